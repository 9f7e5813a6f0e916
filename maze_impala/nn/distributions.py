"""Action distributions for Gymnasium spaces, combined for Dict action spaces.

Each action head maps a slice of a network's output ("logits") to a distribution:
Discrete -> categorical, MultiDiscrete -> independent categoricals, MultiBinary ->
independent Bernoullis, Box -> diagonal Gaussian (mean from the network, a learned
state-independent log-std). A Dict action space is the product of its heads: its
log-prob and entropy are the sums over heads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class ActionHead(nn.Module, ABC):
    """Turns ``n_inputs`` logits into a distribution over one action space."""

    n_inputs: int

    @abstractmethod
    def sample(self, logits: torch.Tensor, deterministic: bool, generator: torch.Generator | None) -> torch.Tensor:
        """Sample (or take the mode of) a batch of actions, drawing from ``generator`` if given."""

    @abstractmethod
    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log-probability per batch entry."""

    @abstractmethod
    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """Entropy per batch entry."""


class CategoricalHead(ActionHead):
    """Independent categoricals, one per entry of ``nvec`` (Discrete is ``nvec=[n]``)."""

    def __init__(self, nvec: list[int], squeeze: bool):
        super().__init__()
        self.nvec = list(nvec)
        self.n_inputs = int(sum(nvec))
        self.squeeze = squeeze  # Discrete: actions have no trailing axis

    def _split(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(logits, self.nvec, dim=-1)

    def sample(self, logits: torch.Tensor, deterministic: bool, generator: torch.Generator | None) -> torch.Tensor:
        return self.sample_with_log_prob(logits, deterministic, generator)[0]

    def sample_with_log_prob(
        self, logits: torch.Tensor, deterministic: bool, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities in one pass (what actors need every step)."""
        parts, total = [], None
        for part in self._split(logits):
            log_p = F.log_softmax(part, dim=-1)
            if deterministic:
                action = part.argmax(-1)
            else:
                flat = log_p.exp().reshape(-1, log_p.shape[-1])
                action = torch.multinomial(flat, 1, generator=generator).reshape(log_p.shape[:-1])
            chosen = log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1)
            total = chosen if total is None else total + chosen
            parts.append(action)
        actions = parts[0].unsqueeze(-1) if len(parts) == 1 else torch.stack(parts, dim=-1)
        return (actions.squeeze(-1) if self.squeeze else actions), total

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        action = action.long()
        if self.squeeze:
            action = action.unsqueeze(-1)
        total = torch.zeros(logits.shape[:-1], dtype=logits.dtype, device=logits.device)
        for i, part in enumerate(self._split(logits)):
            log_p = F.log_softmax(part, dim=-1)
            total = total + log_p.gather(-1, action[..., i : i + 1]).squeeze(-1)
        return total

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(logits.shape[:-1], dtype=logits.dtype, device=logits.device)
        for part in self._split(logits):
            log_p = F.log_softmax(part, dim=-1)
            total = total - (log_p.exp() * log_p).sum(-1)
        return total


class BernoulliHead(ActionHead):
    def __init__(self, n: int):
        super().__init__()
        self.n_inputs = n

    def sample(self, logits: torch.Tensor, deterministic: bool, generator: torch.Generator | None) -> torch.Tensor:
        if deterministic:
            return (logits > 0).to(torch.int8)
        return torch.bernoulli(torch.sigmoid(logits.detach()), generator=generator).to(torch.int8)

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        target = action.to(logits.dtype)
        return -F.binary_cross_entropy_with_logits(logits, target, reduction="none").sum(-1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(logits)
        return F.binary_cross_entropy_with_logits(logits, p, reduction="none").sum(-1)


class GaussianHead(ActionHead):
    """Diagonal Gaussian; the env is expected to clip to the Box bounds if it needs to."""

    def __init__(self, shape: tuple[int, ...], init_log_std: float = 0.0):
        super().__init__()
        self.shape = shape
        self.n_inputs = int(np.prod(shape))
        self.log_std = nn.Parameter(torch.full((self.n_inputs,), init_log_std))

    def sample(self, logits: torch.Tensor, deterministic: bool, generator: torch.Generator | None) -> torch.Tensor:
        mean = logits.detach()
        if not deterministic:
            noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
            mean = mean + noise * self.log_std.detach().exp()
        action = mean
        return action.reshape(*action.shape[:-1], *self.shape)

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        action = action.reshape(*action.shape[: logits.dim() - 1], -1).to(logits.dtype)
        z = (action - logits) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * np.log(2 * np.pi)).sum(-1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        per_dim = 0.5 + 0.5 * np.log(2 * np.pi) + self.log_std
        return per_dim.sum().expand(logits.shape[:-1])


def make_action_head(space: gym.Space) -> ActionHead:
    """The head for one (non-Dict) action space; a clear error for unsupported ones."""
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalHead([int(space.n)], squeeze=True)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if len(space.nvec.shape) != 1:
            raise ValueError(f"MultiDiscrete action spaces must be 1-D, got nvec of shape {space.nvec.shape}")
        return CategoricalHead([int(n) for n in space.nvec], squeeze=False)
    if isinstance(space, gym.spaces.MultiBinary):
        return BernoulliHead(int(np.prod(space.shape)))
    if isinstance(space, gym.spaces.Box):
        return GaussianHead(tuple(space.shape))
    raise TypeError(
        f"unsupported action space {space}: use Discrete, MultiDiscrete, MultiBinary, Box, or a Dict of these"
    )


class DictActionDistribution(nn.Module):
    """The product distribution of a Dict action space; logits are concatenated per head."""

    def __init__(self, space: gym.spaces.Dict):
        super().__init__()
        self.heads = nn.ModuleDict({key: make_action_head(sub) for key, sub in space.spaces.items()})
        self.sizes = [head.n_inputs for head in self.heads.values()]
        self.n_inputs = int(sum(self.sizes))

    def _split(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.heads.keys(), torch.split(logits, self.sizes, dim=-1)))

    def sample(
        self, logits: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        parts = self._split(logits)
        return {key: head.sample(parts[key], deterministic, generator) for key, head in self.heads.items()}

    def log_prob(self, logits: torch.Tensor, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = self._split(logits)
        return sum(head.log_prob(parts[key], actions[key]) for key, head in self.heads.items())

    def sample_with_log_prob(
        self, logits: torch.Tensor, deterministic: bool = False, generator: torch.Generator | None = None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Actions and their joint log-probability, sharing the work where a head can (categoricals)."""
        parts = self._split(logits) if len(self.heads) > 1 else {next(iter(self.heads)): logits}
        actions, total = {}, None
        for key, head in self.heads.items():
            if isinstance(head, CategoricalHead):
                actions[key], log_prob = head.sample_with_log_prob(parts[key], deterministic, generator)
            else:
                actions[key] = head.sample(parts[key], deterministic, generator)
                log_prob = head.log_prob(parts[key], actions[key])
            total = log_prob if total is None else total + log_prob
        return actions, total

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        parts = self._split(logits)
        return sum(head.entropy(parts[key]) for key, head in self.heads.items())
