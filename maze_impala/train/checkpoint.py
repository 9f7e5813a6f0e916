"""Checkpoints: written atomically, checked against the model they are loaded into."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn


class CheckpointMismatchError(ValueError):
    """A checkpoint was made for another model (other step keys, layers or sizes)."""


def model_signature(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes: what a checkpoint must match to load."""
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Save so that a crash mid-write leaves the previous checkpoint intact."""
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path | str, **modules: nn.Module) -> dict[str, Any]:
    """Load a checkpoint and the named modules' weights from it (e.g. ``policy=..., critic=...``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    state = torch.load(path, map_location="cpu", weights_only=False)
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
    return state
