"""The checks of a structured env's contract, one value at a time, with messages that name the step key, the key and
the values: what the adapters and the actors' env batches run on the first sub-steps of every env (see
:class:`~maze_impala.envs.batch.EnvBatch`), and what :func:`~maze_impala.envs.checker.check_env` runs throughout.
This module imports no adapter or factory, so that each of them can use it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.spaces import MASK_SUFFIX
from maze_impala.envs.structured import StructuredEnv


class EnvCheckError(ValueError):
    """An env broke its contract; the message names the step key, the space or key, expected and found."""


def check_observation(obs: Any, space: gym.spaces.Dict, step_key: StepKey, what: str = "observation") -> None:
    """``obs`` has exactly the keys of ``space`` and each value its shape, dtype kind, bounds and finiteness."""
    if not isinstance(obs, Mapping):
        raise EnvCheckError(
            f"step key {step_key!r}: the {what} must be a dict with keys {sorted(space.spaces)}, "
            f"found {type(obs).__name__}"
        )
    if set(obs) != set(space.spaces):
        missing, extra = sorted(set(space.spaces) - set(obs)), sorted(set(obs) - set(space.spaces))
        raise EnvCheckError(
            f"step key {step_key!r}: the {what}'s keys differ from its space: missing {missing}, "
            f"not in the space {extra}"
        )
    for key, sub in space.spaces.items():
        check_value(obs[key], sub, f"step key {step_key!r}, {what} {key!r}")


def check_value(value: Any, space: gym.Space, where: str) -> None:
    """One value of a Dict space: shape, dtype kind, range (Box bounds, Discrete values) and finiteness."""
    array = np.asarray(value)
    shape = () if isinstance(space, gym.spaces.Discrete) else tuple(int(n) for n in space.shape)
    if array.shape != shape:
        raise EnvCheckError(f"{where}: expected shape {shape} ({space}), found {array.shape}")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise EnvCheckError(f"{where}: expected numbers ({space}), found dtype {array.dtype}")
    if isinstance(space, gym.spaces.Box):
        if not np.isfinite(array).all():
            bad = array.ravel()[~np.isfinite(array.ravel())][:3]
            raise EnvCheckError(f"{where}: expected finite values, found {bad}")
        low, high = np.broadcast_to(space.low, shape), np.broadcast_to(space.high, shape)
        outside = (array < low - 1e-6) | (array > high + 1e-6)
        if outside.any():
            i = tuple(int(n) for n in np.argwhere(outside)[0])
            raise EnvCheckError(
                f"{where}: expected values in the bounds [{low[i]}, {high[i]}], found {array[i]} at index {i}"
            )
        return
    if not np.issubdtype(array.dtype, np.integer) and not np.array_equal(array, np.round(array)):
        raise EnvCheckError(f"{where}: expected integers ({space}), found {array.ravel()[:3]}")
    low, high = _integer_range(space)
    if ((array < low) | (array > high)).any():
        raise EnvCheckError(f"{where}: expected values in [{low}, {high}] ({space}), found {array.ravel()[:6]}")


def _integer_range(space: gym.Space) -> tuple[Any, Any]:
    if isinstance(space, gym.spaces.Discrete):
        return space.start, space.start + space.n - 1
    if isinstance(space, gym.spaces.MultiDiscrete):
        return space.start, space.start + space.nvec - 1
    if isinstance(space, gym.spaces.MultiBinary):
        return 0, 1
    raise EnvCheckError(f"unsupported space {space}: use Box, Discrete, MultiDiscrete or MultiBinary inside a Dict")


def check_step_result(result: Any, step_key: StepKey) -> tuple[dict, float, bool, bool, dict]:
    """``step()``'s return value is Gymnasium's 5-tuple with a finite real reward; returns it unpacked."""
    if isinstance(result, tuple) and len(result) == 4:
        raise EnvCheckError(
            f"step key {step_key!r}: step() returned 4 values, Gym's old API (obs, reward, done, "
            "info); return Gymnasium's (obs, reward, terminated, truncated, info)"
        )
    if not isinstance(result, tuple) or len(result) != 5:
        raise EnvCheckError(
            f"step key {step_key!r}: step() must return (obs, reward, terminated, truncated, info), "
            f"found {type(result).__name__} {result!r:.80}"
        )
    obs, reward, terminated, truncated, info = result
    check_reward(reward, step_key)
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool | np.bool_):
            raise EnvCheckError(f"step key {step_key!r}: step()'s {name} must be a bool, found {flag!r}")
    if not isinstance(info, dict):
        raise EnvCheckError(f"step key {step_key!r}: step()'s info must be a dict, found {type(info).__name__}")
    return obs, reward, terminated, truncated, info


def check_reward(reward: Any, step_key: StepKey, what: str = "reward") -> None:
    if isinstance(reward, bool) or not isinstance(reward, int | float | np.integer | np.floating):
        raise EnvCheckError(f"step key {step_key!r}: the {what} must be a real number, found {reward!r}")
    if not math.isfinite(reward):
        raise EnvCheckError(f"step key {step_key!r}: the {what} must be finite, found {reward}")


def check_actor_id(env: StructuredEnv) -> ActorID:
    """``actor_id()`` names a step key of the env's spaces and an agent within its count."""
    actor = env.actor_id()
    if not isinstance(actor, tuple) or len(actor) != 2:
        raise EnvCheckError(f"actor_id() must return ActorID(step_key, agent_id), found {actor!r}")
    actor = ActorID(*actor)
    counts = env.agent_counts_dict
    if actor.step_key not in counts or actor.step_key not in env.observation_spaces_dict:
        raise EnvCheckError(
            f"actor_id() returned step key {actor.step_key!r}, expected one of the spaces' step keys "
            f"{list(env.observation_spaces_dict)}"
        )
    count = counts[actor.step_key]
    if not isinstance(actor.agent_id, int | np.integer) or actor.agent_id < 0 or (0 < count <= actor.agent_id):
        expected = f"an int in [0, {count}) (agent_counts_dict)" if count > 0 else "an int >= 0"
        raise EnvCheckError(
            f"step key {actor.step_key!r}: actor_id() returned agent {actor.agent_id!r}, expected {expected}"
        )
    return actor


