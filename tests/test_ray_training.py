"""``maze-run ... runner=ray`` end to end, from the installed package: CartPole learns, and nothing of the Ray
that the run started outlives it, even when the run is SIGKILLed."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from clitools import alive, maze_run, start_long_run, wait_until
from columns import EVAL, RETURN, STEPS

from maze_impala.actors.reaper import raylet_processes

pytest.importorskip("ray", reason='the Ray backend needs pip install "maze_impala[ray]"')

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray at a time: in one worker, in turn


def ray_processes():
    """Every process of a Ray on this machine (raylets, GCS servers, agents, workers)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes()
        except OSError:
            continue
        if b"ray::" in text or b"/raylet" in text or b"gcs_server" in text:
            found.append(int(cmdline.parent.name))
    return found


def test_cartpole_with_ray_actors_reaches_475_within_the_budget_of_local_actors(tmp_path):
    """The shipped settings over at most 250 updates (256k env steps; subprocess actors reach 475 at a median of
    72k), in epochs of 10 updates as in the subprocess actors' learning test, until a greedy evaluation reaches
    475 (``algorithm.target_score``)."""
    before = set(ray_processes())
    out = tmp_path / "run"
    result = maze_run(
        tmp_path,
        (
            "-cn conf_train algorithm=impala runner=ray algorithm.n_epochs=25 "
            "algorithm.epoch_length=10 algorithm.target_score=475 output.tensorboard=false"
        ),
        out=out,
        timeout=400,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stats = pd.read_csv(out / "stats.csv")
    assert stats[EVAL].iloc[-1] >= 475, stats[[STEPS, RETURN, EVAL]].to_string()
    assert stats[STEPS].iloc[-1] == len(stats) * 10 * 1024 <= 25 * 10 * 1024
    assert "type: ray" in (out / "config.yaml").read_text()
    deadline = time.monotonic() + 30  # Ray's processes end within seconds; the suite's other tests slow them
    while set(ray_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert set(ray_processes()) - before == set(), "the run stopped the Ray it started"


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_a_ray_run_stopped_by_ctrl_c_or_sigkill_leaves_no_ray_process_behind(tmp_path, how):
    """Ctrl-C: SIGINT to the whole foreground process group (Ray's processes included), as a terminal sends it."""
    before = set(ray_processes())
    out = tmp_path / "run"
    proc = start_long_run(
        out, ["runner=ray"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        wait_until((out / "model_last.pt").exists)
        started = set(ray_processes()) - before
        raylets = [pid for pid in started if b"/raylet" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(raylets) == 1 and len(set(raylet_processes(raylets[0])) & started) >= 4, "workers and agents"
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
            _, stderr = proc.communicate(timeout=60)
            assert proc.returncode == 130 and "interrupted" in stderr, stderr[-2000:]
        else:
            proc.kill()
            proc.wait(timeout=10)
        wait_until(lambda: not alive(started), seconds=30)
        assert alive(started) == [], "Ray's agents would otherwise linger for about a minute"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_run_starts_a_ray_of_its_own_where_ray_start_runs_on_this_machine(tmp_path):
    """``ray start`` leaves a Ray that ``ray.init()`` would join (and refuse the run's CPU count for): a run without
    ``runner.address`` starts its own instead, and stops it, leaving the other one running."""
    if ray_processes():
        pytest.skip("a Ray runs on this machine already: `ray stop` at the end would stop it too")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    subprocess.run(
        [ray_bin, "start", "--head", "--num-cpus", "1", "--include-dashboard=false"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        others = set(ray_processes())
        out = tmp_path / "run"
        result = maze_run(
            tmp_path,
            (
                "-cn conf_train runner=ray algorithm.n_epochs=1 algorithm.epoch_length=2 "
                "algorithm.envs_per_actor=4 algorithm.n_rollout_steps=8 output.tensorboard=false"
            ),
            out=out,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert others <= set(ray_processes()), "the other Ray still runs"
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120)
