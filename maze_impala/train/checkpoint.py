"""Checkpoints: written atomically, loaded without running code, checked against the model they are loaded into.

A checkpoint holds tensors, numbers, strings and plain containers only (the run's config
as a plain dict), so it loads with ``torch.load(weights_only=True)``: a file whose
unpickling would import or call anything is refused before it can run.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch
from torch import nn

from maze_impala.files import save_torch


class CheckpointMismatchError(ValueError):
    """A checkpoint was made for another model (other step keys, layers or sizes)."""


class UnsafeCheckpointError(ValueError):
    """A checkpoint holds more than tensors and plain data: loading it could run code, so it is refused."""


def model_signature(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes: what a checkpoint must match to load."""
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Save atomically and fsynced: a crash mid-write leaves the previous checkpoint intact."""
    save_torch(path, state)


def read_checkpoint(path: Path | str) -> dict[str, Any]:
    """The saved state, on the CPU; a clear error if there is no checkpoint at ``path`` or it is unsafe."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UnsafeCheckpointError(
            f"refused to load {path}: it holds objects other than tensors and plain data, and unpickling them "
            f"could run code ({reason}). maze_impala checkpoints never do; load only checkpoints you trust, and "
            "re-save this one with plain data if it is yours"
        ) from None


def load_checkpoint(path: Path | str, **modules: nn.Module) -> dict[str, Any]:
    """Load a checkpoint and the named modules' weights from it (e.g. ``policy=..., critic=...``)."""
    state = read_checkpoint(path)
    restore_modules(state, path, **modules)
    return state


def restore_modules(state: dict[str, Any], path: Path | str, **modules: nn.Module) -> None:
    """Load the named modules from ``state``, checking that it was made for them."""
    for name, module in modules.items():
        if name not in state:
            raise CheckpointMismatchError(f"{path} holds no {name!r} weights (it has {sorted(state)})")
        expected, found = model_signature(module), {k: tuple(v.shape) for k, v in state[name].items()}
        if expected != found:
            diff = sorted(set(expected.items()) ^ set(found.items()))[:6]
            raise CheckpointMismatchError(
                f"{path} was made for another {name}: parameters differ, e.g. {diff}. "
                "Load it with the env and model config of the run that wrote it."
            )
        module.load_state_dict(state[name])
