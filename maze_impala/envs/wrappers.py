"""Gymnasium wrappers for envs users bring (listed in an env config's ``wrappers``, see :mod:`.factory`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np


class ObservationBounds(gym.ObservationWrapper):
    """Declares tighter bounds for a uint8 Box observation (or one key of a Dict), its values unchanged.

    A uint8 image enters the model as ``(x - low) / (high - low)`` by its space's bounds. Camera frames declare
    0..255; MiniGrid's image declares 0..255 too but holds cell codes up to 10 (object), 5 (colour) and 2 (state),
    which would enter as values below 0.04: ``high=[10, 5, 2]`` (broadcast along the last axis) scales them to
    [0, 1]. ``env=minigrid`` does that.
    """

    def __init__(
        self, env: gym.Env, high: float | Sequence[float], low: float | Sequence[float] = 0, key: str | None = None
    ):
        super().__init__(env)
        space = env.observation_space[key] if key is not None else env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"ObservationBounds bounds a Box observation, got {space}")
        bounds = [np.broadcast_to(np.asarray(b, dtype=np.float64), space.shape) for b in (low, high)]
        if (bounds[0] < space.low).any() or (bounds[1] > space.high).any() or (bounds[0] > bounds[1]).any():
            raise ValueError(
                f"ObservationBounds: low={low}, high={high} must lie within the space's own bounds "
                f"({space.low.min()}..{space.high.max()}) with low <= high"
            )
        bounded = gym.spaces.Box(bounds[0].astype(space.dtype), bounds[1].astype(space.dtype), dtype=space.dtype)
        if key is None:
            self.observation_space = bounded
        else:
            self.observation_space = gym.spaces.Dict({**env.observation_space.spaces, key: bounded})

    def observation(self, observation: Any) -> Any:
        return observation


class ScaledReward(gym.RewardWrapper):
    """Every reward multiplied by ``scale``: a check that a learner does not depend on the rewards' units
    (``benchmarks/learning.py --reward-scale``), or a user's change of units."""

    def __init__(self, env: gym.Env, scale: float):
        super().__init__(env)
        if not np.isfinite(scale) or scale == 0:
            raise ValueError(f"ScaledReward's scale must be a finite non-zero number, got {scale!r}")
        self.scale = float(scale)

    def reward(self, reward: Any) -> Any:
        return reward * self.scale


def scaled_parallel_reward(env: Any, scale: float) -> Any:
    """A PettingZoo Parallel env whose every agent's reward is multiplied by ``scale`` (:class:`ScaledReward`'s
    counterpart for ``env.api=parallel``)."""
    from pettingzoo.utils import BaseParallelWrapper

    if not np.isfinite(scale) or scale == 0:
        raise ValueError(f"scaled_parallel_reward's scale must be a finite non-zero number, got {scale!r}")

    class _Scaled(BaseParallelWrapper):
        def step(self, actions: dict) -> tuple:
            observations, rewards, terminations, truncations, infos = super().step(actions)
            return observations, {a: r * scale for a, r in rewards.items()}, terminations, truncations, infos

    return _Scaled(env)
