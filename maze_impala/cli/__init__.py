"""``maze-run``: the Hydra command line, e.g. ``maze-run -cn conf_train algorithm=impala runner=local``.

Every run writes ``<job>.log`` (``train.log`` or ``rollout.log``) into its output directory:
what the console showed, plus the full traceback of a failure, which the console shows
as one line. Hydra and OmegaConf are imported when the command runs: actor processes re-import the
``maze-run`` script, and need neither.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.cli.checks import check_groups, check_output_dir
from maze_impala.cli.dirs import (
    RESULTS,
    detach_log,
    discard_started_run,
    keep_existing_dirs,
    listing,
    override_value,
    owned,
)
from maze_impala.cli.env import env_config, rollout_env, without_default_env_keys
from maze_impala.cli.messages import (
    ConsoleWarnings,
    holds,
    hydra_value,
    interrupted,
    plural,
    resume_command,
    run_log,
    say,
    score_name,
    sweep_rest,
    why_stopped,
)
from maze_impala.config import ConfigError, ExportConfig, RolloutConfig, TrainingConfig, from_mapping
from maze_impala.config.base import import_hint
from maze_impala.config.overrides import check_overrides as overrides_check
from maze_impala.config.workloads import config_dir
from maze_impala.core import TrainingError
from maze_impala.files import RunDirInUseError, atomic_write_text
from maze_impala.run_files import FAILED, KPI_CSV
from maze_impala.startup import compose_once, freeze_and_collect, paused_collector

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONFIGS = {"conf_train": TrainingConfig, "conf_rollout": RolloutConfig, "conf_export": ExportConfig}
"""The primary configs and the dataclass whose fields are their keys."""
log = logging.getLogger("maze_impala")


RUN_NAME_LIMIT = 200
"""The longest multirun job folder (bytes) named by its overrides (file systems allow 255); a longer one is named
``job_<number>``."""


def run_name(overrides: str, number: int, sweep_dir: str = "") -> str:
    """A multirun job's folder: its overrides (``seed=2``), or ``job_<number>`` where they are too long for a file
    name (the job's ``.hydra/overrides.yaml`` keeps them, and ``maze-plot`` labels the runs by them). In a sweep
    folder that holds jobs already (a continued Optuna study), the next free number."""
    if len(overrides.encode()) <= RUN_NAME_LIMIT:
        return overrides
    number = int(number)
    while sweep_dir and (Path(sweep_dir) / f"job_{number}").exists():
        number += 1
    return f"job_{number}"


def register_schemas() -> None:
    """The dataclasses as the schemas of the primary configs (``conf_train`` and ``conf_rollout`` start from them),
    so that Hydra knows every key and its type while it composes; not a config group, so ``--help`` lists none."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for name, schema in CONFIGS.items():
        store.store(name=f"{name}_schema", node=schema)


def to_training_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> TrainingConfig:
    """Validate a composed ``conf_train`` into a :class:`TrainingConfig`; raises ConfigError naming the bad key.

    ``overrides`` are the command line's: an ``env._target_=...`` without an ``env=`` group
    replaces the default env config instead of merging into it (see :func:`env_config`).
    """
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    data["env"] = env_config(cfg, overrides)
    return from_mapping(TrainingConfig, data)


def to_rollout_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> RolloutConfig:
    """Validate a composed ``conf_rollout`` into a :class:`RolloutConfig`."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    data["env"] = env_config(cfg, overrides) if cfg.get("env") is not None else None
    return from_mapping(RolloutConfig, data)


def check_overrides(config_name: str, overrides: Sequence[str]) -> None:
    """Refuse, before Hydra composes, every unknown key and plain value of the wrong type among ``overrides`` of
    the primary config ``config_name`` (see :func:`maze_impala.config.overrides.check_overrides`)."""
    schema = CONFIGS.get(config_name)
    if schema is not None:
        overrides_check(schema, overrides, rollout=config_name == "conf_rollout")


def _fail(error: BaseException, code: int = 2, run_dir: Path | None = None) -> None:
    """Print a configuration or env error the way users can act on, and exit. Of a run that never finished an
    epoch (``run_dir`` holding no results): a configuration error (code 2) leaves no directory; any other failure
    leaves it marked failed (a ``FAILED`` file holding the error; the traceback is in the run's log)."""
    from hydra.errors import InstantiationException

    if isinstance(error, InstantiationException):  # the env's _target_ raised; show its own message
        cause = error.__cause__ or error
        target = re.search(r"'([\w]+(?:\.[\w]+)+)'", f"{error} {cause}")
        hint = import_hint(target.group(1), error) if target else ""
        said = " ".join(str(cause).split())  # Hydra's message spans lines; the console shows one
        message = f"cannot build the env: {type(cause).__name__}: {said}{hint}"
    elif isinstance(error, ConfigError):
        message = f"invalid configuration: {error}"
    elif isinstance(error, TrainingError):  # its message names the epoch and the cause
        message = f"training failed in {error}"
    else:
        message = f"{type(error).__name__}: {error}"
    refused = run_dir is not None and code == 2 and not owned(run_dir)
    if refused:  # a directory of before this command, refused: left exactly as it was, its log included
        detach_log(run_dir)
    log_file = run_log()
    if log_file is not None:  # the traceback into the run's log; a refusal detached it (and prints no traceback)
        log.error("%s", message, exc_info=error, extra={"printed": True})
    first = message.strip().splitlines()[0] if message.strip() else type(error).__name__
    where = f" (the traceback is in {log_file})" if log_file and not isinstance(error, ConfigError) else ""
    if refused:
        where = f" ({run_dir} is left as it was)"
    elif run_dir is not None and code == 2 and discard_started_run(run_dir):
        where = f" (nothing ran: {run_dir} was removed)"
    elif run_dir is not None and run_dir.is_dir() and not any((run_dir / name).exists() for name in RESULTS):
        atomic_write_text(run_dir / FAILED, f"{first}\n")
    print(f"maze-run: {first}{where}", file=sys.stderr)
    sys.exit(code)


def _rollout(cfg: DictConfig, output_dir: Path, overrides: Sequence[str]) -> None:
    from hydra.errors import InstantiationException

    try:
        config = to_rollout_config(cfg, overrides)
    except (ConfigError, ValueError, TypeError) as error:
        _fail(error, run_dir=output_dir)
    what = (
        plural(config.n_episodes, "episode")
        if config.opponent is None
        else (f"{plural(config.n_episodes, 'game')} per seat against {config.opponent}")
    )
    say(f"maze-run: rollout of {what}; outputs go to {output_dir}")
    try:
        from maze_impala.evaluate.rollout import rollout  # torch: seconds, in which a Ctrl-C is handled below

        freeze_and_collect()
        rollout(config, output_dir)
    except KeyboardInterrupt as interrupt:
        kept = f"; the episodes played are in {output_dir / KPI_CSV}" if (output_dir / KPI_CSV).is_file() else ""
        say(f"maze-run: interrupted{kept}", interrupt=True)
        sys.exit(_exit_code(interrupt))
    except (InstantiationException, ConfigError) as error:
        _fail(error, run_dir=output_dir)
    except Exception as error:  # an env or worker failure: one line here, the traceback in the log
        _fail(error, 1, run_dir=output_dir)
    say(f"maze-run: outputs in {output_dir} ({listing(output_dir)})")


def _train(cfg: DictConfig, output_dir: Path, overrides: Sequence[str], sweep: tuple[Path, int] | None = None) -> float:
    """Train, saying how a run that stops can go on (``sweep``: the sweep's folder and this job's number, if it is
    one)."""
    from hydra.errors import InstantiationException

    try:
        config = to_training_config(cfg, overrides)
        from maze_impala.train.rundir import given_keys
        from maze_impala.train.setup import build_trainer  # torch: seconds, in which a Ctrl-C is handled below

        freeze_and_collect()  # before any actor process starts: a forked one inherits the collector's state
        trainer = build_trainer(config, output_dir, given_keys(overrides) if config.resume else None)
    except (InstantiationException, ConfigError, ValueError, TypeError, NotImplementedError) as error:
        _fail(error, run_dir=output_dir)
    except RunDirInUseError as error:  # another live run's directory: left as it is, its log included
        detach_log(output_dir)
        _fail(error, 2)  # a refusal: nothing ran, nothing changed
    except KeyboardInterrupt as interrupt:  # the build starts the actors; it stops them before this
        removed = discard_started_run(output_dir)
        say(
            f"maze-run: interrupted before training started{f' ({output_dir} was removed)' if removed else ''}",
            interrupt=True,
        )
        sys.exit(_exit_code(interrupt))
    except Exception as error:  # e.g. a Ray cluster that cannot be joined
        _fail(error, 1, run_dir=output_dir)
    say(f"maze-run: training; outputs go to {output_dir}")
    try:
        result = trainer.train()  # stops every actor process on success, error and interruption
    except KeyboardInterrupt as interrupt:
        say(interrupted(output_dir, trainer.saved_epoch, overrides, trainer.saved_pending), interrupt=True)
        if sweep is not None:
            say(sweep_rest(*sweep, sys.argv[1:]), interrupt=True)
        sys.exit(_exit_code(interrupt))
    except Exception as error:  # an env, actor or learner failure: one line here, the traceback in the log
        if trainer.saved_epoch is not None:  # what was learnt is kept: say how to go on once the cause is fixed
            say(
                f"maze-run: {holds(output_dir, trainer.saved_epoch, trainer.saved_pending)}; continue the run "
                f"with\n  {resume_command(output_dir, overrides)}",
                error=True,
            )
        _fail(error, 1, run_dir=output_dir)  # one that failed in its first epoch leaves no directory
    score = trainer.evaluator.score  # the objective of a sweeper that optimises (hydra/sweeper=impala_search)
    say(
        f"maze-run: done after {plural(result.epochs, 'epoch')}{why_stopped(config, result)}, "
        f"{result.env_steps:,} env steps, "
        f"best evaluation {score_name(config)} {result.best_eval_return:.2f}.\n"
        f"maze-run: outputs in {output_dir} ({listing(output_dir)})"
    )
    return score


def _run(cfg: DictConfig) -> float | None:
    """One job; a training run returns its final evaluation's score (what an optimising sweeper maximises)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    if not any(isinstance(handler, ConsoleWarnings) for handler in log.handlers):
        log.addHandler(ConsoleWarnings())
    overrides = list(hydra_cfg.overrides.task)
    if hydra_cfg.job.config_name == "conf_rollout":
        _rollout(cfg, output_dir, overrides)
    elif hydra_cfg.job.config_name == "conf_export":
        _export(cfg, output_dir)
    else:
        sweep = (Path(hydra_cfg.sweep.dir), hydra_cfg.job.num) if hydra_cfg.mode == RunMode.MULTIRUN else None
        return _train(cfg, output_dir, overrides, sweep)
    return None


def _export(cfg: DictConfig, output_dir: Path) -> None:
    from omegaconf import OmegaConf

    try:
        config = from_mapping(ExportConfig, OmegaConf.to_container(cfg, resolve=True))
        from maze_impala.deploy.export import export_run

        say(f"maze-run: {export_run(config.input_dir or '', config.checkpoint, config.format, output_dir)}")
    except KeyboardInterrupt as interrupt:
        say("maze-run: interrupted", interrupt=True)
        sys.exit(_exit_code(interrupt))
    except (ConfigError, ValueError, FileNotFoundError) as error:  # nothing was exported: a refusal
        _fail(error if isinstance(error, ConfigError) else ConfigError(str(error)), run_dir=output_dir)


class Interrupted(KeyboardInterrupt):
    """A signal that stops the run like Ctrl-C; the process exits with 128 + its number (130, 143)."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(f"signal {signum}")
        self.exit_code = 128 + signum


def _raise_interrupt(signum: int, frame: object) -> None:
    raise Interrupted(signum)


def _exit_code(interrupt: KeyboardInterrupt) -> int:
    return interrupt.exit_code if isinstance(interrupt, Interrupted) else 130


USAGE = """usage: maze-run -cn CONFIG [key=value ...]

  maze-run -cn conf_train algorithm=impala [env=...] [runner=local|dev] [key=value ...]   train
  maze-run -cn conf_rollout input_dir=<training output dir> [n_episodes=N] [runner=dev|local] evaluate
  maze-run -cn conf_rollout policy=random_policy env=<env>                                    random baseline
  maze-run -cn conf_export input_dir=<training output dir> [format=onnx|numpy]                 deploy (ONNX)
  maze-run -cn conf_train --cfg job          the composed config, without running
  maze-run -cn conf_train --help             the config groups and the composed config
  maze-run -cn conf_train --config-dir DIR   also look for configs (e.g. DIR/env/my_env.yaml) in DIR

Config groups (maze_impala/conf): {groups}
The keys of conf_train are the fields of maze_impala.config.TrainingConfig, those of conf_rollout the fields of
maze_impala.config.RolloutConfig; an unknown key fails with the valid ones."""


def _groups() -> str:
    root = config_dir()
    groups = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    return "; ".join(f"{g.name}: {', '.join(sorted(f.stem for f in g.glob('*.yaml')))}" for g in groups)


def _config_name(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg in ("-cn", "--config-name") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--config-name="):
            return arg.split("=", 1)[1]
    return None


VALUED_FLAGS = {"-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir", "-c", "--cfg", "-p", "--package"}
"""Hydra's flags that take a value (the next argument)."""
INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
"""The values ``--info`` may take (it may also stand alone)."""


def options_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with Hydra's flags (and their values) before the overrides, in their own order: Hydra's parser
    refuses a flag after an override (``algorithm.lr=0.01 --cfg job``), which users type in any order."""
    options, overrides, rest = [], [], list(argv)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        options.append(arg)
        if arg in VALUED_FLAGS and rest:
            options.append(rest.pop(0))
        elif arg in ("-i", "--info") and rest and rest[0] in INFO_TOPICS:
            options.append(rest.pop(0))
    return options + overrides


def main(argv: Sequence[str] | None = None) -> None:
    with paused_collector():  # until the run's modules are imported: see maze_impala.startup
        _main(argv)


def _main(argv: Sequence[str] | None) -> None:
    import hydra

    argv = options_first(sys.argv[1:] if argv is None else argv)
    name = _config_name(argv)
    if name is None:
        print(USAGE.format(groups=_groups()), file=sys.stdout if {"-h", "--help"} & set(argv) else sys.stderr)
        sys.exit(0 if {"-h", "--help"} & set(argv) else 2)
    try:
        check_overrides(name, [a for a in argv if not a.startswith("-") and "=" in a])
        check_groups(argv)
        if not {"--cfg", "-c", "--info", "-i"} & set(argv):
            check_output_dir(argv, Path("outputs"))
    except ConfigError as error:
        print(f"maze-run: invalid configuration: {error}", file=sys.stderr)
        sys.exit(2)
    if name == "conf_rollout":
        argv = rollout_env(argv)
    argv = without_default_env_keys(argv)
    # A module in the working directory (e.g. env._target_=my_env.MyEnv) is importable, as with `python -m`.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    # SIGTERM (e.g. from a job scheduler) unwinds like Ctrl-C, so that actor processes are stopped. SIGINT is
    # set explicitly too: a process started in the background by a non-interactive shell inherits SIGINT as
    # ignored, and Python then installs no KeyboardInterrupt handler of its own.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    resume = [override_value(a) for a in argv if a.startswith("resume=")]
    if resume and name == "conf_train":
        from maze_impala.train.rundir import check_resumable_dir

        try:  # before Hydra writes anything into it: a refused resume leaves the directory as it was
            check_resumable_dir(Path(resume[-1]))
        except ConfigError as error:
            print(f"maze-run: {error}", file=sys.stderr)
            sys.exit(2)
        argv = [a for a in argv if not a.startswith("hydra.run.dir=")]
        # the run's log and outputs continue in its directory; its .hydra/ keeps the record of how it was started
        argv += [f"hydra.run.dir={hydra_value(resume[-1])}", "hydra.output_subdir=null"]
    keep_existing_dirs(argv)
    register_schemas()
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("maze_run_name", run_name, replace=True)
    sys.argv = [sys.argv[0], *argv]
    compose_once(argv)
    hydra.main(version_base=None, config_path=str(config_dir()), config_name=None)(_run)()


def run_command() -> None:
    """The ``maze-run`` command: :func:`main`, then a fast exit with its code once the output is flushed. When
    ``main`` returns, a run's files are written and closed and its actors stopped; the interpreter's teardown of
    torch and the envs' libraries took another half second of every command. The usual exit is kept while Ray or
    a thread of some library is still running (their exit hooks stop them), and for an uncaught exception."""
    import logging
    import threading

    try:
        main()
        code = 0
    except SystemExit as exit_:
        if exit_.code is not None and not isinstance(exit_.code, int):
            raise  # a message to print: the usual exit prints it
        code = exit_.code or 0
    ray = sys.modules.get("ray")
    if (ray is not None and ray.is_initialized()) or any(
        t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()
    ):
        sys.exit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    run_command()
