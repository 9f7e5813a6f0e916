"""What a training run writes, and where its statistics gather: the two bundles a trainer is built from besides
its learner, actors and evaluator (:class:`~maze_impala.train.trainer.ImpalaTrainer`).

An output concern added later (another writer, a file, a callback) is a field here, not a new trainer parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator
from maze_impala.events.tables import EventLogWriter
from maze_impala.events.writers import StatsWriter
from maze_impala.train.progress import Progress


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
