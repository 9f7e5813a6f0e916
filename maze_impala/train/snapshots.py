"""The learner's snapshot pool: past weights of the trained policy, for self-play against past selves
(``algorithm.train_opponent=pool``).

The pool lives with the learner, not in the actors: it takes a snapshot when the policy's version reaches the
next multiple of ``snapshot_every`` (the first weights at once), keeps the newest ``size``, is published to every
actor through the weight publisher (:meth:`~maze_impala.core.WeightPublisher.publish_snapshots`) and is saved in
every checkpoint. So every actor plays the same pool, an actor that restarts finds it, and a resumed run goes on
with the pool it had. The games against it are kept here too: each actor reports which snapshot played each game
that ended and how (:attr:`~maze_impala.core.Rollout.pool_games`), the pool estimates the trained policy's score
against every snapshot from all of them, publishes the estimates (``opponent_pool.draw=pfsp`` draws by them) and
saves them with the snapshots, so that a restarted actor and a resumed run draw as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from maze_impala.config import OpponentPoolConfig
from maze_impala.core import Snapshots
from maze_impala.nn.flat import flatten

if TYPE_CHECKING:
    from torch import nn


PFSP_WINDOW = 100
"""The pool estimates the trained policy's score against a snapshot over about its last this many games against it
(each older game's weight decays by ``1 - 1/PFSP_WINDOW`` per newer one)."""


class SnapshotPool:
    """Snapshots of a policy's weights, numbered from 1, the newest ``config.size`` kept."""

    def __init__(self, config: OpponentPoolConfig):
        self.every, self.size = config.snapshot_every, config.size
        self.snapshots: Snapshots = {}
        """Snapshot number -> (the weights' version, the flat weights), oldest first."""
        self.taken = 0
        """Snapshots taken so far: the number of the newest."""
        self.results: dict[int, tuple[float, float]] = {}
        """Per snapshot held: the decayed count of games against it and the trained policy's decayed score in them."""

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
        self.results = {n: r for n, r in self.results.items() if n in self.snapshots}

    def record(self, games: Iterable[tuple[int, float]]) -> None:
        """Games that ended: the snapshot that played each and the trained policy's score (win 1, draw 0.5, loss
        0). Each older game's weight decays by ``1 - 1/PFSP_WINDOW`` per newer one against the same snapshot; a
        snapshot that left the pool since is skipped."""
        keep = 1.0 - 1.0 / PFSP_WINDOW
        for number, score in games:
            if number in self.snapshots:
                played, scored = self.results.get(number, (0.0, 0.0))
                self.results[number] = (played * keep + 1.0, scored * keep + score)

    def scores(self) -> dict[int, float]:
        """The trained policy's estimated score against each snapshot held, starting from one game drawn: 0.5
        before any game against it."""
        scores = {}
        for number in self.snapshots:
            played, scored = self.results.get(number, (0.0, 0.0))
            scores[number] = (scored + 0.5) / (played + 1.0)
        return scores

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers only: what ``torch.load(weights_only=True)`` reads back."""
        numbers = list(self.snapshots)
        results = [self.results.get(n, (0.0, 0.0)) for n in numbers]
        return {
            "taken": self.taken,
            "numbers": torch.tensor(numbers, dtype=torch.int64),
            "versions": torch.tensor(self.versions, dtype=torch.int64),
            "weights": torch.from_numpy(np.stack([flat for _, flat in self.snapshots.values()])),
            "games": torch.tensor([played for played, _ in results], dtype=torch.float64),
            "scores": torch.tensor([scored for _, scored in results], dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The pool a checkpoint saved; with a smaller ``size`` now, its newest snapshots."""
        numbers, versions = state["numbers"].tolist(), state["versions"].tolist()
        weights = state["weights"].numpy()
        self.snapshots = {n: (v, weights[i].copy()) for i, (n, v) in enumerate(zip(numbers, versions, strict=True))}
        self.taken = int(state["taken"])
        if "games" in state:  # a checkpoint of before the pool kept its games starts every snapshot at 0.5
            played, scored = state["games"].tolist(), state["scores"].tolist()
            self.results = {n: (g, s) for n, g, s in zip(numbers, played, scored, strict=True) if g > 0}
        self._keep_newest()
