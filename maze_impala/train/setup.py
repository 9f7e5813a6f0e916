"""The one place where components are wired together, for the CLI and for Python users alike."""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path
from typing import Any

import torch

from maze_impala.actors.actor import ActorSpec, seed_for
from maze_impala.actors.backends import check_actor_device, check_device, make_actors
from maze_impala.checkpoints import OPPONENTS, read_checkpoint
from maze_impala.config import TrainingConfig
from maze_impala.config.base import to_record, to_yaml
from maze_impala.core import Learner
from maze_impala.envs.factory import env_record, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.evaluate.evaluator import make_evaluator
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator
from maze_impala.files import RunDirLock, atomic_write_text, remove_stray_temp_files
from maze_impala.impala.build import make_learner
from maze_impala.impala.replicas import check_devices
from maze_impala.machine import LoadMeter, LoadSample
from maze_impala.nn.build import make_models
from maze_impala.play.lineup import Lineup, resolve_opponents, run_lineup
from maze_impala.play.pool import make_snapshot_pool
from maze_impala.play.spec import POOL
from maze_impala.run_files import CONFIG_YAML, LAST_MODEL
from maze_impala.startup import fast_cuda_math, restore_cuda_math
from maze_impala.train.outputs import RunStats, make_outputs
from maze_impala.train.resolve import resolved, with_values
from maze_impala.train.rundir import (
    check_more_epochs,
    check_resumable,
    check_resumable_dir,
    claim_output_dir,
    continue_tables,
    run_values,
)
from maze_impala.train.state import EVALUATION_PENDING, TrainerState
from maze_impala.train.trainer import ImpalaTrainer


def build_trainer(config: TrainingConfig, output_dir: Path, given: set[str] | None = None) -> ImpalaTrainer:
    """Wire env, models, weights, actors, learner, evaluator, events and writers; writes ``config.yaml``.

    The actors start here, so that their start-up overlaps the rest of the build: call the trainer's ``train``,
    which stops them however it ends (a failure of the build itself stops them before it raises).

    With ``config.resume`` (a run directory) the run continues from its ``model_last.pt``:
    learner, loop state and RNG state restored, tables continued after the checkpoint's epoch; every setting that
    ``given`` (the command line's keys; None: those that differ from the defaults) leaves out is the run's own.
    Raises :class:`ConfigError` before anything starts if the env cannot be recorded in the
    run's config, the env does not fit the model, ``output_dir`` holds another run, or a
    resume changes what the run learns; :class:`RunDirInUseError` if another run trains there.
    """
    started = time.perf_counter()  # elapsed_seconds count from here: the actors' start-up is part of a run's time
    idle = LoadMeter().sample()  # the machine's load as the set-up finds it, for the learner's first thread count
    output_dir = Path(config.resume) if config.resume else Path(output_dir)
    checkpoint = None
    if config.resume:
        check_resumable_dir(output_dir)
        checkpoint = read_checkpoint(output_dir / LAST_MODEL)
    kept = run_values(checkpoint["config"], to_record(config), given) if checkpoint is not None else {}
    config = with_values(config, kept)
    probe = make_env(config.env)  # fails early on a bad env, before any process starts
    try:
        config = resolved(config, probe, checkpoint)
        check_devices(
            config.algorithm.device, config.algorithm.num_learners, config.runner.type, config.runner.start_method
        )
        check_device("algorithm.device", config.algorithm.device)
        check_actor_device(config.runner.actor_device)
        math_before = fast_cuda_math(config.algorithm.device)  # a CUDA learner's math (maze_impala.startup)
        record = describe(config)  # an env factory that cannot be rebuilt from config.yaml fails here
        lock = RunDirLock(output_dir).acquire()
        try:
            if checkpoint is not None:
                _check_resume(output_dir, checkpoint, record, config.algorithm.n_epochs, kept)
            else:
                claim_output_dir(output_dir, config.overwrite)
            remove_stray_temp_files(output_dir)  # after the checks: a refused directory is left as it was
            trainer = _wire(config, record, checkpoint, lock, probe, started, idle)
            trainer.outputs.on_close.append(functools.partial(restore_cuda_math, math_before))
            return trainer
        except BaseException:
            lock.release()
            restore_cuda_math(math_before)
            raise
    finally:
        probe.close()


def _check_resume(
    run_dir: Path, checkpoint: dict[str, Any], record: dict[str, Any], n_epochs: int, kept: dict[str, Any]
) -> None:
    """Refuse a resume whose config changes what the run learns, or that leaves no epoch to train; log what it
    changes, and what it ``kept`` of the run's own values where today's defaults differ."""
    epoch = int(checkpoint["epoch"])
    changes = check_resumable(checkpoint["config"], record, run_dir)
    check_more_epochs(run_dir, epoch, n_epochs)
    described = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items() if k != "resume")
    pending = f" (epoch {epoch + 1} trained; its evaluation runs again)" if EVALUATION_PENDING in checkpoint else ""
    logging.getLogger("maze_impala").info(
        "resuming %s after epoch %d%s%s", run_dir, epoch, pending, f"; changed: {described}" if described else ""
    )
    if kept:
        logging.getLogger("maze_impala").info(
            "kept from the run, where today's defaults differ: %s", ", ".join(f"{k}={v!r}" for k, v in kept.items())
        )


