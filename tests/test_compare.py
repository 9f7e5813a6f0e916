"""Runs side by side: maze-plot over several runs or a multirun folder, and the summary a multirun writes."""

import numpy as np
import pandas as pd
import pytest
from clitools import PLOT, TINY, maze_run, run_cli

from maze_impala.report.compare import bootstrap_ci, configurations, find_runs, iqm


def test_the_interquartile_mean_and_its_bootstrap_interval():
    assert iqm(np.arange(1, 9)) == pytest.approx(4.5)  # the mean of 3, 4, 5, 6
    assert iqm(np.array([0.0, 10.0, 10.0, 1000.0])) == 10.0  # the outliers do not count
    assert bootstrap_ci(np.full(5, 3.0)) == (3.0, 3.0)
    low, high = bootstrap_ci(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    assert low < iqm(np.arange(1, 7)) < high


def _fake_run(path, overrides, returns, failed=False):
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    column = "eval/EpisodeEvents/episode_return/mean"
    train = "train/EpisodeEvents/episode_return/mean"
    stats = pd.DataFrame({"epoch": [1, 2], "env_steps": [100, 200], column: returns, train: returns})
    stats.to_csv(path / "stats.csv", index=False)
    if failed:
        (path / "FAILED").write_text("training failed in epoch 1\n")


def test_runs_are_grouped_by_their_overrides_but_the_seed_and_labelled_by_what_differs(tmp_path):
    for lr in ("0.001", "0.003"):
        for seed in (1, 2):
            _fake_run(tmp_path / f"lr={lr},seed={seed}", [f"algorithm.lr={lr}", "runner=dev", f"seed={seed}"], [1, 2])
    _fake_run(tmp_path / "broken", ["algorithm.lr=0.1", "runner=dev", "seed=1"], [0, 0], failed=True)
    groups = configurations(find_runs([tmp_path]))
    assert sorted((g.label, len(g.runs)) for g in groups) == [("algorithm.lr=0.001", 2), ("algorithm.lr=0.003", 2)]


def test_single_runs_are_labelled_by_their_seed_too_where_the_seeds_differ(tmp_path):
    """``maze-plot A B`` of two runs that differ in the learning rate and the seed: each curve is one seed."""
    from maze_impala.report.compare import plot_comparison

    _fake_run(tmp_path / "a", ["algorithm.lr=0.003", "seed=1"], [1, 2])
    _fake_run(tmp_path / "b", ["algorithm.lr=0.001", "seed=2"], [1, 3])
    groups = configurations(find_runs([tmp_path / "a", tmp_path / "b"]))
    assert sorted(g.label for g in groups) == ["algorithm.lr=0.001, seed=2", "algorithm.lr=0.003, seed=1"]
    import matplotlib.pyplot as plt

    shown = []
    original = plt.Axes.legend
    plt.Axes.legend = lambda ax, *args, **kwargs: shown.extend(t for t in ax.get_legend_handles_labels()[1])
    try:
        plot_comparison([tmp_path / "a", tmp_path / "b"], tmp_path / "two.png")
    finally:
        plt.Axes.legend = original
    assert "algorithm.lr=0.001, seed=2 (1 run)" in shown, shown


@pytest.mark.slow
def test_a_multirun_names_its_runs_by_their_overrides_and_sums_them_up(tmp_path):
    proc = maze_run(
        tmp_path,
        "-cn conf_train -m runner=dev",
        *TINY,
        "output.tensorboard=false",
        "seed=1,2",
        "algorithm.lr=0.003,0.001",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(runs) == 4 and all("seed=" in name and "algorithm.lr=" in name for name in runs), runs
    summary = pd.read_csv(tmp_path / "sweep" / "summary.csv")
    assert sorted(summary["configuration"]) == ["algorithm.lr=0.001", "algorithm.lr=0.003"]
    assert (summary["runs"] == 2).all() and (summary["iqm_ci_low"] <= summary["iqm"]).all()
    assert (tmp_path / "sweep" / "summary.png").stat().st_size > 5_000
    assert (tmp_path / "sweep" / "comparison.png").stat().st_size > 10_000
    assert f"{tmp_path / 'sweep' / 'summary.png'}" in proc.stdout, "the closing line names every file it wrote"
    # maze-plot draws the folder again, and two of its runs side by side
    first, second = (tmp_path / "sweep" / name for name in runs[:2])
    two = [str(first), str(second), "--output", str(tmp_path / "two.png")]
    sweep_png = tmp_path / "sweep" / "comparison.png"
    for args, png in (([str(tmp_path / "sweep")], sweep_png), (two, tmp_path / "two.png"), (two[:2], sweep_png)):
        png.unlink(missing_ok=True)
        done = run_cli(args, tmp_path, command=PLOT, timeout=120)
        assert done.returncode == 0, done.stderr
        assert png.stat().st_size > 10_000
    assert not (tmp_path / "comparison.png").exists(), "two runs are drawn beside them, not where the command ran"


def test_runs_in_which_no_training_episode_ended_yet_are_drawn_without_that_curve(tmp_path):
    from maze_impala.report.compare import plot_comparison

    _fake_run(tmp_path / "a", ["seed=1"], [1, 2])
    _fake_run(tmp_path / "b", ["seed=2"], [3, 4])
    stats = pd.read_csv(tmp_path / "b" / "stats.csv")
    stats.drop(columns=["train/EpisodeEvents/episode_return/mean"]).to_csv(tmp_path / "b" / "stats.csv", index=False)
    png = plot_comparison([tmp_path / "a", tmp_path / "b"], tmp_path / "comparison.png")
    assert png.stat().st_size > 0
