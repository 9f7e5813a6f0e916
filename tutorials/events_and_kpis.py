"""Domain events and KPIs for your own env, then a rollout that reports them (see docs/events.md).

python tutorials/events_and_kpis.py --output-dir outputs/tutorial_kpis

A small stock-keeping env: every day a random demand arrives and the policy orders
0-3 units for tomorrow. The env publishes what happens as typed events
(``InventoryEvents``); ``InventoryKpis`` turns one episode's events into the numbers a
planner looks at (service level, mean stock, units short). A random-policy rollout
then writes kpis.csv, kpis_summary.csv, stats.csv and the raw event logs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import numpy as np

from maze_impala import ActorID, StructuredEnv
from maze_impala.config import PolicyConfig, RolloutConfig, RolloutRunnerConfig
from maze_impala.evaluate.rollout import rollout
from maze_impala.events.api import EventInterface, episode_stats, epoch_stats, max_, mean, sum_
from maze_impala.events.episodes import EpisodeEventLog, KpiCalculator
from maze_impala.events.tables import read_event_logs


class InventoryEvents(EventInterface):
    """What happens in the warehouse, one call per day."""

    @episode_stats(sum_)  # per episode: the total demand ...
    @epoch_stats(mean, max_)  # ... then mean and max over the episodes of the epoch
    def demand(self, units: int, served: int):
        """Units asked for, and units served from stock."""

    @epoch_stats(mean)
    def stock(self, units: int):
        """Units on the shelf at the end of the day."""


class InventoryKpis(KpiCalculator):
    """Service level, mean stock and units short of one episode, computed from its events."""

    def compute(self, episode: EpisodeEventLog) -> dict[str, float]:
        asked = episode.values(InventoryEvents.demand, "units")
        served = episode.values(InventoryEvents.demand, "served")
        stock = episode.values(InventoryEvents.stock, "units")
        return {
            "service_level": sum(served) / max(sum(asked), 1),
            "mean_stock": float(np.mean(stock)),
            "units_short": float(sum(asked) - sum(served)),
        }


class InventoryEnv(StructuredEnv):
    """A flat env (one step key) with domain events and KPIs; the reward trades sales against holding cost."""

    def __init__(self, days: int = 20):
        self.days, self.rng, self.day, self.shelf = days, np.random.default_rng(), 0, 2
        self.events = self.publisher(InventoryEvents)  # cheap when nobody listens

    observation_spaces_dict = property(lambda self: {0: gym.spaces.Dict({"shelf": gym.spaces.Discrete(10)})})
    action_spaces_dict = property(lambda self: {0: gym.spaces.Dict({"order": gym.spaces.Discrete(4)})})
    agent_counts_dict = property(lambda self: {0: 1})

    def actor_id(self) -> ActorID:
        return ActorID(0, 0)

    def get_env_time(self) -> int:
        return self.day

    def kpi_calculator(self) -> KpiCalculator:
        return InventoryKpis()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.day, self.shelf = 0, 2
        return {"shelf": self.shelf}, {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        demand = int(self.rng.integers(0, 4))
        served = min(demand, self.shelf)
        self.shelf = min(self.shelf - served + int(action["order"]), 9)
        self.events.demand(units=demand, served=served)
        self.events.stock(units=self.shelf)
        self.day += 1
        return {"shelf": self.shelf}, served - 0.1 * self.shelf, self.day >= self.days, False, {}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default="outputs/tutorial_kpis")
    parser.add_argument("--episodes", type=int, default=50)
    args = parser.parse_args()
    out = Path(args.output_dir)
    config = RolloutConfig(
        policy=PolicyConfig(type="random"),
        runner=RolloutRunnerConfig(type="dev"),
        event_logs="csv",
        progress=False,
        env=InventoryEnv,  # a class or any callable; a {"_target_": ...} config works too
        n_episodes=args.episodes,
        deterministic=False,
    )
    rollout(config, out)  # prints the KPI summary table
    logs = read_event_logs(out)  # {"InventoryEvents.demand": DataFrame, "InventoryEvents.stock": DataFrame}
    demand = logs["InventoryEvents.demand"]
    print(f"event log: {len(demand)} demand events, {demand['units'].sum()} units asked over {args.episodes} episodes")


if __name__ == "__main__":
    main()
