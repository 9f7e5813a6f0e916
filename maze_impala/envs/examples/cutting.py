"""Select a piece, then cut it: a structured step of two sub-steps whose reward needs both."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventInterface, episode_stats, epoch_stats, max_, mean, sum_
from maze_impala.events.episodes import EpisodeEventLog, KpiCalculator


class CuttingEvents(EventInterface):
    """What happens to the orders of a :class:`CuttingEnv` (its domain events)."""

    @episode_stats(sum_)
    @epoch_stats(mean, max_)
    def order_filled(self, size: int):
        """An order of length ``size`` was cut from stock; per episode: the total length filled."""

    @episode_stats(sum_)
    @epoch_stats(mean, max_)
    def order_missed(self, size: int):
        """An order of length ``size`` was not filled (piece too short or wrong cut); per episode: the total."""

    @epoch_stats(mean)
    def restocked(self, size: int):
        """No piece was long enough for an order: a fresh piece of length ``size`` replaced one."""


class CuttingKpis(KpiCalculator):
    """fill_rate (orders filled / orders), filled_length, missed_length, restocks per episode."""

    def compute(self, episode: EpisodeEventLog) -> dict[str, float]:
        filled = episode.values(CuttingEvents.order_filled, "size")
        missed = episode.values(CuttingEvents.order_missed, "size")
        orders = len(filled) + len(missed)
        return {
            "fill_rate": len(filled) / orders if orders else 0.0,
            "filled_length": float(sum(filled)),
            "missed_length": float(sum(missed)),
            "restocks": float(episode.count(CuttingEvents.restocked)),
        }


class CuttingEnv(StructuredEnv):
    """Serve a stream of orders from an inventory of pieces, in two sub-steps per order.

    Every structured step an order of length ``o`` (1..``max_size``) arrives.

    * ``"select"`` sees the order and the lengths of the ``n_pieces`` pieces in stock and
      picks a piece.
    * ``"cut"`` sees the order and the length ``s`` of the selected piece and chooses how
      much to leave behind, ``r`` (0..``max_size`` - 1).

    The order is filled, reward 1, if the piece was long enough and the cut exact:
    ``s >= o`` and ``r == s - o``. The best cut therefore depends on what the selection
    chose, which the cut sees in its observation; nothing is earned until both sub-steps
    are learned, and only the cut sub-step returns a reward (the framework credits the
    selection with it). A filled order leaves the remainder ``r`` in stock (a fresh piece
    replaces a used-up one); there is always a piece long enough, so the optimum is one
    reward per order: ``n_orders`` per episode.
    """

    SELECT: StepKey = "select"
    CUT: StepKey = "cut"

    def __init__(self, max_size: int = 6, n_pieces: int = 4, n_orders: int = 8):
        if max_size < 2 or n_pieces < 1 or n_orders < 1:
            raise ValueError("CuttingEnv needs max_size >= 2, n_pieces >= 1 and n_orders >= 1")
        self.max_size, self.n_pieces, self.n_orders = max_size, n_pieces, n_orders
        order = gym.spaces.Discrete(max_size, start=1)
        self._observation_spaces = {
            self.SELECT: gym.spaces.Dict(
                {"order": order, "inventory": gym.spaces.MultiDiscrete([max_size + 1] * n_pieces)}
            ),
            self.CUT: gym.spaces.Dict({"order": order, "piece": gym.spaces.Discrete(max_size + 1)}),
        }
        self._action_spaces = {
            self.SELECT: gym.spaces.Dict({"piece": gym.spaces.Discrete(n_pieces)}),
            self.CUT: gym.spaces.Dict({"remainder": gym.spaces.Discrete(max_size)}),
        }
        self.rng = np.random.default_rng()
        self.inventory = np.zeros(n_pieces, dtype=np.int64)
        self.order, self.selected, self.time = 1, 0, 0
        self.sub_step: StepKey = self.SELECT
        self.events = self.publisher(CuttingEvents)

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._action_spaces

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._observation_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return {self.SELECT: 1, self.CUT: 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.sub_step, 0)

    def get_env_time(self) -> int:
        return self.time

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.inventory = self.rng.integers(1, self.max_size + 1, size=self.n_pieces)
        self.time, self.sub_step = 0, self.SELECT
        self._new_order()
        return self._observation(), {}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        if self.sub_step == self.SELECT:
            self.selected = int(action["piece"])
            self.sub_step = self.CUT
            return self._observation(), 0.0, False, False, {}
        piece, remainder = int(self.inventory[self.selected]), int(action["remainder"])
        reward = 0.0
        if piece >= self.order and remainder == piece - self.order:
            reward = 1.0
            self.events.order_filled(size=self.order)
            self.inventory[self.selected] = remainder if remainder > 0 else self.rng.integers(1, self.max_size + 1)
        else:
            self.events.order_missed(size=self.order)
        self.time += 1
        self.sub_step = self.SELECT
        self._new_order()
        return self._observation(), reward, self.time >= self.n_orders, False, {}

    def _new_order(self) -> None:
        self.order = int(self.rng.integers(1, self.max_size + 1))
        if self.inventory.max() < self.order:  # restock: an order can always be filled
            self.inventory[self.rng.integers(self.n_pieces)] = self.max_size
            self.events.restocked(size=self.max_size)

    def kpi_calculator(self) -> KpiCalculator:
        return CuttingKpis()

    def _observation(self) -> dict:
        if self.sub_step == self.SELECT:
            return {"order": self.order, "inventory": self.inventory.copy()}
        return {"order": self.order, "piece": int(self.inventory[self.selected])}
