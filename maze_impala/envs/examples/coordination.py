"""Cover the open resources: a cooperative multi-agent env where agents must coordinate."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventInterface, epoch_stats, mean
from maze_impala.events.episodes import EpisodeEventLog, KpiCalculator


class CoordinationEvents(EventInterface):
    """The outcome of every structured step of a :class:`CoordinationEnv`."""

    @epoch_stats(mean)
    def step_outcome(self, covered: int, distinct_claims: int, collisions: int):
        """Whether the open resources were covered, how many different resources were claimed, and how many
        claims went to a resource another agent (or the block) already had."""


class CoordinationKpis(KpiCalculator):
    """cover_rate (steps with every open resource covered / steps) and collisions per step."""

    def compute(self, episode: EpisodeEventLog) -> dict[str, float]:
        covered = episode.values(CoordinationEvents.step_outcome, "covered")
        collisions = episode.values(CoordinationEvents.step_outcome, "collisions")
        steps = max(len(covered), 1)
        return {"cover_rate": sum(covered) / steps, "collisions_per_step": sum(collisions) / steps}


class CoordinationEnv(StructuredEnv):
    """``n_agents`` agents must each claim a different one of the open resources.

    Every structured step one of ``n_agents + 1`` resources is blocked at random. The
    agents act one after the other (step key ``0``, agents ``0..n_agents-1``), each
    seeing only its own id and which resource is blocked, not what the others chose:
    they choose as if simultaneously. The team earns 1 when the agents claim every open
    resource, each a different one; there is no reward for a partial cover. Every agent
    is credited with the team reward (the framework's default), so they must agree on a
    convention (who takes which resource for each blocked one) to earn anything
    reliably. Optimum: ``n_steps`` per episode; a random team earns ``n!/(n+1)^n`` per
    step (0.094 for 3 agents).
    """

    STEP_KEY: StepKey = 0

    def __init__(self, n_agents: int = 3, n_steps: int = 10):
        if n_agents < 2 or n_steps < 1:
            raise ValueError("CoordinationEnv needs n_agents >= 2 and n_steps >= 1")
        self.n_agents, self.n_steps = n_agents, n_steps
        self.n_resources = n_agents + 1
        self._observation_spaces = {
            self.STEP_KEY: gym.spaces.Dict(
                {"agent": gym.spaces.Discrete(n_agents), "blocked": gym.spaces.Discrete(self.n_resources)}
            )
        }
        self._action_spaces = {self.STEP_KEY: gym.spaces.Dict({"resource": gym.spaces.Discrete(self.n_resources)})}
        self.rng = np.random.default_rng()
        self.agent, self.blocked, self.time = 0, 0, 0
        self.claims: list[int] = []
        self.events = self.publisher(CoordinationEvents)

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._action_spaces

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._observation_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return {self.STEP_KEY: self.n_agents}

    def actor_id(self) -> ActorID:
        return ActorID(self.STEP_KEY, self.agent)

    def get_env_time(self) -> int:
        return self.time

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.time, self.agent, self.claims = 0, 0, []
        self.blocked = int(self.rng.integers(self.n_resources))
        return self._observation(), {}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        self.claims.append(int(action["resource"]))
        self.agent += 1
        if self.agent < self.n_agents:
            return self._observation(), 0.0, False, False, {}
        open_resources = set(range(self.n_resources)) - {self.blocked}
        success = set(self.claims) == open_resources and len(self.claims) == len(open_resources)
        distinct = len(set(self.claims))
        collisions = len(self.claims) - len(set(self.claims) - {self.blocked})
        self.events.step_outcome(covered=int(success), distinct_claims=distinct, collisions=collisions)
        self.time += 1
        self.agent, self.claims = 0, []
        self.blocked = int(self.rng.integers(self.n_resources))
        return self._observation(), float(success), self.time >= self.n_steps, False, {}

    def kpi_calculator(self) -> KpiCalculator:
        return CoordinationKpis()

    def _observation(self) -> dict:
        return {"agent": self.agent, "blocked": self.blocked}
