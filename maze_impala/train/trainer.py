"""The IMPALA training loop: collect, update, publish weights; evaluate and save per epoch."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_impala.actors.weights import SharedWeights
from maze_impala.core import ActorPool
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.events.writers import StatsWriter
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.train.checkpoint import model_signature, save_checkpoint
from maze_impala.train.evaluator import RolloutEvaluator

LAST_MODEL = "model_last.pt"
BEST_MODEL = "model_best.pt"
STATS_CSV = "stats.csv"


@dataclass
class TrainingResult:
    output_dir: Path
    epochs: int
    env_steps: int
    best_eval_return: float
    stopped_early: bool
    history: list[dict[str, float]] = field(default_factory=list)
    """One row of statistics per epoch (the rows of the stats CSV)."""

    def column(self, name: str) -> list[float]:
        """One statistic over the epochs (NaN where an epoch has none)."""
        return [row.get(name, math.nan) for row in self.history]


class ImpalaTrainer:
    """Runs the epochs; every component is built elsewhere (:func:`maze_impala.train.setup.build_trainer`)."""

    def __init__(
        self,
        learner: ImpalaLearner,
        pool: ActorPool,
        weights: SharedWeights,
        evaluator: RolloutEvaluator,
        hub: EventHub,
        train_stats: StatsAggregator,
        eval_stats: StatsAggregator,
        writers: list[StatsWriter],
        output_dir: Path,
        checkpoint_extras: dict[str, Any],
    ):
        self.learner = learner
        self.config = learner.config
        self.pool = pool
        self.weights = weights
        self.evaluator = evaluator
        self.hub = hub
        self.run_events = hub.publisher(RunEvents)
        self.train_stats = train_stats
        self.eval_stats = eval_stats
        self.writers = writers
        self.output_dir = output_dir
        self.checkpoint_extras = checkpoint_extras
        self.env_steps = 0

    def train(self) -> TrainingResult:
        """Train for ``n_epochs`` (or until ``patience`` runs out); always stops the actors."""
        cfg = self.config
        best, since_best, history, epoch = -math.inf, 0, [], 0
        training_started = time.perf_counter()
        try:
            self.pool.start()
            for epoch in range(1, cfg.n_epochs + 1):
                started, steps_before = time.perf_counter(), self.env_steps
                train_policy = epoch > cfg.critic_burn_in_epochs
                for _ in range(cfg.epoch_length):
                    self._update(train_policy)
                update_seconds = time.perf_counter() - started
                score = self.evaluator.evaluate(self.learner.policy)
                self.run_events.env_steps(value=self.env_steps)
                self.run_events.env_steps_per_second(value=(self.env_steps - steps_before) / update_seconds)
                self.run_events.updates_per_second(value=cfg.epoch_length / update_seconds)
                self.run_events.epoch_seconds(value=time.perf_counter() - started)
                self.run_events.elapsed_seconds(value=time.perf_counter() - training_started)
                row = by_column(self.train_stats.reduce()) | by_column(self.eval_stats.reduce())
                history.append(row)
                for writer in self.writers:
                    writer.write(epoch, self.env_steps, row)
                self._save(LAST_MODEL, epoch, best=max(best, score))
                if score > best:
                    best, since_best = score, 0
                    self._save(BEST_MODEL, epoch, best=best)
                else:
                    since_best += 1
                if cfg.patience and since_best >= cfg.patience:
                    break
        finally:
            self.pool.close()
            self.evaluator.close()
            for writer in self.writers:
                writer.close()
        stopped_early = epoch < cfg.n_epochs
        return TrainingResult(self.output_dir, epoch, self.env_steps, best, stopped_early, history)

    def _update(self, train_policy: bool) -> None:
        ev = self.learner.events
        before = self.pool.queue_size()
        started = time.perf_counter()
        rollouts = self.pool.collect(self.config.actors_batch_size)
        dequeue_seconds = time.perf_counter() - started
        ev.estimated_queue_sizes(before=before, after=self.pool.queue_size())
        for rollout in rollouts:
            self.hub.replay(rollout.events)
            self.env_steps += rollout.env_steps
        self.learner.step(rollouts, train_policy, dequeue_seconds)
        self.weights.publish(self.learner.policy, self.learner.version)

    def _save(self, name: str, epoch: int, best: float) -> None:
        state = {
            **self.learner.state_dict(),
            "epoch": epoch,
            "env_steps": self.env_steps,
            "best_eval_return": best,
            "policy_signature": model_signature(self.learner.policy),
            **self.checkpoint_extras,
        }
        save_checkpoint(self.output_dir / name, state)
