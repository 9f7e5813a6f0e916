"""maze_impala: IMPALA for structured (multi-step, multi-agent) environments."""

from maze_impala.core import ActorID, Rollout, StepKey, Trajectory
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.envs.structured import ActorExit, StructuredEnv
from maze_impala.impala.config import ConfigError, ImpalaAlgorithmConfig, RolloutEvaluatorConfig
from maze_impala.impala.vtrace import vtrace
from maze_impala.nn.critics import StructuredCritic
from maze_impala.nn.models import ModelConfig, StructuredPolicy
from maze_impala.train.setup import RunnerConfig, TrainingConfig, load_policy, train

__all__ = [
    "ActorExit",
    "ActorID",
    "ConfigError",
    "GymStructuredEnv",
    "ImpalaAlgorithmConfig",
    "ModelConfig",
    "Rollout",
    "RolloutEvaluatorConfig",
    "RunnerConfig",
    "StepKey",
    "StructuredCritic",
    "StructuredEnv",
    "StructuredPolicy",
    "TrainingConfig",
    "Trajectory",
    "load_policy",
    "train",
    "vtrace",
]
