"""Whole runs: a training run (``conf_train``) and a rollout (``conf_rollout``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maze_impala.config.algorithm import ImpalaAlgorithmConfig
from maze_impala.config.base import ConfigError, check, check_choice
from maze_impala.config.model import ModelConfig
from maze_impala.config.runner import EVENT_LOG_FORMATS, OutputConfig, RolloutRunnerConfig, RunnerConfig, VideoConfig
from maze_impala.run_files import BEST_MODEL, LAST_MODEL

POLICY_TYPES = ("torch", "random")

MAX_EPISODE_STEPS = 27_000
"""The default episode cap: Atari's convention of 108,000 frames at a frame skip of 4. The shipped envs without a
time limit of their own (MinAtar's five games) play far shorter episodes (Freeway ends itself after 2,500 steps), so
no normal episode reaches it, while an evaluation of a policy that never loses ends within minutes."""


def check_episode_cap(value: object) -> None:
    check(
        value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1),
        "max_episode_steps",
        value,
        "null or an int >= 1",
    )


@dataclass
class TrainingConfig:
    """A whole training run: what ``maze-run -cn conf_train`` composes and what :func:`~maze_impala.train` takes."""

    env: Any = "CartPole-v1"
    """A Gymnasium id, a config with ``_target_``, or a factory (see :mod:`maze_impala.envs.factory`)."""
    algorithm: ImpalaAlgorithmConfig = field(default_factory=ImpalaAlgorithmConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    seed: int = 1234
    """The run's seed: model initialisation, actor and evaluation env seeds derive from it."""
    overwrite: bool = False
    """Train into an output directory that holds another run's files, replacing them."""
    resume: str | None = None
    """A run directory to continue from its last checkpoint (its outputs continue there too)."""
    max_episode_steps: int | None = MAX_EPISODE_STEPS
    """Every episode of an env without a time limit of its own (training, evaluation, games, videos) ends as
    truncated after this many structured steps; an env's own limit (a Gymnasium id's ``max_episode_steps``) is
    kept. None: never cut (an env that never ends its episodes then never ends an evaluation)."""

    def __post_init__(self) -> None:
        check(isinstance(self.seed, int) and not isinstance(self.seed, bool), "seed", self.seed, "an int")
        check_episode_cap(self.max_episode_steps)

    @property
    def filmed_episodes(self) -> int:
        """How many episodes of each filmed evaluation are filmed (0: none)."""
        return min(self.output.video.episodes, self.algorithm.rollout_evaluator.n_episodes)


def check_checkpoint_in(input_dir: str, checkpoint: str) -> None:
    """Refuse a ``policy.checkpoint`` outside ``input_dir``: the env and model come from ``input_dir``'s run, so
    another run's checkpoint would play under this run's config, or not load."""
    path = Path(checkpoint)
    if (Path(input_dir) / path).resolve().parent != Path(input_dir).resolve():
        raise ConfigError(
            f"policy.checkpoint={checkpoint} is not a file of input_dir={input_dir}: the rollout plays a checkpoint "
            f"of input_dir's run ({BEST_MODEL} or {LAST_MODEL} there). To play {path.name} of another run, give "
            f"its directory: input_dir={(Path(input_dir) / path).parent} policy.checkpoint={path.name}"
        )


@dataclass
class PolicyConfig:
    """Which policy a rollout plays."""

    type: str = "torch"
    """torch: a trained policy (``input_dir``/``checkpoint``); random: uniformly random over the allowed actions."""
    checkpoint: str = BEST_MODEL
    """The checkpoint of ``input_dir`` that policy=torch_policy plays."""

    def __post_init__(self) -> None:
        check_choice("policy.type", self.type, POLICY_TYPES)


@dataclass
class RolloutConfig:
    """A rollout: ``maze-run -cn conf_rollout``, or :func:`maze_impala.evaluate.rollout.rollout`."""

    policy: PolicyConfig = field(default_factory=PolicyConfig)
    runner: RolloutRunnerConfig = field(default_factory=RolloutRunnerConfig)
    env: Any = None
    """The env to play; None: the training run's env (policy=torch_policy)."""
    input_dir: str | None = None
    """A training output directory (config.yaml and checkpoints); needed by policy=torch_policy."""
    n_episodes: int = 16
    deterministic: bool = True
    """Greedy actions (true) or actions sampled from the policy (false); a random policy always samples."""
    seed: int = 1234
    """Episode ``i`` runs with a seed derived from (seed, i), whatever the runner."""
    progress: bool = True
    """A live status line: episodes done, env steps, steps/s, mean return so far."""
    event_logs: str = "none"
    """none, csv or parquet: every event of every episode, one table per event type."""
    video: VideoConfig = field(default_factory=VideoConfig)
    """Videos of the first ``video.episodes`` episodes, into videos/ of the output directory."""
    algorithm: Any = None
    """Unused: the training settings an env family's config carries beside its env (``env=minatar``'s learning
    rate), here so that ``env=<family>`` composes for a rollout too. A rollout trains nothing."""
    model: Any = None
    """Unused likewise: the model settings an env family's config carries; a rollout plays its policy's own model
    (``input_dir``'s run, or none for a random policy)."""
    opponent: str | None = None
    """Multi-agent games: instead of episodes, play ``n_episodes`` games in every seat against this fixed
    opponent (``random``, a checkpoint, or a training output dir), in this process; writes games.csv and
    games_summary.csv (win, draw and loss rates per seat)."""
    max_episode_steps: int | None = MAX_EPISODE_STEPS
    """An episode of an env without a time limit of its own ends as truncated after this many structured steps
    (see :attr:`TrainingConfig.max_episode_steps`)."""
    search: int = 0
    """Games against an opponent: the policy decides by a search of this many simulations per move guided by it and
    by its run's critic (AlphaZero's MCTS, :mod:`maze_impala.play.guided`; the games OpenSpiel has); 0: the policy
    alone."""

    def __post_init__(self) -> None:
        check_episode_cap(self.max_episode_steps)
        check(
            isinstance(self.search, int) and (self.search == 0 or self.search >= 2),
            "search",
            self.search,
            "0 (the policy alone) or the simulations per move, >= 2",
        )
        if self.search and (self.opponent is None or self.policy.type != "torch"):
            raise ConfigError(
                f"search={self.search} searches with a trained policy in games against an opponent: "
                "give input_dir=<a training run of a game> and opponent=random (or mcts, a "
                "checkpoint)"
            )
        check(
            self.opponent is None or (isinstance(self.opponent, str) and bool(self.opponent)),
            "opponent",
            self.opponent,
            "null, random, or the path of a checkpoint or training output dir",
        )
        if isinstance(self.video, dict):
            self.video = VideoConfig(**self.video)
        check(isinstance(self.n_episodes, int) and self.n_episodes >= 1, "n_episodes", self.n_episodes, "an int >= 1")
        if self.opponent is not None and self.video.episodes:
            raise ConfigError(
                f"video.episodes={self.video.episodes} with opponent={self.opponent}: games against an "
                "opponent are not filmed; film the policy's own games (without opponent=), or drop "
                "video.episodes"
            )
        check_choice("event_logs", self.event_logs, EVENT_LOG_FORMATS)
        if self.policy.type == "torch" and not self.input_dir:
            raise ConfigError("policy=torch_policy needs input_dir=<a training output dir>")
        if self.policy.type == "torch":
            check_checkpoint_in(self.input_dir, self.policy.checkpoint)
        if self.policy.type == "random" and self.env is None:
            raise ConfigError("policy=random_policy needs an env, e.g. env=gym_env env.name=CartPole-v1")


EXPORT_FORMATS = ("onnx", "numpy")


@dataclass
class ExportConfig:
    """An export of a trained policy: ``maze-run -cn conf_export`` (see :mod:`maze_impala.deploy`)."""

    input_dir: str | None = None
    """A training output directory."""
    checkpoint: str = BEST_MODEL
    """The checkpoint of ``input_dir`` to export."""
    format: str = "onnx"
    """onnx: one ONNX graph per step key, run by onnxruntime (any policy of ops ONNX has); numpy: the numpy form the
    actors run (MLP and recurrent policies without a CNN), run by numpy alone."""

    def __post_init__(self) -> None:
        check_choice("format", self.format, EXPORT_FORMATS)
        if not self.input_dir:
            raise ConfigError("conf_export needs input_dir=<a training output dir>")
        check_checkpoint_in(self.input_dir, self.checkpoint)
