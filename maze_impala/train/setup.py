"""The one place where components are wired together, for the CLI and for Python users alike."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.sequential import SequentialActors
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.transport import estimate_rollout_bytes
from maze_impala.actors.weights import SharedWeights
from maze_impala.core import ActorPool
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator
from maze_impala.events.tables import EVENT_LOG_DIR, EVENT_LOG_FORMATS, EventLogWriter
from maze_impala.events.writers import ConsoleWriter, CsvWriter, StatsWriter, TensorBoardWriter
from maze_impala.impala.config import ConfigError, ImpalaAlgorithmConfig
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import ModelConfig, StructuredPolicy, make_policy
from maze_impala.train.evaluator import RolloutEvaluator
from maze_impala.train.progress import Progress
from maze_impala.train.trainer import STATS_CSV, ImpalaTrainer, TrainingResult

RUNNER_TYPES = ("sequential", "subprocess")
"""sequential: in-process (runner=dev / runner=sequential); subprocess: processes (runner=local / runner=parallel)."""

CONSOLE_PREFIXES = [
    "train/EpisodeEvents/episode_return/mean",
    "train/EpisodeEvents/step_key_return/mean",
    "eval/EpisodeEvents/episode_return/mean",
    "train/RunEvents/env_steps_per_second",
    "train/MultiStepIMPALAEvents/policy_lag/mean",
    "train/MultiStepIMPALAEvents/policy_loss",
    "train/MultiStepIMPALAEvents/policy_entropy",
    "train/MultiStepIMPALAEvents/policy_grad_norm/mean",
    "train/MultiStepIMPALAEvents/critic_value_loss",
    "train/MultiStepIMPALAEvents/critic_grad_norm/mean",
]


@dataclass
class RunnerConfig:
    """How the actors run and where statistics go."""

    type: str = "sequential"
    """sequential: actors take turns in the learner's process; subprocess: one process per actor."""
    start_method: str = "spawn"
    """multiprocessing start method of the subprocess backend (spawn, forkserver or fork)."""
    failure_timeout: float = 120.0
    """Seconds without any rollout, all actors alive, before training fails as stuck."""
    console: bool = True
    """Print a table of the main statistics after every epoch."""
    tensorboard: bool = True
    """Write TensorBoard scalars (and hparams at the end) into the output directory."""
    csv: bool = True
    """Write stats.csv (one row per epoch); the training-curve PNG is drawn from it."""
    progress: bool = True
    """A live status line (epoch, env steps, steps/s, latest return); a line every 10 s when not a terminal."""
    plot: bool = True
    """Write training_curves.png into the output directory at the end of training."""
    event_logs: str = "none"
    """none, csv or parquet: every event of every evaluation (or rollout) episode, one table per event type."""
    n_processes: int = 0
    """Rollouts with runner=parallel: worker processes (0: one per CPU core, at most one per episode)."""

    def __post_init__(self) -> None:
        if self.event_logs not in ("none", *EVENT_LOG_FORMATS):
            raise ConfigError(f"runner.event_logs must be none, csv or parquet, got {self.event_logs!r}")
        if self.n_processes < 0:
            raise ConfigError(f"runner.n_processes must be >= 0 (0: one per core), got {self.n_processes!r}")
        if self.type not in RUNNER_TYPES:
            raise ConfigError(f"runner.type must be one of {RUNNER_TYPES}, got {self.type!r}")
        if self.start_method not in ("spawn", "forkserver", "fork"):
            raise ConfigError(f"runner.start_method must be spawn, forkserver or fork, got {self.start_method!r}")
        if not self.failure_timeout > 0:
            raise ConfigError(f"runner.failure_timeout must be > 0 seconds, got {self.failure_timeout!r}")


@dataclass
class TrainingConfig:
    """A whole run: what the CLI composes from configs/ and what :func:`train` takes."""

    env: Any = "CartPole-v1"
    algorithm: ImpalaAlgorithmConfig = field(default_factory=ImpalaAlgorithmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    seed: int = 1234


def make_pool(
    spec: ActorSpec,
    weights: SharedWeights,
    algorithm: ImpalaAlgorithmConfig,
    runner: RunnerConfig,
    slot_bytes: int | None = None,
) -> ActorPool:
    if runner.type == "sequential":
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
    """Wire env, models, weights, actors, learner, evaluator, events and writers."""
    algorithm, runner = config.algorithm, config.runner
    output_dir.mkdir(parents=True, exist_ok=True)
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
        keep_raw_events=runner.event_logs != "none",
    )
    writers: list[StatsWriter] = [CsvWriter(output_dir / STATS_CSV)] if runner.csv else []
    if runner.console:
        writers.append(ConsoleWriter(CONSOLE_PREFIXES))
    if runner.tensorboard:
        writers.append(TensorBoardWriter(output_dir / "tensorboard"))
    extras = {
        "config": describe(config),
        "spaces": {"observation": repr(obs_spaces), "action": repr(act_spaces)},
    }
    event_logs = EventLogWriter(output_dir / EVENT_LOG_DIR, runner.event_logs) if runner.event_logs != "none" else None
    progress = Progress(algorithm.n_epochs) if runner.progress else None
    return ImpalaTrainer(
        learner, pool, weights, evaluator, hub, train_stats, eval_stats, writers, output_dir, extras,
        learner_threads=learner_threads(algorithm, runner), event_logs=event_logs, progress=progress, plot=runner.plot,
    )  # fmt: skip


def learner_threads(algorithm: ImpalaAlgorithmConfig, runner: RunnerConfig) -> int | None:
    """With actor processes (one core each), the learner gets the cores they leave, at least one, so that
    no process fights another for a core; in-process actors leave torch's default."""
    if runner.type != "subprocess" or algorithm.device != "cpu":
        return None
    return max(1, (os.cpu_count() or 1) - algorithm.num_actors)


def describe(config: TrainingConfig) -> dict[str, Any]:
    """A plain-dict record of the run's config; an env callable becomes ``{"_target_": "module.name"}``.

    That record rebuilds the env (see :func:`load_policy`) whenever the callable is
    importable by name, e.g. an env class or a module-level factory function.
    """
    record = dataclasses.asdict(config)
    if callable(config.env):
        name = getattr(config.env, "__qualname__", type(config.env).__qualname__)
        record["env"] = {"_target_": f"{config.env.__module__}.{name}"}
    return record


def train(
    env: EnvSpec = "CartPole-v1",
    algorithm: ImpalaAlgorithmConfig | None = None,
    model: ModelConfig | None = None,
    runner: RunnerConfig | None = None,
    seed: int = 1234,
    output_dir: str | Path | None = None,
) -> TrainingResult:
    """Train IMPALA from Python with the same components the CLI wires.

    Writes ``config.yaml``, ``stats.csv``, TensorBoard events and the last and best
    model into ``output_dir`` (default: ``outputs/train/<time>``).
    """
    config = TrainingConfig(
        env, algorithm or ImpalaAlgorithmConfig(), model or ModelConfig(), runner or RunnerConfig(), seed
    )
    out = Path(output_dir) if output_dir else Path("outputs", "train", time.strftime("%Y-%m-%d_%H-%M-%S"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(describe(config))))
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
        raise ValueError(f"{checkpoint} holds no run config; was it written by maze_impala training?")
    env = make_env(record["env"])
    policy = make_policy(env, ModelConfig(**record["model"]))
    restore_modules(state, checkpoint, policy=policy)
    policy.eval()
    return policy, env
