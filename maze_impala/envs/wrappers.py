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
