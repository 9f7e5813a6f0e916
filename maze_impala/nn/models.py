"""Policies and critics keyed by step key, built from a :class:`ModelConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.config.model import ModelConfig
from maze_impala.core import ActorID, StepKey
from maze_impala.envs.checker import MASK_SUFFIX
from maze_impala.envs.spaces import storage_dtype
from maze_impala.envs.structured import StructuredEnv
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.numpy_acting import MASKED_LOGIT, mask_error

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}


class _SigmoidTanh(torch.autograd.Function):
    """tanh(x) computed as 2 sigmoid(2x) - 1, with tanh's own gradient 1 - tanh(x)^2."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.sigmoid(x * 2).mul_(2).sub_(1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # grad * (1 - y^2) in one kernel, as torch.tanh's backward


def tanh(x: torch.Tensor) -> torch.Tensor:
    """``torch.tanh``, faster on CPUs, where torch's tanh kernel is much slower than its sigmoid: forward and backward
    on 1,056 x 128 take 330 us against torch.tanh's 550-570 us on our 2-core machine (the backward is torch's own
    tanh kernel, on the saved output). The same function up to float rounding (absolute differences below 2e-7 in value
    and gradient)."""
    return torch.tanh(x) if x.is_cuda else _SigmoidTanh.apply(x)


FUNCTIONAL_ACTIVATIONS = {"tanh": tanh, "relu": torch.relu, "elu": F.elu, "silu": F.silu}


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
                # clamped: padding entries (zeros) of a space that starts above 0 must not fail
                parts.append(F.one_hot((x.long() - int(sub.start)).clamp(0, int(sub.n) - 1), int(sub.n)).float())
            elif isinstance(sub, gym.spaces.MultiDiscrete):
                for i, n in enumerate(int(n) for n in sub.nvec.flat):
                    parts.append(F.one_hot(x[..., i].long().clamp(0, n - 1), n).float())
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


