"""Training curves as a PNG: ``maze-plot <run dir>``, also written at the end of every training run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.files import atomic_write

if TYPE_CHECKING:  # imported where it plots: every actor process imports this package
    import pandas as pd

CURVES_PNG = "training_curves.png"


def panels() -> list[tuple[str, list[str]]]:
    """The panels: a title and the columns (a column ending in ``/``: every group under it, e.g. per step key)."""
    from maze_impala.events.api import last, mean
    from maze_impala.events.interfaces import EpisodeEvents, RunEvents
    from maze_impala.events.stats import StatKey
    from maze_impala.impala.events import MultiStepIMPALAEvents as ev

    def grouped(event: object) -> str:
        return StatKey.of(event, mean).column() + "/"

    return [
        ("return", [StatKey.of(EpisodeEvents.episode_return, mean, scope).column() for scope in ("train", "eval")]),
        ("policy loss", [grouped(ev.policy_loss)]),
        ("policy grad norm", [grouped(ev.policy_grad_norm)]),
        ("critic grad norm", [grouped(ev.critic_grad_norm)]),
        ("critic value loss", [grouped(ev.critic_value_loss)]),
        ("policy lag", [StatKey.of(ev.policy_lag, mean).column()]),
        ("env steps / s", [StatKey.of(RunEvents.env_steps_per_second, last).column()]),
        ("entropy", [grouped(ev.policy_entropy)]),
    ]


class NothingToPlot(ValueError):
    """A stats table without any training curve (e.g. a rollout's)."""


def plot_training_curves(stats_csv: str | Path, png: str | Path) -> Path:
    """Plot return, losses, grad norms (per step key), policy lag and steps/s over env steps into ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    stats = pd.read_csv(stats_csv)
    chosen = [(title, _columns(stats, prefixes)) for title, prefixes in panels()]
    if not any(columns for _, columns in chosen):
        raise NothingToPlot(
            f"{stats_csv} has no training curves (only {len(stats)} row(s) of rollout or other statistics); "
            "a rollout's results are in its kpis.csv and kpis_summary.csv"
        )
    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5), constrained_layout=True)
    for ax, (title, columns) in zip(axes.flat, chosen):
        scopes = {c.split("/")[0] for c in columns}
        for column in columns:
            # the scope (train, eval) where the panel mixes them, else the group (e.g. step_key=select)
            label = column.split("/")[0 if len(scopes) > 1 else -1] if len(columns) > 1 else None
            ax.plot(stats["env_steps"], stats[column], marker=".", label=label)
        ax.set_title(title)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        if len(columns) > 1:
            ax.legend(fontsize=7)
    png = Path(png)
    try:
        atomic_write(png, lambda file: fig.savefig(file, dpi=80, format="png"))
    finally:
        plt.close(fig)
    return png


def _columns(stats: pd.DataFrame, prefixes: list[str]) -> list[str]:
    return [c for c in stats.columns if any(c == p or (p.endswith("/") and c.startswith(p)) for p in prefixes)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A run's training curves from its stats.csv; several runs, or a multirun folder, side by side."
    )
    parser.add_argument("runs", nargs="+", help="training output dirs (or a stats.csv), or multirun folders")
    parser.add_argument(
        "--output",
        help=f"the PNG to write (default: <run dir>/{CURVES_PNG} for one run, <multirun folder>/comparison.png for "
        "a multirun, ./comparison.png for several runs)",
    )
    parser.add_argument("--summary", action="store_true", help="also write summary.csv and summary.png beside it")
    args = parser.parse_args()
    paths = [Path(run) for run in args.runs]
    if len(paths) == 1 and (paths[0].is_file() or (paths[0] / "stats.csv").is_file()) and not args.summary:
        stats = paths[0] / "stats.csv" if paths[0].is_dir() else paths[0]
        try:
            print(plot_training_curves(stats, args.output or stats.parent / CURVES_PNG))
        except NothingToPlot as error:
            parser.exit(1, f"maze-plot: nothing to plot: {error}\n")
        return
    from maze_impala.train.compare import plot_comparison, summarise

    for path in paths:
        if not path.is_dir():
            parser.error(f"no run or multirun folder at {path}")
    default = paths[0] / "comparison.png" if len(paths) == 1 else Path("comparison.png")
    png = Path(args.output) if args.output else default
    try:
        print(plot_comparison(paths, png))
    except ValueError as error:
        parser.exit(1, f"maze-plot: {error}\n")
    if args.summary:
        print(summarise(paths, png.parent))


if __name__ == "__main__":
    main()
