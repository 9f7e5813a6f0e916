"""Where epoch statistics go: the console, TensorBoard and a CSV file."""

from __future__ import annotations

import csv
import io
import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any


class StatsWriter(ABC):
    """Receives one row of statistics per epoch, keyed by column name."""

    @abstractmethod
    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None: ...

    def close(self) -> None:  # noqa: B027 - optional hook
        """Flush and release."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ConsoleWriter(StatsWriter):
    """Prints a compact table per epoch; ``prefixes`` limits it to the columns starting with one of them."""

    def __init__(self, prefixes: list[str] | None = None, printer: Any = print):
        self.prefixes = tuple(prefixes) if prefixes else None
        self.printer = printer

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        names = sorted(c for c in row if self.prefixes is None or c.startswith(self.prefixes))
        width = max((len(n) for n in names), default=10)
        lines = [f"--- epoch {epoch}  env steps {env_steps:,} ---"]
        lines += [f"  {name:<{width}}  {row[name]:>12.5g}" for name in names]
        self.printer("\n".join(lines))


class TensorBoardWriter(StatsWriter):
    """One scalar series per column, indexed by environment steps."""

    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.summary = SummaryWriter(log_dir=str(log_dir))

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        for name, value in row.items():
            self.summary.add_scalar(name, value, global_step=env_steps)
        self.summary.flush()

    def close(self) -> None:
        self.summary.close()


class CsvWriter(StatsWriter):
    """One row per epoch; columns are stable: a stat missing in an epoch is an empty cell.

    The file is rewritten atomically each epoch, so its header always lists every
    column seen so far (in order of first appearance) and a crash never leaves a
    half-written row.
    """

    def __init__(self, path: Path):
        self.path = path
        self.columns: list[str] = ["epoch", "env_steps"]
        self.rows: list[dict[str, float]] = []

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        full = {"epoch": epoch, "env_steps": env_steps, **row}
        self.columns += [c for c in full if c not in self.columns]
        self.rows.append(full)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        atomic_write_text(self.path, buffer.getvalue())
