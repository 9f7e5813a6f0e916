"""How rollouts store the values of a space."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def storage_dtype(space: gym.Space) -> np.dtype:
    """The numpy dtype in which observations/actions of ``space`` are stored in rollouts."""
    if isinstance(space, gym.spaces.Box):
        return np.dtype(np.float32)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return np.dtype(np.int64)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(np.int8)
    raise TypeError(f"unsupported space {space}: use Box, Discrete, MultiDiscrete or MultiBinary inside a Dict")
