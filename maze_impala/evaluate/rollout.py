"""Rollout evaluation: ``maze-run -cn conf_rollout``, a policy played for ``n_episodes`` episodes.

Writes into its output dir: ``kpis.csv`` (one row per episode: id, seed, steps,
return, each KPI), ``kpis_summary.csv`` (mean, std, min, max), ``stats.csv`` (the
aggregated statistics, env events included) and, with ``event_logs``, the raw
event logs. ``runner=local`` spreads the episodes over worker processes. Each process
plays ``runner.envs_per_process`` episodes side by side through the actor's loop, one
batched forward pass per step, each env with its own recurrent state; episode ``i``
always runs with the same seed (and, for sampled actions, its own random stream), so
both runners give the same per-episode results.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pandas as pd

from maze_impala.actors.actor import seed_for
from maze_impala.actors.results import EpisodePublisher, EpisodeResult
from maze_impala.checkpoints import Checkpoint, CheckpointMismatchError, CorruptCheckpointError, UnsafeCheckpointError
from maze_impala.config import ConfigError, RolloutConfig, VideoConfig
from maze_impala.config.base import to_record, to_yaml
from maze_impala.envs.factory import EnvSpec, env_record, make_env, rendering
from maze_impala.evaluate.evaluator import spec_player
from maze_impala.evaluate.games import GameResult, Games
from maze_impala.evaluate.games import summary as games_summary
from maze_impala.evaluate.video import Videos, check_renders
from maze_impala.events.api import EventHub
from maze_impala.events.progress import Progress
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.events.tables import EventLogWriter, kpi_summary, write_csv
from maze_impala.events.writers import CsvWriter
from maze_impala.files import atomic_write_text
from maze_impala.machine import usable_cores
from maze_impala.nn.models import StructuredPolicy
from maze_impala.play.lineup import resolve_opponents
from maze_impala.play.spec import PolicySpec, load_acting
from maze_impala.run_files import (
    CONFIG_YAML,
    EVENT_LOG_DIR,
    GAMES_CSV,
    GAMES_SUMMARY_CSV,
    KPI_CSV,
    KPI_SUMMARY_CSV,
    STATS_CSV,
    VIDEO_DIR,
)
from maze_impala.startup import enter_process


@dataclass
class _Job:
    """What a worker needs to play its episodes (picklable)."""

    env: EnvSpec
    policy: PolicySpec
    deterministic: bool
    keep_raw_events: bool
    n_envs: int
    """Episodes played side by side in one process."""
    video: VideoConfig = field(default_factory=VideoConfig)
    videos_dir: str = ""
    """Where the first ``video.episodes`` episodes' videos go."""
    max_episode_steps: int | None = None
    """An episode of an env without a time limit of its own ends as truncated after this many structured steps."""
    searched: Checkpoint | None = None
    """The checkpoint, as read for the policy, where the moves are searched (its critic guides the search)."""


def _policy(job: _Job, env: Any) -> StructuredPolicy:
    return job.policy.policy(env)


def _play(
    job: _Job, episodes: list[tuple[int, int]], on_episode: Callable[[EpisodeResult], None] | None = None
) -> list[EpisodeResult]:
    """Up to ``job.n_envs`` episodes side by side, one batched forward pass per step key and sub-step."""
    filmed = job.video.episodes
    spec = rendering(job.env) if filmed else job.env
    envs = [make_env(spec) for _ in range(min(job.n_envs, len(episodes)))]
    videos = Videos(Path(job.videos_dir), job.video.format, job.video.fps)
    record = (lambda episode_id: videos.open(episode_id) if episode_id < filmed else None) if filmed else None
    try:
        player = spec_player(
            envs,
            load_acting(job.policy, envs[0]),
            job.deterministic,
            job.keep_raw_events,
            max_episode_steps=job.max_episode_steps,
        )
        return player.play(episodes, on_episode, record)
    finally:
        for env in envs:
            env.close()


def _worker_init() -> None:
    enter_process(1, load=True)  # one core per worker process


