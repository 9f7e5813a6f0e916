"""Every config of maze_impala, one dataclass per concern, validated at construction.

The YAML files under ``maze_impala/conf`` are these dataclasses' values; the CLI builds
them with :func:`from_mapping`, which refuses unknown keys. Every invalid value raises
:class:`ConfigError`, whose message names the key and what it must be.
"""

from maze_impala.config.algorithm import (
    LR_SCHEDULES,
    OPTIMIZERS,
    TRUST_REGIONS,
    VALUE_NORMALIZATIONS,
    VALUE_TARGETS,
    ImpalaAlgorithmConfig,
    OpponentPoolConfig,
    RolloutEvaluatorConfig,
)
from maze_impala.config.base import ConfigError, from_mapping
from maze_impala.config.model import ACTIVATIONS, CRITIC_TYPES, RECURRENT, ModelConfig
from maze_impala.config.run import POLICY_TYPES, ExportConfig, PolicyConfig, RolloutConfig, TrainingConfig
from maze_impala.config.runner import (
    BACKEND_ALIASES,
    BACKENDS,
    EVENT_LOG_FORMATS,
    OutputConfig,
    RolloutRunnerConfig,
    RunnerConfig,
    VideoConfig,
    backend,
)

__all__ = [
    "ACTIVATIONS",
    "BACKENDS",
    "BACKEND_ALIASES",
    "CRITIC_TYPES",
    "EVENT_LOG_FORMATS",
    "LR_SCHEDULES",
    "OPTIMIZERS",
    "POLICY_TYPES",
    "RECURRENT",
    "TRUST_REGIONS",
    "VALUE_NORMALIZATIONS",
    "VALUE_TARGETS",
    "ConfigError",
    "ExportConfig",
    "ImpalaAlgorithmConfig",
    "ModelConfig",
    "OpponentPoolConfig",
    "OutputConfig",
    "PolicyConfig",
    "RolloutConfig",
    "RolloutEvaluatorConfig",
    "RolloutRunnerConfig",
    "RunnerConfig",
    "TrainingConfig",
    "VideoConfig",
    "backend",
    "from_mapping",
]
