"""The run's models, built by their wing: the policy and the critic of a model config for an env's spaces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maze_impala.checkpoints import restore_modules
from maze_impala.config import ModelConfig
from maze_impala.envs.structured import StructuredEnv
from maze_impala.nn.critics import StructuredCritic, make_critic
from maze_impala.nn.models import StructuredPolicy, make_policy


def make_models(
    env: StructuredEnv, model: ModelConfig, saved: dict[str, Any] | None = None, source: Path | str = ""
) -> tuple[StructuredPolicy, StructuredCritic]:
    """The policy and the critic of ``model`` for ``env``'s spaces; with ``saved``, a checkpoint's state (read from
    ``source``), restored from it, checked against them."""
    policy = make_policy(env, model)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    if saved is not None:
        restore_modules(saved, source, policy=policy, critic=critic)
    return policy, critic