def _job(config: RolloutConfig, output_dir: Path) -> _Job:
    keep_raw, n_envs = config.event_logs != "none", config.runner.envs_per_process
    videos = str(output_dir / VIDEO_DIR)
    if config.policy.type == "random":  # a random policy samples, whatever `deterministic` says
        job = _Job(
            config.env, PolicySpec.random(), False, keep_raw, n_envs, config.video, videos, config.max_episode_steps
        )
        _check_renders(job)
        return job
    checkpoint = Path(config.input_dir) / config.policy.checkpoint
    try:
        read = Checkpoint.read(checkpoint)  # here, once: the workers get the weights with the job
        spec = PolicySpec.from_checkpoint(read)
    except (FileNotFoundError, CorruptCheckpointError, UnsafeCheckpointError) as error:  # a refusal: nothing ran
        raise ConfigError(str(error)) from error
    env = config.env if config.env is not None else spec.env
    searched = read if config.search else None
    job = _Job(
        env, spec, config.deterministic, keep_raw, n_envs, config.video, videos, config.max_episode_steps, searched
    )
    probe = make_env(env)
    try:
        load_acting(job.policy, probe)  # a mismatched env or checkpoint fails here, before any worker starts
    except CheckpointMismatchError as error:
        raise ConfigError(str(error)) from error
    finally:
        probe.close()
    _check_renders(job)
    return job


def _check_renders(job: _Job) -> None:
    """With videos asked for, the env must render frames: a clear error before any episode if it does not."""
    if not job.video.episodes:
        return
    env = make_env(rendering(job.env))
    try:
        check_renders(env, f"video.episodes={job.video.episodes}")
    finally:
        env.close()


def rollout(config: RolloutConfig, output_dir: Path) -> list[EpisodeResult]:
    """Play the episodes, write the outputs, print a summary; returns the per-episode results."""
    output_dir.mkdir(parents=True, exist_ok=True)
    record = to_record(config, env=env_record(config.env) if config.env is not None else None)
    job = _job(config, output_dir)
    atomic_write_text(output_dir / CONFIG_YAML, to_yaml(record))
    if config.opponent is not None:
        return _games(config, config.opponent, job, output_dir)
    episodes = [(i, seed_for(config.seed, i)) for i in range(config.n_episodes)]
    progress = Progress(config.n_episodes, unit="episode") if config.progress else None
    results: list[EpisodeResult] = []

    def report(result: EpisodeResult) -> None:
        results.append(result)
        if progress is not None:
            progress.add_return(result.episode_return)
            progress.update(len(results), sum(r.steps for r in results))

    try:
        if config.runner.type == "dev":
            _play(job, episodes, report)
        else:
            _play_in_processes(job, episodes, config, report)
    except KeyboardInterrupt:  # the episodes played so far are kept: their rows and statistics are written
        if results:
            results.sort(key=lambda r: r.episode_id)
            _write(config, results, output_dir)
        raise
    finally:
        if progress is not None:
            progress.close()
    results.sort(key=lambda r: r.episode_id)
    _write(config, results, output_dir)
    _say_capped(results, config.max_episode_steps)
    return results


def _say_capped(results: list[EpisodeResult], cap: int | None) -> None:
    """Once, how many episodes the cap cut off."""
    capped = sum(r.capped for r in results)
    if capped:
        print(
            f"{capped} of {len(results)} episodes reached max_episode_steps={cap:,} without ending and were cut off "
            f"as truncated ({KPI_CSV} marks them; the env has no time limit of its own): set "
            "max_episode_steps=<steps> to change where"
        )


