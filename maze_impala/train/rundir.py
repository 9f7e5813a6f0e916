"""A run's directory: one run per directory, never overwritten by surprise, and resumed where its checkpoint stands."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from maze_impala.config import ConfigError
from maze_impala.config.base import flat_record
from maze_impala.events.tables import CsvTable
from maze_impala.run_files import (
    BEST_MODEL,
    CONFIG_YAML,
    CURVES_PNG,
    EVENT_LOG_DIR,
    KPI_CSV,
    KPI_SUMMARY_CSV,
    LAST_MODEL,
    STATS_CSV,
    TENSORBOARD_DIR,
)

RUN_FILES = (LAST_MODEL, BEST_MODEL, STATS_CSV, KPI_CSV)
"""Files whose presence means that a directory holds a run."""


RUN_TIME_FORMAT = "%Y-%m-%d_%H-%M-%S.%f"
"""A new run's folder name (``outputs/train/<time>``), the same for ``maze-run`` (its Hydra config) and ``train()``:
to the microsecond, so that runs started within a second of each other never share a folder."""


def new_run_dir(kind: str = "train") -> Path:
    """``outputs/<kind>/<now>``: where a run goes that is given no directory."""
    from datetime import datetime

    return Path("outputs", kind, datetime.now().strftime(RUN_TIME_FORMAT))


def claim_output_dir(output_dir: Path, overwrite: bool) -> None:
    """Refuse to train into a directory holding another run's files, unless ``overwrite`` (then remove them)."""
    found = [name for name in RUN_FILES if (output_dir / name).exists()]
    if found and not overwrite:
        raise ConfigError(
            f"{output_dir} holds another run ({', '.join(found)}); training there would replace it. Resume it "
            f"(resume={output_dir}, or train(..., resume_from=...)), choose another directory (hydra.run.dir=... or "
            "train(output_dir=...)), or pass overwrite=true (train(..., overwrite=True)) to replace that run"
        )
    for name in (*found, KPI_SUMMARY_CSV, CURVES_PNG):
        (output_dir / name).unlink(missing_ok=True)
    if found:
        shutil.rmtree(output_dir / TENSORBOARD_DIR, ignore_errors=True)
        shutil.rmtree(output_dir / EVENT_LOG_DIR, ignore_errors=True)
    output_dir.mkdir(parents=True, exist_ok=True)


def check_resumable_dir(run_dir: Path) -> None:
    """Raise :class:`ConfigError` if ``run_dir`` holds no checkpoint to continue from, saying why and what to do.

    Nothing is written or removed here: a refused resume leaves the directory as it was."""
    if not run_dir.is_dir():
        raise ConfigError(f"cannot resume {run_dir}: there is no such directory")
    if (run_dir / LAST_MODEL).is_file():
        return
    if (run_dir / CONFIG_YAML).is_file():  # a training run that stopped before its first checkpoint
        raise ConfigError(
            f"cannot resume {run_dir}: the run stopped before its first checkpoint ({LAST_MODEL}), so there is "
            f"nothing to continue from; {run_dir} is left as it was. Start the run again without resume= (its "
            f"{CONFIG_YAML} holds the config it was started with)"
        )
    raise ConfigError(f"cannot resume {run_dir}: it holds no {LAST_MODEL} (is it a training run's directory?)")


def check_more_epochs(run_dir: Path, done: int, n_epochs: int) -> None:
    """Refuse a resume whose ``algorithm.n_epochs`` leaves nothing to train: the run has ``done`` epochs already."""
    if n_epochs <= done:
        raise ConfigError(
            f"cannot resume {run_dir} with algorithm.n_epochs={n_epochs}: the run has trained "
            f"{done} epoch{'' if done == 1 else 's'} already, so nothing would train. algorithm.n_epochs is the "
            f"run's total: pass more than {done} (e.g. algorithm.n_epochs={2 * done}) to train it on"
        )


SAFE_TO_CHANGE = (
    "algorithm.n_epochs",
    "algorithm.patience",
    "algorithm.target_score",
    "algorithm.num_actors",
    "algorithm.num_learners",
    "algorithm.device",
    "runner.",
    "output.",
    "overwrite",
    "resume",
)
"""Keys a resumed run may change: how long it runs and where; not what it learns (the env, the model, the
algorithm's other fields, the seed). ``n_epochs`` stretches or shrinks the learning-rate schedule from
the current update on."""


