"""maze_impala: IMPALA for structured (multi-step, multi-agent) environments."""

import importlib
from typing import TYPE_CHECKING, Any

from maze_impala.config import (
    ConfigError,
    ImpalaAlgorithmConfig,
    ModelConfig,
    OpponentPoolConfig,
    OutputConfig,
    RolloutEvaluatorConfig,
    RunnerConfig,
    TrainingConfig,
)
from maze_impala.core import ActorID, Rollout, StepKey, Trajectory

if TYPE_CHECKING:
    from maze_impala.envs.checker import EnvCheckError, check_env
    from maze_impala.envs.gym_adapter import GymStructuredEnv
    from maze_impala.envs.structured import ActorExit, StructuredEnv
    from maze_impala.impala.vtrace import vtrace
    from maze_impala.nn.critics import StructuredCritic
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.nn.torch_acting import Player

# What needs torch is imported on first use: every actor process imports this package, and one whose policy acts
# in numpy never imports torch (about 1.2 s of its start). The envs' names need Gymnasium, imported on first use too:
# a deployed policy (maze_impala.deploy) runs where neither is installed.
_LAZY = {
    "EnvCheckError": "maze_impala.envs.checker",
    "check_env": "maze_impala.envs.checker",
    "GymStructuredEnv": "maze_impala.envs.gym_adapter",
    "ActorExit": "maze_impala.envs.structured",
    "StructuredEnv": "maze_impala.envs.structured",
    "vtrace": "maze_impala.impala.vtrace",
    "StructuredCritic": "maze_impala.nn.critics",
    "StructuredPolicy": "maze_impala.nn.models",
    "Player": "maze_impala.nn.torch_acting",
}
# ``maze_impala.train`` is the function, as it always was, not the subpackage of that name. Importing the subpackage
# binds the name to it, once, when it is first imported: so import it first, then bind the name to the function.
importlib.import_module("maze_impala.train")
from maze_impala.api import load_policy, train  # noqa: E402  (torch-free: they import what they need when called)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'maze_impala' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ActorExit",
    "ActorID",
    "ConfigError",
    "EnvCheckError",
    "GymStructuredEnv",
    "ImpalaAlgorithmConfig",
    "ModelConfig",
    "OpponentPoolConfig",
    "OutputConfig",
    "Player",
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
