"""Action distributions for Gymnasium spaces, combined for Dict action spaces.

Each action head maps a slice of a network's output ("logits") to a distribution:
Discrete -> categorical, MultiDiscrete -> independent categoricals, MultiBinary ->
independent Bernoullis, Box -> diagonal Gaussian (mean from the network, a learned
state-independent log-std). A Dict action space is the product of its heads: its
log-prob and entropy are the sums over heads.
"""

from __future__ import annotations

import functools
import operator
from abc import ABC, abstractmethod
from collections.abc import Iterable

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

    def log_prob_and_entropy(self, logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`log_prob` and :meth:`entropy` together (what a learner's loss needs; heads that can share the work
        override this)."""
        return self.log_prob(logits, action), self.entropy(logits)

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
        """Each categorical's logits (one categorical, a Discrete: the logits as they are)."""
        return (logits,) if len(self.nvec) == 1 else torch.split(logits, self.nvec, dim=-1)

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
        return self._chosen(self._log_softmaxes(logits), action)

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        return self._entropy(self._log_softmaxes(logits))

    def log_prob_and_entropy(self, logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_ps = self._log_softmaxes(logits)  # one log-softmax per categorical serves both
        return self._chosen(log_ps, action), self._entropy(log_ps)

    def _log_softmaxes(self, logits: torch.Tensor) -> list[torch.Tensor]:
        return [F.log_softmax(part, dim=-1) for part in self._split(logits)]

    def _chosen(self, log_ps: list[torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        """The log-probability of ``action`` from each categorical's log-probabilities, summed."""
        action = action.long()
        if self.squeeze:
            action = action.unsqueeze(-1)
        return _total(log_p.gather(-1, action[..., i : i + 1]).squeeze(-1) for i, log_p in enumerate(log_ps))

    @staticmethod
    def _entropy(log_ps: list[torch.Tensor]) -> torch.Tensor:
        return _total(-(log_p.exp() * log_p).sum(-1) for log_p in log_ps)


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


SQUASH_EPS = 1e-6
"""A squashed action's share of its half-width is clamped to +-(1 - SQUASH_EPS) before it is unsquashed, so that an
action float32 rounded onto a bound keeps a finite log-probability."""


class GaussianHead(ActionHead):
    """Diagonal Gaussian with a state-independent log standard deviation (a learnt parameter per dimension).

    ``init_log_std`` is the initial log standard deviation in units of each dimension's half-width
    (``half_width``: ``(high - low) / 2``), so that the initial exploration covers the same share of every Box.

    How its actions meet the Box's bounds: without ``squash`` the samples are unbounded, and the Gymnasium and
    PettingZoo adapters clip them on the way to the env (the rollout keeps the sample; a StructuredEnv of your own
    gets them as drawn). With ``squash`` (a ``(low, high)`` pair of finite bounds) a sample ``u`` becomes
    ``center + half_width * tanh(u)``, always within the bounds, and the log-probability of such an action is the
    Gaussian's at ``u`` less the log of the squash's slope (the change of variables); the entropy bonus acts on the
    Gaussian before the squash, whose entropy has a closed form."""

    def __init__(
        self,
        shape: tuple[int, ...],
        init_log_std: float = 0.0,
        half_width: np.ndarray | None = None,
        squash: tuple[np.ndarray, np.ndarray] | None = None,
    ):
        super().__init__()
        self.shape = shape
        self.n_inputs = int(np.prod(shape))
        start = torch.full((self.n_inputs,), float(init_log_std))
        if half_width is not None:
            start = start + torch.as_tensor(np.log(half_width), dtype=torch.float32).reshape(-1)
        self.log_std = nn.Parameter(start)
        self.squash = None
        if squash is not None:
            low, high = (np.asarray(bound, np.float64).reshape(-1) for bound in squash)
            self.squash = ((high + low) / 2, (high - low) / 2)  # center, half-width
            # constants of the space, not state: a checkpoint's keys are the same squashed or clipped
            self.register_buffer(
                "squash_center", torch.as_tensor(self.squash[0], dtype=torch.float32), persistent=False
            )
            self.register_buffer("squash_half", torch.as_tensor(self.squash[1], dtype=torch.float32), persistent=False)

    def sample(self, logits: torch.Tensor, noise: Noise | None) -> torch.Tensor:
        action = logits.detach()
        if noise is not None:
            z = torch.as_tensor(noise.normal(len(action), self.n_inputs), device=action.device).to(action.dtype)
            action = action + z * self.log_std.detach().exp()
        if self.squash is not None:
            action = self.squash_center + self.squash_half * torch.tanh(action)
        return action.reshape(*action.shape[:-1], *self.shape)

    def log_prob(self, logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        action = action.reshape(*action.shape[: logits.dim() - 1], -1).to(logits.dtype)
        slope = None
        if self.squash is not None:  # back to the Gaussian's sample, and the squash's log-slope there
            share = ((action - self.squash_center) / self.squash_half).clamp(-1 + SQUASH_EPS, 1 - SQUASH_EPS)
            action = torch.atanh(share)
            slope = (torch.log(self.squash_half) + torch.log1p(-share.pow(2))).sum(-1)
        z = (action - logits) / self.log_std.exp()
        log_prob = (-0.5 * z.pow(2) - self.log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        return log_prob if slope is None else log_prob - slope

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        per_dim = 0.5 + 0.5 * np.log(2 * np.pi) + self.log_std
        return per_dim.sum().expand(logits.shape[:-1])

    def numpy_form(self, key: str, offset: int, prefix: str) -> HeadForm:
        squash = None if self.squash is None else tuple(part.tolist() for part in self.squash)
        return HeadForm(key, "gaussian", offset, [], log_std=prefix + "log_std", shape=self.shape, squash=squash)


def box_half_width(space: gym.spaces.Box) -> np.ndarray:
    """Half of each dimension's range, ``(high - low) / 2`` (flattened); 1 where a bound is infinite."""
    low, high = np.asarray(space.low, np.float64).reshape(-1), np.asarray(space.high, np.float64).reshape(-1)
    width = (high - low) / 2
    return np.where(np.isfinite(width) & (width > 0), width, 1.0)


def squash_bounds(space: gym.spaces.Box) -> tuple[np.ndarray, np.ndarray] | None:
    """The Box's bounds for squashing its actions into them; None where one is not finite (nothing to squash into:
    such a Box's actions are drawn unbounded, as clipping to an infinite bound leaves them)."""
    low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
        return None
    return low, high


def make_action_head(space: gym.Space, init_log_std: float = 0.0, bounds: str = "clip") -> ActionHead:
    """The head for one (non-Dict) action space; a clear error for unsupported ones. ``init_log_std`` and
    ``bounds`` (clip or squash) shape Box heads (:class:`GaussianHead`)."""
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalHead([int(space.n)], squeeze=True)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if len(space.nvec.shape) != 1:
            raise ValueError(f"MultiDiscrete action spaces must be 1-D, got nvec of shape {space.nvec.shape}")
        return CategoricalHead([int(n) for n in space.nvec], squeeze=False)
    if isinstance(space, gym.spaces.MultiBinary):
        return BernoulliHead(int(np.prod(space.shape)))
    if isinstance(space, gym.spaces.Box):
        squash = squash_bounds(space) if bounds == "squash" else None
        return GaussianHead(tuple(space.shape), init_log_std, box_half_width(space), squash)
    raise TypeError(
        f"unsupported action space {space}: use Discrete, MultiDiscrete, MultiBinary, Box, or a Dict of these"
    )


class DictActionDistribution(nn.Module):
    """The product distribution of a Dict action space; logits are concatenated per head."""

    def __init__(self, space: gym.spaces.Dict, init_log_std: float = 0.0, bounds: str = "clip"):
        super().__init__()
        self.keys = list(space.spaces)
        self.heads = nn.ModuleDict(
            {module_key(key): make_action_head(sub, init_log_std, bounds) for key, sub in space.spaces.items()}
        )
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
        """Each head's logits (one head: all of them, as they are)."""
        if len(self.keys) == 1:
            return {self.keys[0]: logits}
        return dict(zip(self.keys, torch.split(logits, self.sizes, dim=-1)))

    def log_prob(self, logits: torch.Tensor, actions: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = self._split(logits)
        return _total(head.log_prob(parts[key], actions[key]) for key, head in self.items())

    def sample_with_log_prob(
        self, logits: torch.Tensor, noise: Noise | None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Actions (``[B, ...]`` per key) and their joint log-probability, sampled with ``noise`` head by head in
        order (the modes without), sharing the work where a head can (categoricals)."""
        parts = self._split(logits)
        actions, total = {}, None
        for key, head in self.items():
            actions[key], log_prob = head.sample_with_log_prob(parts[key], noise)
            total = log_prob if total is None else total + log_prob
        return actions, total

    def entropy(self, logits: torch.Tensor) -> torch.Tensor:
        parts = self._split(logits)
        return _total(head.entropy(parts[key]) for key, head in self.items())

    def log_prob_and_entropy(
        self, logits: torch.Tensor, actions: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`log_prob` and :meth:`entropy` in one pass over the heads (what a learner's loss needs)."""
        parts = self._split(logits)
        pairs = [head.log_prob_and_entropy(parts[key], actions[key]) for key, head in self.items()]
        return _total(p for p, _ in pairs), _total(e for _, e in pairs)

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


def _total(terms: Iterable[torch.Tensor]) -> torch.Tensor:
    """The sum of the heads' terms, without the ``0 +`` of ``sum`` (one operation fewer a learner step)."""
    return functools.reduce(operator.add, terms)
