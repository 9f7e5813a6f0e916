"""Training curves as a PNG: ``maze-plot <run dir>``, also written at the end of every training run."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maze_impala.files import atomic_write
from maze_impala.run_files import COMPARISON_PNG, CURVES_PNG, STATS_CSV

if TYPE_CHECKING:  # imported where it plots: every actor process imports this package
    from matplotlib.figure import Figure


def panels() -> list[tuple[str, list[str]]]:
    """The panels: a title and the columns (a column ending in ``/``: every group under it, e.g. per step key)."""
    from maze_impala.events.api import last, mean
    from maze_impala.events.interfaces import EpisodeEvents, GameEvents, RunEvents
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
        # multi-agent envs only: a panel without columns is left out
        ("return per agent", [grouped(EpisodeEvents.agent_return)]),
        ("win rate against the opponent, per seat", [StatKey.of(GameEvents.win, mean, "eval").column() + "/"]),
        ("draw rate against the opponent, per seat", [StatKey.of(GameEvents.draw, mean, "eval").column() + "/"]),
        ("loss rate against the opponent, per seat", [StatKey.of(GameEvents.loss, mean, "eval").column() + "/"]),
        ("win rate against the training opponent", [StatKey.of(GameEvents.win, mean, "train").column() + "/"]),
    ]


class NothingToPlot(ValueError):
    """A stats table without any training curve (e.g. a rollout's)."""


_WIDTH_INCHES, _ROW_INCHES = 18.0, 3.75
"""The figure's width and the height of a row of four panels."""


def plot_training_curves(stats_csv: str | Path, png: str | Path) -> Path:
    """Plot return, losses, grad norms (per step key), policy lag and steps/s over env steps into ``png``; in a
    multi-agent env each agent's return too, and with games against an opponent the win and draw rates per seat."""
    from maze_impala.events.tables import read_columns

    fig = training_curves(read_columns(stats_csv), str(stats_csv))
    png = Path(png)
    atomic_write(png, lambda file: fig.savefig(file, dpi=80, format="png"))
    return png


def training_curves(stats: Mapping[str, Any], source: str = "the statistics") -> Figure:
    """The figure of :func:`plot_training_curves`, from a stats table's columns (``read_columns`` or a pandas
    ``DataFrame``). A curve keeps its colour in every panel: a seat, a step key, an agent or the train and eval
    scopes (each line's ``gid`` is that name).

    Drawn on a bare ``Figure`` in a fixed grid: pyplot's import and a constrained layout's solving cost a training run's
    end most of a second, for a picture that has the same panels every time."""
    import matplotlib
    from matplotlib.figure import Figure

    columns_of = list(stats)
    chosen = [(title, columns) for title, prefixes in panels() if (columns := _columns(columns_of, prefixes))]
    if not chosen:
        found = len(stats["env_steps"]) if "env_steps" in stats else 0
        raise NothingToPlot(
            f"{source} has no training curves (only {found} row(s) of rollout or other statistics); "
            "a rollout's results are in its kpis.csv and kpis_summary.csv"
        )
    rows = max(2, -(-len(chosen) // 4))
    height = _ROW_INCHES * rows
    fig = Figure(figsize=(_WIDTH_INCHES, height))
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.5 / height, top=1 - 0.35 / height, wspace=0.3, hspace=0.45)
    colours: dict[str, str] = {}
    palette = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (title, columns) in enumerate(chosen):
        ax = fig.add_subplot(rows, 4, index + 1)
        scopes = {c.split("/")[0] for c in columns}
        for column in columns:
            # the scope (train, eval) where the panel mixes them, else the group (e.g. step_key=select, seat=...)
            name = column.split("/")[0 if len(scopes) > 1 else -1]
            colour = colours.setdefault(name, palette[len(colours) % len(palette)])
            label = name if len(columns) > 1 else None
            ax.plot(stats["env_steps"], stats[column], marker=".", label=label, color=colour, gid=name)
        ax.set_title(title)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
        if len(columns) > 1:
            ax.legend(fontsize=7)
    return fig


def _columns(names: list[str], prefixes: list[str]) -> list[str]:
    return [c for c in names if any(c == p or (p.endswith("/") and c.startswith(p)) for p in prefixes)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A run's training curves from its stats.csv; several runs, or a multirun folder, side by side."
    )
    parser.add_argument("runs", nargs="+", help="training output dirs (or a stats.csv), or multirun folders")
    parser.add_argument(
        "--output",
        help=f"the PNG to write (default: <run dir>/{CURVES_PNG} for one run, <multirun folder>/comparison.png for "
        "a multirun, comparison.png in the folder that holds several runs)",
    )
    parser.add_argument("--summary", action="store_true", help="also write summary.csv and summary.png beside it")
    parser.add_argument(
        "--marl-eval",
        metavar="JSON",
        help="write the runs' evaluation results in marl-eval's JSON to this file instead of plotting",
    )
    args = parser.parse_args()
    paths = [Path(run) for run in args.runs]
    if args.marl_eval:
        from maze_impala.report.marl_eval import write_marl_eval

        written = write_marl_eval(paths, Path(args.marl_eval))
        if written is None:
            parser.exit(1, f"maze-plot: no training run (with a stats.csv and a kpis.csv) under {args.runs}\n")
        print(written)
        return
    if len(paths) == 1 and (paths[0].is_file() or (paths[0] / STATS_CSV).is_file()) and not args.summary:
        stats = paths[0] / STATS_CSV if paths[0].is_dir() else paths[0]
        try:
            print(plot_training_curves(stats, args.output or stats.parent / CURVES_PNG))
        except NothingToPlot as error:
            parser.exit(1, f"maze-plot: nothing to plot: {error}\n")
        return
    from maze_impala.report.compare import plot_comparison, summarise

    for path in paths:
        if not path.is_dir():
            parser.error(f"no run or multirun folder at {path}")
    # several runs: beside them, in the folder they share (outputs/train/), not wherever the command was typed
    default = (paths[0] if len(paths) == 1 else Path(os.path.commonpath([p.resolve() for p in paths]))) / COMPARISON_PNG
    png = Path(args.output) if args.output else default
    try:
        print(plot_comparison(paths, png))
    except ValueError as error:
        parser.exit(1, f"maze-plot: {error}\n")
    if args.summary:
        print(summarise(paths, png.parent))


if __name__ == "__main__":
    main()
