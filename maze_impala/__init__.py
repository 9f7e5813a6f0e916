"""maze_impala: IMPALA for structured (multi-step, multi-agent) environments."""

from maze_impala.config import (
    ConfigError,
    ImpalaAlgorithmConfig,
    ModelConfig,
    OutputConfig,
    RolloutEvaluatorConfig,
    RunnerConfig,
    TrainingConfig,
)
from maze_impala.core import ActorID, Rollout, StepKey, Trajectory
from maze_impala.envs.checker import EnvCheckError, check_env
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.envs.structured import ActorExit, StructuredEnv
from maze_impala.impala.vtrace import vtrace
from maze_impala.nn.critics import StructuredCritic
from maze_impala.nn.models import StructuredPolicy
from maze_impala.train.setup import load_policy, train

__all__ = [
    "ActorExit",
    "ActorID",
    "ConfigError",
    "EnvCheckError",
    "GymStructuredEnv",
    "ImpalaAlgorithmConfig",
    "ModelConfig",
    "OutputConfig",
    "Rollout",
    "RolloutEvaluatorConfig",
    "RunnerConfig",
    "StepKey",
    "StructuredCritic",
    "StructuredEnv",
    "StructuredPolicy",
    "TrainingConfig",
    "Trajectory",
    "check_env",
    "load_policy",
    "train",
    "vtrace",
]
