"""The rollout evaluator: a fixed set of episodes, run side by side through the actor's loop, after every epoch."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from maze_impala.actors.actor import PLAY_CHUNK, PlayProgress, RolloutActor, seed_for
from maze_impala.actors.results import EpisodePublisher, EpisodeResult
from maze_impala.actors.weights import ModuleWeights
from maze_impala.envs.factory import EnvSpec, make_env, rendering
from maze_impala.evaluate.games import Games
from maze_impala.evaluate.video import Videos, check_renders
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator
from maze_impala.play.games import SCORES
from maze_impala.run_files import VIDEO_DIR

if TYPE_CHECKING:
    from pathlib import Path

    from maze_impala.config import TrainingConfig
    from maze_impala.core import WeightSource
    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.evaluate.games import GameResult
    from maze_impala.events.progress import Progress
    from maze_impala.nn.acting import Acting
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.play.spec import PolicySpec


def episode_player(
    envs: list[StructuredEnv],
    policy: StructuredPolicy,
    deterministic: bool,
    keep_raw_events: bool = False,
    max_episode_steps: int | None = None,
) -> RolloutActor:
    """An actor that plays episodes with ``policy``'s current weights (reloaded for every :meth:`~RolloutActor.play`),
    acting as training's actors do: in numpy where the policy exports a numpy form, else in torch."""
    from maze_impala.nn.torch_acting import make_acting

    return spec_player(
        envs, make_acting(policy), deterministic, keep_raw_events, ModuleWeights(policy), max_episode_steps
    )


def spec_player(
    envs: list[StructuredEnv],
    acting: Acting,
    deterministic: bool,
    keep_raw_events: bool = False,
    weights: WeightSource | None = None,
    max_episode_steps: int | None = None,
) -> RolloutActor:
    """An actor that plays episodes with ``acting`` (a fixed policy's, as :func:`~maze_impala.play.spec.load_acting`
    builds it from a spec; or a trained one's, whose ``weights`` it reloads for every play); an episode of an env
    without a time limit of its own ends as truncated after ``max_episode_steps`` structured steps."""
    return RolloutActor(
        envs,
        weights,
        acting,
        PLAY_CHUNK,
        seed=0,
        deterministic=deterministic,
        stepping="general",
        keep_raw_events=keep_raw_events,
        max_episode_steps=max_episode_steps,
    )


class RolloutEvaluator:
    """Runs ``n_episodes`` episodes (one per env, batched by step key) with fixed seeds, so that epochs compare."""

    def __init__(
        self,
        env: EnvSpec,
        n_episodes: int,
        deterministic: bool,
        seed: int,
        hub: EventHub,
        keep_raw_events: bool = False,
        videos: Videos | None = None,
        filmed: int = 0,
        games: Games | None = None,
        max_episode_steps: int | None = None,
    ):
        """``videos`` and ``filmed``: where the films of the first ``filmed`` episodes of an evaluation go (see
        :meth:`evaluate`); the envs then render. ``games``: games against a fixed opponent, played after the
        episodes of every evaluation. ``max_episode_steps``: an episode of an env without a time limit of its
        own ends as truncated after this many structured steps."""
        self.games, self.max_episode_steps = games, max_episode_steps
        self.on_progress: Callable[[PlayProgress], None] | None = None
        """Sees how far each evaluation is (the trainer's status line and watchdog)."""
        self.videos, self.filmed = videos, filmed
        self.envs = [make_env(rendering(env) if filmed else env) for _ in range(n_episodes)]
        self.episodes = [(i, seed_for(seed, 2**31 - 1, i)) for i in range(n_episodes)]
        self.deterministic, self.keep_raw_events = deterministic, keep_raw_events
        self.publish = EpisodePublisher(hub)
        self._player: tuple[StructuredPolicy, RolloutActor] | None = None
        self._score = -math.inf

    def evaluate(self, policy: StructuredPolicy, film: str | None = None) -> list[EpisodeResult]:
        """Play the episodes with ``policy``'s current weights; publishes each one's return, length, env events and
        KPIs. ``film``: a prefix for the video files of the first filmed episodes (``<film>episode_<id>``)."""
        if self._player is None or self._player[0] is not policy:
            player = episode_player(self.envs, policy, self.deterministic, self.keep_raw_events, self.max_episode_steps)
            self._player = (policy, player)
        record = None
        if film is not None and self.videos is not None:
            videos, filmed = self.videos, self.filmed
            videos.prefix, videos.written = film, []
            record = lambda episode_id: videos.open(episode_id) if episode_id < filmed else None  # noqa: E731
        results = self._player[1].play(self.episodes, self.publish, record, self.on_progress)
        self._score = mean_return(results)
        if self.games is not None:
            self._score = game_score(self.games.play(policy))
        return results

    @property
    def score(self) -> float:
        """What the last evaluation scored, which selects ``model_best.pt``: the mean return of its episodes, or,
        with games against an opponent, the mean over seats of the win rate plus half the draw rate (in
        zero-sum self-play the mean return is 0 whatever the policy)."""
        return self._score

    def close(self) -> None:
        for env in self.envs:
            env.close()
        if self.games is not None:
            self.games.close()


def mean_return(results: list[EpisodeResult]) -> float:
    return sum(r.episode_return for r in results) / max(len(results), 1)


def game_score(results: list[GameResult]) -> float:
    """The mean over games (each seat plays as many) of 1 for a win, 0.5 for a draw, 0 for a loss."""
    return sum(SCORES[r.outcome] for r in results) / max(len(results), 1)


def make_evaluator(
    config: TrainingConfig, output_dir: Path, judge: PolicySpec | None, progress: Progress | None = None
) -> tuple[RolloutEvaluator, StatsAggregator]:
    """The evaluation after every epoch of a run of ``config`` in ``output_dir`` (its films in its video folder),
    with its games against ``judge`` (``rollout_evaluator.opponent``'s spec, None: no games), and the statistics
    it gathers; ``progress``: the status line, which counts the games' outcomes."""
    algorithm, output = config.algorithm, config.output
    evaluation, filmed = algorithm.rollout_evaluator, config.filmed_episodes
    hub, stats = EventHub(), StatsAggregator("eval")
    hub.listeners.append(stats)
    if progress is not None:
        hub.listeners.append(progress.evaluation_games)
    games = None
    if judge is not None:
        games = Games(
            config.env,
            judge,
            evaluation.n_episodes,
            evaluation.deterministic,
            config.seed,
            hub,
            config.max_episode_steps,
        )
    videos = Videos(output_dir / VIDEO_DIR, output.video.format, output.video.fps, thumbnails=output.tensorboard)
    evaluator = RolloutEvaluator(
        config.env,
        evaluation.n_episodes,
        evaluation.deterministic,
        config.seed,
        hub,
        keep_raw_events=output.event_logs != "none",
        videos=videos if filmed else None,
        filmed=filmed,
        games=games,
        max_episode_steps=config.max_episode_steps,
    )
    if filmed:
        check_renders(evaluator.envs[0], f"output.video.episodes={output.video.episodes}")
    return evaluator, stats
