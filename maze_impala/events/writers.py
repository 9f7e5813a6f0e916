"""Where epoch statistics go: the console, TensorBoard and a CSV file."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from maze_impala.events.tables import CsvTable


class StatsWriter(ABC):
    """Receives one row of statistics per epoch, keyed by column name."""

    @abstractmethod
    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None: ...

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:  # noqa: B027 - optional hook
        """The run's hyper-parameters and final results, once at the end (writers that can show them do)."""

    def video(self, tag: str, frames: list[Any], env_steps: int, fps: int) -> None:  # noqa: B027 - optional hook
        """Frames of a filmed evaluation episode (writers that can show videos do)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Flush and release."""


def print_and_log(text: str) -> None:
    """Print, and keep in the run's log where logging goes to one (``maze-run`` writes ``train.log``)."""
    print(text, flush=True)
    logging.getLogger("maze_impala").info("%s", text)


class ConsoleWriter(StatsWriter):
    """Prints a compact table per epoch; ``prefixes`` limits it to the columns starting with one of them."""

    def __init__(self, prefixes: list[str] | None = None, printer: Any = print_and_log):
        self.prefixes = tuple(prefixes) if prefixes else None
        self.printer = printer

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        names = sorted(c for c in row if self.prefixes is None or c.startswith(self.prefixes))
        width = max((len(n) for n in names), default=10)
        lines = [
            f"--- epoch {epoch}  env steps {env_steps:,} --- (train/: this epoch's training episodes and updates, "
            "eval/: its evaluation)"
        ]
        lines += [f"  {name:<{width}}  {row[name]:>12.5g}" for name in names]
        self.printer("\n".join(lines))


class TensorBoardWriter(StatsWriter):
    """One scalar series per column, indexed by environment steps (:mod:`maze_impala.events.tensorboard`)."""

    def __init__(self, log_dir: Path, purge_step: int | None = None):
        """``purge_step``: a resumed run's first step; TensorBoard hides what an earlier run logged from it on."""
        from maze_impala.events.tensorboard import EventFile

        self.log_dir = log_dir
        self.events = EventFile(log_dir, purge_step)

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        from maze_impala.events.tensorboard import scalars

        self.events.summary(scalars(row), env_steps)
        self.events.flush()

    def video(self, tag: str, frames: list[Any], env_steps: int, fps: int) -> None:
        """An animated GIF of ``frames`` in TensorBoard's images (what ``SummaryWriter.add_video`` writes, without
        moviepy)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        from maze_impala.events.gif import gif_bytes

        height, width = frames[0].shape[:2]
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif_bytes(frames, fps))
        self.events.summary(Summary(value=[Summary.Value(tag=tag, image=image)]), env_steps)
        self.events.flush()

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        """Training hyper-parameters and final results, for TensorBoard's HParams view: a file of their own in the
        same directory, as ``SummaryWriter.add_hparams(..., run_name=".")`` writes them."""
        from maze_impala.events.tensorboard import EventFile, hparams_summaries, scalars

        file = EventFile(self.log_dir)
        try:
            for summary in hparams_summaries(hparams, metrics):
                file.summary(summary, 0)
            file.summary(scalars(metrics), 0)
        finally:
            file.close()

    def close(self) -> None:
        self.events.close()


class CsvWriter(StatsWriter):
    """One row per epoch; columns are stable: a stat missing in an epoch is an empty cell (see :class:`CsvTable`)."""

    def __init__(self, path: Path):
        self.table = CsvTable(path, ["epoch", "env_steps"])

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        self.table.append([{"epoch": epoch, "env_steps": env_steps, **row}])
