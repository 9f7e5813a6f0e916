"""Helpers of the end-to-end tests: run the installed ``maze-run`` on a tiny budget."""

import subprocess
import sys
import time
from pathlib import Path

from warm import starter

TINY = [
    "algorithm.n_epochs=2",
    "algorithm.epoch_length=3",
    "algorithm.envs_per_actor=4",
    "algorithm.rollout_evaluator.n_episodes=2",
    "output.tensorboard=true",
]


PLOT = (sys.executable, "-m", "maze_impala.report.plots")
"""``maze-plot``, for ``run_cli``'s ``command``."""
WARM = {
    (sys.executable, "-m", "maze_impala"): "maze_impala",
    ("maze-run",): "maze_impala",
    PLOT: "maze_impala.report.plots",
    ("maze-plot",): "maze_impala.report.plots",
}
"""The commands run warm (tests/warm.py), by the module ``python -m`` runs."""


def run_cli(args, cwd, command=(sys.executable, "-m", "maze_impala"), timeout=300):
    """``maze-run ARGS`` in ``cwd``: the installed package (the suite runs from outside the source tree), in a
    process of its own forked from one that has imported it already (tests/warm.py)."""
    if tuple(command) in WARM:
        return starter().run(WARM[tuple(command)], args, cwd=cwd, timeout=timeout)
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def maze_run(cwd, command, *more, out=None, timeout=300):
    """``maze-run COMMAND MORE... hydra.run.dir=OUT`` (:func:`run_cli`): ``command`` the overrides that need no
    quoting, split at spaces, as a shell would (``"-cn conf_train env=tictactoe runner=dev"``); ``more`` whole
    arguments (paths, f-strings); ``out`` the run's directory, if it names one."""
    args = [*command.split(), *more, *([f"hydra.run.dir={out}"] if out is not None else [])]
    return run_cli(args, cwd, timeout=timeout)


def train_tiny(out, args, runner="local"):
    """A run trained by the installed ``maze-run`` on the TINY budget into ``out`` (the CLI tests' fixtures)."""
    proc = run_cli(["-cn", "conf_train", *args, f"runner={runner}", *TINY, f"hydra.run.dir={out}"], cwd=out)
    assert proc.returncode == 0, proc.stderr
    return out


def rollouts_on(runners, trained, tmp_path, args):
    """The rollout CLI (``maze-run -cn conf_rollout``) of the run ``trained`` with each of ``runners`` (two worker
    processes where it has them) and ``args``, each into ``tmp_path/<runner>``; each must succeed. Returns, per
    runner, its output directory and its process."""
    outputs = {}
    for runner in runners:
        out = tmp_path / runner
        args_ = ["-cn", "conf_rollout", f"input_dir={trained}", f"runner={runner}", "runner.n_processes=2", *args]
        proc = run_cli([*args_, f"hydra.run.dir={out}"], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        outputs[runner] = (out, proc)
    return outputs


LONG = ["algorithm.n_epochs=100", "algorithm.epoch_length=5", "output.tensorboard=false"]
"""A run that trains far longer than a test waits: it is stopped (a signal, a kill) before it ends."""


def start_long_run(out, args, **popen):
    """``maze-run -cn conf_train ARGS`` of the installed package on the :data:`LONG` budget into ``out``, started in a
    process of its own (``popen``: the pipes, a session); the test stops it."""
    command = [sys.executable, "-m", "maze_impala", "-cn", "conf_train", *args, *LONG, f"hydra.run.dir={out}"]
    return subprocess.Popen(command, cwd=out.parent, **popen)


def wait_until(done, seconds=120, proc=None, pause=0.1):
    """Poll ``done()`` until it holds, ``seconds`` pass, or ``proc`` (if given) ends; whether it holds."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline and (proc is None or proc.poll() is None):
        time.sleep(pause)
    return done()


def children(pid):
    """The pids of the processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def process_state(pid):
    """The /proc state letter of ``pid``; "Z" for a zombie or a process that is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def alive(pids):
    return [pid for pid in pids if Path(f"/proc/{pid}").exists() and process_state(pid) != "Z"]


MY_ENV = '''
import gymnasium as gym
import numpy as np


class MyEnv(gym.Env):
    """Say the bit you see: reward 1 for the right answer; episodes of `size` questions."""

    observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, size=3):
        self.size = size

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.bit = 0, int(self.np_random.integers(2))
        return np.array([self.bit], np.float32), {}

    def step(self, action):
        reward = float(int(action) == self.bit)
        self.t, self.bit = self.t + 1, int(self.np_random.integers(2))
        return np.array([self.bit], np.float32), reward, self.t >= self.size, False, {}
'''
"""A user's own Gymnasium env, as the docs write it into my_env.py."""
