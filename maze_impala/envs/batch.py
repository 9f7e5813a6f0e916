"""Several structured envs stepped side by side, one sub-step at a time.

The actor's view of its envs (training, evaluation and rollouts alike): it tells who
acts next in every env, groups the envs whose next actor shares a step key (one batched
forward pass per group), and turns each sub-step into a :class:`SubStep` record: the
rewards, where a structured step ended, which actors left, and whether the episode is
over. Whoever steps the envs starts their next episodes (:meth:`EnvBatch.reset`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.checks import check_actor_id, check_observation, check_reward, check_step_result
from maze_impala.envs.structured import ActorExit, StructuredEnv
from maze_impala.events.episodes import EpisodeEventLog, EpisodeSummary


@dataclass
class SubStep:
    """What one sub-step of one env produced."""

    actor: ActorID
    """Who acted."""
    reward: float
    """The reward :meth:`StructuredEnv.step` returned."""
    actor_rewards: dict[ActorID, float] | None
    """Per-actor rewards from the env, or ``None`` for the default crediting."""
    exits: dict[ActorID, ActorExit]
    step_ended: bool
    """A structured step ended with this sub-step (the env time moved on, or the episode ended)."""
    terminated: bool
    truncated: bool
    final_observation: dict | None = None
    """At the end of an episode: the observation :meth:`StructuredEnv.step` returned ..."""
    final_actor: ActorID | None = None
    """... and the actor it belongs to."""
    episode_return: float = 0.0
    """At the end of an episode: its undiscounted return (sum of the rewards ``step`` returned)."""
    episode_length: int = 0
    """At the end of an episode: its number of structured steps."""
    summary: EpisodeSummary | None = None
    """At the end of an episode: its reduced events, KPIs and (optionally) raw events."""
    info: dict = field(default_factory=dict)
    capped: bool = False
    """The episode was truncated by the batch's ``max_episode_steps``, not by the env (see :class:`EnvBatch`)."""

    @property
    def episode_ended(self) -> bool:
        return self.terminated or self.truncated


class FrameSink(Protocol):
    """Where the frames of a recorded episode go (a video file)."""

    def __call__(self, frame: object) -> None: ...

    def close(self) -> None: ...


CHECKED_SUBSTEPS = 32
"""The first sub-steps of every env are checked against its contract (see :mod:`maze_impala.envs.checker`)."""


