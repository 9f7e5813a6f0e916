"""Helpers of the end-to-end tests: run the installed ``maze-run`` on a tiny budget."""

import subprocess
import sys

TINY = [
    "algorithm.n_epochs=2",
    "algorithm.epoch_length=3",
    "algorithm.envs_per_actor=4",
    "algorithm.rollout_evaluator.n_episodes=2",
    "output.tensorboard=true",
]


def run_cli(args, cwd, command=(sys.executable, "-m", "maze_impala"), timeout=300):
    """``maze-run ARGS`` in ``cwd``: the installed package (the suite runs from outside the source tree)."""
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
