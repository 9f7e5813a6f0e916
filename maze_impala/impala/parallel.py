"""Data-parallel learners: each takes a share of every minibatch's columns, and the gradients are all-reduced.

The batch is cut the way one learner cuts it (stacked, normalised once, split into
``n_sgd_minibatches`` runs of columns), and then each minibatch's columns of every
step key into ``size`` contiguous parts, one per learner (a :class:`Shard`). Columns
are whole trajectories, so V-trace, a recurrent policy's re-unroll and the anchor
``pi_0`` stay per column. A learner weighs each step key's losses by its share of the
minibatch's decisions (its own over the joint count), so that the *sum* of the
learners' gradients is the gradient of the joint minibatch; :class:`ProcessGroup`
sums them before clipping, so every learner measures, clips and applies the same
gradient, and parameters and optimizer states stay identical. The metrics a learner
records over its part are pooled the same way (:meth:`ProcessGroup.pool`): means
weighted by share, maxima by maximum, the advantages' spread from pooled moments.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from maze_impala.core import StepKey

if TYPE_CHECKING:
    from collections.abc import Callable

    from maze_impala.impala.batch import StepBatch

MEAN, MAX, SAME, SPREAD = "mean", "max", "same", "spread"
"""How a metric pools over learners: a share-weighted mean; the maximum; already equal on every learner (measured
after the all-reduce, e.g. gradient norms); a standard deviation, from the pooled first and second moments."""


class Metric(NamedTuple):
    """An event, its arguments other than ``value``, the value still on the device, and how it pools."""

    event: Callable[..., None]
    args: dict[str, object]
    value: torch.Tensor
    pooling: str = SAME
    share: float = 1.0
    """This learner's share of the decisions the value is a mean over (:data:`MEAN` and :data:`SPREAD`)."""
    mean: torch.Tensor | None = None
    """:data:`SPREAD` only: the mean of the quantity whose standard deviation ``value`` is."""


@dataclass
class Shard:
    """One learner's part of an update: its columns of every minibatch, and what it needs to weigh them."""

    minibatches: list[dict[StepKey, StepBatch]]
    train_policy: bool = True
    weights: list[dict[StepKey, float]] | None = None
    """Per minibatch and step key, this shard's share of the joint minibatch's decisions (None: this shard is the
    whole batch): what its losses are weighted by."""
    version: int = 0
    """The learner's version before this update (the schedules follow it)."""
    normalizers: dict[str, torch.Tensor] = field(default_factory=dict)
    """The policy's observation statistics after the batch updated them, for the other learners (empty: none, or
    a shard that one learner learns from alone)."""

    def shares(self, index: int) -> dict[StepKey, float] | None:
        """Each step key's share of minibatch ``index``'s decisions held here (None: the whole minibatch)."""
        return None if self.weights is None else self.weights[index]

    def split(self, parts: int) -> list[Shard]:
        """This shard (the whole batch) cut into ``parts`` shards, each with a contiguous run of every minibatch's
        columns of every step key; raises :class:`ValueError` if a minibatch has fewer columns of a key than
        ``parts`` (every learner must hold every key, so that all run the same collectives). The decisions are
        counted here, once, so that no learner waits on its device for them during the update."""
        shards = [
            Shard(
                [{} for _ in self.minibatches],
                self.train_policy,
                [{} for _ in self.minibatches],
                self.version,
                self.normalizers,
            )
            for _ in range(parts)
        ]
        for index, minibatch in enumerate(self.minibatches):
            for key, batch in minibatch.items():
                columns = batch.mask.shape[1]
                if columns < parts:
                    raise ValueError(
                        f"algorithm.num_learners={parts} learners need at least {parts} trajectories of step key "
                        f"{key!r} in each minibatch, but minibatch {index} holds {columns}: lower num_learners or "
                        "n_sgd_minibatches, or give the actors more envs (envs_per_actor)"
                    )
                per_column = batch.mask.sum(0).tolist()
                joint = max(float(sum(per_column)), 1.0)
                bounds = np.linspace(0, columns, parts + 1).round().astype(int)
                for shard, start, stop in zip(shards, bounds[:-1], bounds[1:]):
                    shard.minibatches[index][key] = batch.columns(int(start), int(stop))
                    assert shard.weights is not None
                    shard.weights[index][key] = sum(per_column[start:stop]) / joint
        return shards


