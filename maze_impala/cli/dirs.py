"""What ``maze-run`` keeps, removes and lists of a run's directory.

A directory that existed before the command (a resumed run's, one named by ``hydra.run.dir=``) is never removed,
and a refusal writes nothing into it; only a directory the command made itself, holding nothing but what a start
writes, is removed when the start fails (a configuration error, Ctrl-C before the actors started).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from maze_impala.run_files import (
    CONFIG_YAML,
    CURVES_PNG,
    EVENT_LOG_DIR,
    FAILED,
    KPI_CSV,
    KPI_SUMMARY_CSV,
    LAST_MODEL,
    LOCK_FILE,
    STATS_CSV,
    TENSORBOARD_DIR,
)

RESULTS = (STATS_CSV, LAST_MODEL, KPI_SUMMARY_CSV)
"""Files of a run that got somewhere: a training run's statistics and model, a rollout's summary."""
STARTED_ONLY = {
    ".hydra",
    "train.log",
    "rollout.log",
    "export.log",
    LOCK_FILE,
    CONFIG_YAML,
    TENSORBOARD_DIR,
    EVENT_LOG_DIR,
    KPI_CSV,
    KPI_SUMMARY_CSV,
    CURVES_PNG,
}
"""What a run directory can hold before the run's first epoch ends (Hydra's record and the job's log too); a failed
start leaves no such directory."""


DEFAULT_PARENTS = {"train", "rollout", "export", "outputs"}
"""The folders of Hydra's default run directories (``outputs/train/<time>``): removed with a failed start's
directory when it leaves them empty."""

KEPT: set[Path] = set()
"""Directories that existed before this command started: a resumed run's, an explicit ``hydra.run.dir`` (and the
runs already in an explicit ``hydra.sweep.dir``). This command never removes them, and a refusal leaves them as they
were (nothing is written into them, not even a log line)."""


def owned(run_dir: Path) -> bool:
    """Whether this command made ``run_dir`` (a new, time-stamped directory): only such a one is ever removed."""
    return run_dir.resolve() not in KEPT


def keep_existing_dirs(argv: Sequence[str]) -> None:
    """Remember the directories named on the command line that exist already (see :data:`KEPT`)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        value = override_value(arg) if value else value
        if key in ("resume", "hydra.run.dir") and value and Path(value).is_dir():
            KEPT.add(Path(value).resolve())
        elif key == "hydra.sweep.dir" and value and Path(value).is_dir():
            KEPT.update(p.resolve() for p in Path(value).iterdir() if p.is_dir())


def override_value(override: str) -> str:
    """The value of ``key=value`` as Hydra reads it (its quotes removed); the raw text if Hydra cannot parse it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return str(OverridesParser.create().parse_override(override).value())
    except Exception:  # Hydra itself reports the override's error when it composes
        return override.split("=", 1)[1]


def detach_log(run_dir: Path) -> None:
    """Stop logging into ``run_dir``'s log file (before it is removed, or when a refusal must leave it as it was)."""
    for handler in list(logging.getLogger().handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).is_relative_to(run_dir):
            logging.getLogger().removeHandler(handler)
            handler.close()


def discard_started_run(run_dir: Path) -> bool:
    """Remove ``run_dir`` if this command made it and it holds nothing but what a run writes before its first epoch
    ends (a failed start); whether it did. A directory that existed before (a resumed run's, or one named by
    ``hydra.run.dir``), or one with a model, statistics or anything of a user's, is kept."""
    if not owned(run_dir) or not run_dir.is_dir() or not {p.name for p in run_dir.iterdir()} <= STARTED_ONLY:
        return False
    detach_log(run_dir)  # the run's log file goes with its directory
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in list(run_dir.resolve().parents)[:2]:  # outputs/rollout/ and outputs/, if the start made them empty
        if parent.name not in DEFAULT_PARENTS:
            break
        try:
            parent.rmdir()  # only an empty one
        except OSError:
            break
    return True


def listing(directory: Path) -> str:
    """What a run wrote into ``directory``, as it is there: ``config.yaml, kpis.csv, ..., videos/``."""
    entries = [p for p in directory.iterdir() if not p.name.startswith(".") and p.name != FAILED]
    return ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in entries))