class EnvBatch:
    """``E`` structured envs; ``observations[e]`` and ``actors[e]`` say who acts next in env ``e`` on what.

    The first :data:`CHECKED_SUBSTEPS` sub-steps of every env are checked (observations against their
    spaces, ``step()``'s 5-tuple, finite rewards, ``actor_id()``), so that a broken env fails at once with
    a message naming the step key and the key, instead of far away in a rollout buffer or a loss.

    Every episode ends: an env without a time limit of its own (:attr:`StructuredEnv.time_limit`) has its episode
    truncated after ``max_episode_steps`` structured steps (None: never), as Gymnasium's ``TimeLimit`` would.
    """

    def __init__(self, envs: list[StructuredEnv], keep_raw_events: bool = False, max_episode_steps: int | None = None):
        if not envs:
            raise ValueError("EnvBatch needs at least one env")
        self.envs = envs
        self.caps: list[int | None] = [max_episode_steps if env.time_limit is None else None for env in envs]
        """Per env, the structured steps after which its episodes are truncated (None: the env ends them)."""
        self.logs = [EpisodeEventLog(keep_raw=keep_raw_events) for _ in envs]
        """Each env's domain events of its current episode."""
        for env, log in zip(envs, self.logs):
            env.event_hub.listeners.append(log)
        self.kpis = [env.kpi_calculator() for env in envs]
        self.observations: list[dict] = [{} for _ in envs]
        self.actors: list[ActorID] = [ActorID(0, 0) for _ in envs]
        self._times = np.zeros(len(envs), dtype=np.int64)
        self._returns = np.zeros(len(envs))
        self._lengths = np.zeros(len(envs), dtype=np.int64)
        first = envs[0]
        self.step_keys: list[StepKey] = list(first.agent_counts_dict)
        self.agent_counts: dict[StepKey, int] = dict(first.agent_counts_dict)
        self.checks_left = np.full(len(envs), CHECKED_SUBSTEPS, dtype=np.int64)
        """Sub-steps of each env still to check."""
        self.frame_sinks: list[FrameSink | None] = [None] * len(envs)
        """Per env, where the frames of its current episode go (rendered after its reset and every structured
        step), or None: not recorded."""

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, e: int, seed: int | None = None) -> None:
        self.logs[e].records.clear()
        self.logs[e].step = 0
        obs, _ = self.envs[e].reset(seed=seed)
        if self.checks_left[e] > 0:
            key = check_actor_id(self.envs[e]).step_key
            check_observation(obs, self.envs[e].observation_spaces_dict[key], key)
        self._observe(e, obs)
        self._times[e] = self.envs[e].get_env_time()
        self._returns[e] = 0.0
        self._lengths[e] = 0
        if self.frame_sinks[e] is not None:
            self.frame_sinks[e](self.envs[e].render())

    def groups(self, active: Iterable[int]) -> dict[StepKey, list[int]]:
        """The given envs, grouped by the step key of their next actor."""
        groups: dict[StepKey, list[int]] = {}
        for e in active:
            groups.setdefault(self.actors[e].step_key, []).append(int(e))
        return groups

    def step(self, e: int, action: Mapping[str, np.ndarray]) -> SubStep:
        """One sub-step of env ``e`` (a finished episode's env waits for :meth:`reset`)."""
        env, actor = self.envs[e], self.actors[e]
        self.logs[e].step = int(self._lengths[e])
        result = env.step(action)
        if self.checks_left[e] > 0:
            result = self.check_substep(e, result)
        obs, reward, terminated, truncated, info = result
        self._returns[e] += reward
        time = env.get_env_time()
        ended = bool(terminated or truncated)
        step_ended = ended or time != self._times[e]
        self._times[e] = time
        capped = False
        if step_ended:
            self._lengths[e] += 1
            if self.frame_sinks[e] is not None:
                self.frame_sinks[e](env.render())
            cap = self.caps[e]
            capped = not ended and cap is not None and self._lengths[e] >= cap
            ended = truncated = ended or capped
        sub = SubStep(
            actor,
            float(reward),
            env.get_actor_rewards(),
            env.get_actor_exits(),
            step_ended,
            bool(terminated),
            bool(truncated) and not terminated,
            info=info,
            capped=capped,
        )
        if ended:
            sub.final_observation, sub.final_actor = obs, env.actor_id()
            sub.episode_return, sub.episode_length = float(self._returns[e]), int(self._lengths[e])
            sub.summary = self.logs[e].finish(self.kpis[e])
            return sub
        self._observe(e, obs)
        return sub

    def lengths(self, playing: np.ndarray) -> list[int]:
        """The structured steps of the current episodes of the envs where ``playing`` (a boolean mask) is true."""
        return self._lengths[playing].tolist()

    def finish_episode(self, e: int) -> EpisodeSummary:
        """The reduced events and KPIs of env ``e``'s episode, for a caller that stepped the env itself."""
        return self.logs[e].finish(self.kpis[e])

    def check_substep(self, e: int, result: object) -> tuple[dict, float, bool, bool, dict]:
        """Check what ``step()`` of env ``e`` returned (the actor's fast path calls this on its first steps)."""
        self.checks_left[e] -= 1
        env, key = self.envs[e], self.actors[e].step_key
        checked = check_step_result(result, key)
        rewards = env.get_actor_rewards()
        for actor, reward in (rewards or {}).items():
            check_reward(reward, ActorID(*actor).step_key, f"reward of actor {tuple(actor)} (get_actor_rewards)")
        if not (checked[2] or checked[3]):
            actor = check_actor_id(env)
            check_observation(checked[0], env.observation_spaces_dict[actor.step_key], actor.step_key)
        return checked

    def _observe(self, e: int, obs: dict) -> None:
        actor = self.envs[e].actor_id()
        if not isinstance(actor, ActorID):
            actor = ActorID(*actor)
        if actor.step_key not in self.agent_counts:
            raise ValueError(
                f"{type(self.envs[e]).__name__}.actor_id() returned step key {actor.step_key!r}, which is not "
                f"in its agent_counts_dict {self.agent_counts}"
            )
        self.observations[e], self.actors[e] = obs, actor

    def close(self) -> None:
        for env in self.envs:
            env.close()
