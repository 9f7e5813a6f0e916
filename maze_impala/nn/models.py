"""Policies keyed by step key, built from a :class:`ModelConfig`.

Per step key the policy has three stages, each reporting its width (:class:`StepNet`): an observation encoder
with MLP layers, an optional recurrent core (``model.recurrent``), and the output layer feeding the step key's
action distribution; before them, optionally, running observation statistics (``model.normalize_observations``,
:mod:`maze_impala.nn.normalize`). Critics (:mod:`maze_impala.nn.critics`) are separate networks; with a recurrent
policy they read its core's output (its memory) beside their own encoding.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from maze_impala.config.model import ModelConfig
from maze_impala.core import ActorID, StepKey
from maze_impala.envs.spaces import MASK_SUFFIX, MASKED_LOGIT, mask_error, storage_dtype
from maze_impala.envs.structured import StructuredEnv
from maze_impala.nn.acting import Noise, StreamNoise
from maze_impala.nn.custom import ExternalNet, check_networks, network_config
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.encoders import ObservationEncoder
from maze_impala.nn.flat import flat_layout
from maze_impala.nn.groups import agent_routes
from maze_impala.nn.names import module_key
from maze_impala.nn.normalize import ObservationNormalizer
from maze_impala.nn.numpy_acting import NetworkForm, NumpyPolicyForm, StepForm
from maze_impala.nn.recurrent import RecurrentCore, TorchState

ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "silu": nn.SiLU}
Observations = Mapping[str, torch.Tensor]


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

    def __init__(self, route: list[int], obs_space: gym.spaces.Dict, n_out: int, config: ModelConfig,
                 out_gain: float, recurrent: bool = False):  # fmt: skip
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

    def unroll(self, obs: Observations, state: TorchState, first: torch.Tensor,
               agent_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, Memory]:  # fmt: skip
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


class PolicyUnroll(NamedTuple):
    logits: torch.Tensor
    """The masked logits of rows ``0..T-1``, ``[T, N, L]``."""
    memory: Memory | None
    """The core's output over all ``T + 1`` rows and its states at reset boundaries; None for a feed-forward
    policy."""


class StructuredPolicy(nn.Module):
    """One policy network per step key (or per agent), each with the action distribution of its space.

    Discrete action heads are masked by an observation key ``<action key>_mask``
    (1 = allowed): masked actions get probability zero, so they are never sampled
    and do not count in log-probabilities or entropy.

    Env observations become the networks' inputs through :meth:`normalize` (running statistics where
    ``model.normalize_observations``, else unchanged); :meth:`act` does it itself, the learner once per batch.
    """

    def __init__(
        self,
        observation_spaces: Mapping[StepKey, gym.spaces.Dict],
        action_spaces: Mapping[StepKey, gym.spaces.Dict],
        config: ModelConfig,
        agent_counts: Mapping[StepKey, int] | None = None,
        agents: Mapping[str, ActorID] | None = None,
    ):
        """``agent_counts`` and ``agents`` (the env's named agents) place per-agent and grouped networks
        (``model.per_agent_networks``, ``model.agent_groups``)."""
        super().__init__()
        if set(observation_spaces) != set(action_spaces):
            raise ValueError(
                f"observation and action spaces name different step keys: "
                f"{sorted(map(str, observation_spaces))} vs {sorted(map(str, action_spaces))}"
            )
        self.step_keys: list[StepKey] = list(action_spaces)
        self.observation_spaces, self.action_spaces = dict(observation_spaces), dict(action_spaces)
        self.recurrent = config.recurrent != "none"
        self.distributions = nn.ModuleDict(
            {module_key(k): DictActionDistribution(action_spaces[k]) for k in self.step_keys}
        )
        self.masks = {k: action_masks(observation_spaces[k], action_spaces[k]) for k in self.step_keys}
        if config.normalize_observations:
            self.normalizers = nn.ModuleDict(
                {module_key(k): ObservationNormalizer(observation_spaces[k]) for k in self.step_keys}
            )
        routes = agent_routes(config.agent_groups, config.per_agent_networks, agents or {}, agent_counts or {})
        check_networks(config.networks, self.step_keys)
        networks: dict[str, nn.Module] = {}
        for k in self.step_keys:
            n_out = self.distribution(k).n_inputs
            if (own := network_config(config.networks, k)) is not None:
                networks[module_key(k)] = ExternalNet(own, observation_spaces[k], n_out, k)
            elif k in routes:
                networks[module_key(k)] = PerAgentNet(routes[k], observation_spaces[k], n_out, config, 0.01,
                                                      self.recurrent)  # fmt: skip
            else:
                networks[module_key(k)] = StepNet(observation_spaces[k], n_out, config, 0.01, recurrent=self.recurrent)
        self.networks = nn.ModuleDict(networks)

    def network(self, step_key: StepKey) -> StepNet | PerAgentNet | ExternalNet:
        return self.networks[module_key(step_key)]

    def distribution(self, step_key: StepKey) -> DictActionDistribution:
        return self.distributions[module_key(step_key)]

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        """The shape of one row of ``step_key``'s recurrent state, per name (empty: feed-forward)."""
        return self.network(step_key).state_shapes()

    def initial_state(self, step_key: StepKey, batch: int) -> TorchState:
        """The state an episode starts from: zeros, ``[batch, ...]`` per name."""
        return {name: torch.zeros(batch, *shape) for name, shape in self.state_shapes(step_key).items()}

    @property
    def normalizes(self) -> bool:
        """Whether observations go through running statistics (``model.normalize_observations``)."""
        return "normalizers" in self._modules

    def normalize(self, step_key: StepKey, obs: Observations) -> Observations:
        """The networks' inputs for env observations: normalised by the running statistics, if the model has any."""
        return self.normalizers[module_key(step_key)](obs) if self.normalizes else obs

    def update_normalizers(self, step_key: StepKey, obs: Observations) -> None:
        """Add a batch of ``step_key``'s observations (one row per decision, ``[M, ...]``) to its statistics."""
        if self.normalizes:
            self.normalizers[module_key(step_key)].update(obs)

    def mask_logits(
        self, step_key: StepKey, logits: torch.Tensor, inputs: Observations, check_masks: bool = False
    ) -> torch.Tensor:
        masks = self.masks[step_key]
        if not masks:
            return logits
        dist = self.distribution(step_key)
        parts = []
        for key, size in zip(dist.keys, dist.sizes):
            if key in masks:
                allowed = inputs[masks[key]] > 0.5
                if check_masks and not bool(allowed.any(-1).all()):
                    raise mask_error(step_key, masks[key], key)
                parts.append(allowed)
            else:
                parts.append(torch.ones(*logits.shape[:-1], size, dtype=torch.bool, device=logits.device))
        return logits.masked_fill(~torch.cat(parts, dim=-1), MASKED_LOGIT)

    def logits(
        self,
        step_key: StepKey,
        inputs: Observations,
        batch_dims: int = 1,
        agent_ids: torch.Tensor | None = None,
        check_masks: bool = False,
    ) -> torch.Tensor:
        """A feed-forward policy's masked logits for (normalised) inputs with ``batch_dims`` leading axes."""
        logits = self.network(step_key)(inputs, batch_dims, agent_ids)
        return self.mask_logits(step_key, logits, inputs, check_masks)

    def unroll(
        self,
        step_key: StepKey,
        inputs: Observations,
        state: TorchState,
        first: torch.Tensor,
        agent_ids: torch.Tensor,
    ) -> PolicyUnroll:
        """The policy over a batch's ``[T + 1, N]`` rows of (normalised) inputs: the logits of rows ``0..T-1`` and,
        for a recurrent policy, its memory over all rows, unrolled from the columns' recorded ``state``, reset
        before every row where ``first`` (``[T + 1, N]``: the decision starts a new episode)."""
        if not self.recurrent:
            rows = {k: v[:-1] for k, v in inputs.items()}
            return PolicyUnroll(self.logits(step_key, rows, 2, agent_ids), None)
        out, memory = self.network(step_key).unroll(inputs, state, first, agent_ids)
        rows = {k: v[:-1] for k, v in inputs.items()}
        return PolicyUnroll(self.mask_logits(step_key, out[:-1], rows), memory)

    def memory(self, step_key: StepKey, inputs: Observations, state: TorchState, agent_ids: torch.Tensor):
        """The core's output for ``[K]`` (normalised) inputs taken from their ``state`` (recurrent policies)."""
        return self.network(step_key).memory(inputs, state, agent_ids)

    @torch.no_grad()
    def act(
        self,
        step_key: StepKey,
        obs: Observations,
        state: TorchState | None = None,
        agent_ids: torch.Tensor | None = None,
        noise: Noise | None = None,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, TorchState]:
        """Batched acting on ``[B, ...]`` env observations from ``state`` (None: the initial state): actions,
        their log-probabilities and the next state. Sampled with ``noise`` (see :class:`~maze_impala.nn.acting.Noise`),
        the most likely actions without."""
        inputs = self.normalize(step_key, obs)
        if state is None or (self.recurrent and not state):
            state = self.initial_state(step_key, len(next(iter(obs.values()))))
        out, state = self.network(step_key).step(inputs, state, agent_ids)
        logits = self.mask_logits(step_key, out, inputs, check_masks=True)
        actions, log_probs = self.distribution(step_key).sample_with_log_prob(logits, noise)
        return actions, log_probs, state

    def compute_action(
        self, observation: Mapping[str, np.ndarray], actor_id: ActorID, deterministic: bool = False
    ) -> dict[str, np.ndarray]:
        """One action for one observation of the actor ``actor_id`` (numpy in, numpy out); feed-forward policies
        only (a recurrent one acts with its state: use :meth:`player`)."""
        if self.recurrent:
            raise ValueError("a recurrent policy acts with its state: use policy.player(), which keeps it per actor")
        obs = {k: torch.as_tensor(np.asarray(v)).unsqueeze(0) for k, v in observation.items()}
        noise = None if deterministic else StreamNoise(np.random.default_rng())
        actions, _, _ = self.act(actor_id.step_key, obs, None, torch.tensor([actor_id.agent_id]), noise)
        space = self.action_spaces[actor_id.step_key]
        return {k: a[0].numpy().astype(storage_dtype(space[k])) for k, a in actions.items()}

    def player(self, deterministic: bool = True, seed: int = 0) -> Any:
        """A :class:`~maze_impala.nn.torch_acting.Player` of this policy: one observation at a time, each actor's
        recurrent state kept between calls."""
        from maze_impala.nn.torch_acting import Player

        return Player(self, deterministic, seed)

    def numpy_form(self) -> NumpyPolicyForm | None:
        """The policy as plain data for :class:`~maze_impala.nn.numpy_acting.NumpyActing`, or None where a part of it
        has no numpy form, or where its state (parameters and buffers) holds entries that no form reads."""
        steps = {}
        for key in self.step_keys:
            name = module_key(key)
            export = getattr(self.network(key), "numpy_form", None)  # a network without one acts in torch
            network = export(f"networks.{name}.") if export is not None else None
            heads = self.distribution(key).numpy_form(f"distributions.{name}.")
            if network is None or heads is None:
                return None
            normalizer = self.normalizers[name].numpy_form(f"normalizers.{name}.") if self.normalizes else None
            steps[key] = StepForm(normalizer, network, heads, dict(self.masks[key]))
        form = NumpyPolicyForm(steps, flat_layout(self))
        return None if form.unread() else form


def make_policy(env: StructuredEnv, config: ModelConfig) -> StructuredPolicy:
    """The policy for ``env``'s step keys, spaces and agent counts (its observations without the critic-only keys)."""
    spaces = policy_observation_spaces(env.observation_spaces_dict, config.critic_only_keys)
    return StructuredPolicy(spaces, env.action_spaces_dict, config, env.agent_counts_dict, env.agents_dict)


def policy_observation_spaces(
    spaces: Mapping[StepKey, gym.spaces.Dict], critic_only: Sequence[str]
) -> dict[StepKey, gym.spaces.Dict]:
    """Each step key's observation space without the keys that only the critics see (``model.critic_only_keys``)."""
    if not critic_only:
        return dict(spaces)
    known = {name for space in spaces.values() for name in space.spaces}
    unknown = sorted(set(critic_only) - known)
    if unknown:
        raise ValueError(f"model.critic_only_keys: {unknown} are not observation keys of this env; its keys: "
                         f"{sorted(known)}")  # fmt: skip
    kept = {key: gym.spaces.Dict({n: s for n, s in space.spaces.items() if n not in critic_only})
            for key, space in spaces.items()}  # fmt: skip
    empty = [str(key) for key, space in kept.items() if not space.spaces]
    if empty:
        raise ValueError(f"model.critic_only_keys leaves the policy of step key(s) {empty} no observation to act on")
    return kept


class RandomPolicy(StructuredPolicy):
    """Uniformly random over the allowed actions of every discrete head (a baseline; Box heads: N(0, 1)).

    It always samples: a greedy "random" policy would pick the first allowed action every time. Asked for the most
    likely actions (no noise), it samples from its own stream.
    """

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._noise = StreamNoise(seed)

    def reseed(self, seed: int) -> None:
        """Draw from a fresh stream seeded with ``seed`` (the random numbers of actions taken without noise)."""
        self._noise = StreamNoise(seed)

    @torch.no_grad()
    def act(self, step_key, obs, state=None, agent_ids=None, noise=None):  # type: ignore[no-untyped-def]
        sample = next(iter(obs.values()))
        logits = torch.zeros(len(sample), self.distribution(step_key).n_inputs, device=sample.device)
        logits = self.mask_logits(step_key, logits, obs, check_masks=True)
        actions, log_probs = self.distribution(step_key).sample_with_log_prob(logits, noise or self._noise)
        return actions, log_probs, state or {}

    def numpy_form(self) -> None:
        return None


def make_random_policy(env: StructuredEnv, seed: int = 0) -> RandomPolicy:
    """A random policy for ``env`` (tiny networks that it never uses)."""
    return RandomPolicy(
        env.observation_spaces_dict,
        env.action_spaces_dict,
        ModelConfig(hidden_units=[1], image_encoder="flatten"),
        seed=seed,
    )
