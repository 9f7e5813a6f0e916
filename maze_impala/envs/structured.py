"""The structured environment interface: Gymnasium conventions plus who acts next."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import gymnasium as gym

from maze_impala.core import ActorID, StepKey


class StructuredEnv(ABC):
    """An environment whose decisions are taken in sub-steps and/or by several agents.

    It follows Gymnasium's conventions (``reset(seed=, options=) -> (obs, info)``,
    ``step(action) -> (obs, reward, terminated, truncated, info)``) with Dict
    observations and actions. Between two calls of :meth:`step`, :meth:`actor_id`
    names who acts next: the sub-step (``step_key``) and the agent within it. Each
    step key has its own observation and action space.
    """

    @property
    @abstractmethod
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """The action space of every step key."""

    @property
    @abstractmethod
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        """The observation space of every step key."""

    @property
    @abstractmethod
    def agent_counts_dict(self) -> dict[StepKey, int]:
        """How many agents act in each step key (-1 where the count varies)."""

    @abstractmethod
    def actor_id(self) -> ActorID:
        """The actor whose observation was returned last, and who acts next."""

    @abstractmethod
    def is_actor_done(self) -> bool:
        """Whether the current actor is done (e.g. an agent that left the episode)."""

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode; returns the first actor's observation and an info dict."""

    @abstractmethod
    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        """Apply the current actor's action; returns the next actor's observation."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
