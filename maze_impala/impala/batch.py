"""Rollouts stacked for the learner: one step key's trajectories of a batch as ``[T, N]`` tensors on the device."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from maze_impala.core import Rollout, StepKey, Trajectory
from maze_impala.envs.layout import padded, rows_of, select_columns, stack, tree_map


@dataclass
class StepBatch(Trajectory[torch.Tensor]):
    """The data of one step key across a batch of rollouts, ``N`` columns in all, on the device: the fields of
    :class:`~maze_impala.core.Trajectory` (declared there) as tensors, laid out in the same rows."""

    dense: bool = False
    """Every entry holds a decision (no padding, known on the host when the batch was stacked): the losses then
    take plain means instead of masked ones. False says nothing (``mask`` is then read)."""

    @functools.cached_property
    def continues(self) -> torch.Tensor:
        """``[T, N]`` float32: 1 where the actor's episode goes on after the decision, 0 where the decision ended it
        (terminated or truncated); made once for all the passes over the batch."""
        return (~(self.terminated | self.truncated)).float()

    @property
    def first(self) -> torch.Tensor:
        """``[T + 1, N]`` bool: the decision of row ``t`` starts a new episode of its column (its actor's previous
        decision, in row ``t - 1``, ended one): where a recurrent state is zeroed."""
        done = self.terminated | self.truncated
        return torch.cat([torch.zeros_like(done[:1]), done])

    def columns(self, start: int, stop: int) -> StepBatch:
        """Columns ``start`` to ``stop`` (time-limit cut-offs re-indexed), each tensor copied once into memory of its
        own: every pass over a minibatch then reads contiguous rows, where a view's strided columns would be copied
        again by each layer that flattens them."""
        device = self.mask.device
        selected = select_columns(self, slice(start, stop), lambda index: torch.as_tensor(index, device=device))
        for name in rows_of(selected):
            setattr(selected, name, tree_map(torch.Tensor.contiguous, getattr(selected, name)))
        selected.dense = self.dense
        return selected


def stack_step(rollouts: list[Rollout], step_key: StepKey, device: torch.device) -> StepBatch:
    """Concatenate one step key's trajectories along the column axis, padded to a common length."""
    trajectories = [r.trajectories[step_key] for r in rollouts if step_key in r.trajectories]
    n_steps = max(tr.n_steps for tr in trajectories)

    def to_tensor(array: np.ndarray) -> torch.Tensor:
        if not array.flags.writeable:  # e.g. a view of Ray's object store: a tensor must own writable memory
            array = array.copy()
        tensor = torch.from_numpy(np.ascontiguousarray(array))  # in its stored dtype: uint8 frames stay uint8
        if device.type == "cuda":  # from page-locked memory the copy runs asynchronously, at the bus's speed
            tensor = tensor.pin_memory()
        return tensor.to(device, non_blocking=True)

    laid = [padded(tr, n_steps) for tr in trajectories]
    return StepBatch(**stack(laid, to_tensor), dense=all(bool(tr.mask.all()) for tr in laid))


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
