"""Play episodes with a policy in one call, as the evaluator plays them (for the tests)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from maze_impala.actors.results import EpisodeResult
from maze_impala.envs.batch import FrameSink
from maze_impala.envs.structured import StructuredEnv
from maze_impala.evaluate.evaluator import episode_player
from maze_impala.nn.models import StructuredPolicy


def play_episodes(
    envs: list[StructuredEnv],
    policy: StructuredPolicy,
    episodes: Sequence[tuple[int, int]],
    deterministic: bool,
    on_episode: Callable[[EpisodeResult], None] | None = None,
    keep_raw_events: bool = False,
    record: Callable[[int], FrameSink | None] | None = None,
    max_episode_steps: int | None = None,
) -> list[EpisodeResult]:
    """Play ``episodes`` (``(episode id, seed)`` pairs) with ``policy`` on ``envs`` side by side; results in episode
    order (``record``: see :meth:`~maze_impala.actors.actor.RolloutActor.play`)."""
    player = episode_player(envs, policy, deterministic, keep_raw_events, max_episode_steps)
    return player.play(episodes, on_episode, record)
