"""State critics for structured envs: per step key, shared over all sub-steps, or delta.

All three answer ``values(step_key, obs, batch_dims, ancestors, memory)``: ``V(x)``
for a batch of one step key's (normalised) observations. ``ancestors`` holds, per
earlier sub-step key, that sub-step's observation in the same structured step; only
the delta critic reads it. ``memory`` is a recurrent policy's core output for the same
rows: a critic has no core of its own but reads the policy's memory (detached, so that
the value loss trains the critic only) beside its own encoding. The actors record the
policy's state only, so the policy's memory is what a critic can be given exactly at
every row of a rollout, its first included. :meth:`StructuredCritic.networks_by_key` names each network for
gradient norms and clipping (the ``critic_key`` of the events).

Each network's output is read through its :class:`~maze_impala.nn.value_norm.ValueNormalizer`: ``values`` are
always in the env's units, and the learner (``algorithm.value_normalization``) keeps the statistics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import gymnasium as gym
import torch
from torch import nn

from maze_impala.config import ModelConfig
from maze_impala.core import StepKey
from maze_impala.nn.names import module_key
from maze_impala.nn.networks import Observations, StepNet
from maze_impala.nn.value_norm import ValueNormalizer


class StructuredCritic(nn.Module):
    """Base class: one or more value networks over the observations of every step key."""

    step_keys: list[StepKey]
    needs_ancestors = False

    def values(
        self,
        step_key: StepKey,
        obs: Observations,
        batch_dims: int = 1,
        ancestors: Mapping[StepKey, Observations] | None = None,
        memory: torch.Tensor | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError

    def networks_by_key(self) -> dict[str, nn.Module]:
        raise NotImplementedError

    def critic_key(self, step_key: StepKey) -> str:
        """The name of the network that values ``step_key`` (the ``critic_key`` of every critic statistic)."""
        return str(step_key)

    value_norms: nn.ModuleDict
    """Each network's :class:`ValueNormalizer`, under its ``critic_key`` (escaped as a module name)."""

    def normalizer(self, step_key: StepKey) -> ValueNormalizer:
        """The statistics the network that values ``step_key`` is read with."""
        return self.value_norms[module_key(self.critic_key(step_key))]

    def head(self, step_key: StepKey) -> nn.Linear:
        """The output layer of the network that values ``step_key`` (PopArt rescales it)."""
        network = self.networks_by_key()[self.critic_key(step_key)]
        assert isinstance(network, StepNet)
        return network.output_layer

    def own_targets(
        self,
        step_key: StepKey,
        targets: torch.Tensor,
        obs: Observations,
        batch_dims: int,
        ancestors: Mapping[StepKey, Observations] | None,
    ) -> torch.Tensor:
        """``targets`` (of V at ``obs``) in the units of the network's own output, before its normaliser: what its
        statistics are of. The targets themselves, but for a network that predicts a part of V (the delta critic)."""
        return targets


class StepStateCritic(StructuredCritic):
    """One state-value network per step key, trained on that step key's V-trace targets."""

    def __init__(
        self, observation_spaces: Mapping[StepKey, gym.spaces.Dict], config: ModelConfig, memory_width: int = 0
    ):
        super().__init__()
        self.step_keys = list(observation_spaces)
        self.networks = nn.ModuleDict(
            {module_key(k): StepNet(observation_spaces[k], 1, config, 1.0, memory_width) for k in self.step_keys}
        )
        self.value_norms = nn.ModuleDict({module_key(k): ValueNormalizer() for k in self.step_keys})

    def values(
        self,
        step_key: StepKey,
        obs: Observations,
        batch_dims: int = 1,
        ancestors: Mapping[StepKey, Observations] | None = None,
        memory: torch.Tensor | None = None,
    ) -> torch.Tensor:
        output = self.networks[module_key(step_key)](obs, batch_dims, extra=memory).squeeze(-1)
        return self.value_norms[module_key(step_key)].denormalize(output)

    def networks_by_key(self) -> dict[str, nn.Module]:
        return {str(k): self.networks[module_key(k)] for k in self.step_keys}


