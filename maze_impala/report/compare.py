"""Runs side by side: ``maze-plot RUN [RUN ...]`` and the summary of a Hydra multirun.

A run is a training output directory with a ``stats.csv`` (one marked ``FAILED``, or without statistics, is left
out). A multirun folder (``maze-run -m ...``) holds one such run per job, named by its overrides (``seed=2``);
its runs are grouped into configurations by their overrides other than ``seed``. Runs are labelled by the
overrides in which they differ.

The summary of a multirun (written when the multirun ends, and by ``maze-plot --summary``) gives, per
configuration, the final evaluation return of each seed, their mean, their interquartile mean and a 95%
bootstrap confidence interval of the IQM (rliable's aggregate, Agarwal et al. 2021), as ``summary.csv`` and
``summary.png``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.run_files import CONFIG_YAML, FAILED, HYDRA_OVERRIDES, SUMMARY_CSV, SUMMARY_PNG
from maze_impala.run_files import STATS_CSV as STATS

SEED_KEYS = ("seed",)
"""Overrides that tell the runs of one configuration apart (its spread, not another configuration)."""


@dataclass
class Run:
    path: Path
    overrides: dict[str, str]
    """The run's command-line overrides (Hydra's ``.hydra/overrides.yaml``), or its config's values."""

    @property
    def configuration(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((k, v) for k, v in self.overrides.items() if k not in SEED_KEYS))


@dataclass
class Configuration:
    label: str
    runs: list[Run] = field(default_factory=list)


def is_run(path: Path) -> bool:
    return path.is_dir() and (path / STATS).is_file() and not (path / FAILED).exists()


def _overrides(path: Path) -> dict[str, str]:
    from omegaconf import OmegaConf

    hydra = path / HYDRA_OVERRIDES
    if hydra.is_file():
        items = OmegaConf.to_container(OmegaConf.load(hydra)) or []
        return {str(o).split("=", 1)[0].lstrip("+~"): str(o).split("=", 1)[-1] for o in items}
    config = path / CONFIG_YAML
    if config.is_file():  # a run started from Python: its config's values
        from maze_impala.config.base import flat_record

        return {k: str(v) for k, v in flat_record(OmegaConf.to_container(OmegaConf.load(config))).items()}
    return {}


def find_runs(paths: list[Path]) -> list[Run]:
    """The runs named by ``paths``: run directories, or multirun folders (every run under them)."""
    runs = []
    for path in paths:
        found = [path] if is_run(path) else sorted(p for p in path.rglob("*") if is_run(p))
        runs += [Run(p, _overrides(p)) for p in found]
    return runs


def configurations(runs: list[Run]) -> list[Configuration]:
    """The runs grouped by their overrides other than the seed, each group labelled by the overrides in which the
    groups differ (the run's directory name where nothing differs). A group of one run is labelled by its seed too
    where the seeds differ: that run is one seed, not a spread over seeds."""
    groups: dict[tuple, Configuration] = {}
    for run in runs:
        groups.setdefault(run.configuration, Configuration("")).runs.append(run)
    named = {key: _label_items(key, c.runs) for key, c in groups.items()}
    differing = {
        k for items in named.values() for k, v in items if any(dict(other).get(k) != v for other in named.values())
    }
    for key, configuration in groups.items():
        label = ", ".join(f"{k}={v}" for k, v in named[key] if k in differing)
        configuration.label = label or (configuration.runs[0].path.name if len(groups) > 1 else "run")
    return list(groups.values())


def _label_items(key: tuple[tuple[str, str], ...], runs: list[Run]) -> tuple[tuple[str, str], ...]:
    if len(runs) != 1:
        return key
    seeds = tuple((k, v) for k, v in runs[0].overrides.items() if k in SEED_KEYS)
    return tuple(sorted(key + seeds))


def iqm(values: np.ndarray) -> float:
    """The interquartile mean: the mean of the middle 50% (rliable's trimmed mean, 25% cut on each side)."""
    values = np.sort(np.asarray(values, dtype=float))
    n = len(values)
    low, high = math.floor(0.25 * n), math.ceil(0.75 * n)
    middle = values[low:high] if high > low else values
    return float(middle.mean())


