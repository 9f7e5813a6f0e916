"""Tables written as files: per-episode KPIs, raw event logs, and reading them back into pandas."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.events.api import EventRecord
from maze_impala.files import append_text, atomic_write, atomic_write_text
from maze_impala.run_files import EVENT_LOG_DIR

EVENT_LOG_FORMATS = ("csv", "parquet")


def write_csv(path: Path, rows: Iterable[dict[str, Any]], columns: Iterable[str] = ()) -> None:
    """A whole table at once, atomically (e.g. ``kpis_summary.csv``); columns in order of first appearance."""
    rows = list(rows)
    names = list(columns)
    for row in rows:
        names += [c for c in row if c not in names]
    atomic_write_text(path, _csv_text(names, rows, header=True))


def _csv_text(columns: list[str], rows: Iterable[dict[str, Any]], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, restval="", lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def read_columns(path: str | Path) -> dict[str, np.ndarray]:
    """A CSV of numbers (``stats.csv``) as one float array per column, an empty cell NaN, read without pandas (whose
    import would cost a training run's end a fifth of a second); a column with text keeps its strings."""
    with open(path, newline="") as file:
        reader = csv.reader(file)
        header = next(reader, [])
        rows = list(reader)
    columns: dict[str, np.ndarray] = {}
    for i, name in enumerate(header):
        cells = [row[i] if i < len(row) else "" for row in rows]
        try:
            columns[name] = np.array([float(cell) if cell else np.nan for cell in cells], dtype=float)
        except ValueError:
            columns[name] = np.array(cells, dtype=object)
    return columns


class CsvTable:
    """A CSV file that grows by rows (``stats.csv``, ``kpis.csv``), with stable columns in order of first appearance.

    :meth:`append` appends the new rows and fsyncs them, so a row costs the same at epoch 10 as
    at epoch 50,000. A row with a column the file has not seen rewrites the file once,
    atomically, with the wider header (a missing value is an empty cell). An existing file
    is continued (a resumed run); :meth:`truncate` first drops rows a checkpoint does not cover.
    """

    def __init__(self, path: Path, columns: Iterable[str] = ()):
        self.path = Path(path)
        self.columns: list[str] = list(columns)
        self._written = False
        """The file on disk has the header of :attr:`columns`."""
        if self.path.is_file():
            with open(self.path, newline="") as file:
                header = next(csv.reader(file), [])
            self.columns = header + [c for c in self.columns if c not in header]
            self._written = self.columns == header

    def rows(self) -> list[dict[str, str]]:
        """The rows on disk (values as text)."""
        if not self.path.is_file():
            return []
        with open(self.path, newline="") as file:
            return list(csv.DictReader(file))

    def truncate(self, keep: Callable[[dict[str, str]], bool]) -> int:
        """Keep only the rows on disk for which ``keep(row)`` holds; returns how many were dropped."""
        rows = self.rows()
        kept = [row for row in rows if keep(row)]
        if len(kept) != len(rows):
            atomic_write_text(self.path, _csv_text(self.columns, kept, header=True))
            self._written = True
        return len(rows) - len(kept)

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        rows = list(rows)
        new = [c for row in rows for c in row if c not in self.columns]
        self.columns += list(dict.fromkeys(new))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._written and not new:
            append_text(self.path, _csv_text(self.columns, rows, header=False))
            return
        atomic_write_text(self.path, _csv_text(self.columns, [*self.rows(), *rows], header=True))
        self._written = True


def agent_return_column(agent: str) -> str:
    """The column of an agent's return in ``kpis.csv`` (multi-agent envs), e.g. ``return/agent=player_1``."""
    return f"return/agent={agent}"


def kpi_row(
    episode_id: int,
    seed: int,
    steps: int,
    episode_return: float,
    kpis: dict[str, float],
    agent_returns: Mapping[str, float] | None = None,
    truncated: bool = False,
) -> dict[str, Any]:
    """One row of ``kpis.csv``: the episode, its return, whether a time limit cut it off (1) or it terminated (0),
    each named agent's return and the env's KPIs."""
    agents = {agent_return_column(name): value for name, value in (agent_returns or {}).items()}
    return {
        "episode_id": episode_id,
        "seed": seed,
        "steps": steps,
        "return": episode_return,
        "truncated": int(truncated),
        **agents,
        **kpis,
    }


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
        """Rows not yet on disk (csv), or every row (parquet, which cannot be appended to)."""

    def add(self, episode_id: int, raw: list[tuple[int, EventRecord]], **extra: Any) -> None:
        """The raw events of one episode (``(step, record)`` pairs, as :class:`EpisodeEventLog` keeps them)."""
        for step, record in raw:
            row = {**extra, "episode_id": episode_id, "step": step, **record.values}
            self.tables.setdefault(f"{record.interface}.{record.event}", []).append(row)

    def flush(self) -> None:
        """Write what was added: appended to each csv table, or each parquet table rewritten whole."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for name, rows in self.tables.items():
            path = self.directory / f"{name}.{self.fmt}"
            if self.fmt == "csv":
                CsvTable(path).append(rows)
            else:
                import pandas as pd

                frame = pd.DataFrame(rows)
                atomic_write(path, lambda file, frame=frame: frame.to_parquet(file, index=False))
        if self.fmt == "csv":
            self.tables = {}

    def truncate(self, keep: Callable[[dict[str, str]], bool]) -> None:
        """Continue the tables on disk without the rows ``keep`` rejects (a resumed run: epochs past its checkpoint)."""
        for path in self.directory.glob(f"*.{self.fmt}"):
            if self.fmt == "csv":
                CsvTable(path).truncate(keep)
            else:
                import pandas as pd

                self.tables[path.stem] = [row for row in pd.read_parquet(path).to_dict("records") if keep(row)]


def read_event_logs(directory: str | Path) -> dict[str, Any]:
    """The event logs of a run (its output dir or its ``event_logs`` dir) as ``{"Interface.event": DataFrame}``."""
    import pandas as pd

    directory = Path(directory)
    if (directory / EVENT_LOG_DIR).is_dir():
        directory = directory / EVENT_LOG_DIR
    if not directory.is_dir():
        raise FileNotFoundError(
            f"no event logs in {directory}; were they enabled (output.event_logs=csv in training, "
            "event_logs=csv in rollouts)?"
        )
    tables = {}
    for path in sorted(directory.iterdir()):
        if path.suffix == ".csv":
            tables[path.stem] = pd.read_csv(path)
        elif path.suffix == ".parquet":
            tables[path.stem] = pd.read_parquet(path)
    return tables
