"""The training loop's state: everything a resume restores besides the learner, in one object the checkpoint saves."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from maze_impala.events.stats import StatKey
from maze_impala.play.pool import SNAPSHOT_POOL, SnapshotPool

EVALUATION_PENDING = "evaluation_pending"
"""The checkpoint key of an epoch trained whose evaluation had not ended (see :attr:`TrainerState.pending`)."""


@dataclass
class TrainedEpoch:
    """An epoch's training, before its evaluation: its statistics and the seconds it took."""

    stats: dict[StatKey, float]
    seconds: float

    def state_dict(self) -> dict[str, Any]:
        """Strings, numbers and lists: what ``torch.load(weights_only=True)`` reads back."""
        return {"seconds": self.seconds, "stats": [[*key, value] for key, value in self.stats.items()]}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TrainedEpoch:
        return cls({StatKey(*row[:-1]): float(row[-1]) for row in state["stats"]}, float(state["seconds"]))


@dataclass
class TrainerState:
    """Where a run stands after an epoch; :meth:`state_dict` goes into every checkpoint."""

    epoch: int = 0
    """Epochs completed."""
    env_steps: int = 0
    """Structured env steps consumed by the learner so far."""
    best_eval_return: float = -math.inf
    """The best evaluation score so far (the one ``model_best.pt`` holds): the mean evaluation return, or with
    games against an opponent the mean of win + draw / 2 (see :attr:`RolloutEvaluator.score`)."""
    epochs_since_best: int = 0
    """Epochs since the best evaluation: the patience counter."""
    snapshots: SnapshotPool | None = field(default=None, repr=False)
    """The snapshot pool of self-play against past selves (``algorithm.train_opponent=pool``), if the run has one."""
    pending: TrainedEpoch | None = field(default=None, repr=False)
    """Epoch ``epoch + 1``'s training, saved before its evaluation (``model_last.pt`` then holds its weights): a
    run stopped during that evaluation resumes by running it again, not by training the epoch again."""
    history: list[dict[str, float]] = field(default_factory=list, repr=False)
    """One row of statistics per completed epoch. Not in the checkpoint: a resume reads it back from
    ``stats.csv``, the durable record, so that checkpoints do not grow with the run."""

    def record(self, epoch: int, score: float, row: dict[str, float]) -> bool:
        """Count an epoch that evaluated to ``score``; True if it is the best so far, or ties it.

        A tie goes to the newer model, which has trained longer: an evaluation that saturates (every game won,
        CartPole's 500) would otherwise keep, in ``model_best.pt``, the first epoch that reached it, however
        much the policy improved after. Only a higher score resets the patience counter."""
        self.epoch = epoch
        self.history.append(row)
        if score > self.best_eval_return:
            self.best_eval_return, self.epochs_since_best = score, 0
            return True
        self.epochs_since_best += 1
        return score == self.best_eval_return

    def state_dict(self) -> dict[str, Any]:
        """Numbers and the torch RNG state: what ``torch.load(weights_only=True)`` reads back."""
        return (
            {
                "epoch": self.epoch,
                "env_steps": self.env_steps,
                "best_eval_return": self.best_eval_return,
                "epochs_since_best": self.epochs_since_best,
                "torch_rng_state": torch.get_rng_state(),
            }
            | ({SNAPSHOT_POOL: self.snapshots.state_dict()} if self.snapshots is not None else {})
            | ({EVALUATION_PENDING: self.pending.state_dict()} if self.pending is not None else {})
        )

    @classmethod
    def from_checkpoint(cls, state: dict[str, Any], snapshots: SnapshotPool | None = None) -> TrainerState:
        """The state a checkpoint saved, with the run's pool (if it has one; restored from the same checkpoint by
        :func:`~maze_impala.play.pool.make_snapshot_pool`); restores the torch RNG state too."""
        if "torch_rng_state" in state:
            torch.set_rng_state(state["torch_rng_state"])
        return cls(
            epoch=int(state["epoch"]),
            env_steps=int(state["env_steps"]),
            best_eval_return=float(state["best_eval_return"]),
            epochs_since_best=int(state.get("epochs_since_best", 0)),
            snapshots=snapshots,
            pending=TrainedEpoch.from_state_dict(state[EVALUATION_PENDING]) if EVALUATION_PENDING in state else None,
        )
