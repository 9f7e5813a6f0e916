"""Select a piece, then cut it: a structured step of two sub-steps whose reward needs both."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.structured import StructuredEnv


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
        self.filled = 0
        """Orders filled in this episode (a KPI)."""

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
        self.time, self.filled, self.sub_step = 0, 0, self.SELECT
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
            reward, self.filled = 1.0, self.filled + 1
            self.inventory[self.selected] = remainder if remainder > 0 else self.rng.integers(1, self.max_size + 1)
        self.time += 1
        self.sub_step = self.SELECT
        self._new_order()
        return self._observation(), reward, self.time >= self.n_orders, False, {}

    def _new_order(self) -> None:
        self.order = int(self.rng.integers(1, self.max_size + 1))
        if self.inventory.max() < self.order:  # restock: an order can always be filled
            self.inventory[self.rng.integers(self.n_pieces)] = self.max_size

    def _observation(self) -> dict:
        if self.sub_step == self.SELECT:
            return {"order": self.order, "inventory": self.inventory.copy()}
        return {"order": self.order, "piece": int(self.inventory[self.selected])}
