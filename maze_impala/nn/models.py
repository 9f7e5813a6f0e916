"""Policies and critics keyed by step key, built from a :class:`ModelConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.core import ActorID, StepKey
from maze_impala.nn.distributions import DictActionDistribution

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


@dataclass
class ModelConfig:
    """The MLP used for every policy and critic network."""

    hidden_units: list[int] = field(default_factory=lambda: [128, 128])
    """Widths of the hidden layers."""
    activation: str = "tanh"
    """One of tanh, relu, elu, silu."""

    def __post_init__(self) -> None:
        if not self.hidden_units or any(int(h) <= 0 for h in self.hidden_units):
            raise ValueError(f"model.hidden_units must be a non-empty list of positive ints, got {self.hidden_units}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"model.activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")


def storage_dtype(space: gym.Space) -> np.dtype:
    """The numpy dtype in which observations/actions of ``space`` are stored in rollouts."""
    if isinstance(space, gym.spaces.Box):
        return np.dtype(np.float32)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
        return np.dtype(np.int64)
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(np.int8)
    raise TypeError(f"unsupported space {space}: use Box, Discrete, MultiDiscrete or MultiBinary inside a Dict")


class ObservationEncoder(nn.Module):
    """Flattens a Dict observation into one float vector (one-hot for discrete parts)."""

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
                parts.append(F.one_hot(x.long() - int(sub.start), int(sub.n)).float())
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                parts.extend(F.one_hot(x[..., i].long(), int(n)).float() for i, n in enumerate(sub.nvec.flat))
            else:
                parts.append(x.reshape(*x.shape[:batch_dims], -1).float())
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]


def mlp(n_in: int, n_out: int, config: ModelConfig, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in config.hidden_units:
        linear = nn.Linear(n_in, int(width))
        nn.init.orthogonal_(linear.weight, gain=np.sqrt(2))
        nn.init.zeros_(linear.bias)
        layers += [linear, ACTIVATIONS[config.activation]()]
        n_in = int(width)
    head = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(head.weight, gain=out_gain)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


class _StepNet(nn.Module):
    def __init__(self, obs_space: gym.spaces.Dict, n_out: int, config: ModelConfig, out_gain: float):
        super().__init__()
        self.encoder = ObservationEncoder(obs_space)
        self.body = mlp(self.encoder.n_outputs, n_out, config, out_gain)

    def forward(self, obs: Mapping[str, torch.Tensor], batch_dims: int) -> torch.Tensor:
        return self.body(self.encoder(obs, batch_dims))


class StructuredPolicy(nn.Module):
    """One policy network per step key, each with the action distribution of its space."""

    def __init__(
        self,
        observation_spaces: Mapping[StepKey, gym.spaces.Dict],
        action_spaces: Mapping[StepKey, gym.spaces.Dict],
        config: ModelConfig,
    ):
        super().__init__()
        if set(observation_spaces) != set(action_spaces):
            raise ValueError(
                f"observation and action spaces name different step keys: "
                f"{sorted(map(str, observation_spaces))} vs {sorted(map(str, action_spaces))}"
            )
        self.step_keys: list[StepKey] = list(action_spaces)
        self.action_spaces = dict(action_spaces)
        self.distributions = nn.ModuleDict({str(k): DictActionDistribution(action_spaces[k]) for k in self.step_keys})
        self.networks = nn.ModuleDict(
            {
                str(k): _StepNet(observation_spaces[k], self.distributions[str(k)].n_inputs, config, out_gain=0.01)
                for k in self.step_keys
            }
        )

    def logits(self, step_key: StepKey, obs: Mapping[str, torch.Tensor], batch_dims: int = 1) -> torch.Tensor:
        return self.networks[str(step_key)](obs, batch_dims)

    def distribution(self, step_key: StepKey) -> DictActionDistribution:
        return self.distributions[str(step_key)]

    @torch.no_grad()
    def act(
        self,
        step_key: StepKey,
        obs: Mapping[str, torch.Tensor],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Batched acting: actions and their log-probs for a ``[B, ...]`` batch of observations.

        Sampling draws from ``generator`` (an actor's own, for reproducible rollouts) or torch's global one.
        """
        logits = self.logits(step_key, obs)
        dist = self.distribution(step_key)
        actions = dist.sample(logits, deterministic, generator)
        return actions, dist.log_prob(logits, actions)

    def compute_action(
        self, observation: Mapping[str, np.ndarray], actor_id: ActorID, deterministic: bool = False
    ) -> dict[str, np.ndarray]:
        """One action for one observation of the actor ``actor_id`` (numpy in, numpy out)."""
        obs = {k: torch.as_tensor(np.asarray(v)).unsqueeze(0) for k, v in observation.items()}
        actions, _ = self.act(actor_id.step_key, obs, deterministic)
        space = self.action_spaces[actor_id.step_key]
        return {k: a[0].numpy().astype(storage_dtype(space[k])) for k, a in actions.items()}


class StructuredCritic(nn.Module):
    """One state-value network per step key: V(x) for the observations of that sub-step."""

    def __init__(self, observation_spaces: Mapping[StepKey, gym.spaces.Dict], config: ModelConfig):
        super().__init__()
        self.step_keys: list[StepKey] = list(observation_spaces)
        self.networks = nn.ModuleDict(
            {str(k): _StepNet(observation_spaces[k], 1, config, out_gain=1.0) for k in self.step_keys}
        )

    def values(self, step_key: StepKey, obs: Mapping[str, torch.Tensor], batch_dims: int = 1) -> torch.Tensor:
        return self.networks[str(step_key)](obs, batch_dims).squeeze(-1)