def _wire(
    config: TrainingConfig,
    record: dict[str, Any],
    checkpoint: dict[str, Any] | None,
    lock: RunDirLock,
    probe: StructuredEnv,
    started: float,
    idle: LoadSample | None = None,
) -> ImpalaTrainer:
    """The run's parts, each built by its wing, connected, in the run directory that ``lock`` holds; ``probe``:
    one instance of the env (the caller closes it); ``started``: when the run's set-up began, and ``idle`` the
    machine's idle cores then."""
    output_dir = lock.directory
    algorithm, saved = config.algorithm, (checkpoint or {}).get(OPPONENTS, {})
    torch.manual_seed(config.seed)
    policy, critic = make_models(probe, config.model, checkpoint, output_dir / LAST_MODEL)
    opponents = resolve_opponents(probe, algorithm.train_opponent, algorithm.rollout_evaluator.opponent, saved)
    hub, train_stats = EventHub(), StatsAggregator("train")  # every interface: the learner's, the actors', the env's
    hub.listeners.append(train_stats)
    version = int((checkpoint or {}).get("version", 0))
    state = _state(config, checkpoint, output_dir, policy, version)
    atomic_write_text(output_dir / CONFIG_YAML, to_yaml(record))
    spec = _actor_spec(config, run_lineup(config, opponents), state)
    load = LoadMeter().load(since=idle)  # before the actors start: their start-up is this run's own work
    pool, weights = make_actors(spec, policy, version, config, hub, state.snapshots)
    # The actors start before the rest is built, so that their start-up (each actor process imports torch) overlaps
    # the learner's and the writers'. The trainer stops them; a failure before it exists stops them here.
    pool.start()
    learner: Learner | None = None
    try:
        learner = make_learner(policy, critic, config, checkpoint, hub, pool.actor_cores(), load)
        extras = {
            "config": record,
            "spaces": {"observation": repr(probe.observation_spaces_dict), "action": repr(probe.action_spaces_dict)},
            OPPONENTS: {name: spec.state_dict() for name, spec in opponents.items()},
        }
        outputs = make_outputs(config, output_dir, state, extras, [lock.release])
        judge = algorithm.rollout_evaluator.opponent
        evaluator, eval_stats = make_evaluator(config, output_dir, opponents.get(judge or ""), outputs.progress)
        stats = RunStats(hub, train_stats, eval_stats)
        return ImpalaTrainer(algorithm, learner, pool, weights, evaluator, stats, outputs, state, started)
    except BaseException:
        if learner is not None:
            learner.close()
        pool.close()
        raise


def _state(
    config: TrainingConfig, checkpoint: dict[str, Any] | None, output_dir: Path, policy: torch.nn.Module, version: int
) -> TrainerState:
    """The loop's state: a new run's, or a resumed one's (its RNG state, its pool and its tables continued); with
    the snapshot pool of a run that trains against it, holding at least the ``policy`` it starts from (at
    ``version``)."""
    algorithm = config.algorithm
    snapshots = None
    if algorithm.train_opponent == POOL:
        snapshots = make_snapshot_pool(algorithm.opponent_pool, policy, version, checkpoint)
    if checkpoint is None:
        return TrainerState(snapshots=snapshots)
    state = TrainerState.from_checkpoint(checkpoint, snapshots)
    state.history = continue_tables(output_dir, state.epoch)
    return state


def _actor_spec(config: TrainingConfig, lineup: Lineup, state: TrainerState) -> ActorSpec:
    """What every actor runs: the env, the ``lineup`` (the trained policy, and whom it trains against) and its
    rollouts. A resumed run's actors start from seeds of their own: their envs do not replay the first epochs."""
    algorithm = config.algorithm
    seed = seed_for(config.seed, state.epoch) if state.epoch else config.seed
    return ActorSpec(
        config.env, lineup, algorithm.n_rollout_steps, algorithm.envs_per_actor, seed, config.max_episode_steps
    )


def describe(config: TrainingConfig) -> dict[str, Any]:
    """The run's config as plain data (``config.yaml``, checkpoints), from which ``load_policy`` rebuilds the env.

    An env factory is recorded as a ``_target_`` config (see :func:`~maze_impala.envs.factory.env_record`); one
    that cannot be raises :class:`ConfigError` here, before training.
    """
    return to_record(config, env=env_record(config.env))
