"""The one place where components are wired together, for the CLI and for Python users alike."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from maze_impala.actors.actor import ActorSpec, seed_for
from maze_impala.config import (
    ConfigError,
    TrainingConfig,
)
from maze_impala.config.base import from_mapping, to_record, to_yaml
from maze_impala.config.runner import auto_learner_cores
from maze_impala.core import ActorPool, Learner, WeightPublisher
from maze_impala.envs.factory import env_record, make_env
from maze_impala.envs.spaces import is_image_space
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventHub, last, mean
from maze_impala.events.interfaces import ActorEvents, EpisodeEvents, GameEvents, RunEvents
from maze_impala.events.stats import StatKey, StatsAggregator
from maze_impala.events.tables import EventLogWriter
from maze_impala.events.trackers import MlflowWriter, WandbWriter
from maze_impala.events.writers import ConsoleWriter, CsvWriter, StatsWriter, TensorBoardWriter
from maze_impala.files import RunDirLock, atomic_write_text, remove_stray_temp_files
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.replicas import DataParallelLearner, check_devices
from maze_impala.impala.threads import ThreadPlan
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup, seats
from maze_impala.play.pool import SnapshotPool
from maze_impala.play.spec import POOL, PolicySpec, load_acting, opponent_spec
from maze_impala.run_files import CONFIG_YAML, EVENT_LOG_DIR, LAST_MODEL, STATS_CSV, TENSORBOARD_DIR, VIDEO_DIR
from maze_impala.train.backends import check_actor_device, check_device, learner_threads, make_actors, make_replicas
from maze_impala.train.checkpoint import OPPONENTS, read_checkpoint, restore_modules
from maze_impala.train.evaluator import RolloutEvaluator
from maze_impala.train.games import Games
from maze_impala.train.outputs import RunOutputs, RunStats
from maze_impala.train.progress import Progress
from maze_impala.train.rundir import (
    check_more_epochs,
    check_resumable,
    check_resumable_dir,
    claim_output_dir,
    continue_tables,
    run_values,
    scalar_config,
)
from maze_impala.train.state import EVALUATION_PENDING, TrainerState
from maze_impala.train.trainer import ImpalaTrainer
from maze_impala.train.video import Videos, check_renders


def console_columns() -> list[str]:
    """The statistics the console table shows (and every per-step-key column under them)."""
    train, evaluation, ev = "train", "eval", MultiStepIMPALAEvents
    return [
        StatKey.of(EpisodeEvents.episode_return, mean, train).column(),
        StatKey.of(EpisodeEvents.step_key_return, mean, train).column(),
        StatKey.of(EpisodeEvents.episode_return, mean, evaluation).column(),
        StatKey.of(RunEvents.env_steps_per_second, last, train).column(),
        StatKey.of(RunEvents.learner_waiting_percent, last, train).column(),
        StatKey.of(RunEvents.learner_threads, mean, train).column(),
        StatKey.of(ev.policy_lag, mean, train).column(),
        StatKey.of(ev.policy_loss, mean, train).column(),
        StatKey.of(ev.policy_entropy, mean, train).column(),
        StatKey.of(ev.policy_grad_norm, mean, train).column(),
        StatKey.of(ev.critic_value_loss, mean, train).column(),
        StatKey.of(ev.critic_grad_norm, mean, train).column(),
        *(
            StatKey.of(outcome, mean, source).column() + "/"
            for source in (train, evaluation)
            for outcome in (GameEvents.win, GameEvents.draw, GameEvents.loss)
        ),  # per seat, in games only
    ]


def build_trainer(config: TrainingConfig, output_dir: Path) -> ImpalaTrainer:
    """Wire env, models, weights, actors, learner, evaluator, events and writers; writes ``config.yaml``.

    The actors start here, so that their start-up overlaps the rest of the build: call the trainer's ``train``,
    which stops them however it ends (a failure of the build itself stops them before it raises).

    With ``config.resume`` (a run directory) the run continues from its ``model_last.pt``:
    learner, loop state and RNG state restored, tables continued after the checkpoint's epoch.
    Raises :class:`ConfigError` before anything starts if the env cannot be recorded in the
    run's config, the env does not fit the model, ``output_dir`` holds another run, or a
    resume changes what the run learns; :class:`RunDirInUseError` if another run trains there.
    """
    started = time.perf_counter()  # elapsed_seconds count from here: the actors' start-up is part of a run's time
    output_dir = Path(config.resume) if config.resume else Path(output_dir)
    checkpoint = None
    if config.resume:
        check_resumable_dir(output_dir)
        checkpoint = read_checkpoint(output_dir / LAST_MODEL)
    kept = run_values(checkpoint["config"], to_record(config)) if checkpoint is not None else {}
    config = with_values(config, kept)
    probe = make_env(config.env)  # fails early on a bad env, before any process starts
    try:
        config = with_learner_cores(with_image_encoder(config, probe, checkpoint), probe)
        check_devices(
            config.algorithm.device, config.algorithm.num_learners, config.runner.type, config.runner.start_method
        )
        check_device("algorithm.device", config.algorithm.device)
        check_actor_device(config.runner.actor_device)
        record = describe(config)  # an env factory that cannot be rebuilt from config.yaml fails here
        lock = RunDirLock(output_dir).acquire()
        try:
            if checkpoint is not None:
                _check_resume(output_dir, checkpoint, record, config.algorithm.n_epochs, kept)
            else:
                claim_output_dir(output_dir, config.overwrite)
            remove_stray_temp_files(output_dir)  # after the checks: a refused directory is left as it was
            trainer = _wire(config, record, output_dir, checkpoint, lock, probe)
            trainer.started = started
            return trainer
        except BaseException:
            lock.release()
            raise
    finally:
        probe.close()


def with_values(config: TrainingConfig, values: dict[str, Any]) -> TrainingConfig:
    """``config`` with the flat keys ``values`` (``algorithm.gamma``) set."""
    if not values:
        return config
    record = to_record(config)
    for key, value in values.items():
        *parents, name = key.split(".")
        node = record
        for parent in parents:
            node = node[parent]
        node[name] = value
    return from_mapping(TrainingConfig, record)


def with_image_encoder(
    config: TrainingConfig, probe: StructuredEnv, checkpoint: dict[str, Any] | None = None
) -> TrainingConfig:
    """``config`` with ``model.image_encoder=auto`` replaced by what it becomes for the env (``probe``, one instance
    of it) and the learner's device, so that the run records it (``config.yaml``, checkpoints, ``load_policy``); a
    resumed run keeps what its ``checkpoint`` recorded (an earlier release's default was impala)."""
    if config.model.image_encoder != "auto":
        return config
    if checkpoint is not None:
        recorded = checkpoint["config"].get("model", {}).get("image_encoder", "impala")
        return replace(config, model=replace(config.model, image_encoder=recorded))
    return replace(config, model=config.model.resolved(image_shapes(probe), config.algorithm.device))


def with_learner_cores(config: TrainingConfig, probe: StructuredEnv) -> TrainingConfig:
    """``config`` with ``runner.learner_cores=auto`` replaced by what it becomes for its model (after
    :func:`with_image_encoder`) on the env (``probe``), so that the run records it."""
    if config.runner.learner_cores != "auto":
        return config
    cnn = bool(image_shapes(probe)) and config.model.image_encoder != "flatten"
    cores = auto_learner_cores(cnn=cnn, recurrent=config.model.recurrent != "none")
    return replace(config, runner=replace(config.runner, learner_cores=cores))


def image_shapes(probe: StructuredEnv) -> list[tuple[int, ...]]:
    """The shapes of the env's image observations (rank-3 Box keys), every step key's."""
    spaces = [sub for space in probe.observation_spaces_dict.values() for sub in space.spaces.values()]
    return [tuple(sub.shape) for sub in spaces if is_image_space(sub)]


def _check_resume(run_dir: Path, checkpoint: dict[str, Any], record: dict[str, Any], n_epochs: int,
                  kept: dict[str, Any]) -> None:  # fmt: skip
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
        logging.getLogger("maze_impala").info("kept from the run, where today's defaults differ: %s",
                                              ", ".join(f"{k}={v!r}" for k, v in kept.items()))  # fmt: skip


def _wire(
    config: TrainingConfig,
    record: dict[str, Any],
    output_dir: Path,
    checkpoint: dict[str, Any] | None,
    lock: RunDirLock,
    probe: StructuredEnv,
) -> ImpalaTrainer:
    """The run's parts around ``probe``, one instance of its env (the caller closes it)."""
    algorithm = config.algorithm
    torch.manual_seed(config.seed)
    obs_spaces, act_spaces = probe.observation_spaces_dict, probe.action_spaces_dict
    try:
        policy = make_policy(probe, config.model)
        critic = make_critic(obs_spaces, probe.agent_counts_dict, config.model)
        opponents: dict[str, PolicySpec] = {}  # each fixed opponent, resolved once (its checkpoint read here)
        saved = checkpoint.get(OPPONENTS, {}) if checkpoint is not None else {}
        for opponent, trains in ((algorithm.train_opponent, True), (algorithm.rollout_evaluator.opponent, False)):
            if opponent is not None:  # a bad opponent fails here, before any process starts
                seats(opponent, probe)
                if not (trains and opponent == POOL):  # the pool is the trained policy's
                    # a resumed run plays the opponent its checkpoint saved, even if the file has changed or gone
                    known = saved.get(opponent)
                    opponents[opponent] = PolicySpec.from_state_dict(known) if known else opponent_spec(opponent)
                    load_acting(opponents[opponent], probe)  # one that cannot play this game fails here
    except ValueError as error:
        raise ConfigError(str(error)) from error

    hub = EventHub()
    train_stats = StatsAggregator("train")  # every interface: the learner's, the actors' and the env's own
    hub.listeners.append(train_stats)
    snapshots = SnapshotPool(algorithm.opponent_pool) if algorithm.train_opponent == POOL else None
    state, version = TrainerState(snapshots=snapshots), 0
    if checkpoint is not None:
        restore_modules(checkpoint, output_dir / LAST_MODEL, policy=policy, critic=critic)
        state = TrainerState.from_checkpoint(checkpoint, snapshots)  # the RNG state and the pool too
        state.history = continue_tables(output_dir, state.epoch)
        version = int(checkpoint["version"])
    if snapshots is not None and not snapshots.snapshots:  # a new run; or a run of a release that saved no pool
        snapshots.offer(policy, version)
    atomic_write_text(output_dir / CONFIG_YAML, to_yaml(record))
    # A resumed run's actors start from seeds of their own: their envs do not replay the first epochs.
    actor_seed = seed_for(config.seed, state.epoch) if state.epoch else config.seed
    opponent = algorithm.train_opponent
    lineup = Lineup.of(
        config.model,
        opponents.get(opponent, opponent) if opponent else None,
        algorithm.opponent_actors,
        algorithm.opponent_pool.draw,
        device=config.runner.actor_device,
    )
    spec = ActorSpec(config.env, lineup, algorithm.n_rollout_steps, algorithm.envs_per_actor, actor_seed,
                     config.max_episode_steps)  # fmt: skip
    pool, weights = make_actors(spec, policy, version, algorithm, config.runner, hub.publisher(ActorEvents),
                                snapshots)  # fmt: skip
    # The actors start before the rest is built, so that their start-up (each actor process imports torch) overlaps
    # the learner's and the writers'. The trainer stops them; a failure before it exists stops them here.
    pool.start()
    learner: Learner | None = None
    try:
        if algorithm.compile != "off":  # the compiler's work falls in the first updates: say so, not 70 silent s
            logging.getLogger("maze_impala").warning(
                "algorithm.compile=%s: the update compiles with torch.compile in its first updates (about half a "
                "minute to two minutes on 2 CPU cores, again for each new batch shape) before training runs at its "
                "pace", algorithm.compile)  # fmt: skip
        learner = ImpalaLearner(policy, critic, algorithm, hub.publisher(MultiStepIMPALAEvents))
        if checkpoint is not None:
            learner.load_state_dict(checkpoint)
        threads = learner_threads(algorithm, config.runner, pool)
        if threads is not None:
            logging.getLogger("maze_impala").info("%s", threads.describe())
        if algorithm.num_learners > 1:  # the others start from learner 0's state, a resumed run's included
            share = threads.start if threads is not None else None
            learner = DataParallelLearner(learner, make_replicas(algorithm, config.runner, share))
        extras = {"config": record, "spaces": {"observation": repr(obs_spaces), "action": repr(act_spaces)},
                  OPPONENTS: {name: spec.state_dict() for name, spec in opponents.items()}}  # fmt: skip
        return _trainer(config, output_dir, state, learner, pool, weights, hub, train_stats, extras, lock, opponents,
                        threads)  # fmt: skip
    except BaseException:
        if learner is not None:
            learner.close()
        pool.close()
        raise


def _trainer(
    config: TrainingConfig,
    output_dir: Path,
    state: TrainerState,
    learner: Learner,
    pool: ActorPool,
    weights: WeightPublisher,
    hub: EventHub,
    train_stats: StatsAggregator,
    extras: dict[str, Any],
    lock: RunDirLock,
    opponents: dict[str, PolicySpec],
    threads: ThreadPlan | None,
) -> ImpalaTrainer:
    """The evaluator, the writers and the trainer around the parts :func:`_wire` built (``opponents``: the fixed
    opponents it resolved; ``threads``: the learner's thread counts)."""
    algorithm, output = config.algorithm, config.output
    eval_hub = EventHub()
    eval_stats = StatsAggregator("eval")
    eval_hub.listeners.append(eval_stats)
    filmed = min(output.video.episodes, algorithm.rollout_evaluator.n_episodes)
    videos = Videos(output_dir / VIDEO_DIR, output.video.format, output.video.fps, thumbnails=output.tensorboard)
    evaluator = RolloutEvaluator(
        config.env,
        algorithm.rollout_evaluator.n_episodes,
        algorithm.rollout_evaluator.deterministic,
        config.seed,
        eval_hub,
        keep_raw_events=output.event_logs != "none",
        videos=videos if filmed else None,
        filmed=filmed,
        games=_games(config, eval_hub, opponents),
        max_episode_steps=config.max_episode_steps,
    )
    if filmed:
        check_renders(evaluator.envs[0], f"output.video.episodes={output.video.episodes}")
    writers: list[StatsWriter] = [CsvWriter(output_dir / STATS_CSV)] if output.csv else []
    if output.console:
        writers.append(ConsoleWriter(console_columns()))
    if output.tensorboard:  # a resumed run drops the events logged after its checkpoint
        writers.append(TensorBoardWriter(output_dir / TENSORBOARD_DIR, purge_step=state.env_steps + 1))
    if output.wandb:
        writers.append(WandbWriter(output_dir, scalar_config(extras["config"])))
    if output.mlflow:
        writers.append(MlflowWriter(output_dir, scalar_config(extras["config"])))
    event_logs = EventLogWriter(output_dir / EVENT_LOG_DIR, output.event_logs) if output.event_logs != "none" else None
    progress = None
    if output.progress:  # a resumed run's rate counts this process's env steps, its returns start afresh
        progress = Progress(algorithm.n_epochs, start_steps=state.env_steps, resumed_at=state.epoch or None)
        eval_hub.listeners.append(progress.evaluation_games)  # the evaluation's games (the trainer adds the rest)
    outputs = RunOutputs(
        output_dir, writers, extras, event_logs, progress, output.plot, output.checkpoint_every,
        video_every=output.video.every if filmed else 0, on_close=[lock.release],
    )  # fmt: skip
    stats = RunStats(hub, train_stats, eval_stats)
    return ImpalaTrainer(algorithm, learner, pool, weights, evaluator, stats, outputs, state, threads)


def _games(config: TrainingConfig, hub: EventHub, opponents: dict[str, PolicySpec]) -> Games | None:
    """The games against ``rollout_evaluator.opponent`` after every evaluation, if it names one (``opponents``:
    each named opponent's spec, resolved once)."""
    evaluation = config.algorithm.rollout_evaluator
    if evaluation.opponent is None:
        return None
    opponent = opponents[evaluation.opponent]
    return Games(config.env, opponent, evaluation.n_episodes, evaluation.deterministic, config.seed, hub,
                 config.max_episode_steps)  # fmt: skip


def describe(config: TrainingConfig) -> dict[str, Any]:
    """The run's config as plain data (``config.yaml``, checkpoints), from which ``load_policy`` rebuilds the env.

    An env factory is recorded as a ``_target_`` config (see :func:`~maze_impala.envs.factory.env_record`); one
    that cannot be raises :class:`ConfigError` here, before training.
    """
    return to_record(config, env=env_record(config.env))
