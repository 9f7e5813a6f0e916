"""The rollout evaluator: a fixed set of episodes, run side by side, after every epoch."""

from __future__ import annotations

from maze_impala.actors.actor import seed_for
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.api import EventHub
from maze_impala.events.episodes import KpiEvents
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.models import StructuredPolicy
from maze_impala.train.episodes import EpisodeResult, episode_slots, run_episodes


class EpisodePublisher:
    """Publishes finished episodes into a hub: return, length, the env's reduced events and KPIs."""

    def __init__(self, hub: EventHub):
        self.hub = hub
        self.episodes, self.kpis = hub.publisher(EpisodeEvents), hub.publisher(KpiEvents)

    def __call__(self, result: EpisodeResult) -> None:
        self.episodes.episode_return(value=result.episode_return)
        self.episodes.episode_length(value=result.steps)
        self.hub.replay(result.records)
        for name, value in result.kpis.items():
            self.kpis.kpi(name=name, value=value)


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
        self.slots = episode_slots([make_env(env) for _ in range(n_episodes)], keep_raw_events)
        self.episodes = [(i, seed_for(seed, 2**31 - 1, i)) for i in range(n_episodes)]
        self.deterministic = deterministic
        self.publish = EpisodePublisher(hub)

    def evaluate(self, policy: StructuredPolicy) -> list[EpisodeResult]:
        """Play the episodes; publishes each one's return, length, env events and KPIs."""
        return run_episodes(self.slots, policy, self.episodes, self.deterministic, True, self.publish)

    def close(self) -> None:
        self.slots.close()


def mean_return(results: list[EpisodeResult]) -> float:
    return sum(r.episode_return for r in results) / max(len(results), 1)
