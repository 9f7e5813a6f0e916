"""What ``maze-run`` refuses before Hydra composes or writes anything: a config group option that does not exist
(``env=cartpole``), and an output directory that cannot be written (a read-only filesystem, ``/proc``, a file where
a folder should be). Each is a :class:`~maze_impala.config.ConfigError`: one line and exit 2, nothing left behind."""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from maze_impala.config import ConfigError
from maze_impala.config.overrides import override_key
from maze_impala.config.workloads import config_dir

SWEEP_CHOICE = ","
"""A multirun's options of one group: ``env=cutting,coordination``."""


def config_dirs(argv: Sequence[str]) -> list[Path]:
    """The shipped configs and the user's ``--config-dir`` (``-cd``), where Hydra looks for group options."""
    dirs = [config_dir()]
    for i, arg in enumerate(argv):
        if arg in ("-cd", "--config-dir") and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
    return dirs


def check_groups(argv: Sequence[str]) -> None:
    """Refuse a group option (``env=...``, ``runner=...``) that no config directory holds, naming the options."""
    dirs = config_dirs(argv)
    groups = {p.name for d in dirs if d.is_dir() for p in d.iterdir() if p.is_dir() and not p.name.startswith("_")}
    problems = []
    for arg in argv:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key not in groups or value in ("", "null"):
            continue
        options = sorted({f.stem for d in dirs for f in (d / key).glob("*.yaml")})
        for choice in value.split(SWEEP_CHOICE):
            if choice not in options:
                close = difflib.get_close_matches(choice, options, n=1)
                hint = f" (did you mean {key}={close[0]}?)" if close else ""
                problems.append(f"{key}={choice} is no {key} config{hint}; the {key} configs: {', '.join(options)}")
    if problems:
        raise ConfigError("; ".join(problems))


def check_output_dir(argv: Sequence[str], default: Path) -> None:
    """Refuse an output directory that cannot be made and written: the one ``hydra.run.dir`` (or, for a multirun,
    ``hydra.sweep.dir``) names, else ``default`` (``outputs/`` of the working directory). A folder is made and
    removed again in its nearest existing parent, the one real test of a read-only filesystem, ``/proc`` or a
    full disk's quota."""
    key = "hydra.sweep.dir" if {"-m", "--multirun"} & set(argv) else "hydra.run.dir"
    given = [a.split("=", 1)[1] for a in argv if override_key(a) == key]
    target = Path(given[-1]) if given and "${" not in given[-1] else default
    target = target if target.is_absolute() else Path.cwd() / target
    parent = target
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    named = f"{key}={target}" if given else f"the outputs' directory {target}"
    if not parent.is_dir():
        raise ConfigError(
            f"{named} cannot be made: {parent} is a file, not a folder; choose another directory ({key}=...)"
        )
    if target.is_dir() and not os.access(target, os.W_OK | os.X_OK):
        raise ConfigError(f"{named} is not writable; choose another directory ({key}=...)")
    try:
        probe = tempfile.mkdtemp(prefix=".maze-run-probe-", dir=parent if not target.is_dir() else target)
        os.rmdir(probe)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(
            f"{named} cannot be written ({reason} in {parent}); choose another directory ({key}=...)"
        ) from None
