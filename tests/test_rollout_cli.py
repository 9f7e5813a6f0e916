"""Training outputs (KPIs, event logs, curves, hparams) and `maze-run -cn conf_rollout` end to end."""

import pandas as pd
import pytest
from clitools import PLOT, TINY, maze_run, rollouts_on, run_cli

from maze_impala.events.tables import read_event_logs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    proc = maze_run(out, "-cn conf_train env=cutting runner=dev output.event_logs=csv", *TINY, out=out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_training_writes_kpis_event_logs_curves_and_hparams(trained):
    kpis = pd.read_csv(trained / "kpis.csv")
    assert kpis["epoch"].tolist() == [1, 1, 2, 2]  # two evaluation episodes per epoch
    assert {"episode_id", "seed", "steps", "return", "fill_rate", "filled_length"} <= set(kpis.columns)
    assert (kpis["steps"] == 8).all() and kpis["fill_rate"].between(0, 1).all()
    summary = pd.read_csv(trained / "kpis_summary.csv").set_index("kpi")
    assert list(summary.columns) == ["mean", "std", "min", "max"] and "fill_rate" in summary.index
    logs = read_event_logs(trained)
    filled = logs.get("CuttingEvents.order_filled", pd.DataFrame(columns=["epoch", "episode_id"]))
    missed = logs["CuttingEvents.order_missed"]
    assert len(filled) + len(missed) == 4 * 8  # every order of every evaluation episode
    assert (trained / "training_curves.png").stat().st_size > 10_000
    stats = pd.read_csv(trained / "stats.csv")
    assert stats["train/KpiEvents/kpi/mean/name=fill_rate"].notna().all()
    assert stats["eval/CuttingEvents/order_missed/size/mean"].notna().all()
    events = b"".join(p.read_bytes() for p in (trained / "tensorboard").rglob("events.out.tfevents.*"))
    assert b"hparams" in events and b"algorithm.lr" in events


def test_maze_plot_redraws_the_curves_of_a_finishedrun_cli(trained, tmp_path):
    png = tmp_path / "curves.png"
    proc = run_cli([str(trained), "--output", str(png)], tmp_path, command=PLOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert png.stat().st_size > 10_000


def test_rollout_runners_give_identical_per_episode_results(trained, tmp_path):
    args = ["policy=torch_policy", "n_episodes=6", "deterministic=false", "event_logs=csv"]
    runs = rollouts_on(("sequential", "parallel"), trained, tmp_path, args)
    for _, proc in runs.values():
        assert "fill_rate" in proc.stdout and "mean" in proc.stdout  # the summary table
    outputs = {runner: out for runner, (out, _) in runs.items()}
    kpis = {runner: pd.read_csv(out / "kpis.csv") for runner, out in outputs.items()}
    assert kpis["sequential"]["episode_id"].tolist() == list(range(6))
    pd.testing.assert_frame_equal(kpis["sequential"], kpis["parallel"])
    logs = {runner: read_event_logs(out) for runner, out in outputs.items()}
    for name, frame in logs["sequential"].items():
        pd.testing.assert_frame_equal(frame, logs["parallel"][name])
    stats = pd.read_csv(outputs["parallel"] / "stats.csv")
    assert stats["rollout/EpisodeEvents/episode_return/count"].iloc[0] == 6


def test_random_policy_rollout_on_any_env(tmp_path):
    proc = maze_run(tmp_path, "-cn conf_rollout policy=random_policy env=coordination n_episodes=4", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert len(kpis) == 4 and kpis["cover_rate"].between(0, 1).all()


def test_a_random_policy_plays_an_env_family_whose_config_carries_training_settings(tmp_path):
    """``env=tictactoe`` sets algorithm keys beside its env (and ``env=minatar`` model keys): a rollout composes
    them and trains nothing, so the random baseline of every shipped family is one command."""
    args = ["-cn", "conf_rollout", "policy=random_policy", "env=tictactoe", "n_episodes=4", "progress=false"]
    proc = run_cli([*args, f"hydra.run.dir={tmp_path}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(tmp_path / "kpis.csv")) == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["policy=torch_policy"], "needs input_dir"),
        (["policy=random_policy", "env=cutting", "algorithm.lr=0.1"], "algorithm.lr is a training setting"),
        (["policy=random_policy"], "needs an env"),
        (["policy=random_policy", "env=cutting", "n_episodes=0"], "n_episodes must be an int >= 1"),
        (
            ["policy=random_policy", "env=tictactoe", "opponent=random", "video.episodes=1"],
            "games against an opponent are not filmed",
        ),
    ],
)
def test_bad_rollout_configs_fail_early_with_a_clear_message(tmp_path, args, message):
    proc = maze_run(tmp_path, "-cn conf_rollout", *args, out=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr


def test_a_refused_rollout_in_its_default_directory_leaves_no_folder_behind(tmp_path):
    proc = maze_run(tmp_path, "-cn conf_rollout policy=random_policy env=cutting n_episodes=0")
    assert proc.returncode == 2 and "n_episodes must be an int >= 1" in proc.stderr
    assert not (tmp_path / "outputs").exists(), "no empty outputs/rollout/ in the directory the command ran in"
