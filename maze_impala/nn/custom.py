"""Your own policy network per step key: ``model.networks`` (see docs/models.md, "Your own network").

A network of yours is any ``torch.nn.Module`` built as ``Target(observation_space=..., n_outputs=..., **kwargs)``
from its config (``_target_`` and your keyword arguments, recorded with the run and rebuilt by ``load_policy``,
resume and the rollout CLI, as env factories are) whose ``forward(observations)`` maps a Dict of ``[B, ...]``
tensors (the step key's observation keys, in the dtypes rollouts store: uint8 images unscaled) to ``[B, n_outputs]``
action-distribution inputs. Masks, critics, checkpoints and the rollout CLI work with it as with the built-in
network; it acts in torch. :class:`ExternalNet` adapts it to the policy's ``[T, N]`` batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from maze_impala.config.base import import_hint
from maze_impala.core import StepKey

TARGET = "_target_"


def network_config(networks: Mapping[str, Any], step_key: StepKey) -> dict[str, Any] | None:
    """The config of ``step_key``'s own network in ``model.networks``: one ``_target_`` for every step key, or one
    per step key (by its name); None: the built-in network."""
    if not networks:
        return None
    if TARGET in networks:
        return dict(networks)
    config = networks.get(str(step_key))
    return dict(config) if config is not None else None


def check_networks(networks: Mapping[str, Any], step_keys: list[StepKey]) -> None:
    """``model.networks`` names step keys of the env and gives each a ``_target_``; else a clear error."""
    from maze_impala.config import ConfigError

    if not networks or TARGET in networks:
        return
    names = [str(k) for k in step_keys]
    for name, config in networks.items():
        if name not in names:
            raise ConfigError(
                f"model.networks.{name}: the env has no step key {name!r} (its step keys: {names}); "
                f"use model.networks._target_=... for every step key"
            )
        if not isinstance(config, Mapping) or TARGET not in config:
            raise ConfigError(f"model.networks.{name} needs a _target_ (your network's class), got {config!r}")


class ExternalNet(nn.Module):
    """A network of yours as one step key's policy network: ``[T, N]`` batches flattened to ``[T * N]`` for it,
    its output checked and shaped back."""

    def __init__(self, config: Mapping[str, Any], obs_space: gym.spaces.Dict, n_out: int, step_key: StepKey):
        super().__init__()
        from hydra.utils import instantiate

        self.target, self.n_out = str(config[TARGET]), n_out
        try:
            self.module = instantiate(dict(config), observation_space=obs_space, n_outputs=n_out, _convert_="all")
        except Exception as error:  # an import error, a wrong argument: say which network and what it is given
            hint = import_hint(self.target, error) or (
                f"; a network is built as {self.target}(observation_space=<gym.spaces.Dict>, n_outputs=<int>, "
                "**its config's keys)"
            )
            raise ValueError(
                f"model.networks: cannot build {self.target} for step key {step_key!r} ({' '.join(str(error).split())})"
                f"{hint}"
            ) from error
        if not isinstance(self.module, nn.Module):
            built = type(self.module).__name__
            raise ValueError(f"model.networks: {self.target} built a {built}, not a torch.nn.Module")

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {}

    def step(
        self, obs: Mapping[str, torch.Tensor], state: dict[str, torch.Tensor], agent_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Acting on ``[B, ...]`` observations (a network of yours keeps no state)."""
        return self(obs, 1, agent_ids), state

    def forward(
        self,
        obs: Mapping[str, torch.Tensor],
        batch_dims: int,
        agent_ids: torch.Tensor | None = None,
        extra: torch.Tensor | None = None,
    ) -> torch.Tensor:
        lead = next(iter(obs.values())).shape[:batch_dims]
        out = self.module({k: v.reshape(-1, *v.shape[batch_dims:]) for k, v in obs.items()})
        rows = lead.numel()
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (rows, self.n_out):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"{self.target}.forward must return a [batch, n_outputs] = {(rows, self.n_out)} tensor, got {shape}"
            )
        return out.reshape(*lead, self.n_out)