def scalar_config(record: dict[str, Any]) -> dict[str, int | float | str | bool]:
    """A config record flattened (``algorithm.lr``) with every value a scalar (lists and others as text): what
    TensorBoard's hparams and the experiment trackers take."""
    return {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in flat_record(record).items()}


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The keys whose values differ: ``{key: (saved, current)}``."""
    old, new = flat_record(saved), flat_record(current)
    return {k: (old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)}


BEHAVIOUR_BEFORE = {
    "algorithm.normalize_advantages": False,
    "algorithm.continuous_entropy_coef": None,
    "algorithm.value_normalization": "off",
    "model.init_log_std": 0.0,
    "model.action_bounds": "clip",
}
"""Keys added with a default that is not the behaviour of the releases before them: their value in a run of such a
release, which lacks them."""


RUN_OWN = ("resume", "overwrite")
"""Keys of the command itself, never taken from the run."""


def given_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys a command line's ``overrides`` give (``algorithm.lr=0.1`` -> ``algorithm.lr``; a group
    choice such as ``env=cutting`` -> ``env``, which gives every key under it); Hydra's own keys left out."""
    keys = set()
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0].strip()
        if key and not key.startswith("hydra"):
            keys.add(key)
    return keys


def _given(key: str, given: set[str]) -> bool:
    return any(key == g or key.startswith(g + ".") for g in given)


def run_values(saved: dict[str, Any], current: dict[str, Any], given: set[str] | None = None) -> dict[str, Any]:
    """What a resumed run keeps of its own config: every key of ``current`` that the command did not give, at the
    run's value (or, for a key the run lacks, :data:`BEHAVIOUR_BEFORE`'s) where the two differ. ``given``: the keys
    the command line gave (:func:`given_keys`); None (``train(resume_from=...)`` from Python): those whose value
    differs from today's default. A plain resume therefore trains to the run's own ``n_epochs`` with the run's
    settings, however the defaults have moved since; a value given that differs from the run's is refused
    (:func:`check_resumable`) unless it is one a resume may change. Flat keys (``algorithm.gamma``)."""
    from maze_impala.config import TrainingConfig
    from maze_impala.config.base import to_record

    recorded, now, defaults = flat_record(saved), flat_record(current), flat_record(to_record(TrainingConfig()))
    kept: dict[str, Any] = {}
    for key, value in now.items():
        if key in RUN_OWN or value == "auto":  # "auto": resolved for the run (model.image_encoder), as it was
            continue
        if _given(key, given) if given is not None else (key not in defaults or value != defaults[key]):
            continue
        if key in recorded and recorded[key] != value:
            kept[key] = recorded[key]
        elif key not in recorded and key in BEHAVIOUR_BEFORE and BEHAVIOUR_BEFORE[key] != value:
            kept[key] = BEHAVIOUR_BEFORE[key]
    return kept


def check_resumable(saved: dict[str, Any], current: dict[str, Any], run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """The safe changes of a resume; raises :class:`ConfigError` naming every unsafe one.

    A key that the run's config lacks (the run was made by an earlier release, before the key existed) is safe
    at the behaviour of the releases before it: its default, or :data:`BEHAVIOUR_BEFORE`'s value."""
    from maze_impala.config import TrainingConfig
    from maze_impala.config.base import to_record

    changes = config_changes(saved, current)
    recorded, defaults = flat_record(saved), flat_record(to_record(TrainingConfig()))
    added = {k for k, (_, new) in changes.items()
             if k not in recorded and k in defaults and new == BEHAVIOUR_BEFORE.get(k, defaults[k])}  # fmt: skip
    unsafe = {k: v for k, v in changes.items() if not k.startswith(SAFE_TO_CHANGE) and k not in added}
    if unsafe:
        was = lambda key, value: repr(value) if key in recorded else "absent"  # noqa: E731
        listed = "; ".join(f"{k}: {was(k, old)} in the run, {new!r} now" for k, (old, new) in unsafe.items())
        raise ConfigError(
            f"cannot resume {run_dir} with another config ({listed}). Resume with the run's config (only "
            f"{', '.join(k.rstrip('.') for k in SAFE_TO_CHANGE[:-2])} may change), or start a new run"
        )
    return changes


def continue_tables(output_dir: Path, epoch: int) -> list[dict[str, float]]:
    """Drop the rows of epochs after ``epoch`` (written after the checkpoint a run resumes from) from
    ``stats.csv``, ``kpis.csv`` and the event logs, so that no row is duplicated when those epochs run again;
    returns the statistics of the epochs kept (the run's history)."""
    covered = lambda row: int(float(row["epoch"])) <= epoch  # noqa: E731
    stats = CsvTable(output_dir / STATS_CSV)
    stats.truncate(covered)
    CsvTable(output_dir / KPI_CSV).truncate(covered)
    for path in (output_dir / EVENT_LOG_DIR).glob("*.csv"):
        CsvTable(path).truncate(covered)
    ignored = ("epoch", "env_steps")
    return [{k: float(v) for k, v in row.items() if k not in ignored and v != ""} for row in stats.rows()]