class ProcessGroup:
    """This learner's link to the others: a ``torch.distributed`` process group (gloo; NCCL for CUDA learners)
    of ``size`` learners, without touching torch's global default group (a process may train several runs).

    Rank 0 hosts the rendezvous store: pass ``store`` (made with :func:`host_store`) there, ``address`` and
    ``port`` elsewhere. ``timeout_s`` bounds every collective: a learner that hangs fails the others after it, one
    that dies fails them at once.
    """

    def __init__(
        self,
        rank: int,
        size: int,
        timeout_s: float,
        address: str = "127.0.0.1",
        port: int = 0,
        store: dist.Store | None = None,
        device: torch.device | None = None,
    ):
        self.rank, self.size = rank, size
        timeout = datetime.timedelta(seconds=timeout_s)
        if store is None:
            store = dist.TCPStore(address, port, size, False, timeout=timeout)
        self.store = store
        device = device or torch.device("cpu")
        if device.type == "cuda" and dist.is_nccl_available():
            self.group: dist.ProcessGroup = dist.ProcessGroupNCCL(store, rank, size)
        else:
            self.group = dist.ProcessGroupGloo(store, rank, size, timeout)

    def all_reduce_gradients(self, params: list[torch.Tensor]) -> None:
        """Sum the gradients of ``params`` (those that have one; the same on every learner) over the learners."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._all_reduce(flat, dist.ReduceOp.SUM)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def summed(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over the learners (a new tensor; each learner passes one of the same shape)."""
        total = tensor.clone()
        self._all_reduce(total, dist.ReduceOp.SUM)
        return total

    def pool(self, metrics: list[Metric]) -> list[torch.Tensor]:
        """Each metric's value over the joint batch (see :data:`MEAN`): two all-reduces for them all."""
        sums: list[torch.Tensor] = []
        maxima: list[torch.Tensor] = []
        for m in metrics:
            value = m.value.detach().float().reshape(())
            if m.pooling == MEAN:
                sums.append(value * m.share)
            elif m.pooling == SPREAD:
                assert m.mean is not None
                mean = m.mean.detach().float().reshape(())
                sums += [(value.square() + mean.square()) * m.share, mean * m.share]
            elif m.pooling == MAX:
                maxima.append(value)
        summed = self._reduced(sums, dist.ReduceOp.SUM)
        largest = self._reduced(maxima, dist.ReduceOp.MAX)
        pooled, s, x = [], 0, 0
        for m in metrics:
            if m.pooling == MEAN:
                pooled.append(summed[s])
                s += 1
            elif m.pooling == SPREAD:
                second, first = summed[s], summed[s + 1]
                pooled.append((second - first.square()).clamp(min=0.0).sqrt())
                s += 2
            elif m.pooling == MAX:
                pooled.append(largest[x])
                x += 1
            else:
                pooled.append(m.value)
        return pooled

    def _reduced(self, values: list[torch.Tensor], op: dist.ReduceOp) -> torch.Tensor:
        if not values:
            return torch.zeros(0)
        flat = torch.stack(values)
        self._all_reduce(flat, op)
        return flat

    def _all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp) -> None:
        options = dist.AllreduceOptions()
        options.reduceOp = op
        self.group.allreduce([tensor], options).wait()


def host_store(size: int, timeout_s: float, address: str = "127.0.0.1") -> dist.TCPStore:
    """Rank 0's rendezvous store on a free port of ``address`` (its ``port`` tells the other learners where)."""
    return dist.TCPStore(address, 0, size, True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
