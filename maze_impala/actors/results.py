"""What a finished episode leaves: its :class:`EpisodeResult`, and the one :class:`EpisodePublisher` that turns
episodes into events, for training's actors, the evaluation and the rollout CLI alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from maze_impala.core import ActorID, StepKey
from maze_impala.events.api import EventHub, EventRecord
from maze_impala.events.episodes import KpiEvents
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.events.tables import kpi_row


def step_key_returns(actor_returns: dict[ActorID, float]) -> dict[StepKey, float]:
    """The mean return of each step key's actors."""
    if len(actor_returns) == 1:
        (((key, _), value),) = actor_returns.items()
        return {key: value}
    by_key: dict[StepKey, list[float]] = {}
    for actor, value in actor_returns.items():
        by_key.setdefault(actor.step_key, []).append(value)
    return {key: sum(values) / len(values) for key, values in by_key.items()}


def agent_returns(actor_returns: dict[ActorID, float], agents: dict[str, ActorID]) -> dict[str, float]:
    """The return of each named agent (see :attr:`StructuredEnv.agents_dict`) that acted in the episode."""
    return {name: actor_returns[actor] for name, actor in agents.items() if actor in actor_returns}


@dataclass
class EpisodeResult:
    """One played episode (evaluation, rollouts)."""

    episode_id: int
    seed: int
    steps: int
    """Structured steps."""
    episode_return: float
    actor_returns: dict[ActorID, float] = field(default_factory=dict)
    """The reward credited to each actor (step key, agent)."""
    agent_returns: dict[str, float] = field(default_factory=dict)
    """The return of each named agent of a multi-agent env (see :attr:`StructuredEnv.agents_dict`)."""
    kpis: dict[str, float] = field(default_factory=dict)
    records: list[EventRecord] = field(default_factory=list)
    """The env's events of the episode, reduced as their interfaces declare."""
    raw: list[tuple[int, EventRecord]] = field(default_factory=list)
    """Every event of the episode with its structured step (when raw events were asked for)."""
    truncated: bool = False
    """Cut off by a time limit (the env's own, or ``max_episode_steps``) rather than terminated."""
    capped: bool = False
    """Cut off by ``max_episode_steps``: the env has no time limit of its own and the episode had not ended."""

    def kpi_row(self) -> dict[str, Any]:
        """Its row of ``kpis.csv`` (see :func:`~maze_impala.events.tables.kpi_row`)."""
        return kpi_row(
            self.episode_id, self.seed, self.steps, self.episode_return, self.kpis, self.agent_returns, self.truncated
        )


class EpisodePublisher:
    """Publishes finished episodes into a hub: return, length, return per step key and per named agent, the env's
    reduced events and KPIs. The one publisher of training's actors, the evaluation and the rollout CLI, so that
    every statistic of a training episode exists for an evaluation episode too."""

    def __init__(self, hub: EventHub):
        self.hub = hub
        self.episodes, self.kpis = hub.publisher(EpisodeEvents), hub.publisher(KpiEvents)

    def publish(
        self,
        episode_return: float,
        length: int,
        actor_returns: dict[ActorID, float],
        agent_returns: dict[str, float],
        records: list[EventRecord],
        kpis: dict[str, float],
        truncated: bool = False,
    ) -> None:
        self.episodes.episode_return(value=episode_return)
        self.episodes.episode_length(value=length)
        self.episodes.episode_truncated(value=int(truncated))
        for key, value in step_key_returns(actor_returns).items():
            self.episodes.step_key_return(step_key=key, value=value)
        for name, value in agent_returns.items():
            self.episodes.agent_return(agent=name, value=value)
        self.hub.replay(records)  # the env's own events, reduced per step and episode
        for name, value in kpis.items():
            self.kpis.kpi(name=name, value=value)

    def __call__(self, result: EpisodeResult) -> None:
        """A played episode (evaluation, rollouts)."""
        self.publish(
            result.episode_return,
            result.steps,
            result.actor_returns,
            result.agent_returns,
            result.records,
            result.kpis,
            result.truncated,
        )
