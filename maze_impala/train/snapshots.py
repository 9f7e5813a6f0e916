"""The learner's snapshot pool: past weights of the trained policy, for self-play against past selves
(``algorithm.train_opponent=pool``).

The pool lives with the learner, not in the actors: it takes a snapshot when the policy's version reaches the
next multiple of ``snapshot_every`` (the first weights at once), keeps the newest ``size``, is published to every
actor through the weight publisher (:meth:`~maze_impala.core.WeightPublisher.publish_snapshots`) and is saved in
every checkpoint. So every actor plays the same pool, an actor that restarts finds it, and a resumed run goes on
with the pool it had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from maze_impala.config import OpponentPoolConfig
from maze_impala.core import Snapshots
from maze_impala.nn.flat import flatten

if TYPE_CHECKING:
    from torch import nn


class SnapshotPool:
    """Snapshots of a policy's weights, numbered from 1, the newest ``config.size`` kept."""

    def __init__(self, config: OpponentPoolConfig):
        self.every, self.size = config.snapshot_every, config.size
        self.snapshots: Snapshots = {}
        """Snapshot number -> (the weights' version, the flat weights), oldest first."""
        self.taken = 0
        """Snapshots taken so far: the number of the newest."""

    @property
    def versions(self) -> list[int]:
        """The versions of the weights in the pool, oldest first."""
        return [version for version, _ in self.snapshots.values()]

    def due(self, version: int) -> bool:
        """Whether weights at ``version`` join the pool: the first weights, then each multiple of ``every`` past
        the newest snapshot's version."""
        if not self.snapshots:
            return True
        newest = next(reversed(self.snapshots.values()))[0]
        return version >= (newest // self.every + 1) * self.every

    def offer(self, module: nn.Module, version: int) -> bool:
        """Take a snapshot of ``module``'s weights at ``version`` if one is due; True if the pool changed."""
        if not self.due(version):
            return False
        self.add(version, flatten(module).numpy().copy())
        return True

    def add(self, version: int, flat: np.ndarray) -> None:
        self.taken += 1
        self.snapshots[self.taken] = (version, flat)
        self._keep_newest()

    def _keep_newest(self) -> None:
        while len(self.snapshots) > self.size:
            del self.snapshots[min(self.snapshots)]

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers only: what ``torch.load(weights_only=True)`` reads back."""
        numbers = list(self.snapshots)
        return {
            "taken": self.taken,
            "numbers": torch.tensor(numbers, dtype=torch.int64),
            "versions": torch.tensor(self.versions, dtype=torch.int64),
            "weights": torch.from_numpy(np.stack([flat for _, flat in self.snapshots.values()])),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The pool a checkpoint saved; with a smaller ``size`` now, its newest snapshots."""
        numbers, versions = state["numbers"].tolist(), state["versions"].tolist()
        weights = state["weights"].numpy()
        self.snapshots = {n: (v, weights[i].copy()) for i, (n, v) in enumerate(zip(numbers, versions, strict=True))}
        self.taken = int(state["taken"])
        self._keep_newest()
