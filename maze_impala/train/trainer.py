"""The IMPALA training loop: collect, update, publish weights; evaluate and save per epoch."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.actors.actor import PlayProgress
from maze_impala.actors.results import EpisodeResult
from maze_impala.checkpoints import model_signature, save_checkpoint
from maze_impala.config import ImpalaAlgorithmConfig
from maze_impala.core import ActorPool, Learner, TrainingError, WeightPublisher
from maze_impala.evaluate.evaluator import RolloutEvaluator
from maze_impala.events.api import mean
from maze_impala.events.frames import StatsRow, to_dataframe
from maze_impala.events.interfaces import ActorEvents, EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey, by_column
from maze_impala.events.tables import CsvTable, kpi_summary, write_csv
from maze_impala.events.writers import StatsWriter
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.run_files import BEST_MODEL, CURVES_PNG, KPI_CSV, KPI_SUMMARY_CSV, LAST_MODEL, STATS_CSV
from maze_impala.train.outputs import RunOutputs, RunStats
from maze_impala.train.pace import PaceWatch
from maze_impala.train.rundir import scalar_config
from maze_impala.train.state import TrainedEpoch, TrainerState
from maze_impala.train.watch import EpisodeWatch

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class TrainingResult:
    output_dir: Path
    epochs: int
    env_steps: int
    best_eval_return: float
    stopped_early: bool
    history: list[dict[str, float]] = field(default_factory=list, repr=False)
    """One row of statistics per epoch (the rows of the stats CSV)."""
    stats: list[StatsRow] = field(default_factory=list, repr=False)
    """The same statistics, addressed by :class:`StatKey`."""

    def column(self, name: str) -> list[float]:
        """One statistic over the epochs (NaN where an epoch has none)."""
        return [row.get(name, math.nan) for row in self.history]

    def to_dataframe(self, form: str = "wide") -> pd.DataFrame:
        """The run's statistics as a DataFrame (``wide``: as ``stats.csv``; ``long``: one row per statistic)."""
        return to_dataframe(self.stats, form)


