"""The door: every switch that changes the whole process, in one place, each with why it is set.

Nothing deeper in the package flips process-wide state: the CLI (:mod:`maze_impala.cli`) calls these as a command
starts, the run's set-up (:func:`~maze_impala.train.setup.build_trainer`) and each learner process call
:func:`fast_cuda_math` for a CUDA learner. Measured with torch 2.13, Hydra 1.3 and CPython 3.12 (docs/benchmarks.md,
"a run's start and end", and docs/models.md for the GPU):

- the garbage collector is paused while a command imports torch, Hydra and the package, and what they built is then
  frozen (:func:`paused_collector`, :func:`collect_from_here`): 0.3-0.4 s of a short run's start-up;
- Hydra composes a command's config once, not twice (:func:`compose_once`): 0.6 s per composition of
  ``conf_train`` on 2 cores;
- a CUDA learner computes in TF32 and lets cuDNN pick its fastest algorithms (:func:`fast_cuda_math`): about 1.65x
  the IMPALA CNN learner's samples per second on an H200.

torch's thread count is the learner's to choose as the load changes (:mod:`maze_impala.machine`).
Nothing of the package is imported here.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from typing import Any

USER_CONFIGS = ("-cd", "--config-dir", "-cp", "--config-path")
"""Options that add configs the package does not ship."""


@contextlib.contextmanager
def paused_collector() -> Iterator[None]:
    """Python's cyclic garbage collector off until :func:`collect_from_here` (or the end of the block).

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


def collect_from_here() -> None:
    """The collector resumes, and what start-up built is set aside from its scans (``gc.freeze``, about 280,000
    objects): call it once a command's modules are imported and before it builds anything (before any actor process
    starts: a forked one inherits the collector's state). Only the first call of a process freezes: a multirun's
    later jobs would freeze what earlier jobs left as garbage."""
    if not gc.get_freeze_count():
        gc.freeze()
    gc.enable()


def mode_is_the_command_lines(argv: Sequence[str]) -> bool:
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

    if not mode_is_the_command_lines(argv) or not hasattr(Hydra, "get_mode"):
        return False
    Hydra.get_mode = _no_mode_in_the_config
    return True


def fast_cuda_math(device: str) -> None:
    """For a learner on ``device`` a CUDA GPU: TF32 matrix products and convolutions (10 bits of mantissa) and
    cuDNN's choice of the fastest algorithm for the update's fixed shapes. A CPU learner leaves them as they are."""
    if not device.startswith("cuda"):
        return
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
