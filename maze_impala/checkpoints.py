"""Checkpoints: written atomically, read without running code, checked against the model they are loaded into.

A checkpoint holds tensors, numbers, strings and plain containers only (the run's config as a plain dict), so it
loads with ``torch.load(weights_only=True)``: a file whose unpickling would import or call anything is refused
before it can run. This module is the one place that reads a checkpoint file; a path that needs a checkpoint's
policy and its critic reads the file once (:class:`Checkpoint`) and takes both from it.
"""

from __future__ import annotations

import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maze_impala.config import ConfigError
from maze_impala.files import save_torch
from maze_impala.run_files import BEST_MODEL, LAST_MODEL

if TYPE_CHECKING:  # torch is imported where it is used: an actor that acts in numpy imports this module, not torch
    from torch import nn

OPPONENTS = "opponents"
"""The checkpoint key of a run's fixed opponents: name -> :meth:`~maze_impala.play.spec.PolicySpec.state_dict`,
so that a resumed run plays the opponents it trained and was judged against, whatever happened to their files."""


class CheckpointMismatchError(ValueError):
    """A checkpoint was made for another model (other step keys, layers or sizes)."""


class UnsafeCheckpointError(ValueError):
    """A checkpoint holds more than tensors and plain data: loading it could run code, so it is refused."""


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be read: truncated (a copy cut short, a full disk) or not a checkpoint."""


def model_signature(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes: what a checkpoint must match to load."""
    return {name: tuple(t.shape) for name, t in module.state_dict().items()}


def read_checkpoint(path: Path | str) -> dict[str, Any]:
    """The saved state, on the CPU; a clear error if there is no checkpoint at ``path`` or it is unsafe."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, OSError, EOFError, zipfile.BadZipFile) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        size = Path(path).stat().st_size
        raise CorruptCheckpointError(
            f"cannot read the checkpoint {path} ({size:,} bytes): it is truncated or corrupt ({reason}). Use another "
            f"checkpoint of the run ({LAST_MODEL}, {BEST_MODEL}) or train again; maze_impala writes its checkpoints "
            "atomically, so a torn one comes from a copy or another program"
        ) from None
    except pickle.UnpicklingError as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UnsafeCheckpointError(
            f"refused to load {path}: it holds objects other than tensors and plain data, and unpickling them "
            f"could run code ({reason}). maze_impala checkpoints never do; load only checkpoints you trust, and "
            "re-save this one with plain data if it is yours"
        ) from None


def restore_modules(state: dict[str, Any], path: Path | str, **modules: nn.Module) -> None:
    """Load the named modules from ``state``, checking that it was made for them."""
    for name, module in modules.items():
        saved = _with_identity_statistics(module, _saved(state, name, path))
        expected, found = model_signature(module), {k: tuple(v.shape) for k, v in saved.items()}
        if expected != found:
            raise CheckpointMismatchError(
                f"{path} was made for another {name}: {_first_difference(found, expected)}. Load it with the env "
                f"and model config of the run that wrote it{_run_env(state)}."
            )
        module.load_state_dict(saved)


def _saved(state: dict[str, Any], name: str, path: Path | str) -> dict[str, Any]:
    """The state dict ``state`` saved as ``name``, or a clear error naming what it holds."""
    if name not in state:
        raise CheckpointMismatchError(f"{path} holds no {name!r} weights (it has {sorted(state)})")
    return state[name]


NEWER_BUFFERS = ("value_norms.",)
"""State a checkpoint written before it existed lacks, whose fresh value (a critic read in the env's units) is what
that checkpoint meant."""


def _with_identity_statistics(module: nn.Module, saved: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with the entries of :data:`NEWER_BUFFERS` that it lacks taken from ``module`` as built."""
    fresh = module.state_dict()
    missing = {k: v for k, v in fresh.items() if k not in saved and k.startswith(NEWER_BUFFERS)}
    return {**saved, **missing} if missing else saved


def _first_difference(saved: dict[str, tuple[int, ...]], model: dict[str, tuple[int, ...]]) -> str:
    """The first layer where a checkpoint's parameters and a model's differ, in words, each side named."""
    for name in [*saved, *(n for n in model if n not in saved)]:
        if name not in model:
            return f"the checkpoint has a parameter {name} {list(saved[name])} that this model lacks"
        if name not in saved:
            return f"this model has a parameter {name} {list(model[name])} that the checkpoint lacks"
        if saved[name] != model[name]:
            return (
                f"the first differing layer is {name}: {list(saved[name])} in the checkpoint, "
                f"{list(model[name])} in this model"
            )
    return "their parameters differ"


def _run_env(state: dict[str, Any]) -> str:
    """`` (its env: ...)`` where the checkpoint recorded its run's env."""
    env = (state.get("config") or {}).get("env")
    return f" (its env: {env})" if env else ""


MODEL_BEFORE = {"action_bounds": "clip"}
"""Model keys added with a default that is not how the policies of the records before them act: their value in a
record that lacks them."""


def run_record(state: dict[str, Any], path: Path | str) -> dict[str, Any]:
    """The run config a checkpoint recorded (env, model, ...), or a clear error; a model key its release lacked is
    given as that release acted (:data:`MODEL_BEFORE`)."""
    record = state.get("config")
    if record is None:
        raise ConfigError(f"{path} holds no run config; was it written by maze_impala training?")
    if isinstance(record.get("model"), dict):
        record = {**record, "model": {**MODEL_BEFORE, **record["model"]}}
    return record


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Save atomically and fsynced: a crash mid-write leaves the previous checkpoint intact."""
    save_torch(path, state)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file, read once: its path (for messages) and its state."""

    path: Path
    state: dict[str, Any]

    @classmethod
    def read(cls, path: Path | str) -> Checkpoint:
        """The checkpoint at ``path`` (:func:`read_checkpoint`'s checks and errors)."""
        return cls(Path(path), read_checkpoint(path))

    @property
    def record(self) -> dict[str, Any]:
        """The run config it recorded (env, model, ...), or a clear error."""
        return run_record(self.state, self.path)

    def weights(self, name: str) -> dict[str, Any]:
        """The state dict saved as ``name`` (``policy``, ``critic``), or a clear error naming what it holds."""
        return dict(_saved(self.state, name, self.path))