class ImpalaTrainer:
    """Runs the epochs; every component is built elsewhere (:func:`maze_impala.train.setup.build_trainer`).

    Per epoch: ``epoch_length`` updates (collect, learn, publish), ``model_last.pt`` (every ``checkpoint_every``
    epochs and at the end: the epoch's training, so that a run stopped during the evaluation keeps it), an
    evaluation, the epoch's statistics to every writer, then ``model_best.pt`` (on an evaluation that ties or
    beats the best) and ``model_last.pt`` again, with the evaluation counted. Loop state lives in :attr:`state`,
    which every checkpoint saves and a resume restores (see :func:`~maze_impala.train.setup.build_trainer`).
    """

    def __init__(
        self,
        config: ImpalaAlgorithmConfig,
        learner: Learner,
        pool: ActorPool,
        publisher: WeightPublisher,
        evaluator: RolloutEvaluator,
        stats: RunStats,
        outputs: RunOutputs,
        state: TrainerState | None = None,
        started: float | None = None,
    ):
        """``started``: ``time.perf_counter()`` when the run's set-up began, from which ``elapsed_seconds`` counts
        (the actors' start-up is part of a run's time); None: from the call of :meth:`train`."""
        self.config = config
        self.learner = learner
        self.pool = pool
        self.publisher = publisher
        self.evaluator = evaluator
        self.hub = hub = stats.hub
        self.run_events = hub.publisher(RunEvents)
        self.queue_events = hub.publisher(MultiStepIMPALAEvents)
        self.actor_events = hub.publisher(ActorEvents)
        self.train_stats, self.eval_stats = stats.train, stats.eval
        self.outputs = outputs
        self.output_dir = outputs.output_dir
        self.state = state or TrainerState()
        self._updates, self._waited = 0, 0.0
        """Updates tried in the running epoch (the status line's progress within it), and the seconds it waited
        for rollouts."""
        self.pace = PaceWatch(pool.actor_cores())
        hub.listeners.append(self.pace)  # it hears the learner's threads
        self.kpis = CsvTable(self.output_dir / KPI_CSV, ["epoch", "episode_id", "seed", "steps", "return", "truncated"])
        if outputs.progress is not None:
            hub.listeners.append(outputs.progress)
        self.saved_epoch: int | None = self.state.epoch or None
        """The epochs ``model_last.pt`` holds (the last of them possibly trained but not yet evaluated: see
        :attr:`saved_pending`); None before the first checkpoint."""
        self.saved_pending = False
        """Whether the last epoch ``model_last.pt`` holds was saved before its evaluation and table."""
        """The epoch that ``model_last.pt`` holds (a resumed run's checkpoint at first); None: none written yet."""
        self.watch = EpisodeWatch(
            config.num_actors * config.envs_per_actor, config.n_rollout_steps, evaluator.max_episode_steps
        )
        """Says once when episodes stop ending (see :mod:`~maze_impala.train.watch`); it hears the episodes' events."""
        hub.listeners.append(self.watch)
        self._epoch = self.state.epoch
        """The epoch that trains or evaluates now."""
        evaluator.on_progress = self._evaluating
        self.started = started

    def train(self) -> TrainingResult:
        """Train until ``n_epochs``, or until ``patience`` runs out or an evaluation reaches ``target_score``;
        always stops the actors."""
        cfg, state = self.config, self.state
        stats: list[StatsRow] = []
        results: list[EpisodeResult] = []
        first_epoch = state.epoch + 1
        training_started = time.perf_counter() if self.started is None else self.started
        try:
            self.pool.start()
            for epoch in range(first_epoch, cfg.n_epochs + 1):
                started = time.perf_counter()
                try:
                    trained, state.pending = state.pending, None  # a resumed run stopped during this evaluation
                    if trained is None:
                        trained = self._train_epoch(epoch, started)
                        if epoch == cfg.n_epochs or epoch % self.outputs.checkpoint_every == 0:
                            state.pending = trained  # the epoch's training is kept if its evaluation is stopped
                            self._save(LAST_MODEL)
                            state.pending = None
                    filming = self.outputs.films(epoch, cfg.n_epochs)
                    self._epoch = epoch
                    self.watch.evaluation_start(trained.seconds)
                    evaluating = time.perf_counter()
                    results = self.evaluator.evaluate(self.learner.policy, f"epoch_{epoch}_" if filming else None)
                    self.watch.evaluated(results)
                except Exception as error:  # an env, actor or learner failure: say when it happened
                    raise TrainingError(f"epoch {epoch}: {type(error).__name__}: {error}") from error
                self._record_episodes(epoch, results)
                self.run_events.epoch_seconds(value=trained.seconds + time.perf_counter() - evaluating)
                self.run_events.elapsed_seconds(value=time.perf_counter() - training_started)
                epoch_stats = trained.stats | self.train_stats.reduce() | self.eval_stats.reduce()
                row = by_column(epoch_stats)
                stats.append((epoch, state.env_steps, epoch_stats))
                best = state.record(epoch, self.evaluator.score, row)
                if self.outputs.progress is not None:
                    self.outputs.progress.update(epoch, state.env_steps, force=True)
                    self.outputs.progress.end_line()
                for writer in self.outputs.writers:
                    writer.write(epoch, state.env_steps, row)
                    if filming:
                        self._write_videos(writer, state.env_steps)
                stopping = (
                    epoch == cfg.n_epochs
                    or bool(cfg.patience and state.epochs_since_best >= cfg.patience)
                    or (cfg.target_score is not None and self.evaluator.score >= cfg.target_score)
                )
                if best:  # before model_last.pt: a run killed between the two saves evaluates this epoch again
                    self._save(BEST_MODEL)
                if stopping or epoch % self.outputs.checkpoint_every == 0:
                    self._save(LAST_MODEL)
                if stopping:
                    break
        except BaseException:
            try:  # an interrupted or failed run still gets its KPI summary and curves, of what there is
                self._finish(results)
            except Exception as error:  # never hide the failure that got us here
                logging.getLogger("maze_impala").warning("could not write the final outputs: %r", error)
            raise
        else:
            self._finish(results)
        finally:
            self._close()
        stopped_early = state.epoch < cfg.n_epochs
        return TrainingResult(
            self.output_dir, state.epoch, state.env_steps, state.best_eval_return, stopped_early, state.history, stats
        )

    def _train_epoch(self, epoch: int, started: float) -> TrainedEpoch:
        """The epoch's ``epoch_length`` updates; its training statistics, its pace recorded."""
        cfg, steps_before = self.config, self.state.env_steps
        self._updates, self._waited = 0, 0.0
        updates = 0
        while updates < cfg.epoch_length:
            updates += self._update(epoch, train_policy=epoch > cfg.critic_burn_in_epochs)
        seconds = time.perf_counter() - started
        self.run_events.env_steps(value=self.state.env_steps)
        rate = (self.state.env_steps - steps_before) / seconds
        self.run_events.env_steps_per_second(value=rate)
        self.run_events.learner_waiting_percent(value=100.0 * self._waited / seconds)
        self.run_events.updates_per_second(value=cfg.epoch_length / seconds)
        notice = self.pace.epoch(epoch, rate)
        if notice is not None:
            logging.getLogger("maze_impala").warning("%s", notice)
        return TrainedEpoch(self.train_stats.reduce(), seconds)

    def _evaluating(self, progress: PlayProgress) -> None:
        """The status line during an evaluation: its episodes done and the longest so far."""
        part = self.watch.evaluating(progress)
        if self.outputs.progress is not None:
            self.outputs.progress.update(self._epoch, self.state.env_steps, part=part)

    def _write_videos(self, writer: StatsWriter, env_steps: int) -> None:
        """The evaluation's films to a writer that shows videos (TensorBoard)."""
        videos = self.evaluator.videos
        for index, video in enumerate(videos.written if videos is not None else []):
            if video.thumbnails:
                writer.video(f"eval/video/episode_{index}", video.thumbnails, env_steps, videos.fps)

    def _close(self) -> None:
        self.learner.close()
        self.pool.close()
        self.evaluator.close()
        if self.outputs.progress is not None:
            self.outputs.progress.close()
        for writer in self.outputs.writers:
            writer.close()
        for callback in self.outputs.on_close:
            callback()

    def _record_episodes(self, epoch: int, results: list[EpisodeResult]) -> None:
        """The evaluation episodes' rows of ``kpis.csv``, and their raw events if event logs are on."""
        self.kpis.append({"epoch": epoch, **r.kpi_row()} for r in results)
        if self.outputs.event_logs is not None:
            for result in results:
                self.outputs.event_logs.add(result.episode_id, result.raw, epoch=epoch)
            self.outputs.event_logs.flush()

    def _finish(self, results: list[EpisodeResult]) -> None:
        """KPI summary of the last evaluation, hparams for TensorBoard, the PNG of the training curves."""
        if not results:
            return
        history = self.state.history
        final_rows = [r.kpi_row() for r in results]
        write_csv(self.output_dir / KPI_SUMMARY_CSV, kpi_summary(final_rows))
        metrics = {"hparam/best_eval_return": self.state.best_eval_return, "hparam/env_steps": self.state.env_steps}
        if history:
            final = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
            metrics["hparam/final_train_return"] = history[-1].get(final, math.nan)
        config = scalar_config(self.outputs.checkpoint_extras.get("config", {}))
        for writer in self.outputs.writers:
            writer.hparams(config, metrics)
        if self.outputs.plot and history and (self.output_dir / STATS_CSV).is_file():
            from maze_impala.report.plots import plot_training_curves  # matplotlib only when drawing

            plot_training_curves(self.output_dir / STATS_CSV, self.output_dir / CURVES_PNG)

    def _update(self, epoch: int, train_policy: bool) -> bool:
        """Collect a batch and learn from it; False if every rollout of it was too stale to learn from."""
        before = self.pool.queue_size()
        started = time.perf_counter()
        fewest, most = self.config.batch_bounds
        rollouts = self.pool.collect(fewest, at_most=most)
        dequeue_seconds = time.perf_counter() - started
        self._waited += dequeue_seconds
        self.pace.sample()
        self.queue_events.estimated_queue_sizes(before=before, after=self.pool.queue_size())
        for rollout in rollouts:  # their episodes happened and their env steps were taken, stale or not
            self.hub.replay(rollout.events)
            self.state.env_steps += rollout.env_steps
        self.watch.stepped(sum(r.env_steps for r in rollouts))
        max_lag, version = self.config.max_policy_lag, self.learner.version
        fresh = [r for r in rollouts if max_lag is None or version - r.policy_version <= max_lag]
        if len(fresh) < len(rollouts):
            self.actor_events.dropped_stale_rollout(value=len(rollouts) - len(fresh))
        if fresh:
            started = time.perf_counter()
            self.learner.step(fresh, train_policy)
            self.publisher.publish(self.learner.policy, self.learner.version)
            whole = dequeue_seconds + time.perf_counter() - started
            percent = 100.0 * dequeue_seconds / whole if whole > 0 else 0.0
            self.queue_events.time_dequeuing_actors(time=dequeue_seconds, percent=percent)
        if self.outputs.progress is not None:
            self._updates += 1
            self.outputs.progress.update(
                epoch, self.state.env_steps, part=f"update {self._updates}/{self.config.epoch_length}"
            )
        return bool(fresh)

    def _save(self, name: str) -> None:
        state = {
            **self.learner.state_dict(),
            **self.state.state_dict(),
            "policy_signature": model_signature(self.learner.policy),
            **self.outputs.checkpoint_extras,
        }
        save_checkpoint(self.output_dir / name, state)
        if name == LAST_MODEL:
            self.saved_pending = self.state.pending is not None
            self.saved_epoch = self.state.epoch + self.saved_pending
