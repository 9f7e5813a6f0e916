"""The one place where components are wired together, for the CLI and for Python users alike."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.sequential import SequentialActors
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.transport import estimate_rollout_bytes
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import (
    ConfigError,
    ImpalaAlgorithmConfig,
    ModelConfig,
    OutputConfig,
    RunnerConfig,
    TrainingConfig,
    from_mapping,
)
from maze_impala.config.base import to_record
from maze_impala.core import ActorPool
from maze_impala.envs.factory import EnvSpec, env_record, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventHub, last, mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey, StatsAggregator
from maze_impala.events.tables import EVENT_LOG_DIR, KPI_CSV, KPI_SUMMARY_CSV, EventLogWriter, atomic_write_text
from maze_impala.events.writers import ConsoleWriter, CsvWriter, StatsWriter, TensorBoardWriter
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import StructuredPolicy, make_policy
from maze_impala.train.evaluator import RolloutEvaluator
from maze_impala.train.plots import CURVES_PNG
from maze_impala.train.progress import Progress
from maze_impala.train.trainer import BEST_MODEL, CONFIG_YAML, LAST_MODEL, STATS_CSV, ImpalaTrainer, TrainingResult


def console_columns() -> list[str]:
    """The statistics the console table shows (and every per-step-key column under them)."""
    train, evaluation, ev = "train", "eval", MultiStepIMPALAEvents
    return [
        StatKey.of(EpisodeEvents.episode_return, mean, train).column(),
        StatKey.of(EpisodeEvents.step_key_return, mean, train).column(),
        StatKey.of(EpisodeEvents.episode_return, mean, evaluation).column(),
        StatKey.of(RunEvents.env_steps_per_second, last, train).column(),
        StatKey.of(ev.policy_lag, mean, train).column(),
        StatKey.of(ev.policy_loss, mean, train).column(),
        StatKey.of(ev.policy_entropy, mean, train).column(),
        StatKey.of(ev.policy_grad_norm, mean, train).column(),
        StatKey.of(ev.critic_value_loss, mean, train).column(),
        StatKey.of(ev.critic_grad_norm, mean, train).column(),
    ]


def make_pool(
    spec: ActorSpec,
    weights: SharedWeights,
    algorithm: ImpalaAlgorithmConfig,
    runner: RunnerConfig,
    slot_bytes: int | None = None,
) -> ActorPool:
    if runner.type == "dev":
        return SequentialActors(spec, weights, algorithm.num_actors)
    return SubprocessActors(
        spec,
        weights,
        algorithm.num_actors,
        algorithm.queue_size_limit,
        runner.start_method,
        runner.failure_timeout,
        batch_size=algorithm.actors_batch_size,
        slot_bytes=slot_bytes,
    )


def build_trainer(config: TrainingConfig, output_dir: Path) -> ImpalaTrainer:
    """Wire env, models, weights, actors, learner, evaluator, events and writers; writes ``config.yaml``.

    Raises :class:`ConfigError` before anything starts if the env cannot be recorded in the
    run's config, the env does not fit the model, or ``output_dir`` holds another run.
    """
    algorithm, runner, output = config.algorithm, config.runner, config.output
    record = describe(config)  # an env factory that cannot be rebuilt from config.yaml fails here
    claim_output_dir(output_dir, config.overwrite)
    torch.manual_seed(config.seed)
    probe = make_env(config.env)  # fails early on a bad env, before any process starts
    obs_spaces, act_spaces = probe.observation_spaces_dict, probe.action_spaces_dict
    spec = ActorSpec(config.env, config.model, algorithm.n_rollout_steps, algorithm.envs_per_actor, config.seed)
    try:
        policy = make_policy(probe, config.model)
        critic = make_critic(obs_spaces, probe.agent_counts_dict, config.model)
        slot_bytes = estimate_rollout_bytes(probe, spec)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    finally:
        probe.close()
    atomic_write_text(output_dir / CONFIG_YAML, OmegaConf.to_yaml(OmegaConf.create(record)))

    hub = EventHub()
    train_stats = StatsAggregator("train")  # every interface: the learner's, the actors' and the env's own
    hub.listeners.append(train_stats)
    eval_hub = EventHub()
    eval_stats = StatsAggregator("eval")
    eval_hub.listeners.append(eval_stats)

    learner = ImpalaLearner(policy, critic, algorithm, hub.publisher(MultiStepIMPALAEvents))
    weights = SharedWeights(learner.policy)
    pool = make_pool(spec, weights, algorithm, runner, slot_bytes)
    evaluator = RolloutEvaluator(
        config.env,
        algorithm.rollout_evaluator.n_episodes,
        algorithm.rollout_evaluator.deterministic,
        config.seed,
        eval_hub,
        keep_raw_events=output.event_logs != "none",
    )
    writers: list[StatsWriter] = [CsvWriter(output_dir / STATS_CSV)] if output.csv else []
    if output.console:
        writers.append(ConsoleWriter(console_columns()))
    if output.tensorboard:
        writers.append(TensorBoardWriter(output_dir / "tensorboard"))
    extras = {
        "config": record,
        "spaces": {"observation": repr(obs_spaces), "action": repr(act_spaces)},
    }
    event_logs = EventLogWriter(output_dir / EVENT_LOG_DIR, output.event_logs) if output.event_logs != "none" else None
    progress = Progress(algorithm.n_epochs) if output.progress else None
    return ImpalaTrainer(
        learner, pool, weights, evaluator, hub, train_stats, eval_stats, writers, output_dir, extras,
        learner_threads=learner_threads(algorithm, runner), event_logs=event_logs, progress=progress, plot=output.plot,
    )  # fmt: skip


RUN_FILES = (LAST_MODEL, BEST_MODEL, STATS_CSV, KPI_CSV)
"""Files whose presence means that a directory holds a run."""


def claim_output_dir(output_dir: Path, overwrite: bool) -> None:
    """Refuse to train into a directory holding another run's files, unless ``overwrite`` (then remove them)."""
    found = [name for name in RUN_FILES if (output_dir / name).exists()]
    if found and not overwrite:
        raise ConfigError(
            f"{output_dir} holds another run ({', '.join(found)}); training there would replace it. Choose another "
            "directory (hydra.run.dir=... or train(output_dir=...)), or pass overwrite=true (train(..., "
            "overwrite=True)) to replace that run"
        )
    for name in (*found, KPI_SUMMARY_CSV, CURVES_PNG):
        (output_dir / name).unlink(missing_ok=True)
    if found:
        shutil.rmtree(output_dir / "tensorboard", ignore_errors=True)
        shutil.rmtree(output_dir / EVENT_LOG_DIR, ignore_errors=True)
    output_dir.mkdir(parents=True, exist_ok=True)


