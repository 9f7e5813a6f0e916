"""One step key's network (:class:`StepNet`: encoder, MLP layers, an optional recurrent core, the output layer) and
its per-agent form (:class:`PerAgentNet`, one network per agent or group)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.config.model import ModelConfig
from maze_impala.nn.encoders import ObservationEncoder
from maze_impala.nn.numpy_forms import NetworkForm
from maze_impala.nn.recurrent import RecurrentCore, TorchState

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
Observations = Mapping[str, torch.Tensor]


FUNCTIONAL_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": F.elu, "silu": F.silu}


def _linear(n_in: int, n_out: int, gain: float, init: str = "orthogonal") -> nn.Linear:
    linear = nn.Linear(n_in, n_out)
    if init == "orthogonal":
        nn.init.orthogonal_(linear.weight, gain=gain)
        nn.init.zeros_(linear.bias)
    return linear


class Memory(NamedTuple):
    """What a recurrent network's unroll over ``[T, N]`` rows gives besides its output."""

    features: torch.Tensor
    """The core's output per row, ``[T, N, units]``: the memory a critic reads."""
    ends: dict[int, TorchState]
    """The state after row ``t`` where a run of rows without a reset ends (see :class:`~.recurrent.Unrolled`)."""


class StepNet(nn.Module):
    """One step key's network: encoder, MLP layers, an optional recurrent core, and the output layer.

    ``n_extra`` features (a critic's view of the policy's memory) join the encoder's output. The state dict keeps
    the names of the MLP (``body.0``, ..., the output layer last) whether or not a core sits before the output.
    """

    def __init__(
        self,
        obs_space: gym.spaces.Dict,
        n_out: int,
        config: ModelConfig,
        out_gain: float,
        n_extra: int = 0,
        recurrent: bool = False,
    ):
        super().__init__()
        self.encoder = ObservationEncoder(obs_space, config.image_encoder, config.image_features)
        self.activation_name = config.activation
        self._activation = FUNCTIONAL_ACTIVATIONS[config.activation]
        widths = [self.encoder.n_outputs + n_extra, *(int(w) for w in config.hidden_units)]
        layers: list[nn.Module] = []
        for n_in, width in itertools.pairwise(widths):
            layers += [_linear(n_in, width, np.sqrt(2), config.init), ACTIVATIONS[config.activation]()]
        self.core = RecurrentCore(config.recurrent, widths[-1], config.recurrent_units) if recurrent else None
        layers.append(_linear(self.core.units if self.core else widths[-1], n_out, out_gain, config.init))
        self.body = nn.Sequential(*layers)
        # a tuple: nn.Module registers a module assigned as an attribute, not one held in a tuple
        self._linears = tuple(m for m in self.body if isinstance(m, nn.Linear))
        self.n_out = n_out

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.core.state_shapes() if self.core is not None else {}

    def features(self, obs: Observations, batch_dims: int, extra: torch.Tensor | None = None) -> torch.Tensor:
        """Encoder and MLP layers. Applied functionally: the same maths as the layers' modules, without the per-module
        call overhead that dominates small batches on the actors."""
        x = self.encoder(obs, batch_dims)
        if extra is not None:
            x = torch.cat([x, extra], dim=-1)
        for layer in self._linears[:-1]:
            x = self._activation(F.linear(x, layer.weight, layer.bias))
        return x

    @property
    def output_layer(self) -> nn.Linear:
        """The last linear layer, whose outputs are the network's."""
        return self._linears[-1]

    def output(self, x: torch.Tensor) -> torch.Tensor:
        head = self._linears[-1]
        return F.linear(x, head.weight, head.bias)

    def forward(
        self,
        obs: Observations,
        batch_dims: int,
        agent_ids: torch.Tensor | None = None,
        extra: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.core is not None:
            raise ValueError("a recurrent network acts with its state: call step() or unroll()")
        return self.output(self.features(obs, batch_dims, extra))

    def step(
        self, obs: Observations, state: TorchState, agent_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, TorchState]:
        """One decision per row of ``[B]`` observations from ``state``: the output and the next state."""
        x = self.features(obs, 1)
        if self.core is None:
            return self.output(x), state
        x, state = self.core.step(x, state)
        return self.output(x), state

    def unroll(
        self, obs: Observations, state: TorchState, first: torch.Tensor, agent_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, Memory]:
        """The output over ``[T, N]`` rows (columns in time order) from the columns' ``state``, reset where
        ``first``."""
        assert self.core is not None, "unroll() is for recurrent networks"
        unrolled = self.core.unroll(self.features(obs, 2), state, first)
        return self.output(unrolled.out), Memory(unrolled.out, unrolled.ends)

    def memory(self, obs: Observations, state: TorchState, agent_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The core's output for ``[K]`` observations from their states (a truncated episode's final observation)."""
        assert self.core is not None, "memory() is for recurrent networks"
        return self.core.step(self.features(obs, 1), state)[0]

    def numpy_form(self, prefix: str) -> NetworkForm | None:
        """This network as plain data, or None where it holds layers the form does not know."""
        if any(not isinstance(m, nn.Linear | ACTIVATIONS[self.activation_name]) for m in self.body):
            return None
        names = {id(p): f"{prefix}{n}" for n, p in self.named_parameters()}
        layers = [(names[id(m.weight)], names[id(m.bias)]) for m in self._linears]
        core = self.core.numpy_form(f"{prefix}core.") if self.core is not None else None
        encoder = self.encoder.numpy_form()
        if encoder is None:
            return None
        return NetworkForm(encoder, layers[:-1], self.activation_name, core, layers[-1], self.encoder.numpy_scalings())


def _route(agent_ids: torch.Tensor) -> list[tuple[int, torch.Tensor]]:
    return [(agent, (agent_ids == agent).nonzero().squeeze(-1)) for agent in torch.unique(agent_ids).tolist()]


class PerAgentNet(nn.Module):
    """One :class:`StepNet` per agent or group of agents: ``route[agent id]`` is an agent's network, and
    ``agent_ids`` (over the last batch axis: rows, or columns over time) routes each entry to it (see
    :mod:`~maze_impala.nn.groups`)."""

    def __init__(
        self,
        route: list[int],
        obs_space: gym.spaces.Dict,
        n_out: int,
        config: ModelConfig,
        out_gain: float,
        recurrent: bool = False,
    ):
        super().__init__()
        self.route = route
        self.agents = nn.ModuleList(
            StepNet(obs_space, n_out, config, out_gain, recurrent=recurrent) for _ in range(max(route) + 1)
        )
        self.n_out = n_out

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return self.agents[0].state_shapes()

    def _ids(self, agent_ids: torch.Tensor | None) -> torch.Tensor:
        """Each entry's network."""
        if agent_ids is None:
            raise ValueError("a per-agent network needs the agent id of every entry")
        return torch.as_tensor(self.route, device=agent_ids.device)[agent_ids.long()]

    def forward(
        self, obs: Observations, batch_dims: int, agent_ids: torch.Tensor | None = None, extra: None = None
    ) -> torch.Tensor:
        axis = batch_dims - 1
        shape = next(iter(obs.values())).shape[:batch_dims]
        out = torch.zeros(*shape, self.n_out, device=self._ids(agent_ids).device)
        for agent, index in _route(self._ids(agent_ids)):
            part = self.agents[agent]({k: v.index_select(axis, index) for k, v in obs.items()}, batch_dims)
            out = out.index_copy(axis, index, part)
        return out

    def step(self, obs: Observations, state: TorchState, agent_ids: torch.Tensor | None = None):
        out = torch.zeros(len(next(iter(obs.values()))), self.n_out)
        new = {k: v.clone() for k, v in state.items()}
        for agent, index in _route(self._ids(agent_ids)):
            part, part_state = self.agents[agent].step(
                {k: v[index] for k, v in obs.items()}, {k: v[index] for k, v in state.items()}
            )
            out[index] = part
            for k, v in part_state.items():
                new[k][index] = v
        return out, new

    def traced_step(
        self, obs: Observations, state: TorchState, agent_ids: torch.Tensor
    ) -> tuple[torch.Tensor, TorchState]:
        """:meth:`step` in a form a tracer follows (the ONNX export): every network on every row, each row then
        taking its own network's output and state, picked by its agent id (no routing that depends on the data)."""
        pick = torch.nn.functional.one_hot(self._ids(agent_ids), len(self.agents)).T.unsqueeze(-1)  # [A, B, 1]
        outs, states = zip(*(agent.step(obs, state) for agent in self.agents))
        new = {k: (torch.stack([s[k] for s in states]) * pick).sum(0) for k in state}
        return (torch.stack(outs) * pick).sum(0), new

    def unroll(
        self, obs: Observations, state: TorchState, first: torch.Tensor, agent_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, Memory]:
        T, N = first.shape
        out, features, ends = None, None, {}
        for agent, index in _route(self._ids(agent_ids)):
            part, memory = self.agents[agent].unroll(
                {k: v[:, index] for k, v in obs.items()}, {k: v[index] for k, v in state.items()}, first[:, index]
            )
            out = part.new_zeros(T, N, part.shape[-1]) if out is None else out
            features = part.new_zeros(T, N, memory.features.shape[-1]) if features is None else features
            out = out.index_copy(1, index, part)
            features = features.index_copy(1, index, memory.features)
            for t, end in memory.ends.items():
                merged = ends.setdefault(t, {k: v.new_zeros(N, v.shape[-1]) for k, v in end.items()})
                for k, v in end.items():
                    merged[k][index] = v
        return out, Memory(features, ends)

    def memory(self, obs: Observations, state: TorchState, agent_ids: torch.Tensor | None = None) -> torch.Tensor:
        out = None
        for agent, index in _route(self._ids(agent_ids)):
            rows = {k: v[index] for k, v in obs.items()}
            part = self.agents[agent].memory(rows, {k: v[index] for k, v in state.items()})
            out = part.new_zeros(len(self._ids(agent_ids)), part.shape[-1]) if out is None else out
            out[index] = part
        return out

    def numpy_form(self, prefix: str) -> None:
        return None  # per-agent routing acts in torch