class SharedStateCritic(StructuredCritic):
    """One network for every sub-step, trained on the targets of all of them.

    Its input is the union of the step keys' observation entries (an entry a step
    key lacks is zero) plus a one-hot of the step key.
    """

    CRITIC_KEY = "shared"
    STEP_KEY_INPUT = "_step_key"

    def __init__(
        self, observation_spaces: Mapping[StepKey, gym.spaces.Dict], config: ModelConfig, memory_width: int = 0
    ):
        super().__init__()
        self.step_keys = list(observation_spaces)
        union: dict[str, gym.Space] = {}
        for key, space in observation_spaces.items():
            for name, sub in space.spaces.items():
                if name in union and union[name] != sub:
                    raise ValueError(
                        f"model.critic=shared: observation entry {name!r} has different spaces in different step "
                        f"keys ({union[name]} vs {sub} in {key!r}); rename one, or use model.critic=step"
                    )
                union[name] = sub
        union[self.STEP_KEY_INPUT] = gym.spaces.Discrete(len(self.step_keys))
        self.space = gym.spaces.Dict(union)
        self.network = StepNet(self.space, 1, config, 1.0, memory_width)
        self.value_norms = nn.ModuleDict({self.CRITIC_KEY: ValueNormalizer()})

    def values(
        self,
        step_key: StepKey,
        obs: Observations,
        batch_dims: int = 1,
        ancestors: Mapping[StepKey, Observations] | None = None,
        memory: torch.Tensor | None = None,
    ) -> torch.Tensor:
        sample = next(iter(obs.values()))
        shape = sample.shape[:batch_dims]
        full: dict[str, torch.Tensor] = {}
        for name, sub in self.space.spaces.items():
            if name == self.STEP_KEY_INPUT:
                full[name] = torch.full(shape, self.step_keys.index(step_key), dtype=torch.long, device=sample.device)
            elif name in obs:
                full[name] = obs[name]
            else:
                low = int(getattr(sub, "start", 0)) if isinstance(sub, gym.spaces.Discrete) else 0
                full[name] = torch.full((*shape, *sub.shape), low, device=sample.device)
        return self.value_norms[self.CRITIC_KEY].denormalize(self.network(full, batch_dims, extra=memory).squeeze(-1))

    def networks_by_key(self) -> dict[str, nn.Module]:
        return {self.CRITIC_KEY: self.network}

    def critic_key(self, step_key: StepKey) -> str:
        return self.CRITIC_KEY


class DeltaStateCritic(StepStateCritic):
    """Later sub-steps predict the change to the previous sub-step's value.

    ``V_1(x_1) = f_1(x_1)`` and ``V_k(x_k) = V_{k-1}(x_{k-1}) + f_k(x_k)``, where
    ``x_{k-1}`` is the previous sub-step's observation in the same structured step.
    The previous value is not differentiated through, so each network learns from
    its own step key's targets only. Every structured step must visit the step keys
    in the order of ``agent_counts_dict``, one agent each (the actors check this).
    """

    needs_ancestors = True

    def values(
        self,
        step_key: StepKey,
        obs: Observations,
        batch_dims: int = 1,
        ancestors: Mapping[StepKey, Observations] | None = None,
        memory: torch.Tensor | None = None,
    ) -> torch.Tensor:
        own = super().values(step_key, obs, batch_dims)
        return self._previous(step_key, batch_dims, ancestors) + own

    def _previous(
        self, step_key: StepKey, batch_dims: int, ancestors: Mapping[StepKey, Observations] | None
    ) -> torch.Tensor | float:
        """V of the earlier sub-step, the sum of the earlier networks' outputs (0 for the first step key)."""
        position = self.step_keys.index(step_key)
        if position == 0:
            return 0.0
        if ancestors is None or any(k not in ancestors for k in self.step_keys[:position]):
            raise ValueError(f"the delta critic of step key {step_key!r} needs the earlier sub-steps' observations")
        with torch.no_grad():
            return sum(StepStateCritic.values(self, k, ancestors[k], batch_dims) for k in self.step_keys[:position])

    def own_targets(
        self,
        step_key: StepKey,
        targets: torch.Tensor,
        obs: Observations,
        batch_dims: int,
        ancestors: Mapping[StepKey, Observations] | None,
    ) -> torch.Tensor:
        previous = self._previous(step_key, batch_dims, ancestors)
        if isinstance(previous, torch.Tensor):  # the earlier sub-steps' values at x_0..x_T; the targets are of x_0..
            previous = previous[: targets.shape[0]]
        return targets - previous


def make_critic(
    observation_spaces: Mapping[StepKey, gym.spaces.Dict], agent_counts: Mapping[StepKey, int], config: ModelConfig
) -> StructuredCritic:
    """The critic named by ``config.critic``."""
    kind = config.critic
    config = replace(config, hidden_units=config.critic_widths, networks={})  # critics: the built-in networks
    memory_width = config.recurrent_units if config.recurrent != "none" else 0
    if kind == "step":
        return StepStateCritic(observation_spaces, config, memory_width)
    if kind == "shared":
        return SharedStateCritic(observation_spaces, config, memory_width)
    if kind == "delta":
        bad = {k: n for k, n in agent_counts.items() if n != 1}
        if bad:
            raise ValueError(
                f"model.critic=delta needs one agent per step key (sub-steps in a fixed order), got agent counts "
                f"{bad}; use model.critic=step or shared"
            )
        return DeltaStateCritic(observation_spaces, config)
    raise ValueError(f"model.critic must be one of step, shared, delta; got {kind!r}")
