"""Commands that train nothing answer without importing torch (2-3 s of every training run's start-up)."""

import subprocess
import sys

import pytest

PROBE = """
import sys
from maze_impala.{module} import {function} as command
sys.argv = [{name!r}, *{args!r}]
try:
    command()
except SystemExit:
    pass
print("TORCH" if "torch" in sys.modules else "NO TORCH", file=sys.stderr)
"""


def _imports_torch(module: str, function: str, name: str, args: list[str], cwd) -> tuple[bool, str]:
    code = PROBE.format(module=module, function=function, name=name, args=args)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)
    verdict = proc.stderr.strip().splitlines()[-1]
    assert verdict in ("TORCH", "NO TORCH"), proc.stderr
    return verdict == "TORCH", proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["-cn", "conf_train", "--help"],
        ["-cn", "conf_train", "--cfg", "job"],
        ["-cn", "conf_train", "algorithm.lrr=0.1"],  # refused before Hydra
        ["-cn", "conf_train", "algorithm.lr=-1", "hydra.run.dir=refused"],  # refused by the config's checks
        ["-cn", "conf_rollout", "--cfg", "job"],
    ],
)
def test_maze_run_without_training_never_imports_torch(tmp_path, args):
    torch, output = _imports_torch("cli", "main", "maze-run", args, tmp_path)
    assert not torch, f"maze-run {' '.join(args)} imported torch:\n{output}"


def test_maze_plot_never_imports_torch(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "stats.csv").write_text("epoch,env_steps,train/EpisodeEvents/episode_return/mean\n1,100,1.0\n2,200,2.0\n")
    torch, output = _imports_torch("train.plots", "main", "maze-plot", [str(run)], tmp_path)
    assert (run / "training_curves.png").is_file(), output
    assert not torch, f"maze-plot imported torch:\n{output}"
