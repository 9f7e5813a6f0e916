"""Observation normalisation inside the model: running mean and variance as buffers, updated by the learner only.

The statistics are buffers of the policy, so they are in its state dict: they travel to the actors with the
weights (:mod:`maze_impala.nn.flat` carries buffers), are saved in every checkpoint and restored on resume, and
evaluation, ``load_policy`` and the rollout CLI use them; there is no second file to remember. Only the learner
updates them, once per batch from its valid decisions, before the loss (:meth:`ObservationNormalizer.update`), so
every copy of the policy normalises alike (as Sample Factory does; RLlib's per-worker filters, merged now and
then, normalise the same observation differently on different workers).
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import torch
from torch import nn

from maze_impala.envs.spaces import normalizable_keys
from maze_impala.nn.names import module_key
from maze_impala.nn.numpy_forms import NormalizerForm

CLIP = 5.0
"""Normalised values are clipped to +-CLIP standard deviations (Sample Factory's bound)."""
EPS = 1e-8


class RunningMeanStd(nn.Module):
    """The mean and (population) variance of everything :meth:`update` saw, per element of one observation key,
    in float64 buffers (they are published as float32: :meth:`ObservationNormalizer.forward` computes from their
    float32 values, as the actors do)."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``[M, *shape]`` into the statistics (Chan et al.'s parallel update), in place."""
        if len(x) == 0:
            return
        x = x.double()
        batch_mean, batch_var, n = x.mean(0), x.var(0, correction=0), float(len(x))
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.fill_(total)


class ObservationNormalizer(nn.Module):
    """Running statistics for the normalisable keys of one step key's observations (Box keys other than action
    masks and images); :meth:`forward` maps observations to ``clip((x - mean) / sqrt(var + eps), -5, 5)``."""

    def __init__(self, space: gym.spaces.Dict):
        super().__init__()
        self.keys = normalizable_keys(space)
        self.stats = nn.ModuleDict(
            {module_key(key): RunningMeanStd(tuple(space.spaces[key].shape)) for key in self.keys}
        )

    def forward(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(obs)
        for key in self.keys:
            stats = self.stats[module_key(key)]
            scale = 1.0 / torch.sqrt(stats.var.float() + EPS)
            out[key] = ((obs[key].float() - stats.mean.float()) * scale).clamp(-CLIP, CLIP)
        return out

    @torch.no_grad()
    def update(self, obs: Mapping[str, torch.Tensor]) -> None:
        """Add observations (one row per decision, ``[M, ...]``) to the statistics."""
        for key in self.keys:
            self.stats[module_key(key)].update(obs[key])

    def numpy_form(self, prefix: str) -> NormalizerForm:
        keys, counts = [], []
        for key in self.keys:
            name = f"{prefix}stats.{module_key(key)}."
            keys.append((key, name + "mean", name + "var"))
            counts.append(name + "count")
        return NormalizerForm(keys, CLIP, EPS, counts)