class StepNet(nn.Module):
    """Encoder plus MLP over one step key's observations."""

    def __init__(self, obs_space: gym.spaces.Dict, n_out: int, config: ModelConfig, out_gain: float):
        super().__init__()
        self.encoder = ObservationEncoder(obs_space)
        self.body = mlp(self.encoder.n_outputs, n_out, config, out_gain)
        self.activation_name = config.activation
        self._activation = FUNCTIONAL_ACTIVATIONS[config.activation]
        # a tuple: nn.Module registers a module assigned as an attribute, not one held in a tuple
        self._linears = tuple(m for m in self.body if isinstance(m, nn.Linear))

    def forward(
        self, obs: Mapping[str, torch.Tensor], batch_dims: int, agent_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        # The layers are applied functionally: the same maths as self.body(x), without the per-module call
        # overhead that dominates small batches on the actors.
        x = self.encoder(obs, batch_dims)
        *hidden, head = self._linears
        for layer in hidden:
            x = self._activation(F.linear(x, layer.weight, layer.bias))
        return F.linear(x, head.weight, head.bias)


class PerAgentNet(nn.Module):
    """One :class:`StepNet` per agent; ``agent_ids`` (over the last batch axis) routes each entry."""

    def __init__(self, n_agents: int, obs_space: gym.spaces.Dict, n_out: int, config: ModelConfig, out_gain: float):
        super().__init__()
        self.agents = nn.ModuleList(StepNet(obs_space, n_out, config, out_gain) for _ in range(n_agents))
        self.n_out = n_out

    def forward(
        self, obs: Mapping[str, torch.Tensor], batch_dims: int, agent_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        if agent_ids is None:
            raise ValueError("a per-agent network needs the agent id of every entry")
        axis = batch_dims - 1
        shape = next(iter(obs.values())).shape[:batch_dims]
        out = torch.zeros(*shape, self.n_out, device=agent_ids.device)
        for agent in torch.unique(agent_ids).tolist():
            index = (agent_ids == agent).nonzero().squeeze(-1)
            part = self.agents[agent]({k: v.index_select(axis, index) for k, v in obs.items()}, batch_dims)
            out = out.index_copy(axis, index, part)
        return out


def action_masks(obs_space: gym.spaces.Dict, act_space: gym.spaces.Dict) -> dict[str, str]:
    """Action keys masked by an observation key ``<action key>_mask``, checked against the head's size."""
    masks = {}
    for key, sub in act_space.spaces.items():
        mask_space = obs_space.spaces.get(key + MASK_SUFFIX)
        if mask_space is None:
            continue
        if not isinstance(sub, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            raise ValueError(f"observation key {key + MASK_SUFFIX!r} masks action {key!r}, which is not discrete")
        size = int(sub.n) if isinstance(sub, gym.spaces.Discrete) else int(sub.nvec.sum())
        if tuple(mask_space.shape) != (size,):
            raise ValueError(
                f"action mask {key + MASK_SUFFIX!r} has shape {mask_space.shape}, expected ({size},) "
                f"for action {key!r} ({sub})"
            )
        masks[key] = key + MASK_SUFFIX
    return masks


class StructuredPolicy(nn.Module):
    """One policy network per step key (or per agent), each with the action distribution of its space.

    Discrete action heads are masked by an observation key ``<action key>_mask``
    (1 = allowed): masked actions get probability zero, so they are never sampled
    and do not count in log-probabilities or entropy.
    """

    def __init__(
        self,
        observation_spaces: Mapping[StepKey, gym.spaces.Dict],
        action_spaces: Mapping[StepKey, gym.spaces.Dict],
        config: ModelConfig,
        agent_counts: Mapping[StepKey, int] | None = None,
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
        self.masks = {k: action_masks(observation_spaces[k], action_spaces[k]) for k in self.step_keys}
        counts = dict(agent_counts or {})
        networks: dict[str, nn.Module] = {}
        for k in self.step_keys:
            n_out = self.distributions[str(k)].n_inputs
            if config.per_agent_networks and counts.get(k, 1) != 1:
                if counts[k] < 1:
                    raise ValueError(
                        f"model.per_agent_networks=true needs a fixed agent count, but step key {k!r} has "
                        f"{counts[k]}; use shared networks (model.per_agent_networks=false) for it"
                    )
                networks[str(k)] = PerAgentNet(counts[k], observation_spaces[k], n_out, config, out_gain=0.01)
            else:
                networks[str(k)] = StepNet(observation_spaces[k], n_out, config, out_gain=0.01)
        self.networks = nn.ModuleDict(networks)

    def logits(
        self,
        step_key: StepKey,
        obs: Mapping[str, torch.Tensor],
        batch_dims: int = 1,
        agent_ids: torch.Tensor | None = None,
        check_masks: bool = False,
    ) -> torch.Tensor:
        logits = self.raw_logits(step_key, obs, batch_dims, agent_ids)
        masks = self.masks[step_key]
        if not masks:
            return logits
        dist = self.distribution(step_key)
        parts = []
        for key, size in zip(dist.heads.keys(), dist.sizes):
            if key in masks:
                allowed = obs[masks[key]] > 0.5
                if check_masks and not bool(allowed.any(-1).all()):
                    raise mask_error(step_key, masks[key], key)
                parts.append(allowed)
            else:
                parts.append(torch.ones(*logits.shape[:-1], size, dtype=torch.bool, device=logits.device))
        return logits.masked_fill(~torch.cat(parts, dim=-1), MASKED_LOGIT)

    def raw_logits(
        self, step_key: StepKey, obs: Mapping[str, torch.Tensor], batch_dims: int, agent_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """The network's output, before action masks."""
        return self.networks[str(step_key)](obs, batch_dims, agent_ids)

    def distribution(self, step_key: StepKey) -> DictActionDistribution:
        return self.distributions[str(step_key)]

    @torch.no_grad()
    def act(
        self,
        step_key: StepKey,
        obs: Mapping[str, torch.Tensor],
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        agent_ids: torch.Tensor | None = None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Batched acting: actions and their log-probs for a ``[B, ...]`` batch of observations.

        Sampling draws from ``generator`` (an actor's own, for reproducible rollouts) or torch's global one.
        """
        logits = self.logits(step_key, obs, agent_ids=agent_ids, check_masks=True)
        return self.distribution(step_key).sample_with_log_prob(logits, deterministic, generator)

    def compute_action(
        self, observation: Mapping[str, np.ndarray], actor_id: ActorID, deterministic: bool = False
    ) -> dict[str, np.ndarray]:
        """One action for one observation of the actor ``actor_id`` (numpy in, numpy out)."""
        obs = {k: torch.as_tensor(np.asarray(v)).unsqueeze(0) for k, v in observation.items()}
        agent = torch.tensor([actor_id.agent_id])
        actions, _ = self.act(actor_id.step_key, obs, deterministic, agent_ids=agent)
        space = self.action_spaces[actor_id.step_key]
        return {k: a[0].numpy().astype(storage_dtype(space[k])) for k, a in actions.items()}


def make_policy(env: StructuredEnv, config: ModelConfig) -> StructuredPolicy:
    """The policy for ``env``'s step keys, spaces and agent counts."""
    return StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, config, env.agent_counts_dict)


class RandomPolicy(StructuredPolicy):
    """Uniformly random over the allowed actions of every discrete head (a baseline; Box heads: N(0, 1)).

    It always samples: a greedy "random" policy would pick the first allowed action every time.
    """

    def act(self, step_key: StepKey, obs: Mapping[str, torch.Tensor], deterministic: bool = False, *args, **kwargs):
        return super().act(step_key, obs, False, *args, **kwargs)

    def raw_logits(
        self, step_key: StepKey, obs: Mapping[str, torch.Tensor], batch_dims: int, agent_ids: torch.Tensor | None
    ) -> torch.Tensor:
        sample = next(iter(obs.values()))
        return torch.zeros(*sample.shape[:batch_dims], self.distribution(step_key).n_inputs, device=sample.device)


def make_random_policy(env: StructuredEnv) -> RandomPolicy:
    """A random policy for ``env`` (tiny networks that it never uses)."""
    return RandomPolicy(env.observation_spaces_dict, env.action_spaces_dict, ModelConfig(hidden_units=[1]))
