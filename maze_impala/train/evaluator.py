"""The rollout evaluator: a fixed set of episodes, run side by side, after every epoch."""

from __future__ import annotations

from maze_impala.actors.actor import seed_for
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.api import EventHub
from maze_impala.events.episodes import KpiEvents
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.models import StructuredPolicy
from maze_impala.train.episodes import EpisodeResult, run_episodes


def publish_episode(hub: EventHub, result: EpisodeResult) -> None:
    """An episode's return, length, reduced env events and KPIs, into ``hub``."""
    episodes, kpis = hub.publisher(EpisodeEvents), hub.publisher(KpiEvents)
    episodes.episode_return(value=result.episode_return)
    episodes.episode_length(value=result.steps)
    hub.replay(result.records)
    for name, value in result.kpis.items():
        kpis.kpi(name=name, value=value)


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
    ):
        self.envs = [make_env(env) for _ in range(n_episodes)]
        self.episodes = [(i, seed_for(seed, 2**31 - 1, i)) for i in range(n_episodes)]
        self.deterministic = deterministic
        self.hub = hub
        self.keep_raw_events = keep_raw_events

    def evaluate(self, policy: StructuredPolicy) -> list[EpisodeResult]:
        """Play the episodes; publishes each one's return, length, env events and KPIs."""
        results = run_episodes(self.envs, policy, self.episodes, self.deterministic, True, self.keep_raw_events)
        for result in results:
            publish_episode(self.hub, result)
        return results

    def close(self) -> None:
        for env in self.envs:
            env.close()


def mean_return(results: list[EpisodeResult]) -> float:
    return sum(r.episode_return for r in results) / max(len(results), 1)
