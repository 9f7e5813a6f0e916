"""Turn an env description (id, config, callable or instance) into a structured env."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.envs.structured import StructuredEnv

EnvSpec = str | Mapping[str, Any] | Callable[[], Any]
"""A Gymnasium id, a Hydra-style config with ``_target_``, or a picklable callable."""


def make_env(spec: EnvSpec) -> StructuredEnv:
    """Build one structured env; Gymnasium envs are wrapped by :class:`GymStructuredEnv`."""
    if isinstance(spec, str):
        env: Any = GymStructuredEnv(spec)
    elif isinstance(spec, Mapping):
        if "_target_" not in spec:
            raise ValueError(f"env config needs a _target_ (a class or function to call), got keys {sorted(spec)}")
        from hydra.utils import instantiate

        env = instantiate(dict(spec), _convert_="all")
    elif callable(spec):
        env = spec()
    else:
        raise TypeError(f"cannot make an env from {spec!r}: give an id, a config with _target_, or a callable")
    if isinstance(env, gym.Env):
        env = GymStructuredEnv(env)
    if not isinstance(env, StructuredEnv):
        raise TypeError(f"the env factory returned {type(env).__name__}, expected a StructuredEnv or a gymnasium.Env")
    _check_spaces(env)
    return env


def _check_spaces(env: StructuredEnv) -> None:
    obs_keys, act_keys = set(env.observation_spaces_dict), set(env.action_spaces_dict)
    if obs_keys != act_keys or obs_keys != set(env.agent_counts_dict):
        raise ValueError(
            f"{type(env).__name__}: observation_spaces_dict, action_spaces_dict and agent_counts_dict must "
            f"name the same step keys, got {sorted(map(str, obs_keys))}, {sorted(map(str, act_keys))} and "
            f"{sorted(map(str, env.agent_counts_dict))}"
        )
    for key, count in env.agent_counts_dict.items():
        if not isinstance(count, int) or not (count >= 1 or count == -1):
            raise ValueError(
                f"{type(env).__name__}: agent_counts_dict[{key!r}] must be a positive int, or -1 for a count that "
                f"varies, got {count!r}"
            )
    for key in obs_keys:
        for kind, space in (
            ("observation", env.observation_spaces_dict[key]),
            ("action", env.action_spaces_dict[key]),
        ):
            if not isinstance(space, gym.spaces.Dict):
                raise TypeError(f"{type(env).__name__}: the {kind} space of step key {key!r} must be a gym.spaces.Dict")
