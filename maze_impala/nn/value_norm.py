"""The running statistics of one critic network's value targets: the scale its output is read in.

A critic network predicts ``(V - mu) / sigma``; :meth:`ValueNormalizer.denormalize` gives V back, so that everything
outside the learner's value loss (V-trace, the advantages, a guided search) sees values in the env's units. The
statistics start at ``mu = 0, sigma = 1``, where the network's output is V itself: a learner that never updates them
(``algorithm.value_normalization=off``) computes exactly what an unnormalised critic does.

They are kept in float64 as an exponential moving average with debiasing (MAPPO's ValueNorm): the mean and the mean
square of the targets, each weighted by ``1 - decay`` per update (``algorithm.value_norm_decay``), divided by the sum
of the weights so far.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

DECAY = 0.99
"""Weight of the statistics so far at each update (one per batch), unless the update names its own: about the last
100 batches count."""
SIGMA_FLOOR = 1e-4
"""The smallest scale: targets that are all equal (a sparse reward not yet found) leave the network's output as is."""
SIGMA_CEILING = 1e6


class Moments(NamedTuple):
    """Mean and scale of the targets, float64 scalars."""

    mu: torch.Tensor
    sigma: torch.Tensor


class ValueNormalizer(nn.Module):
    """Mean and scale of one critic network's value targets, in float64 buffers (saved with the critic)."""

    def __init__(self) -> None:
        super().__init__()
        for name, value in (("running_mean", 0.0), ("running_mean_sq", 0.0), ("debias", 0.0), ("mu", 0.0)):
            self.register_buffer(name, torch.tensor(value, dtype=torch.float64))
        self.register_buffer("sigma", torch.tensor(1.0, dtype=torch.float64))

    def moments(self) -> Moments:
        """The current mean and scale (0 and 1 before the first update)."""
        return Moments(self.mu.clone(), self.sigma.clone())

    def denormalize(self, output: torch.Tensor) -> torch.Tensor:
        """V from the network's output (the output itself before the first update: ``x * 1 + 0`` is exact), in the
        output's dtype: the float64 scalars take it by type promotion, without a conversion of their own."""
        return output * self.sigma + self.mu

    def scale(self) -> torch.Tensor:
        """The scale, float32: the value loss divides the errors by it."""
        return self.sigma.float()

    @torch.no_grad()
    def update(
        self,
        targets: torch.Tensor,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
        decay: float = DECAY,
    ) -> tuple[Moments, Moments]:
        """Adds a batch's ``targets`` (any shape, in the env's units) to the statistics, the earlier ones weighted by
        ``decay``; returns the moments before and after. ``reduce`` sums a tensor over data-parallel learners (each
        holding a part of the batch)."""
        before = self.moments()
        x = targets.detach().double().reshape(-1)
        sums = torch.stack([x.new_tensor(float(x.numel())), x.sum(), x.square().sum()])
        if reduce is not None:
            sums = reduce(sums)
        count, total, total_sq = sums.unbind()
        seen = (count > 0).double()  # no targets (no decision of this network in the batch): nothing changes
        kept = 1.0 - (1.0 - decay) * seen
        weight = (1.0 - decay) * seen / count.clamp(min=1.0)
        self.running_mean.mul_(kept).add_(weight * total)
        self.running_mean_sq.mul_(kept).add_(weight * total_sq)
        self.debias.mul_(kept).add_((1.0 - decay) * seen)
        mean = self.running_mean / self.debias.clamp(min=1e-300)
        variance = (self.running_mean_sq / self.debias.clamp(min=1e-300) - mean.square()).clamp(min=0.0)
        fresh = self.debias > 0  # before any target: mu 0, sigma 1
        self.mu.copy_(torch.where(fresh, mean, self.mu))
        self.sigma.copy_(torch.where(fresh, variance.sqrt().clamp(SIGMA_FLOOR, SIGMA_CEILING), self.sigma))
        return before, self.moments()


@torch.no_grad()
def preserve_outputs(head: nn.Linear, before: Moments, after: Moments, keep_mean: bool = True) -> None:
    """PopArt's rescaling (van Hasselt et al. 2016): the output layer ``head`` changed so that the denormalised
    values it gives stay what they were under the moments ``before``, now read under ``after``. Without
    ``keep_mean`` only their spread is kept: each value's distance from the mean stays what it was, and the values
    move with the mean (``V - mu`` preserved, not ``V``)."""
    ratio = (before.sigma / after.sigma).to(head.weight.dtype)
    head.weight.mul_(ratio)
    head.bias.mul_(ratio)
    if keep_mean:
        head.bias.add_(((before.mu - after.mu) / after.sigma).to(head.bias.dtype))


@torch.no_grad()
def fit_mean(
    head: nn.Linear,
    errors: torch.Tensor,
    moments: Moments,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> None:
    """Moves the output layer ``head``'s bias so that the network's mean error on a batch is zero: ``errors`` are
    the targets minus the values, in the env's units, read under ``moments``. The critic's level then follows its
    targets' at once, where a learning rate's steps would take thousands (``algorithm.fit_value_mean``). ``reduce``
    sums a tensor over data-parallel learners."""
    x = errors.detach().double().reshape(-1)
    sums = torch.stack([x.sum(), x.new_tensor(float(x.numel()))])
    if reduce is not None:
        sums = reduce(sums)
    total, count = sums.unbind()
    if count > 0:
        head.bias.add_((total / count / moments.sigma).to(head.bias.dtype))