def bootstrap_ci(values: np.ndarray, statistic: Any = iqm, samples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A 95% percentile-bootstrap confidence interval of ``statistic`` over the runs (resampled with replacement)."""
    rng = np.random.default_rng(seed)
    values = np.asarray(values, dtype=float)
    draws = [statistic(rng.choice(values, len(values))) for _ in range(samples)]
    return float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))


def final_returns(run: Run, column: str) -> float:
    import pandas as pd

    stats = pd.read_csv(run.path / STATS)
    values = stats[column].dropna() if column in stats else []
    return float(values.iloc[-1]) if len(values) else math.nan


def summarise(paths: list[Path], out_dir: Path) -> Path | None:
    """Write ``summary.csv`` and ``summary.png`` of the runs under ``paths`` into ``out_dir``; None if no run."""
    import pandas as pd

    from maze_impala.files import atomic_write

    runs = find_runs(paths)
    if not runs:
        return None
    column = _eval_return()
    rows = []
    for configuration in configurations(runs):
        finals = np.array([final_returns(run, column) for run in configuration.runs])
        finals = finals[~np.isnan(finals)]
        if not len(finals):
            continue
        low, high = bootstrap_ci(finals)
        rows.append(
            {
                "configuration": configuration.label,
                "folders": " ".join(_relative(run.path, out_dir) for run in configuration.runs),
                "runs": len(finals),
                "mean": float(finals.mean()),
                "iqm": iqm(finals),
                "iqm_ci_low": low,
                "iqm_ci_high": high,
                "final_returns": " ".join(f"{v:.4g}" for v in finals),
            }
        )
    table = pd.DataFrame(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / SUMMARY_CSV, lambda file: file.write(table.to_csv(index=False).encode()))
    _plot_summary(table, out_dir / SUMMARY_PNG)
    return out_dir / SUMMARY_CSV


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def best_row(summary_csv: Path) -> str | None:
    """The configuration of ``summary.csv`` with the best mean final evaluation and its folders, in words (ties
    named); None for an empty summary."""
    import pandas as pd

    table = pd.read_csv(summary_csv)
    if table.empty:
        return None
    best = table["mean"].max()
    tied = table[table["mean"] == best]
    folders = " ".join(str(f) for f in tied["folders"])
    ties = f" (tied: {len(tied)} configurations)" if len(tied) > 1 else ""
    return f"best mean final evaluation {best:.4g}{ties}: {folders}"


SHORT_LABEL = 40
"""Longer configuration labels are replaced in summary.png by their folders (summary.csv has both)."""


def _eval_return() -> str:
    from maze_impala.events.api import mean
    from maze_impala.events.interfaces import EpisodeEvents
    from maze_impala.events.stats import StatKey

    return StatKey.of(EpisodeEvents.episode_return, mean, "eval").column()


def _plot_summary(table: Any, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from maze_impala.files import atomic_write

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(table) + 1.5), constrained_layout=True)
    y = np.arange(len(table))
    ax.errorbar(
        table["iqm"],
        y,
        xerr=[table["iqm"] - table["iqm_ci_low"], table["iqm_ci_high"] - table["iqm"]],
        fmt="o",
        capsize=4,
    )
    labels = [c if len(c) <= SHORT_LABEL else f for c, f in zip(table["configuration"], table["folders"])]
    ax.set_yticks(y, [label if len(label) <= SHORT_LABEL else label[: SHORT_LABEL - 3] + "..." for label in labels])
    ax.set_xlabel("final evaluation return: IQM over the runs, 95% bootstrap CI")
    ax.grid(alpha=0.3)
    try:
        atomic_write(png, lambda file: fig.savefig(file, dpi=80, format="png"))
    finally:
        plt.close(fig)


def plot_comparison(paths: list[Path], png: Path) -> Path:
    """Training and evaluation returns over env steps, one curve per configuration (the mean over its runs, their
    range shaded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from maze_impala.events.api import mean
    from maze_impala.events.interfaces import EpisodeEvents
    from maze_impala.events.stats import StatKey
    from maze_impala.files import atomic_write

    runs = find_runs(paths)
    if not runs:
        raise ValueError(
            f"no finished training run under {', '.join(map(str, paths))} (a run has a {STATS} and no {FAILED} file)"
        )
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
    for ax, scope in zip(axes, ("train", "eval")):
        column = StatKey.of(EpisodeEvents.episode_return, mean, scope).column()
        for configuration in configurations(runs):
            tables = [pd.read_csv(run.path / STATS).set_index("env_steps") for run in configuration.runs]
            curves = [table[column] for table in tables if column in table]  # no episode ended yet: no curve
            if not curves:
                continue
            frame = pd.concat(curves, axis=1).sort_index()
            count = f"{len(curves)} run{'' if len(curves) == 1 else 's'}"
            line = ax.plot(frame.index, frame.mean(axis=1), label=f"{configuration.label} ({count})")
            if len(curves) > 1:
                ax.fill_between(frame.index, frame.min(axis=1), frame.max(axis=1), alpha=0.2, color=line[0].get_color())
        ax.set_title(f"{scope} return")
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        if ax.lines:  # no run has this curve yet (no episode ended): an empty panel, no legend
            ax.legend(fontsize=7)
    try:
        atomic_write(png, lambda file: fig.savefig(file, dpi=80, format="png"))
    finally:
        plt.close(fig)
    return png
