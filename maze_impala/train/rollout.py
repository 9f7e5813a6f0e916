"""Rollout evaluation: ``maze-run -cn conf_rollout``, a policy played for ``n_episodes`` episodes.

Writes into its output dir: ``kpis.csv`` (one row per episode: id, seed, steps,
return, each KPI), ``kpis_summary.csv`` (mean, std, min, max), ``stats.csv`` (the
aggregated statistics, env events included) and, with ``runner.event_logs``, the raw
event logs. ``runner=parallel`` spreads the episodes over worker processes; episode
``i`` always runs with the same seed and one observation per forward pass, so both
runners give the same per-episode results.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pandas as pd

from maze_impala.actors.actor import seed_for
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.events.tables import (
    EVENT_LOG_DIR,
    KPI_CSV,
    KPI_SUMMARY_CSV,
    CsvTable,
    EventLogWriter,
    kpi_row,
    kpi_summary,
)
from maze_impala.events.writers import CsvWriter
from maze_impala.impala.config import ConfigError
from maze_impala.nn.models import ModelConfig, StructuredPolicy, make_policy, make_random_policy
from maze_impala.train.checkpoint import read_checkpoint, restore_modules
from maze_impala.train.episodes import EpisodeResult, episode_slots, run_episodes
from maze_impala.train.evaluator import EpisodePublisher
from maze_impala.train.progress import Progress
from maze_impala.train.setup import RunnerConfig

POLICY_TYPES = ("torch", "random")


@dataclass
class PolicyConfig:
    """Which policy a rollout plays."""

    type: str = "torch"
    """torch: a trained policy (``input_dir``/``checkpoint``); random: uniformly random actions."""
    checkpoint: str = "model_best.pt"

    def __post_init__(self) -> None:
        if self.type not in POLICY_TYPES:
            raise ConfigError(f"policy.type must be one of {POLICY_TYPES}, got {self.type!r}")


@dataclass
class RolloutConfig:
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    env: Any = None
    input_dir: str | None = None
    n_episodes: int = 16
    deterministic: bool = True
    seed: int = 1234

    def __post_init__(self) -> None:
        if self.n_episodes < 1:
            raise ConfigError(f"n_episodes must be >= 1, got {self.n_episodes!r}")
        if self.policy.type == "torch" and not self.input_dir:
            raise ConfigError("policy=torch_policy needs input_dir=<a training output dir>")
        if self.policy.type == "random" and self.env is None:
            raise ConfigError("policy=random_policy needs an env, e.g. env=gym_env env.name=CartPole-v1")


@dataclass
class _Job:
    """What a worker needs to play its episodes (picklable)."""

    env: EnvSpec
    model: dict[str, Any] | None
    checkpoint: str | None
    deterministic: bool
    keep_raw_events: bool


def _policy(job: _Job, env: Any) -> StructuredPolicy:
    if job.checkpoint is None:
        return make_random_policy(env)
    policy = make_policy(env, ModelConfig(**job.model))
    restore_modules(read_checkpoint(job.checkpoint), job.checkpoint, policy=policy)
    return policy.eval()


def _play(
    job: _Job, episodes: list[tuple[int, int]], on_episode: Callable[[EpisodeResult], None] | None = None
) -> list[EpisodeResult]:
    """One env slot, one observation per forward pass: results depend only on each episode's seed."""
    slots = episode_slots([make_env(job.env)], job.keep_raw_events)
    try:
        return run_episodes(slots, _policy(job, slots.envs[0]), episodes, job.deterministic, False, on_episode)
    finally:
        slots.close()


def _worker_init() -> None:
    import torch

    torch.set_num_threads(1)  # one core per worker process


def _job(config: RolloutConfig) -> _Job:
    keep_raw = config.runner.event_logs != "none"
    if config.policy.type == "random":
        return _Job(config.env, None, None, config.deterministic, keep_raw)
    checkpoint = Path(config.input_dir) / config.policy.checkpoint
    state = read_checkpoint(checkpoint)
    record = state.get("config")
    if record is None:
        raise ConfigError(f"{checkpoint} holds no run config; was it written by maze_impala training?")
    env = config.env if config.env is not None else record["env"]
    job = _Job(env, record["model"], str(checkpoint), config.deterministic, keep_raw)
    probe = make_env(env)
    try:
        _policy(job, probe)  # a mismatched env or checkpoint fails here, before any worker starts
    finally:
        probe.close()
    return job


def rollout(config: RolloutConfig, output_dir: Path) -> list[EpisodeResult]:
    """Play the episodes, write the outputs, print a summary; returns the per-episode results."""
    output_dir.mkdir(parents=True, exist_ok=True)
    job = _job(config)
    episodes = [(i, seed_for(config.seed, i)) for i in range(config.n_episodes)]
    progress = Progress(config.n_episodes, unit="episode") if config.runner.progress else None
    results: list[EpisodeResult] = []
    try:
        if config.runner.type == "sequential":

            def report(result: EpisodeResult) -> None:
                results.append(result)
                if progress is not None:
                    progress.update(len(results), sum(r.steps for r in results))

            _play(job, episodes, report)
        else:
            n = config.runner.n_processes or os.cpu_count() or 1
            chunks = [episodes[i::n] for i in range(min(n, len(episodes)))]
            context = get_context(config.runner.start_method)
            with ProcessPoolExecutor(len(chunks), mp_context=context, initializer=_worker_init) as pool:
                futures = [pool.submit(_play, job, chunk) for chunk in chunks]
                try:
                    for future in as_completed(futures):
                        results += future.result()  # a dead worker raises BrokenProcessPool here
                        if progress is not None:
                            progress.update(len(results), sum(r.steps for r in results))
                except BaseException:
                    for process in list(getattr(pool, "_processes", {}).values()):
                        process.kill()  # do not wait for the other workers' episodes
                    raise
    finally:
        if progress is not None:
            progress.close()
    results.sort(key=lambda r: r.episode_id)
    _write(config, results, output_dir)
    return results


def _write(config: RolloutConfig, results: list[EpisodeResult], output_dir: Path) -> None:
    rows = [kpi_row(r.episode_id, r.seed, r.steps, r.episode_return, r.kpis) for r in results]
    CsvTable(output_dir / KPI_CSV).append(rows)
    summary = kpi_summary(rows)
    CsvTable(output_dir / KPI_SUMMARY_CSV).append(summary)
    hub = EventHub()
    stats = StatsAggregator("rollout")
    hub.listeners.append(stats)
    publish = EpisodePublisher(hub)
    for result in results:
        publish(result)
    CsvWriter(output_dir / "stats.csv").write(1, sum(r.steps for r in results), by_column(stats.reduce()))
    if config.runner.event_logs != "none":
        logs = EventLogWriter(output_dir / EVENT_LOG_DIR, config.runner.event_logs)
        for result in results:
            logs.add(result.episode_id, result.raw)
        logs.flush()
    table = pd.DataFrame(summary).set_index("kpi")
    print(f"{len(results)} episodes ({'greedy' if config.deterministic else 'sampled'} actions):")
    print(table.to_string(float_format=lambda x: f"{x:.4g}"))
