"""Rollouts stacked for the learner: one step key's trajectories of a batch as ``[T, N]`` tensors on the device."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from maze_impala.core import Rollout, StepKey


@dataclass
class StepBatch:
    """The data of one step key across a batch of rollouts, ``N`` columns in all, on the device."""

    observations: dict[str, torch.Tensor]  # [T + 1, N, ...]
    actions: dict[str, torch.Tensor]  # [T, N, ...]
    behaviour_log_probs: torch.Tensor  # [T, N]
    rewards: torch.Tensor  # [T, N]
    terminated: torch.Tensor  # [T, N]
    truncated: torch.Tensor  # [T, N]
    truncated_observations: dict[str, torch.Tensor]  # [K, ...]
    truncated_index: torch.Tensor  # [K, 2] (t, column)
    mask: torch.Tensor  # [T, N] bool
    agent_ids: torch.Tensor  # [N]
    ancestors: dict[StepKey, dict[str, torch.Tensor]]  # [T + 1, N, ...] per earlier sub-step key
    initial_state: dict[str, torch.Tensor] = field(default_factory=dict)
    """``[N, ...]`` per name: a recurrent policy's state at each column's first decision (empty: feed-forward)."""

    @property
    def first(self) -> torch.Tensor:
        """``[T + 1, N]`` bool: the decision of row ``t`` starts a new episode of its column (its actor's previous
        decision, in row ``t - 1``, ended one): where a recurrent state is zeroed."""
        done = self.terminated | self.truncated
        return torch.cat([torch.zeros_like(done[:1]), done])

    def columns(self, start: int, stop: int) -> StepBatch:
        """Columns ``start`` to ``stop`` (views where the layout allows; time-limit cut-offs re-indexed)."""
        cut = slice(start, stop)
        kept = (self.truncated_index[:, 1] >= start) & (self.truncated_index[:, 1] < stop)
        shift = torch.tensor([0, start], dtype=self.truncated_index.dtype, device=self.truncated_index.device)
        return StepBatch(
            observations={name: obs[:, cut] for name, obs in self.observations.items()},
            actions={name: action[:, cut] for name, action in self.actions.items()},
            behaviour_log_probs=self.behaviour_log_probs[:, cut],
            rewards=self.rewards[:, cut],
            terminated=self.terminated[:, cut],
            truncated=self.truncated[:, cut],
            truncated_observations={name: obs[kept] for name, obs in self.truncated_observations.items()},
            truncated_index=self.truncated_index[kept] - shift,
            mask=self.mask[:, cut],
            agent_ids=self.agent_ids[cut],
            ancestors={key: {name: obs[:, cut] for name, obs in of.items()} for key, of in self.ancestors.items()},
            initial_state={name: state[cut] for name, state in self.initial_state.items()},
        )


def stack_step(rollouts: list[Rollout], step_key: StepKey, device: torch.device) -> StepBatch:
    """Concatenate one step key's trajectories along the column axis, padded to a common length."""
    trajectories = [r.trajectories[step_key] for r in rollouts if step_key in r.trajectories]
    n_steps = max(tr.n_steps for tr in trajectories)
    trajectories = [tr.padded(n_steps) for tr in trajectories]

    def cat(arrays: list[np.ndarray], axis: int = 1) -> torch.Tensor:
        array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=axis)
        if not array.flags.writeable:  # e.g. a view of Ray's object store: a tensor must own writable memory
            array = array.copy()
        return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)

    def cat_nested(nested: list[dict[str, np.ndarray]], axis: int = 1) -> dict[str, torch.Tensor]:
        return {k: cat([n[k] for n in nested], axis) for k in nested[0]}

    offsets = np.cumsum([0, *(tr.n_columns for tr in trajectories[:-1])])
    shifted = [tr.truncated_index + np.array([0, off]) for tr, off in zip(trajectories, offsets)]
    first = trajectories[0]
    return StepBatch(
        observations=cat_nested([tr.observations for tr in trajectories]),
        actions=cat_nested([tr.actions for tr in trajectories]),
        behaviour_log_probs=cat([tr.behaviour_log_probs for tr in trajectories]),
        rewards=cat([tr.rewards for tr in trajectories]),
        terminated=cat([tr.terminated for tr in trajectories]),
        truncated=cat([tr.truncated for tr in trajectories]),
        truncated_observations=cat_nested([tr.truncated_observations for tr in trajectories], axis=0),
        truncated_index=torch.from_numpy(np.concatenate(shifted)).to(device),
        mask=cat([tr.mask for tr in trajectories]),
        agent_ids=cat([tr.agent_ids for tr in trajectories], axis=0),
        ancestors={key: cat_nested([tr.ancestors[key] for tr in trajectories]) for key in first.ancestors},
        initial_state=cat_nested([tr.initial_state for tr in trajectories], axis=0),
    )


def split_columns(batches: dict[StepKey, StepBatch], parts: int) -> list[dict[StepKey, StepBatch]]:
    """The batch cut into ``parts`` minibatches along the column axis (whole trajectories, so that V-trace's
    recursion over time stays exact), each step key's columns in ``parts`` contiguous runs of near-equal size;
    a minibatch without columns of any step key is left out."""
    if parts == 1:
        return [batches]
    minibatches: list[dict[StepKey, StepBatch]] = [{} for _ in range(parts)]
    for key, batch in batches.items():
        bounds = np.linspace(0, batch.mask.shape[1], parts + 1).round().astype(int)
        for minibatch, start, stop in zip(minibatches, bounds[:-1], bounds[1:]):
            if stop > start:
                minibatch[key] = batch.columns(int(start), int(stop))
    return [minibatch for minibatch in minibatches if minibatch]
