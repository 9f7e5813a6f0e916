"""Where actors run (the backend) and where a training run's statistics go."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from maze_impala.config.base import ConfigError, check, check_choice

BACKENDS = ("dev", "local", "ray")
"""dev: in the learner's process, one actor after another; local: one process per actor (or rollout worker);
ray: one Ray actor per actor, on this machine or a Ray cluster (training only)."""
BACKEND_ALIASES = {"sequential": "dev", "subprocess": "local", "parallel": "local"}
"""Other names of the backends, accepted everywhere (Maze-RL's rollout runners and the class names)."""
START_METHODS = ("spawn", "forkserver", "fork")
LEARNER_CORES = ("auto", "leftover", "all")
EVENT_LOG_FORMATS = ("none", "csv", "parquet")
VIDEO_FORMATS = ("mp4", "gif")


def backend(name: str, field: str = "runner.type") -> str:
    """The backend's one name for ``name`` or one of its aliases."""
    name = BACKEND_ALIASES.get(name, name)
    check_choice(field, name, BACKENDS)
    return name


def auto_learner_cores(cnn: bool, recurrent: bool) -> str:
    """What ``runner.learner_cores=auto`` becomes: ``all`` for a learner that sets the pace while its actors wait
    (one with a CNN encoding images, ``cnn``, or a recurrent core, ``recurrent``, which it re-unrolls in every
    pass), ``leftover`` for an MLP's learner, whose actors keep their cores busy. Measured per shipped family in
    docs/benchmarks.md ("the learner's cores beside local actors")."""
    return "all" if cnn or recurrent else "leftover"


@dataclass
class RunnerConfig:
    """The actor backend of a training run: ``runner=local`` (the default), ``runner=dev`` or ``runner=ray``.

    The restart and timeout fields apply to the local and ray backends alike; ``address`` and
    ``num_cpus_per_actor`` to ray only.
    """

    type: str = "local"
    """local: one process per actor; dev: actors take turns in the learner's process (breakpoints work);
    ray: one Ray actor per actor (``pip install "maze_impala[ray]"``)."""
    start_method: str = "spawn"
    """multiprocessing start method of local actors (spawn, forkserver or fork)."""
    failure_timeout: float = 120.0
    """Seconds an actor may take to start and deliver its first rollout before it counts as hung."""
    max_restarts: int = 5
    """Restarts of failed actors (died, raised or hung) allowed within restart_window_s, all actors together;
    0: the first failure ends the run. An actor whose env raises before its first rollout ends the run at once."""
    restart_window_s: float = 600.0
    """The window in which max_restarts counts."""
    actor_timeout_s: float | None = None
    """Seconds an actor may hold a granted slot without delivering a rollout before it counts as hung and is
    restarted; None: 10x its median rollout time, at least 3 s."""
    learner_cores: str = "auto"
    """The most cores a CPU learner computes on (its torch threads), every runner: leftover: those the actors on
    this machine leave, at least one, for workloads whose actors keep their cores busy; all: every core this
    process may use, shared with waiting actors, for a learner that sets the pace; auto: what
    :func:`auto_learner_cores` chooses for the model (a run records what it became). Within that, the learner
    times its updates and computes with the fastest of 1, leftover and that many threads, which follows another
    program's load (see :mod:`maze_impala.impala.threads`); runner=dev computes on one thread, so that it repeats a
    run exactly. A number pins the threads, as ``OMP_NUM_THREADS`` in the environment does."""
    actor_device: str | None = None
    """None: actors act on the CPU, in numpy where the policy exports a numpy form (an MLP, an LSTM), through torch
    otherwise. ``cuda`` (or ``cuda:N``): every actor acts through torch on that GPU, its batch of observations
    crossing once per step, for a pixel workload whose CNN would cap the actors on the CPU; each actor process
    then holds a CUDA context of its own. ``cpu``: the same torch path on the CPU. runner=local and runner=dev."""
    learner_timeout_s: float = 300.0
    """algorithm.num_learners > 1: seconds one learner may wait for another within an update (a gradient sum)
    before the run fails; a learner that dies fails it at once."""
    address: str | None = None
    """runner=ray: None starts a Ray on this machine for the run (and stops it after); "auto" joins the cluster
    that `ray start` started on this machine, "ray://<head>:10001" one elsewhere (which keeps running after)."""
    num_cpus_per_actor: float = 1.0
    """runner=ray: the CPUs Ray reserves for each actor (fractions share a core)."""

    def __post_init__(self) -> None:
        self.type = backend(self.type)
        check(self.num_cpus_per_actor > 0, "runner.num_cpus_per_actor", self.num_cpus_per_actor, "> 0")
        if self.type != "ray" and self.address is not None:
            raise ConfigError(f"runner.address={self.address!r} applies to runner=ray only, not runner={self.type}")
        if self.type == "ray" and importlib.util.find_spec("ray") is None:
            raise ConfigError('runner=ray needs Ray, which is not installed: pip install "maze_impala[ray]"')
        check_choice("runner.start_method", self.start_method, START_METHODS)
        check(self.failure_timeout > 0, "runner.failure_timeout", self.failure_timeout, "> 0 seconds")
        check(
            isinstance(self.max_restarts, int) and self.max_restarts >= 0,
            "runner.max_restarts",
            self.max_restarts,
            "an int >= 0",
        )
        self.learner_cores = str(self.learner_cores)
        check(
            self.learner_cores in LEARNER_CORES or (self.learner_cores.isdigit() and int(self.learner_cores) >= 1),
            "runner.learner_cores",
            self.learner_cores,
            "auto, leftover, all or a number of threads >= 1",
        )
        check(self.learner_timeout_s > 0, "runner.learner_timeout_s", self.learner_timeout_s, "> 0 seconds")
        device = self.actor_device
        check(
            device in (None, "cpu", "cuda")
            or (isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit()),
            "runner.actor_device",
            device,
            "null (the CPU, numpy where the policy allows), cpu, cuda or cuda:N",
        )
        if self.type == "ray" and device is not None and device.startswith("cuda"):
            raise ConfigError(
                f"runner.actor_device={device} with runner=ray: a Ray actor sees a GPU only where it "
                "reserves one, which runner=ray does not yet; act on GPUs with runner=local, or drop "
                "runner.actor_device"
            )
        if self.start_method == "fork" and device is not None and device.startswith("cuda"):
            raise ConfigError(
                f"runner.actor_device={device} with runner.start_method=fork: a forked process cannot "
                "use CUDA once its parent has; start the actors with spawn (the default) or "
                "forkserver"
            )
        check(self.restart_window_s > 0, "runner.restart_window_s", self.restart_window_s, "> 0 seconds")
        check(
            self.actor_timeout_s is None or self.actor_timeout_s > 0,
            "runner.actor_timeout_s",
            self.actor_timeout_s,
            "None (derived) or > 0 seconds",
        )


@dataclass
class RolloutRunnerConfig:
    """The backend of a rollout (``maze-run -cn conf_rollout``): ``runner=dev`` (the default) or ``runner=local``."""

    type: str = "dev"
    """dev: the episodes in this process; local: spread over ``n_processes`` worker processes."""
    start_method: str = "spawn"
    """multiprocessing start method of local workers (spawn, forkserver or fork)."""
    n_processes: int = 0
    """Worker processes with runner=local (0: one per CPU core, at most one per episode)."""
    envs_per_process: int = 16
    """Episodes each process (or the dev runner) plays side by side, one batched forward pass per step."""

    def __post_init__(self) -> None:
        self.type = backend(self.type)
        check(self.type in ("dev", "local"), "runner.type", self.type, "dev or local for rollouts (ray trains only)")
        check_choice("runner.start_method", self.start_method, START_METHODS)
        check(
            isinstance(self.n_processes, int) and self.n_processes >= 0,
            "runner.n_processes",
            self.n_processes,
            "an int >= 0 (0: one per core)",
        )
        check(
            isinstance(self.envs_per_process, int) and self.envs_per_process >= 1,
            "runner.envs_per_process",
            self.envs_per_process,
            "an int >= 1",
        )


@dataclass
class VideoConfig:
    """Videos of played episodes, written into ``videos/`` of the output directory (``pip install
    "maze_impala[video]"``; the env must render ``rgb_array`` frames: ids and ``_target_`` configs are made with
    ``render_mode="rgb_array"``)."""

    episodes: int = 0
    """How many episodes to film: a rollout's first ones; in training, of every filmed evaluation (0: none)."""
    every: int = 1
    """Training: film the evaluation every this many epochs (and the last one)."""
    format: str = "mp4"
    """mp4 or gif."""
    fps: int = 30
    """Frames per second: one frame per structured step."""

    def __post_init__(self) -> None:
        check(isinstance(self.episodes, int) and self.episodes >= 0, "video.episodes", self.episodes, "an int >= 0")
        check(isinstance(self.every, int) and self.every >= 1, "video.every", self.every, "an int >= 1")
        check_choice("video.format", self.format, VIDEO_FORMATS)
        check(isinstance(self.fps, int) and self.fps >= 1, "video.fps", self.fps, "an int >= 1")


@dataclass
class OutputConfig:
    """What a training run writes besides its checkpoints (``output.<field>=...`` on the command line)."""

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
    """none, csv or parquet: every event of every evaluation episode, one table per event type."""
    checkpoint_every: int = 1
    """Save model_last.pt (what a resume continues from) every this many epochs, and at the end;
    model_best.pt is saved whenever the evaluation improves."""
    video: VideoConfig = field(default_factory=VideoConfig)
    """Videos of evaluation episodes (``output.video.episodes=1``), into videos/ and TensorBoard."""
    wandb: bool = False
    """Log every epoch's statistics to Weights & Biases (``pip install "maze_impala[wandb]"``)."""
    mlflow: bool = False
    """Log every epoch's statistics to MLflow (``pip install "maze_impala[mlflow]"``; the run's mlruns/ by default)."""

    def __post_init__(self) -> None:
        if isinstance(self.video, dict):
            self.video = VideoConfig(**self.video)
        check_choice("output.event_logs", self.event_logs, EVENT_LOG_FORMATS)
        check(
            isinstance(self.checkpoint_every, int) and self.checkpoint_every >= 1,
            "output.checkpoint_every",
            self.checkpoint_every,
            "an int >= 1",
        )
