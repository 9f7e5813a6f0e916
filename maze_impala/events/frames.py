"""Statistics as pandas DataFrames: a tidy long form and a wide form with stable column names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.events.stats import StatKey
from maze_impala.run_files import STATS_CSV

if TYPE_CHECKING:  # pandas is imported where a DataFrame is made: every actor process imports this package
    import pandas as pd

StatsRow = tuple[int, int, dict[StatKey, float]]
"""One epoch: (epoch, env steps, statistics)."""
LONG_COLUMNS = ["epoch", "env_steps", "scope", "interface", "event", "field", "reducer", "group", "value"]


def to_dataframe(rows: Sequence[StatsRow], form: str = "wide") -> pd.DataFrame:
    """One epoch's or a whole run's statistics.

    ``wide``: one row per epoch, one column per statistic, named as in ``stats.csv``
    (``StatKey.column()``; a statistic missing in an epoch is NaN). ``long``: one row per
    (epoch, statistic) with its address split into columns, for ``groupby`` and plots.
    """
    import pandas as pd

    if form == "long":
        records = [
            {"epoch": epoch, "env_steps": steps, **key._asdict(), "value": value}
            for epoch, steps, stats in rows
            for key, value in stats.items()
        ]
        return pd.DataFrame(records, columns=LONG_COLUMNS)
    if form != "wide":
        raise ValueError(f"form must be 'wide' or 'long', got {form!r}")
    columns: list[str] = []
    records = []
    for epoch, steps, stats in rows:
        record = {"epoch": epoch, "env_steps": steps, **{key.column(): value for key, value in stats.items()}}
        columns += [c for c in record if c not in columns]
        records.append(record)
    return pd.DataFrame(records, columns=columns or ["epoch", "env_steps"])


def read_stats_csv(path: str | Path) -> pd.DataFrame:
    """A run's ``stats.csv`` (or its output dir) in the wide form of :func:`to_dataframe`."""
    import pandas as pd

    path = Path(path)
    return pd.read_csv(path / STATS_CSV if path.is_dir() else path)
