"""A run's config as it trains: the values a resumed run keeps, and every ``auto`` replaced by what it becomes for
the env, so that the run records it (``config.yaml``, checkpoints, ``load_policy``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from maze_impala.config import TrainingConfig
from maze_impala.config.base import from_mapping, to_record
from maze_impala.config.runner import auto_learner_cores
from maze_impala.envs.spaces import is_image_space
from maze_impala.envs.structured import StructuredEnv


def resolved(config: TrainingConfig, probe: StructuredEnv, checkpoint: dict[str, Any] | None = None) -> TrainingConfig:
    """``config`` with every ``auto`` resolved for the env (``probe``, one instance of it); a resumed run's
    ``checkpoint`` keeps what it recorded."""
    return with_learner_cores(with_image_encoder(config, probe, checkpoint), probe)


def with_values(config: TrainingConfig, values: dict[str, Any]) -> TrainingConfig:
    """``config`` with the flat keys ``values`` (``algorithm.gamma``) set."""
    if not values:
        return config
    record = to_record(config)
    for key, value in values.items():
        *parents, name = key.split(".")
        node = record
        for parent in parents:
            node = node[parent]
        node[name] = value
    return from_mapping(TrainingConfig, record)


def with_image_encoder(
    config: TrainingConfig, probe: StructuredEnv, checkpoint: dict[str, Any] | None = None
) -> TrainingConfig:
    """``config`` with ``model.image_encoder=auto`` replaced by what it becomes for the env (``probe``, one instance
    of it) and the learner's device, so that the run records it (``config.yaml``, checkpoints, ``load_policy``); a
    resumed run keeps what its ``checkpoint`` recorded (an earlier release's default was impala)."""
    if config.model.image_encoder != "auto":
        return config
    if checkpoint is not None:
        recorded = checkpoint["config"].get("model", {}).get("image_encoder", "impala")
        return replace(config, model=replace(config.model, image_encoder=recorded))
    return replace(config, model=config.model.resolved(image_shapes(probe), config.algorithm.device))


def with_learner_cores(config: TrainingConfig, probe: StructuredEnv) -> TrainingConfig:
    """``config`` with ``runner.learner_cores=auto`` replaced by what it becomes for its model (after
    :func:`with_image_encoder`) on the env (``probe``), so that the run records it."""
    if config.runner.learner_cores != "auto":
        return config
    cnn = bool(image_shapes(probe)) and config.model.image_encoder != "flatten"
    cores = auto_learner_cores(cnn=cnn, recurrent=config.model.recurrent != "none")
    return replace(config, runner=replace(config.runner, learner_cores=cores))


def image_shapes(probe: StructuredEnv) -> list[tuple[int, ...]]:
    """The shapes of the env's image observations (rank-3 Box keys), every step key's."""
    spaces = [sub for space in probe.observation_spaces_dict.values() for sub in space.spaces.values()]
    return [tuple(sub.shape) for sub in spaces if is_image_space(sub)]