def check_masks(obs: Mapping[str, Any], action_space: gym.spaces.Dict, step_key: StepKey) -> dict[str, np.ndarray]:
    """Every ``<action>_mask`` of ``obs`` fits its discrete action head and allows at least one action."""
    masks = {}
    for name, sub in action_space.spaces.items():
        mask = obs.get(name + MASK_SUFFIX)
        if mask is None:
            continue
        mask = np.asarray(mask)
        size = (int(sub.n),) if isinstance(sub, gym.spaces.Discrete) else None
        if size is None:
            raise EnvCheckError(
                f"step key {step_key!r}: mask {name + MASK_SUFFIX!r} masks action {name!r}, which is "
                f"not Discrete ({sub})"
            )
        if mask.shape != size:
            raise EnvCheckError(
                f"step key {step_key!r}: mask {name + MASK_SUFFIX!r} must have shape {size} (one entry "
                f"per action of {sub}), found {mask.shape}"
            )
        if not mask.astype(bool).any():
            raise EnvCheckError(f"step key {step_key!r}: mask {name + MASK_SUFFIX!r} allows no action")
        masks[name] = mask.astype(bool)
    return masks


def sample_action(action_space: gym.spaces.Dict, masks: Mapping[str, np.ndarray], rng: np.random.Generator) -> dict:
    """A random action, allowed by the masks."""
    action = {}
    for name, sub in action_space.spaces.items():
        if name in masks:
            action[name] = sub.start + int(rng.choice(np.flatnonzero(masks[name])))
        else:
            sub.seed(int(rng.integers(2**31)))
            action[name] = sub.sample()
    return action
