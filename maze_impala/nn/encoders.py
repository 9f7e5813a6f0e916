"""Observation encoders: a step key's (normalised) observations as one feature vector per decision."""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.envs.spaces import storage_dtype


class ObservationEncoder(nn.Module):
    """Flattens a Dict observation into one float vector (one-hot for discrete parts).

    :attr:`n_outputs` is its width; :meth:`numpy_form` describes it as plain data for acting in numpy.
    """

    def __init__(self, space: gym.spaces.Dict):
        super().__init__()
        self.space = space
        self.n_outputs = 0
        for sub in space.spaces.values():
            storage_dtype(sub)  # rejects unsupported spaces early
            if isinstance(sub, gym.spaces.Discrete):
                self.n_outputs += int(sub.n)
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                self.n_outputs += int(sub.nvec.sum())
            else:
                self.n_outputs += int(np.prod(sub.shape))

    def forward(self, obs: Mapping[str, torch.Tensor], batch_dims: int) -> torch.Tensor:
        parts = []
        for key, sub in self.space.spaces.items():
            x = obs[key]
            if isinstance(sub, gym.spaces.Discrete):
                # clamped: padding entries (zeros) of a space that starts above 0 must not fail
                parts.append(F.one_hot((x.long() - int(sub.start)).clamp(0, int(sub.n) - 1), int(sub.n)).float())
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                for i, n in enumerate(int(n) for n in sub.nvec.flat):
                    parts.append(F.one_hot(x[..., i].long().clamp(0, n - 1), n).float())
            else:
                parts.append(x.reshape(*x.shape[:batch_dims], -1).float())
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def numpy_form(self) -> list[tuple[str, int | None, int, int | None]]:
        """Per encoded part: (observation key, column of a MultiDiscrete or None, first code, one-hot size or None
        for a Box): see :class:`~maze_impala.nn.numpy_acting.NetworkForm`."""
        parts: list[tuple[str, int | None, int, int | None]] = []
        for key, space in self.space.spaces.items():
            if isinstance(space, gym.spaces.Discrete):
                parts.append((key, None, int(space.start), int(space.n)))
            elif isinstance(space, gym.spaces.MultiDiscrete):
                parts += [(key, i, 0, int(n)) for i, n in enumerate(space.nvec.flat)]
            else:
                parts.append((key, None, 0, None))
        return parts
