"""Policies keyed by step key, built from a :class:`ModelConfig`.

Per step key the policy has three stages, each reporting its width (:class:`~maze_impala.nn.networks.StepNet`):
an observation encoder with MLP layers, an optional recurrent core (``model.recurrent``), and the output layer
feeding the step key's action distribution; before them, optionally, running observation statistics
(``model.normalize_observations``, :mod:`maze_impala.nn.normalize`). Critics (:mod:`maze_impala.nn.critics`) are
separate networks; with a recurrent policy they read its core's output (its memory) beside their own encoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import torch
from torch import nn

from maze_impala.config.model import ModelConfig
from maze_impala.core import ActorID, StepKey
from maze_impala.envs.spaces import MASK_SUFFIX, MASKED_LOGIT, mask_error
from maze_impala.envs.structured import StructuredEnv
from maze_impala.nn.acting import Noise, StreamNoise
from maze_impala.nn.custom import ExternalNet, check_networks, network_config
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.flat import flat_layout
from maze_impala.nn.groups import agent_routes
from maze_impala.nn.names import module_key
from maze_impala.nn.networks import Memory, Observations, PerAgentNet, StepNet
from maze_impala.nn.normalize import ObservationNormalizer
from maze_impala.nn.numpy_forms import NumpyPolicyForm, StepForm
from maze_impala.nn.recurrent import TorchState


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
            {
                module_key(k): DictActionDistribution(action_spaces[k], config.init_log_std, config.action_bounds)
                for k in self.step_keys
            }
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
                networks[module_key(k)] = PerAgentNet(
                    routes[k], observation_spaces[k], n_out, config, 0.01, self.recurrent
                )
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
        first: torch.Tensor | None,
        agent_ids: torch.Tensor,
    ) -> PolicyUnroll:
        """The policy over a batch's ``[T + 1, N]`` rows of (normalised) inputs: the logits of rows ``0..T-1`` and,
        for a recurrent policy, its memory over all rows, unrolled from the columns' recorded ``state``, reset
        before every row where ``first`` (``[T + 1, N]``: the decision starts a new episode; a feed-forward policy
        reads none, and may be given None)."""
        if not self.recurrent:
            rows = {k: v[:-1] for k, v in inputs.items()}
            return PolicyUnroll(self.logits(step_key, rows, 2, agent_ids), None)
        if first is None:
            raise ValueError("a recurrent policy unrolls from its episode starts: pass first ([T + 1, N] bool)")
        out, memory = self.network(step_key).unroll(inputs, state, first, agent_ids)
        rows = {k: v[:-1] for k, v in inputs.items()}
        return PolicyUnroll(self.mask_logits(step_key, out[:-1], rows), memory)

    def memory(self, step_key: StepKey, inputs: Observations, state: TorchState, agent_ids: torch.Tensor):
        """The core's output for ``[K]`` (normalised) inputs taken from their ``state`` (recurrent policies)."""
        return self.network(step_key).memory(inputs, state, agent_ids)

    def step_logits(
        self,
        step_key: StepKey,
        obs: Observations,
        state: TorchState,
        agent_ids: torch.Tensor | None,
        check_masks: bool = False,
        traced: bool = False,
    ) -> tuple[torch.Tensor, TorchState]:
        """One decision's masked logits for ``[B, ...]`` env observations (normalised here) from ``state``, and the
        next state: what acting samples from and what an export computes (``traced``: the network's branch-free
        form, where it has one)."""
        inputs = self.normalize(step_key, obs)
        network = self.network(step_key)
        step = getattr(network, "traced_step", network.step) if traced else network.step
        out, state = step(inputs, state, agent_ids)
        return self.mask_logits(step_key, out, inputs, check_masks), state

    @torch.inference_mode()  # no autograd bookkeeping at all: 1.11-1.16x faster CNN rollouts than no_grad
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
        if state is None or (self.recurrent and not state):
            state = self.initial_state(step_key, len(next(iter(obs.values()))))
        logits, state = self.step_logits(step_key, obs, state, agent_ids, check_masks=True)
        actions, log_probs = self.distribution(step_key).sample_with_log_prob(logits, noise)
        return actions, log_probs, state

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
        raise ValueError(
            f"model.critic_only_keys: {unknown} are not observation keys of this env; its keys: {sorted(known)}. "
            "A PettingZoo env holds global_state only with env.global_state set (env=pettingzoo ships "
            "observations); with env.global_state=false give model.critic_only_keys=[] too"
        )
    kept = {
        key: gym.spaces.Dict({n: s for n, s in space.spaces.items() if n not in critic_only})
        for key, space in spaces.items()
    }
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

    @torch.inference_mode()
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
