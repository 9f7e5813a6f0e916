"""How rollouts store the values of a space, and the conventions models read from observation spaces."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from maze_impala.masking import MASK_SUFFIX, MASKED_LOGIT, mask_error  # noqa: F401  (where the models look)


def storage_dtype(space: gym.Space) -> np.dtype:
    """The numpy dtype in which observations/actions of ``space`` are stored in rollouts: uint8 for a uint8 Box (an
    image stays a quarter of its float size in rollouts, queues and batches), bool for a bool Box, float32 for every
    other Box."""
    if isinstance(space, gym.spaces.Box):
        return np.dtype(space.dtype) if space.dtype in (np.uint8, np.bool_) else np.dtype(np.float32)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return np.dtype(np.int64)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(np.int8)
    raise TypeError(f"unsupported space {space}: use Box, Discrete, MultiDiscrete or MultiBinary inside a Dict")


def is_image_space(space: gym.Space) -> bool:
    """A rank-3 Box (an image, channels first or last): image encoders' input, never normalised by statistics."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def normalizable_keys(space: gym.spaces.Dict) -> list[str]:
    """The observation keys running statistics normalise: Box keys that are neither action masks nor images."""
    return [
        key
        for key, sub in space.spaces.items()
        if isinstance(sub, gym.spaces.Box) and not key.endswith(MASK_SUFFIX) and not is_image_space(sub)
    ]


def within_bounds(space: gym.Space, action: object) -> object:
    """``action`` with every float Box part clipped to its space's bounds, as the adapters pass it to the env.

    A Gaussian policy's samples are unbounded; envs either clip them themselves, warn on every step (pistonball)
    or fail. The rollout keeps the policy's own action, which is what the learner scores (as SB3 does)."""
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        return np.clip(action, space.low, space.high)
    if isinstance(space, gym.spaces.Dict) and isinstance(action, dict):
        return {key: within_bounds(space.spaces.get(key), value) for key, value in action.items()}
    return action
