"""The door: every switch that changes the whole process, in one place, each with why it is set.

Nothing deeper in the package flips process-wide state: the CLI (:mod:`maze_impala.cli`) calls these as a command
starts, the run's set-up (:func:`~maze_impala.train.setup.build_trainer`) calls :func:`fast_cuda_math` for a CUDA
learner, every process the package starts (actor workers, Ray actors, learner replicas, rollout workers) enters
through :func:`enter_process`, and the tuned learner sets its threads with :func:`set_torch_threads`. What each
saves is measured in docs/benchmarks.md ("what the code's choices rest on"):

- the garbage collector is paused while a command imports torch, Hydra and the package, and what they built is then
  frozen (:func:`paused_collector`, :func:`freeze_and_collect`);
- Hydra composes a command's config once, not twice (:func:`compose_once`);
- a CUDA learner computes in TF32 and lets cuDNN pick its fastest algorithms (:func:`fast_cuda_math`).

torch's thread count is the learner's to choose as the load changes (:mod:`maze_impala.impala.threads`).
Nothing of the package is imported here.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

USER_CONFIGS = ("-cd", "--config-dir", "-cp", "--config-path")
"""Options that add configs the package does not ship."""


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Python's cyclic garbage collector off until :func:`freeze_and_collect` (or the end of the block).

    Importing torch, Hydra and the package allocates some hundreds of thousands of objects that live as long as the
    process. With the collector on, their allocations set off full scans of all of them again and again, and every
    full collection during the run walks them once more."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def freeze_and_collect() -> None:
    """The collector resumes, and what start-up built is set aside from its scans (``gc.freeze``, about 280,000
    objects): call it once a command's modules are imported and before it builds anything (before any actor process
    starts: a forked one inherits the collector's state). Only the first call of a process freezes: a multirun's
    later jobs would freeze what earlier jobs left as garbage."""
    if not gc.get_freeze_count():
        gc.freeze()
    gc.enable()


def command_line_decides_mode(argv: Sequence[str]) -> bool:
    """Whether ``hydra.mode`` can only be what the command line's ``-m`` says: no override names it, and only the
    shipped configs are composed (a config directory of the user's may set anything)."""
    for arg in argv:
        if arg.split("=", 1)[0] in USER_CONFIGS:
            return False
        if "=" in arg and arg.split("=", 1)[0].lstrip("+~") == "hydra.mode":
            return False
    return True


def _no_mode_in_the_config(self: Any, config_name: str | None, overrides: list[str]) -> None:
    """``Hydra.get_mode`` where no config sets ``hydra.mode``: none, so the command line decides."""
    return None


def compose_once(argv: Sequence[str]) -> bool:
    """Skip Hydra's composition for ``hydra.mode`` in this process where the command line decides the mode; whether
    it is skipped.

    Hydra's ``@hydra.main`` composes a command's config twice: first with every override, only to read
    ``hydra.mode`` (whether the config asks for a multirun), then again for the run itself. The shipped configs set
    no ``hydra.mode`` (tests/test_startup.py checks it, and that a run composes once). Hydra versions without
    ``Hydra.get_mode`` keep their own way."""
    from hydra._internal.hydra import Hydra

    if not command_line_decides_mode(argv) or not hasattr(Hydra, "get_mode"):
        return False
    Hydra.get_mode = _no_mode_in_the_config
    return True


def _cuda_switches(torch: Any) -> list[tuple[Any, str]]:
    """torch's switches that :func:`fast_cuda_math` turns on: (owner, attribute)."""
    return [
        (torch.backends.cuda.matmul, "allow_tf32"),
        (torch.backends.cudnn, "allow_tf32"),
        (torch.backends.cudnn, "benchmark"),
    ]


def fast_cuda_math(device: str) -> list[bool]:
    """For a learner on ``device`` a CUDA GPU: TF32 matrix products and convolutions (10 bits of mantissa) and
    cuDNN's choice of the fastest algorithm for the update's fixed shapes. A CPU learner leaves them as they are.
    Returns the switches as they were, for :func:`restore_cuda_math` (empty: none changed)."""
    if not device.startswith("cuda"):
        return []
    import torch

    before = [getattr(owner, name) for owner, name in _cuda_switches(torch)]
    for owner, name in _cuda_switches(torch):
        setattr(owner, name, True)
    return before


def restore_cuda_math(before: list[bool]) -> None:
    """The switches :func:`fast_cuda_math` changed put back (a run started from Python leaves the process as it was)."""
    if before:
        import torch

        for (owner, name), value in zip(_cuda_switches(torch), before, strict=True):
            setattr(owner, name, value)


def set_torch_threads(threads: int, load: bool = False) -> None:
    """Set torch's intra-op threads in this process to ``threads``: where torch is loaded already, or, with
    ``load``, after loading it (an actor acting in numpy leaves it unloaded)."""
    torch = importlib.import_module("torch") if load else sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def torch_threads() -> int | None:
    """torch's intra-op threads in this process; None where torch is not loaded."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def enter_process(threads: int = 1, load: bool = False) -> None:
    """The door of every process the package starts (as Sample Factory's ``init_torch_runtime``): torch's threads,
    one core per actor or rollout worker and a learner replica's share, where torch is loaded or ``load`` says to
    load it. A learner replica's CUDA math is set where it learns its device (``build_replica``)."""
    set_torch_threads(threads, load)


def headless_rendering() -> None:
    """Where there is no display, SDL (pygame, which many envs draw with) draws off-screen (``SDL_VIDEODRIVER=dummy``,
    unless set): the same frames, without its error lines about a missing display server."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


def mlflow_file_store() -> None:
    """MLflow accepts a local directory as its tracking store (``MLFLOW_ALLOW_FILE_STORE=true``, unless set)."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
