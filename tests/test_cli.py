"""`maze-run` end to end on a tiny budget: outputs, stats columns, models, and early config errors."""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from clitools import TINY, alive, children, maze_run, run_cli, start_long_run, wait_until
from omegaconf import OmegaConf

from maze_impala import Player, load_policy

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("runner", ["dev", "local"])
def test_training_run_writes_every_output(tmp_path, runner):
    out = tmp_path / "run"
    proc = maze_run(tmp_path, "-cn conf_train algorithm=impala", f"runner={runner}", *TINY, out=out)
    assert proc.returncode == 0, proc.stderr
    assert f"outputs in {out}" in proc.stdout
    assert "best evaluation return (mean of 2 episodes)" in proc.stdout  # what model_best.pt's choice rests on
    for name in ("config.yaml", "stats.csv", "model_last.pt", "model_best.pt"):
        assert (out / name).is_file(), name
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    config = OmegaConf.load(out / "config.yaml")
    assert config.seed == 1234 and config.runner.type == runner
    stats = pd.read_csv(out / "stats.csv")
    assert stats["epoch"].tolist() == [1, 2]
    assert stats["env_steps"].tolist() == [3 * 4 * 32, 2 * 3 * 4 * 32]  # updates x envs x steps (batch of 1)
    epoch, elapsed = stats["train/RunEvents/epoch_seconds/last"], stats["train/RunEvents/elapsed_seconds/last"]
    assert 0 < epoch[1] <= elapsed[1] - elapsed[0]  # training and evaluation, each counted once
    for column in (
        "train/EpisodeEvents/episode_return/mean",
        "eval/EpisodeEvents/episode_return/mean",
        "train/MultiStepIMPALAEvents/policy_grad_norm/mean/step_key=0",
        "train/MultiStepIMPALAEvents/critic_grad_norm/mean/critic_key=0",
        "train/MultiStepIMPALAEvents/policy_lag/mean",
        "train/MultiStepIMPALAEvents/time_backprop/percent/mean",
    ):
        assert stats[column].notna().all(), column
    policy, env = load_policy(out / "model_best.pt")
    obs, _ = env.reset(seed=0)
    assert env.action_spaces_dict[0].contains(Player(policy, deterministic=False)(obs, env.actor_id()))


def test_any_gymnasium_id_through_env_name(tmp_path):
    proc = maze_run(
        tmp_path,
        "-cn conf_train runner=dev env=gym_env env.name=Acrobot-v1",
        *TINY,
        "algorithm.n_epochs=1",
        out=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(tmp_path / "stats.csv")["eval/EpisodeEvents/episode_return/mean"].iloc[0] <= 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.lr=-1", "algorithm.lr must be a finite float > 0"),
        ("algorithm.num_actors=0", "algorithm.num_actors must be an int >= 1"),
        ("algorithm.no_such_field=1", "no_such_field"),
        ("runner=no_such_runner", "no_such_runner"),
        ("env.name=NoSuchEnv-v0", "cannot make Gymnasium env 'NoSuchEnv-v0'"),
        ("model.activation=gelu", "model.activation must be one of"),
    ],
)
def test_bad_config_fails_before_training_and_names_the_problem(tmp_path, override, message):
    proc = run_cli(["-cn", "conf_train", override, f"hydra.run.dir={tmp_path}"], cwd=tmp_path)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert not (tmp_path / "stats.csv").exists()


def test_installed_maze_run_finds_its_configs_from_any_directory(tmp_path):
    exe = shutil.which("maze-run")
    if exe is None:
        pytest.skip("maze-run is not installed (pip install .)")
    proc = run_cli(
        [
            "-cn",
            "conf_train",
            "runner=dev",
            *TINY,
            "algorithm.n_epochs=1",
            "output.tensorboard=false",
            f"hydra.run.dir={tmp_path / 'out'}",
        ],
        cwd=tmp_path,
        command=(exe,),
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "model_best.pt").is_file()


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_interrupt_stops_every_actor_and_keeps_the_last_checkpoint(tmp_path, signal_name):
    import signal
    import time

    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to find the actor processes")
    out = tmp_path / "run"
    proc = start_long_run(out, ["runner=local"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # model_best.pt comes after the first evaluation (model_last.pt before it too): an epoch has ended
        wait_until((out / "model_best.pt").exists, proc=proc)
        actors = children(proc.pid)
        assert len(actors) >= 2, "two actor processes (plus the resource tracker) run"
        proc.send_signal(getattr(signal, signal_name))
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == {"SIGINT": 130, "SIGTERM": 143}[signal_name], stderr
    assert "interrupted" in stderr
    # the exact command that continues the run: its own overrides, resume= its directory
    command = (
        f"maze-run -cn conf_train runner=local algorithm.n_epochs=100 algorithm.epoch_length=5 "
        f"output.tensorboard=false resume={out}"
    )
    assert command in stderr, stderr
    time.sleep(0.5)
    assert alive(actors) == []
    policy, _ = load_policy(out / "model_last.pt")
    assert policy is not None
    # what there is of the run is summed up: the curves of its finished epochs and the last evaluation's KPIs
    assert (out / "training_curves.png").stat().st_size > 10_000
    assert (out / "kpis_summary.csv").is_file()


@pytest.mark.parametrize(
    ("body", "code", "out"),
    [
        ("print('done', end='')", 0, "done"),  # unflushed output still comes out
        ("import sys; print('failed', end=''); sys.exit(3)", 3, "failed"),
        # a library's thread still writing: the usual exit, which waits for it
        (
            "import threading, time; threading.Thread(target=lambda: (time.sleep(0.3), print('late', end=''))).start()",
            0,
            "late",
        ),
    ],
    ids=["returns", "exits", "thread"],
)
def test_the_command_exits_fast_with_mains_code_and_loses_no_output(tmp_path, body, code, out):
    script = f"import maze_impala.cli as cli\ndef main():\n    {body}\ncli.main = main\ncli.run_command()\n"
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (code, out), proc.stderr
