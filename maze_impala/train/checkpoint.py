"""Checkpoints: written atomically, loaded without running code (:mod:`maze_impala.play.spec` reads them),
checked against the model they are loaded into.

A checkpoint holds tensors, numbers, strings and plain containers only (the run's config
as a plain dict), so it loads with ``torch.load(weights_only=True)``: a file whose
unpickling would import or call anything is refused before it can run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from maze_impala.files import save_torch
from maze_impala.play.spec import (  # reading lives at the policy seam, below the actors
    CheckpointMismatchError,
    CorruptCheckpointError,
    UnsafeCheckpointError,
    model_signature,
    read_checkpoint,
    restore_modules,
)

OPPONENTS = "opponents"
"""The checkpoint key of a run's fixed opponents: name -> :meth:`~maze_impala.play.spec.PolicySpec.state_dict`,
so that a resumed run plays the opponents it trained and was judged against, whatever happened to their files."""

__all__ = [
    "OPPONENTS",
    "CheckpointMismatchError",
    "CorruptCheckpointError",
    "UnsafeCheckpointError",
    "model_signature",
    "read_checkpoint",
    "restore_modules",
    "save_checkpoint",
]


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Save atomically and fsynced: a crash mid-write leaves the previous checkpoint intact."""
    save_torch(path, state)
