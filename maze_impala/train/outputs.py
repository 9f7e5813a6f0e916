"""What a training run writes, and where its statistics gather: the two bundles a trainer is built from besides
its learner, actors and evaluator (:class:`~maze_impala.train.trainer.ImpalaTrainer`); :func:`make_outputs`
builds the first for a run's config.

An output concern added later (another writer, a file, a callback) is a field here, not a new trainer parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_impala.config import TrainingConfig
from maze_impala.events.api import EventHub, last, mean
from maze_impala.events.episodes import KpiEvents
from maze_impala.events.interfaces import EpisodeEvents, GameEvents, RunEvents
from maze_impala.events.progress import Progress
from maze_impala.events.stats import StatKey, StatsAggregator
from maze_impala.events.tables import EventLogWriter
from maze_impala.events.trackers import MlflowWriter, WandbWriter
from maze_impala.events.writers import ConsoleWriter, CsvWriter, StatsWriter, TensorBoardWriter
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.run_files import EVENT_LOG_DIR, STATS_CSV, TENSORBOARD_DIR
from maze_impala.train.rundir import scalar_config
from maze_impala.train.state import TrainerState


@dataclass
class RunStats:
    """The run's event hub and the statistics it gathers: training (every interface, actors' events replayed)
    and evaluation."""

    hub: EventHub
    train: StatsAggregator
    eval: StatsAggregator


@dataclass
class RunOutputs:
    """Everything a run writes, and when."""

    output_dir: Path
    writers: list[StatsWriter] = field(default_factory=list)
    """The epoch's statistics go to each (CSV, console, TensorBoard, ...)."""
    checkpoint_extras: dict[str, Any] = field(default_factory=dict)
    """Saved in every checkpoint besides the learner's and the loop's state (the run config, the spaces)."""
    event_logs: EventLogWriter | None = None
    """Raw events of the evaluation episodes, or None."""
    progress: Progress | None = None
    """The console's status line, or None."""
    plot: bool = True
    """Draw ``training_curves.png`` at the end."""
    checkpoint_every: int = 1
    """Write ``model_last.pt`` every this many epochs (and at the end)."""
    video_every: int = 0
    """Film the evaluation every this many epochs (and the last); 0: never."""
    on_close: list[Callable[[], None]] = field(default_factory=list)
    """Called once when training ends, however it ends (e.g. releasing the run directory's lock)."""

    def films(self, epoch: int, n_epochs: int) -> bool:
        """Whether the evaluation after ``epoch`` (of ``n_epochs``) is filmed."""
        return bool(self.video_every) and (epoch % self.video_every == 0 or epoch == n_epochs)


def make_outputs(
    config: TrainingConfig,
    output_dir: Path,
    state: TrainerState,
    extras: dict[str, Any],
    on_close: list[Callable[[], None]],
) -> RunOutputs:
    """The writers, event logs and status line that ``config.output`` asks for, in ``output_dir``, continuing
    from ``state`` (a resumed run's); ``extras`` go in every checkpoint, ``on_close`` runs when training ends."""
    output, n_epochs = config.output, config.algorithm.n_epochs
    writers: list[StatsWriter] = [CsvWriter(output_dir / STATS_CSV)] if output.csv else []
    if output.console:
        writers.append(ConsoleWriter(console_columns()))
    if output.tensorboard:  # a resumed run drops the events logged after its checkpoint
        writers.append(TensorBoardWriter(output_dir / TENSORBOARD_DIR, purge_step=state.env_steps + 1))
    if output.wandb:
        writers.append(WandbWriter(output_dir, scalar_config(extras["config"])))
    if output.mlflow:
        writers.append(MlflowWriter(output_dir, scalar_config(extras["config"])))
    event_logs = EventLogWriter(output_dir / EVENT_LOG_DIR, output.event_logs) if output.event_logs != "none" else None
    progress = None
    if output.progress:  # a resumed run's rate counts this process's env steps, its returns start afresh
        progress = Progress(n_epochs, start_steps=state.env_steps, resumed_at=state.epoch or None)
    video_every = output.video.every if config.filmed_episodes else 0
    return RunOutputs(
        output_dir=output_dir,
        writers=writers,
        checkpoint_extras=extras,
        event_logs=event_logs,
        progress=progress,
        plot=output.plot,
        checkpoint_every=output.checkpoint_every,
        video_every=video_every,
        on_close=on_close,
    )


def console_columns() -> list[str]:
    """The statistics the console table shows (and every per-step-key, per-agent and per-KPI column under them)."""
    train, evaluation, ev = "train", "eval", MultiStepIMPALAEvents
    return [
        StatKey.of(EpisodeEvents.episode_return, mean, train).column(),
        StatKey.of(EpisodeEvents.step_key_return, mean, train).column(),
        StatKey.of(EpisodeEvents.agent_return, mean, train).column(),  # multi-agent envs: each named agent's
        StatKey.of(EpisodeEvents.episode_return, mean, evaluation).column(),
        *(StatKey.of(KpiEvents.kpi, mean, source).column() + "/" for source in (train, evaluation)),  # the env's KPIs
        StatKey.of(RunEvents.env_steps_per_second, last, train).column(),
        StatKey.of(RunEvents.learner_waiting_percent, last, train).column(),
        StatKey.of(RunEvents.learner_threads, mean, train).column(),
        StatKey.of(ev.policy_lag, mean, train).column(),
        StatKey.of(ev.policy_loss, mean, train).column(),
        StatKey.of(ev.policy_entropy, mean, train).column(),
        StatKey.of(ev.policy_grad_norm, mean, train).column(),
        StatKey.of(ev.critic_value_loss, mean, train).column(),
        StatKey.of(ev.critic_grad_norm, mean, train).column(),
        *(
            StatKey.of(outcome, mean, source).column() + "/"
            for source in (train, evaluation)
            for outcome in (GameEvents.win, GameEvents.draw, GameEvents.loss)
        ),  # per seat, in games only
    ]
