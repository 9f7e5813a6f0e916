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

from maze_impala.nn.acting import Noise
from maze_impala.nn.names import module_key
from maze_impala.nn.numpy_forms import HeadForm


class ActionHead(nn.Module, ABC):
    """Turns ``n_inputs`` logits into a distribution over one action space."""

    n_inputs: int

    @abstractmethod
    def sample(self, logits: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        """Sample a ``[B, ...]`` batch of actions with ``noise`` (as the numpy form does), or take their modes."""

    @abstractmethod
    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Log-probability per batch entry."""

    @abstractmethod
    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """Entropy per batch entry."""

    def sample_with_log_prob(self, logits: torch.Tensor, noise: Noise | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions and their log-probabilities (heads that can share the work override this)."""
        action = self.sample(logits, noise)
        return action, self.log_prob(logits, action)

    def numpy_form(self, key: str, offset: int, prefix: str) -> HeadForm | None:
        """The head as plain data for acting in numpy (its parameters named with ``prefix``); None: torch only."""
        return None


class CategoricalHead(ActionHead):
    """Independent categoricals, one per entry of ``nvec`` (Discrete is ``nvec=[n]``)."""

    def __init__(self, nvec: list[int], squeeze: bool):
        super().__init__()
        self.nvec = list(nvec)
        self.n_inputs = int(sum(nvec))
        self.squeeze = squeeze  # Discrete: actions have no trailing axis

    def _split(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.split(logits, self.nvec, dim=-1)

    def sample(self, logits: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        return self.sample_with_log_prob(logits, noise)[0]

    def sample_with_log_prob(self, logits: torch.Tensor, noise: Noise | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``[B, ...]`` and their log-probabilities in one pass (what actors need every step); sampled by
        inverse CDF on ``noise``'s uniforms, one per categorical and row."""
        parts, total = [], None
        for part in self._split(logits):
            log_p = F.log_softmax(part, dim=-1)
            if noise is None:
                action = part.argmax(-1)
            else:
                z = part - part.amax(-1, keepdim=True)
                cdf = torch.exp(z).double().cumsum(-1)
                u = torch.as_tensor(noise.uniform(len(part), 1), device=part.device) * cdf[:, -1:]
                action = (cdf <= u).sum(-1).clamp(max=part.shape[-1] - 1)
            chosen = log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1)
            total = chosen if total is None else total + chosen
            parts.append(action)
        actions = parts[0].unsqueeze(-1) if len(parts) == 1 else torch.stack(parts, dim=-1)
        return (actions.squeeze(-1) if self.squeeze else actions), total

    def numpy_form(self, key: str, offset: int, prefix: str) -> HeadForm:
        return HeadForm(key, "categorical", offset, list(self.nvec), squeeze=self.squeeze)

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

    def sample(self, logits: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        if noise is None:
            return (logits > 0).to(torch.int8)
        u = torch.as_tensor(noise.uniform(len(logits), self.n_inputs), device=logits.device)
        return (u < torch.sigmoid(logits.detach()).double()).to(torch.int8)

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        target = action.to(logits.dtype)
        return -F.binary_cross_entropy_with_logits(logits, target, reduction="none").sum(-1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(logits)
        return F.binary_cross_entropy_with_logits(logits, p, reduction="none").sum(-1)


class GaussianHead(ActionHead):
    """Diagonal Gaussian. Its samples are unbounded: the Gymnasium and PettingZoo adapters clip them to the Box
    bounds on the way to the env (the rollout keeps the sample); a StructuredEnv of your own gets them as drawn."""

    def __init__(self, shape: tuple[int, ...], init_log_std: float = 0.0):
        super().__init__()
        self.shape = shape
        self.n_inputs = int(np.prod(shape))
        self.log_std = nn.Parameter(torch.full((self.n_inputs,), init_log_std))

    def sample(self, logits: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        action = logits.detach()
        if noise is not None:
            z = torch.as_tensor(noise.normal(len(action), self.n_inputs), device=action.device).to(action.dtype)
            action = action + z * self.log_std.detach().exp()
        return action.reshape(*action.shape[:-1], *self.shape)

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        action = action.reshape(*action.shape[: logits.dim() - 1], -1).to(logits.dtype)
        z = (action - logits) / self.log_std.exp()
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * np.log(2 * np.pi)).sum(-1)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        per_dim = 0.5 + 0.5 * np.log(2 * np.pi) + self.log_std
        return per_dim.sum().expand(logits.shape[:-1])

    def numpy_form(self, key: str, offset: int, prefix: str) -> HeadForm:
        return HeadForm(key, "gaussian", offset, [], log_std=prefix + "log_std", shape=self.shape)


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
        self.keys = list(space.spaces)
        self.heads = nn.ModuleDict({module_key(key): make_action_head(sub) for key, sub in space.spaces.items()})
        self.sizes = [head.n_inputs for head in self.heads.values()]
        self.n_inputs = int(sum(self.sizes))

    @property
    def continuous(self) -> bool:
        """Whether a part of the action is continuous (a Gaussian head)."""
        return any(isinstance(head, GaussianHead) for head in self.heads.values())

    def items(self) -> list[tuple[str, ActionHead]]:
        """(action key, head) pairs in the order of the logits."""
        return list(zip(self.keys, self.heads.values()))

    def _split(self, logits: torch.Tensor) -> dict[str, torch.Tensor]:
        return dict(zip(self.keys, torch.split(logits, self.sizes, dim=-1)))

    def log_prob(self, logits: torch.Tensor, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = self._split(logits)
        return sum(head.log_prob(parts[key], actions[key]) for key, head in self.items())

    def sample_with_log_prob(
        self, logits: torch.Tensor, noise: Noise | None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Actions (``[B, ...]`` per key) and their joint log-probability, sampled with ``noise`` head by head in
        order (the modes without), sharing the work where a head can (categoricals)."""
        parts = self._split(logits) if len(self.keys) > 1 else {self.keys[0]: logits}
        actions, total = {}, None
        for key, head in self.items():
            actions[key], log_prob = head.sample_with_log_prob(parts[key], noise)
            total = log_prob if total is None else total + log_prob
        return actions, total

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        parts = self._split(logits)
        return sum(head.entropy(parts[key]) for key, head in self.items())

    def numpy_form(self, prefix: str) -> list[HeadForm] | None:
        """Every head's form (None if one has none), with its offset in the logits."""
        forms, offset = [], 0
        for (key, head), name in zip(self.items(), self.heads.keys()):
            form = head.numpy_form(key, offset, f"{prefix}heads.{name}.")
            if form is None:
                return None
            forms.append(form)
            offset += head.n_inputs
        return forms
