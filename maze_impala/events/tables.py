"""Tables written as files: per-episode KPIs, raw event logs, and reading them back into pandas."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.events.api import EventRecord

KPI_CSV = "kpis.csv"
KPI_SUMMARY_CSV = "kpis_summary.csv"
EVENT_LOG_DIR = "event_logs"
EVENT_LOG_FORMATS = ("csv", "parquet")


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class CsvTable:
    """A CSV file of rows with stable columns (in order of first appearance; a missing value is an empty cell).

    The file is rewritten atomically on every :meth:`append`, so its header always
    lists every column seen so far and a crash never leaves a half-written row.
    """

    def __init__(self, path: Path, columns: Iterable[str] = ()):
        self.path = path
        self.columns: list[str] = list(columns)
        self.rows: list[dict[str, Any]] = []

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            self.columns += [c for c in row if c not in self.columns]
            self.rows.append(row)
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=self.columns, restval="", lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, buffer.getvalue())


def kpi_row(episode_id: int, seed: int, steps: int, episode_return: float, kpis: dict[str, float]) -> dict[str, Any]:
    """One row of ``kpis.csv``."""
    return {"episode_id": episode_id, "seed": seed, "steps": steps, "return": episode_return, **kpis}


def kpi_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean, std, min and max of the return, the step count and every KPI over the episodes."""
    names: list[str] = []
    for row in rows:
        names += [c for c in row if c not in names and c not in ("epoch", "episode_id", "seed")]
    summary = []
    for name in names:
        values = np.array([float(r[name]) for r in rows if r.get(name) not in (None, "")])
        if values.size:
            summary.append(
                {"kpi": name, "mean": values.mean(), "std": values.std(), "min": values.min(), "max": values.max()}
            )
    return summary


class EventLogWriter:
    """Every event of every episode, one table per event type: ``<interface>.<event>.csv`` (or ``.parquet``).

    Columns: the ``extra`` ones given per episode (e.g. ``epoch``), ``episode_id``,
    ``step`` (the structured step the event happened in), then the event's arguments.
    """

    def __init__(self, directory: Path, fmt: str = "csv"):
        if fmt not in EVENT_LOG_FORMATS:
            raise ValueError(f"event logs are written as one of {EVENT_LOG_FORMATS}, got {fmt!r}")
        if fmt == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ValueError("parquet event logs need pyarrow (pip install pyarrow); or use csv") from None
        self.directory, self.fmt = directory, fmt
        self.tables: dict[str, list[dict[str, Any]]] = {}

    def add(self, episode_id: int, raw: list[tuple[int, EventRecord]], **extra: Any) -> None:
        """The raw events of one episode (``(step, record)`` pairs, as :class:`EpisodeEventLog` keeps them)."""
        for step, record in raw:
            row = {**extra, "episode_id": episode_id, "step": step, **record.values}
            self.tables.setdefault(f"{record.interface}.{record.event}", []).append(row)

    def flush(self) -> None:
        import pandas as pd

        self.directory.mkdir(parents=True, exist_ok=True)
        for name, rows in self.tables.items():
            path = self.directory / f"{name}.{self.fmt}"
            tmp = path.with_name(f".{path.name}.tmp")
            frame = pd.DataFrame(rows)
            if self.fmt == "csv":
                frame.to_csv(tmp, index=False)
            else:
                frame.to_parquet(tmp, index=False)
            os.replace(tmp, path)


def read_event_logs(directory: str | Path) -> dict[str, Any]:
    """The event logs of a run (its output dir or its ``event_logs`` dir) as ``{"Interface.event": DataFrame}``."""
    import pandas as pd

    directory = Path(directory)
    if (directory / EVENT_LOG_DIR).is_dir():
        directory = directory / EVENT_LOG_DIR
    if not directory.is_dir():
        raise FileNotFoundError(f"no event logs in {directory}; were they enabled (output.event_logs=csv in training, "
                                "event_logs=csv in rollouts)?")  # fmt: skip
    tables = {}
    for path in sorted(directory.iterdir()):
        if path.suffix == ".csv":
            tables[path.stem] = pd.read_csv(path)
        elif path.suffix == ".parquet":
            tables[path.stem] = pd.read_parquet(path)
    return tables
