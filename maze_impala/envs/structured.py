"""The structured environment interface: Gymnasium conventions plus who acts next."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

import gymnasium as gym

from maze_impala.core import ActorID, StepKey
from maze_impala.events.api import EventHub, InterfaceT
from maze_impala.events.episodes import KpiCalculator


class ActorExit(NamedTuple):
    """An actor leaving the episode before (or as) it ends, e.g. a PettingZoo agent that is done."""

    truncated: bool = False
    """``False``: terminated, its last decision is not bootstrapped. ``True``: cut off (bootstrapped)."""
    observation: dict | None = None
    """The actor's final observation, to bootstrap a truncated exit (a truncation without one counts as terminal)."""


class StructuredEnv(ABC):
    """An environment whose decisions are taken in sub-steps and/or by several agents.

    It follows Gymnasium's conventions (``reset(seed=, options=) -> (obs, info)``,
    ``step(action) -> (obs, reward, terminated, truncated, info)``) with Dict
    observations and actions. Between two calls of :meth:`step`, :meth:`actor_id`
    names who acts next: the sub-step (``step_key``) and the agent within it. Each
    step key has its own observation and action space.

    A *structured step* is one full decision, taken in one or more sub-steps (select a
    piece, then cut it; or every agent once). :meth:`get_env_time` counts them: the
    framework sees a structured step end when it changes after a sub-step (or when the
    episode ends, possibly in the middle of one).

    Rewards: by default the reward of a structured step is the sum of what its sub-steps
    returned, and every actor that acted in it is credited with it. An env that knows
    better (a split of the reward, one reward per agent) returns per-actor rewards from
    :meth:`get_actor_rewards`; they are used as given and credited to each actor's
    latest decision.
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

    @property
    def agents_dict(self) -> dict[str, ActorID]:
        """The env's agents by name, each with the actor that acts for it (the seats of a game); empty where one
        agent takes every decision. By default, the agents of the step keys that more than one agent shares
        (``<step key>_<agent id>``); the PettingZoo adapters name them as the PettingZoo env does."""
        return {
            f"{key}_{agent}": ActorID(key, agent)
            for key, count in self.agent_counts_dict.items()
            if count > 1
            for agent in range(count)
        }

    @abstractmethod
    def actor_id(self) -> ActorID:
        """The actor whose observation was returned last, and who acts next."""

    @abstractmethod
    def get_env_time(self) -> int:
        """Structured steps completed in the current episode (0 after :meth:`reset`)."""

    @abstractmethod
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode; returns the first actor's observation and an info dict."""

    @abstractmethod
    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        """Apply the current actor's action; returns the next actor's observation.

        ``terminated``/``truncated`` end the episode for every actor.
        """

    def get_actor_rewards(self) -> dict[ActorID, float] | None:
        """The last sub-step's rewards per actor, or ``None`` to credit :meth:`step`'s reward by default.

        Called after every sub-step. Each reward is credited to that actor's latest
        decision (what it earned since it last acted); the scalar reward that
        :meth:`step` returned then only counts towards the episode return.
        """
        return None

    def get_actor_exits(self) -> dict[ActorID, ActorExit]:
        """The actors that left the episode with the last sub-step (called after every sub-step)."""
        return {}

    @property
    def time_limit(self) -> int | None:
        """The structured steps after which the env truncates an episode itself, if it does (a Gymnasium id's
        ``max_episode_steps``); None: no limit of its own is known. Where there is none, whole episodes are capped
        at the run's ``max_episode_steps`` (see :class:`~maze_impala.envs.batch.EnvBatch`)."""
        return None

    is_flat: bool = False
    """True for envs with one actor whose every ``step()`` is a structured step and that never return
    per-actor rewards or exits (e.g. Gymnasium envs): actors then take a faster loop."""

    @property
    def event_hub(self) -> EventHub:
        """The hub of this env's domain events; whoever runs its episodes listens to it."""
        hub = self.__dict__.get("_event_hub")
        if hub is None:
            hub = self.__dict__["_event_hub"] = EventHub()
        return hub

    def publisher(self, interface: type[InterfaceT]) -> InterfaceT:
        """Publish domain events, e.g. ``self.events = self.publisher(MyEvents)`` then ``self.events.cost(value=3)``.

        Cheap when nobody listens; a wrong call raises at once.
        """
        return self.event_hub.publisher(interface)

    def kpi_calculator(self) -> KpiCalculator | None:
        """The calculator of this env's episode KPIs from its events, if it has KPIs."""
        return None

    def render(self) -> Any:
        """A frame of the current state (an ``[H, W, 3]`` uint8 array where the env renders ``rgb_array``), for
        videos; envs that can render override it."""
        raise NotImplementedError(
            f"{type(self).__name__} does not render: implement render() (an [H, W, 3] uint8 frame) to record videos"
        )

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
