"""What ``maze-run`` says: lines for the user that its log keeps too (:func:`say`, :class:`ConsoleWarnings`), and
when a training run ends or stops, why it ended early and the commands that continue it or the rest of its sweep
(quoted for Hydra and for the shell)."""

from __future__ import annotations

import logging
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from maze_impala.config import TrainingConfig
from maze_impala.config.overrides import override_key
from maze_impala.run_files import LAST_MODEL

log = logging.getLogger("maze_impala")


def run_log() -> Path | None:
    """The file the run logs to, where it has one."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            return Path(handler.baseFilename)
    return None


def say(message: str, error: bool = False, interrupt: bool = False) -> None:
    """Print a line for the user (an ``error`` or ``interrupt`` to stderr) and keep it in the run's log, where a
    user's interrupt is a warning, not an error."""
    level = logging.WARNING if interrupt else logging.ERROR if error else logging.INFO
    log.log(level, "%s", message, extra={"printed": True})
    error = error or interrupt
    print(message, file=sys.stderr if error else sys.stdout, flush=True)


class ConsoleWarnings(logging.Handler):
    """The run's warnings (an actor restarted, training starved) on the console as well as in its log, as
    ``maze-run: ...`` lines; what :func:`say` printed already is not printed again."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        if not getattr(record, "printed", False):
            print(f"maze-run: {record.getMessage()}", file=sys.stderr, flush=True)


def why_stopped(config: TrainingConfig, result: Any) -> str:
    """Why a run ended before its ``n_epochs``: `` (early: ...)``, or nothing for a run that trained them all."""
    algorithm = config.algorithm
    if not result.stopped_early:
        return ""
    if algorithm.target_score is not None and result.best_eval_return >= algorithm.target_score:
        return f" (early: an evaluation reached algorithm.target_score={algorithm.target_score:g})"
    return f" (early: no better evaluation in algorithm.patience={algorithm.patience} epochs)"


def plural(count: int, noun: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def holds(output_dir: Path, saved_epoch: int, pending: bool = False) -> str:
    """What the run's ``model_last.pt`` holds, in the epochs its tables show."""
    if not pending:
        return f"{output_dir / LAST_MODEL} holds epoch {saved_epoch}"
    done = f"epoch {saved_epoch - 1} and " if saved_epoch > 1 else ""
    return (
        f"{output_dir / LAST_MODEL} holds {done}the training of epoch {saved_epoch}, whose evaluation and table run "
        "first when the run resumes"
    )


def interrupted(output_dir: Path, saved_epoch: int | None, overrides: Sequence[str], pending: bool = False) -> str:
    """What an interrupted training run says: the command that continues it from its checkpoint, or, where no epoch
    ended before the interrupt (so there is no checkpoint), that there is nothing to resume and how to start again."""
    if saved_epoch is None:
        kept = [o for o in overrides if not override_key(o).startswith(("resume", "hydra.run.dir"))]
        again = [*kept, f"hydra.run.dir={hydra_value(str(output_dir))}"]  # the same directory: it holds no results
        return (
            f"maze-run: interrupted before the first checkpoint: no epoch ended, so there is nothing to resume "
            f"(what the run logged is in {output_dir}). Start it again with\n  {_command(again)}"
        )
    return (
        f"maze-run: interrupted; {holds(output_dir, saved_epoch, pending)}; continue the run "
        f"with\n  {resume_command(output_dir, overrides)}"
    )


def score_name(config: TrainingConfig) -> str:
    """What ``model_best.pt`` was chosen on, with the episodes the choice rests on."""
    evaluation = config.algorithm.rollout_evaluator
    episodes = plural(evaluation.n_episodes, "episode")
    if evaluation.opponent is None:
        return f"return (mean of {episodes})"
    return f"score against {evaluation.opponent} (win + draw / 2, {episodes} per seat)"


def resume_command(output_dir: Path, overrides: Sequence[str]) -> str:
    """The command that continues the run in ``output_dir``: its own overrides, and ``resume=`` the directory
    (quoted for Hydra where its name holds ``=`` or ``,``, as a sweep job's does, and for the shell)."""
    kept = [o for o in overrides if not override_key(o).startswith(("hydra.", "resume"))]
    return _command([*kept, f"resume={hydra_value(str(output_dir))}"])


def hydra_value(text: str) -> str:
    """``text`` as a value Hydra's override grammar reads back as ``text``: as it is, or quoted where it holds
    characters the grammar gives a meaning (``=`` and ``,`` in a sweep job's folder name, spaces, brackets)."""
    if re.fullmatch(r"[\w./\-+:~@%]+", text):
        return text
    quote = '"' if '"' not in text else "'"  # double: the shell's single quotes then wrap it cleanly
    return quote + text.replace(quote, "\\" + quote) + quote


def sweep_rest(sweep_dir: Path, job: int, argv: Sequence[str]) -> str:
    """What an interrupted sweep (``argv``: its command line) says about the jobs after ``job``: a command for each,
    into the sweep's folder, and how to sum the sweep up."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweep = [
        a
        for a in argv
        if "=" in a and not a.startswith("-") and not override_key(a).startswith(("hydra.sweep", "resume"))
    ]
    jobs = [
        j
        for batch in BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(sweep), None)
        for j in batch
    ]
    rest = jobs[job + 1 :]
    folder = f"hydra.sweep.dir={hydra_value(str(sweep_dir))}"
    lines = [f"maze-run: the sweep in {sweep_dir} stopped in job {job + 1} of {len(jobs)}."]
    if rest:
        lines.append(
            f"maze-run: the {plural(len(rest), 'job')} after it did not run; each runs into the sweep's "
            "folder with (the summary is written again after each):"
        )
        lines += ["  " + _command(["-m", *j, folder]) for j in rest[:10]]
        if len(rest) > 10:
            lines.append(f"  ... and {len(rest) - 10} more, likewise")
    lines.append(f"maze-run: a summary of the jobs that finished: maze-plot {shlex.quote(str(sweep_dir))} --summary")
    return "\n".join(lines)


def _command(overrides: Sequence[str]) -> str:
    """``maze-run`` with this command's config directories, ``-cn conf_train`` and ``overrides``, quoted for a shell."""
    config_dirs = [f"--config-dir {shlex.quote(d)}" for d in _config_dirs(sys.argv)]
    return " ".join(["maze-run", *config_dirs, "-cn conf_train", *map(shlex.quote, overrides)])


def _config_dirs(argv: Sequence[str]) -> list[str]:
    found = []
    for i, arg in enumerate(argv):
        if arg in ("-cd", "--config-dir") and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--config-dir="):
            found.append(arg.split("=", 1)[1])
    return found