def learner_threads(algorithm: ImpalaAlgorithmConfig, runner: RunnerConfig) -> int | None:
    """With actor processes (one core each), the learner gets the cores they leave, at least one, so that
    no process fights another for a core; in-process actors leave torch's default."""
    if runner.type != "local" or algorithm.device != "cpu":
        return None
    return max(1, (os.cpu_count() or 1) - algorithm.num_actors)


def describe(config: TrainingConfig) -> dict[str, Any]:
    """The run's config as plain data (``config.yaml``, checkpoints), from which :func:`load_policy` rebuilds the env.

    An env factory is recorded as a ``_target_`` config (see :func:`~maze_impala.envs.factory.env_record`); one
    that cannot be raises :class:`ConfigError` here, before training.
    """
    return to_record(config, env=env_record(config.env))


def train(
    env: EnvSpec = "CartPole-v1",
    algorithm: ImpalaAlgorithmConfig | None = None,
    model: ModelConfig | None = None,
    runner: RunnerConfig | None = None,
    seed: int = 1234,
    output_dir: str | Path | None = None,
    output: OutputConfig | None = None,
    overwrite: bool = False,
) -> TrainingResult:
    """Train IMPALA from Python with the same components and defaults as ``maze-run -cn conf_train``.

    Writes ``config.yaml``, ``stats.csv``, ``kpis.csv``, TensorBoard events and the last and best
    model into ``output_dir`` (default: ``outputs/train/<time>``). Call it under
    ``if __name__ == "__main__":`` in a script: the default ``runner=local`` starts actor processes.
    """
    config = TrainingConfig(
        env,
        algorithm or ImpalaAlgorithmConfig(),
        model or ModelConfig(),
        runner or RunnerConfig(),
        output or OutputConfig(),
        seed,
        overwrite,
    )
    out = Path(output_dir) if output_dir else Path("outputs", "train", time.strftime("%Y-%m-%d_%H-%M-%S"))
    return build_trainer(config, out).train()


def load_policy(checkpoint: str | Path) -> tuple[StructuredPolicy, StructuredEnv]:
    """The policy of a checkpoint written by training, and a fresh env of the run's config.

    The env and model are rebuilt from the config stored in the checkpoint, so this
    works for any run whose env is given by an id or a ``_target_`` config.
    """
    from maze_impala.train.checkpoint import read_checkpoint, restore_modules

    state = read_checkpoint(checkpoint)
    record = state.get("config")
    if record is None:
        raise ConfigError(f"{checkpoint} holds no run config; was it written by maze_impala training?")
    env = make_env(record["env"])
    policy = make_policy(env, from_mapping(ModelConfig, record["model"], "model"))
    restore_modules(state, checkpoint, policy=policy)
    policy.eval()
    return policy, env