def _games(config: RolloutConfig, name: str, job: _Job, output_dir: Path) -> list[EpisodeResult]:
    """``n_episodes`` games in every seat against the opponent ``name`` (``config.opponent``): games.csv,
    games_summary.csv, stats.csv."""
    hub = EventHub()
    stats = StatsAggregator("rollout")
    hub.listeners.append(stats)
    probe = make_env(job.env)
    try:
        opponent = resolve_opponents(probe, judge=name)[name]
    finally:
        probe.close()
    games = Games(job.env, opponent, config.n_episodes, job.deterministic, config.seed, hub, job.max_episode_steps)
    seats = len(games.agents)
    progress = Progress(config.n_episodes * seats, unit="game") if config.progress else None
    results: list[GameResult] = []

    def report(game: GameResult) -> None:
        results.append(game)
        if progress is not None:
            progress.add_return(game.seat_return)
            progress.update(len(results), sum(r.episode.steps for r in results))

    try:
        policy = _policy(job, games.envs[0])
        acting = None
        if job.searched is not None:  # the policy's moves searched, guided by it and its run's critic
            from maze_impala.play.guided import GuidedSearch
            from maze_impala.play.spec import load_critic

            critic = load_critic(job.searched, games.envs[0])
            acting = GuidedSearch(games.envs[0], policy, critic, config.search, config.seed)
        games.play(policy, report, acting)
    finally:
        games.close()
        if progress is not None:
            progress.close()
    episodes = [r.episode for r in results]
    _say_capped(episodes, job.max_episode_steps)
    rows = []
    for game, e in zip(results, episodes):
        row = e.kpi_row()
        rows.append({"seat": game.seat, "outcome": game.outcome, "seat_return": game.seat_return, **row})
    write_csv(output_dir / GAMES_CSV, rows)
    table = games_summary(results)
    write_csv(output_dir / GAMES_SUMMARY_CSV, table)
    CsvWriter(output_dir / STATS_CSV).write(1, sum(e.steps for e in episodes), by_column(stats.reduce()))
    kind = "random" if config.policy.type == "random" else "greedy" if config.deterministic else "sampled"
    kind = (
        f"a search of {config.search} simulations a move, guided by the policy" if config.search else f"{kind} actions"
    )
    print(
        f"{len(results)} game{'' if len(results) == 1 else 's'} against {config.opponent}, {config.n_episodes} in "
        f"each seat ({kind}):"
    )
    print(pd.DataFrame(table).set_index("seat").to_string(float_format=lambda x: f"{x:.3f}"))
    return episodes


def _play_in_processes(
    job: _Job, episodes: list[tuple[int, int]], config: RolloutConfig, report: Callable[[EpisodeResult], None]
) -> None:
    """Spread the episodes over ``runner.n_processes`` workers (0: one per core); kills them all on a failure."""
    n = config.runner.n_processes or usable_cores()
    chunks = [episodes[i::n] for i in range(min(n, len(episodes)))]
    context = get_context(config.runner.start_method)
    with ProcessPoolExecutor(len(chunks), mp_context=context, initializer=_worker_init) as pool:
        futures = [pool.submit(_play, job, chunk) for chunk in chunks]
        try:
            for future in as_completed(futures):
                for result in future.result():  # a dead worker raises BrokenProcessPool here
                    report(result)
        except BaseException:
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()  # do not wait for the other workers' episodes
            raise


def _write(config: RolloutConfig, results: list[EpisodeResult], output_dir: Path) -> None:
    rows = [r.kpi_row() for r in results]
    write_csv(output_dir / KPI_CSV, rows)
    summary = kpi_summary(rows)
    write_csv(output_dir / KPI_SUMMARY_CSV, summary)
    hub = EventHub()
    stats = StatsAggregator("rollout")
    hub.listeners.append(stats)
    publish = EpisodePublisher(hub)
    for result in results:
        publish(result)
    CsvWriter(output_dir / STATS_CSV).write(1, sum(r.steps for r in results), by_column(stats.reduce()))
    if config.event_logs != "none":
        logs = EventLogWriter(output_dir / EVENT_LOG_DIR, config.event_logs)
        for result in results:
            logs.add(result.episode_id, result.raw)
        logs.flush()
    table = pd.DataFrame(summary).set_index("kpi")
    kind = "random" if config.policy.type == "random" else "greedy" if config.deterministic else "sampled"
    print(f"{len(results)} episode{'' if len(results) == 1 else 's'} ({kind} actions):")
    print(table.to_string(float_format=lambda x: f"{x:.4g}"))
