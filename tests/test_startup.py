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
    torch, output = _imports_torch("report.plots", "main", "maze-plot", [str(run)], tmp_path)
    assert (run / "training_curves.png").is_file(), output
    assert not torch, f"maze-plot imported torch:\n{output}"


COUNTED = """
import gc
import sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
from hydra._internal.hydra import Hydra
composed = []
compose = Hydra.compose_config
def counted(self, *args, **kwargs):
    composed.append(kwargs.get("run_mode"))
    return compose(self, *args, **kwargs)
Hydra.compose_config = counted
from maze_impala.cli import main
sys.argv = ["maze-run", *{args!r}]
try:
    main()
except SystemExit as stop:
    assert not stop.code, stop.code
print("LOADED", *[name for name in {heavy!r} if name in sys.modules], file=sys.stderr)
print("COMPOSED", len(composed), file=sys.stderr)
print("COLLECTOR", int(gc.isenabled()), gc.get_freeze_count(), len(collections), file=sys.stderr)
"""
HEAVY = ["pandas", "matplotlib.pyplot", "tensorboard.util.tensor_util", "torch.utils.tensorboard"]
"""What a run's end used to import for its curves and TensorBoard's hparams: about a second of a 1-update run."""
ONE_UPDATE = [
    "-cn",
    "conf_train",
    "runner=dev",
    "algorithm.n_epochs=1",
    "algorithm.epoch_length=1",
    "algorithm.rollout_evaluator.n_episodes=1",
    "output.tensorboard=false",
    "output.progress=false",
    "output.plot=false",
    "output.console=false",
    "hydra.run.dir=run",
]


def _run(args: list[str], cwd) -> dict[str, list[str]]:
    """A run in a process of its own: ``COMPOSED`` (how many times Hydra composed its config), ``LOADED`` (which of
    :data:`HEAVY` it imported), ``COLLECTOR`` (after it: the garbage collector on, the objects it froze, and how many
    collections ran)."""
    proc = subprocess.run(
        [sys.executable, "-c", COUNTED.format(args=args, heavy=HEAVY)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {line.split()[0]: line.split()[1:] for line in proc.stderr.strip().splitlines()[-3:]}


def _compositions(args: list[str], cwd) -> int:
    return int(_run(args, cwd)["COMPOSED"][0])


@pytest.mark.slow
def test_a_run_composes_its_config_once_unless_something_may_set_hydra_mode(tmp_path):
    assert _compositions(ONE_UPDATE, tmp_path) == 1  # Hydra's own way composes twice (once for hydra.mode)
    assert _compositions([*ONE_UPDATE, "hydra.mode=RUN", "hydra.run.dir=run2"], tmp_path) == 2  # read as Hydra does


@pytest.mark.slow
def test_a_runs_end_draws_its_curves_and_hparams_without_pandas_pyplot_or_tensorboards_tensor_utilities(tmp_path):
    """The curves are drawn on a bare matplotlib ``Figure`` from the CSV's columns, TensorBoard's hparams written from
    its protocol buffers alone (tests/test_tensorboard.py reads them back with TensorBoard's reader)."""
    drawn = [arg for arg in ONE_UPDATE if not arg.startswith(("output.plot=", "output.tensorboard="))]
    loaded = _run(drawn, tmp_path)["LOADED"]
    assert (tmp_path / "run" / "training_curves.png").stat().st_size > 10_000
    assert any((tmp_path / "run" / "tensorboard").iterdir())
    assert not loaded, f"a 1-update run imported {loaded}"


@pytest.mark.slow
def test_start_up_is_frozen_out_of_garbage_collection_which_runs_during_training(tmp_path):
    """``maze-run`` pauses the collector while torch and the package import, freezes what they built (``gc.freeze``)
    and collects as usual from there: the collector is on again, and it ran."""
    enabled, frozen, collections = map(int, _run(ONE_UPDATE, tmp_path)["COLLECTOR"])
    assert enabled and frozen > 100_000 and collections > 0, (enabled, frozen, collections)


def test_the_command_line_decides_the_mode_unless_an_override_or_a_users_config_may():
    from omegaconf import OmegaConf

    from maze_impala.config.workloads import config_dir
    from maze_impala.startup import command_line_decides_mode

    assert command_line_decides_mode(["-cn", "conf_train", "-m", "seed=1,2", "env=minigrid"])
    for extra in (
        ["hydra.mode=MULTIRUN"],
        ["+hydra.mode=RUN"],
        ["--config-dir", "conf"],
        ["--config-dir=conf"],
        ["-cd", "conf"],
        ["-cp", "/somewhere"],
    ):
        assert not command_line_decides_mode(["-cn", "conf_train", *extra]), extra
    for path in config_dir().rglob("*.yaml"):  # what makes skipping Hydra's reading of hydra.mode safe
        config = OmegaConf.to_container(OmegaConf.load(path))
        assert "mode" not in (config or {}).get("hydra", {}), f"{path} sets hydra.mode"


def test_a_cuda_learners_math_is_put_back_as_it_was_and_a_cpu_learner_changes_nothing():
    import torch

    from maze_impala.startup import fast_cuda_math, restore_cuda_math

    flags = lambda: (  # noqa: E731
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.benchmark,
    )
    as_it_was = flags()
    assert fast_cuda_math("cpu") == [] and flags() == as_it_was
    before = fast_cuda_math("cuda:0")
    try:
        assert flags() == (True, True, True)
        assert tuple(before) == as_it_was
    finally:
        restore_cuda_math(before)
    assert flags() == as_it_was
