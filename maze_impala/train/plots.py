"""Training curves as a PNG: ``maze-plot <run dir>``, also written at the end of every training run."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pandas as pd

CURVES_PNG = "training_curves.png"
PANELS = [
    ("return", ["train/EpisodeEvents/episode_return/mean", "eval/EpisodeEvents/episode_return/mean"]),
    ("policy loss", ["train/MultiStepIMPALAEvents/policy_loss/mean/"]),
    ("policy grad norm", ["train/MultiStepIMPALAEvents/policy_grad_norm/mean/"]),
    ("critic grad norm", ["train/MultiStepIMPALAEvents/critic_grad_norm/mean/"]),
    ("critic value loss", ["train/MultiStepIMPALAEvents/critic_value_loss/mean/"]),
    ("policy lag", ["train/MultiStepIMPALAEvents/policy_lag/mean"]),
    ("env steps / s", ["train/RunEvents/env_steps_per_second/last"]),
    ("entropy", ["train/MultiStepIMPALAEvents/policy_entropy/mean/"]),
]


def plot_training_curves(stats_csv: str | Path, png: str | Path) -> Path:
    """Plot return, losses, grad norms (per step key), policy lag and steps/s over env steps into ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = pd.read_csv(stats_csv)
    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5), constrained_layout=True)
    for ax, (title, prefixes) in zip(axes.flat, PANELS):
        columns = [c for c in stats.columns if any(c == p or (p.endswith("/") and c.startswith(p)) for p in prefixes)]
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
    tmp = png.with_name(f".{png.stem}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    os.replace(tmp, png)
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description="Plot a finished run's training curves from its stats.csv.")
    parser.add_argument("run", help="a training output dir (or its stats.csv)")
    parser.add_argument("--output", help=f"the PNG to write (default: <run dir>/{CURVES_PNG})")
    args = parser.parse_args()
    run = Path(args.run)
    stats = run / "stats.csv" if run.is_dir() else run
    if not stats.is_file():
        parser.error(f"no stats.csv at {stats}")
    print(plot_training_curves(stats, args.output or stats.parent / CURVES_PNG))


if __name__ == "__main__":
    main()
