"""How an actor's envs take their sub-steps: the strategies of :class:`~maze_impala.actors.actor.RolloutActor`'s loop.

The actor has one loop: for every group of envs whose next actor shares a step key, it
asks its :class:`Stepping` where their decisions go (:meth:`Stepping.slots`), acts for
the group in one batched forward pass, records the decisions, and hands the actions
back to the strategy, which steps the envs and records what they returned
(:meth:`Stepping.step`). When an env's episode ends, the strategy closes its actors'
decisions through the recorders (which also reset their recurrent states), hands the
:class:`Episode` to the actor, and starts the env's next episode if the actor's
:class:`Episodes` has one. Two strategies, which record the same data (a test checks it):

* :class:`SubStepping`, for every structured env: envs grouped by the step key of their
  next actor, rewards credited as the :class:`~maze_impala.envs.structured.StructuredEnv`
  contract says, decisions closed when their actor leaves or the episode ends;
* :class:`FlatStepping`, the fast path for flat envs (one actor, every ``step()`` a
  structured step, e.g. any Gymnasium env): every env decides at the same row, so the
  observations are read from and written into the recorder's ``[T + 1, E]`` buffers in
  place, and plain Gymnasium envs are stepped directly, past their first (checked) steps.
  Its envs play in step: every episode that ends is followed by another.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from maze_impala.actors.recorder import StepRecorder, store
from maze_impala.core import ActorID, NestedArrays, StepKey
from maze_impala.envs.batch import EnvBatch, SubStep
from maze_impala.envs.gym_adapter import ACTION_KEY, OBS_KEY
from maze_impala.events.episodes import EpisodeSummary

Group = list[int] | slice
"""Envs that act together: their indices, or a slice of all of them."""
Rows = np.ndarray | int
Cols = np.ndarray | slice


@dataclass
class Episode:
    """A finished episode of one of the actor's envs."""

    env: int
    episode_return: float
    """The sum of the rewards ``step()`` returned."""
    length: int
    """Structured steps."""
    actor_returns: dict[ActorID, float]
    """The reward credited to each actor (step key and agent) that acted in it."""
    summary: EpisodeSummary
    """The env's reduced events and KPIs."""
    truncated: bool = False
    """Cut off by a time limit (the env's own, or ``max_episode_steps``) rather than terminated."""
    capped: bool = False
    """Cut off by ``max_episode_steps`` (see :class:`~maze_impala.envs.batch.EnvBatch`)."""


class Episodes(ABC):
    """What an actor does with finished episodes, and which episode each env plays next."""

    @abstractmethod
    def finished(self, episode: Episode) -> None:
        """An env's episode ended."""

    @abstractmethod
    def next(self, env: int) -> tuple[bool, int | None]:
        """Whether env ``env`` plays another episode, and its seed (None: the env's own stream continues)."""


class Stepping(ABC):
    """Steps an :class:`EnvBatch` for the actor's loop and records into its recorders, one per step key."""

    def __init__(self, batch: EnvBatch, recorders: dict[StepKey, StepRecorder], episodes: Episodes):
        self.batch, self.recorders, self.episodes = batch, recorders, episodes
        self.current = np.zeros(len(batch), dtype=np.int64)
        """The column of every env's next actor."""
        self.idle = np.zeros(len(batch), dtype=bool)
        """Envs that have no episode to play."""

    def start(self, e: int, seed: int | None) -> None:
        """Start an episode of env ``e`` (reset with ``seed``) and record its first observation."""
        self.batch.reset(e, seed=seed)
        self.idle[e] = False
        self.observe(e)

    def observe(self, e: int) -> None:
        """Record the observation env ``e``'s next actor decides on."""
        actor = self.batch.actors[e]
        recorder = self.recorders[actor.step_key]
        col = recorder.column(e, actor.agent_id)
        recorder.observe(col, self.batch.observations[e])
        self.current[e] = col

    def _next_episode(self, e: int) -> bool:
        """Start env ``e``'s next episode if it has one; whether it did."""
        go, seed = self.episodes.next(e)
        if go:
            self.batch.reset(e, seed=seed)
        self.idle[e] = not go
        return go

    @abstractmethod
    def groups(self, steps_left: np.ndarray) -> Collection[tuple[StepKey, Group]]:
        """The envs with structured steps left, grouped by the step key of their next actor (empty: all done)."""

    @abstractmethod
    def slots(self, key: StepKey, group: Group) -> tuple[Rows, Cols]:
        """Where the decisions of ``group`` go: their rows and columns in the recorder of ``key``."""

    @abstractmethod
    def step(self, key: StepKey, group: Group, rows: Rows, cols: Cols, actions: NestedArrays) -> np.ndarray:
        """Step the envs of ``group`` with ``actions`` (recorded already); returns the structured steps each ended."""


class SubStepping(Stepping):
    """The general strategy: any structured env, sub-step by sub-step (see :class:`~.actor.RolloutActor`)."""

    def __init__(
        self,
        batch: EnvBatch,
        recorders: dict[StepKey, StepRecorder],
        episodes: Episodes,
        order: list[StepKey],
        ancestors: bool = False,
    ):
        """``order``: the step keys in the order structured steps visit them; ``ancestors``: record the earlier
        sub-steps' observations next to each decision (for the delta critic)."""
        super().__init__(batch, recorders, episodes)
        self.order, self.ancestors = order, ancestors
        E = len(batch)
        self.pot = np.zeros(E)
        """Rewards of the current structured step awaiting default crediting."""
        self.in_step: list[list[tuple[StepKey, int, int]]] = [[] for _ in range(E)]
        """(step key, column, row) of the decisions taken in the current structured step."""
        self.credited: list[dict[tuple[StepKey, int], float]] = [{} for _ in range(E)]
        """Reward credited to each actor (step key, column) in the current episode."""

    def groups(self, steps_left: np.ndarray) -> Collection[tuple[StepKey, Group]]:
        return self.batch.groups(np.flatnonzero((steps_left > 0) & ~self.idle)).items()

    def slots(self, key: StepKey, group: Group) -> tuple[Rows, Cols]:
        recorder = self.recorders[key]
        cols = self.current[group]
        rows = recorder.awaiting_rows(cols)
        if self.ancestors:
            for e, row, col in zip(group, rows, cols):
                self._record_ancestors(e, key, int(row), int(col))
        return rows, cols

    def step(self, key: StepKey, group: Group, rows: Rows, cols: Cols, actions: NestedArrays) -> np.ndarray:
        ended = np.zeros(len(group), dtype=np.int64)
        for i, e in enumerate(group):
            sub = self.batch.step(e, {k: a[i] for k, a in actions.items()})
            self.in_step[e].append((key, int(cols[i]), int(rows[i])))
            ended[i] = sub.step_ended
            if self._account(e, sub):
                self.observe(e)
        return ended

    def _credit(self, e: int, actor: ActorID, reward: float) -> None:
        recorder = self.recorders[actor.step_key]
        col = recorder.column(e, actor.agent_id)
        if recorder.credit(col, reward):
            key = (actor.step_key, col)
            self.credited[e][key] = self.credited[e].get(key, 0.0) + reward

    def _account(self, e: int, sub: SubStep) -> bool:
        """Credit rewards, close the decisions of leaving actors, and end steps and episodes; whether the env has
        an observation to act on next (False: idle)."""
        if sub.actor_rewards is None:
            self.pot[e] += sub.reward
        else:
            for actor, reward in sub.actor_rewards.items():
                self._credit(e, ActorID(*actor), float(reward))
        for actor, exit_ in sub.exits.items():
            recorder = self.recorders[actor[0]]
            recorder.close(recorder.column(e, actor[1]), exit_.truncated, exit_.observation)
        if sub.step_ended:
            pot = float(self.pot[e])
            for key, col, row in self.in_step[e]:
                self.recorders[key].rewards[row, col] += pot
                self.credited[e][key, col] = self.credited[e].get((key, col), 0.0) + pot
            self.pot[e] = 0.0
            self.in_step[e].clear()
        if not sub.episode_ended:
            return True
        for key, recorder in self.recorders.items():
            for col in recorder.columns_of(e):
                own = sub.final_actor is not None and tuple(sub.final_actor) == (key, recorder.agent_ids[col])
                recorder.close(int(col), sub.truncated, sub.final_observation if own else None)
        returns = {
            ActorID(key, int(self.recorders[key].agent_ids[col])): value
            for (key, col), value in self.credited[e].items()
        }
        self.episodes.finished(
            Episode(e, sub.episode_return, sub.episode_length, returns, sub.summary, sub.truncated, sub.capped)
        )
        self.credited[e].clear()
        self.pot[e] = 0.0
        self.in_step[e].clear()
        return self._next_episode(e)

    def _record_ancestors(self, e: int, key: StepKey, row: int, col: int) -> None:
        """Copy the earlier sub-steps' observations of this structured step next to the decision (delta critic)."""
        earlier = [k for k, _, _ in self.in_step[e]]
        if [*earlier, key] != self.order[: len(earlier) + 1]:
            raise ValueError(
                f"model.critic=delta needs every structured step to visit the step keys in the order {self.order}, "
                f"but {type(self.batch.envs[e]).__name__} went {[*earlier, key]}; use model.critic=step or shared"
            )
        ancestors = self.recorders[key].ancestors
        for k, c, r in self.in_step[e]:
            for name, array in ancestors[k].items():
                array[row, col] = self.recorders[k].obs[name][r, c]


class FlatStepping(Stepping):
    """The fast path for flat envs: all envs decide at row ``t`` of column ``e``; nothing to credit or group."""

    def __init__(self, batch: EnvBatch, recorders: dict[StepKey, StepRecorder], episodes: Episodes):
        super().__init__(batch, recorders, episodes)
        (self.key, self.recorder), E = next(iter(recorders.items())), len(batch)
        self.all = slice(0, E)
        self.returns = np.zeros(E, dtype=np.float64)
        self.lengths = np.zeros(E, dtype=np.int64)
        """The return and length of every env's current episode."""
        self.direct = [env.direct_env() if hasattr(env, "direct_env") else None for env in batch.envs]
        """Per env, the Gymnasium env to step directly (no Dict wrapping per step), or None."""
        self.all_direct = all(env is not None for env in self.direct)
        self.caps = np.array([math.inf if cap is None else cap for cap in batch.caps])
        """Per env, the episode length at which it is truncated (see :class:`~maze_impala.envs.batch.EnvBatch`)."""
        self.capping = bool(np.isfinite(self.caps).any())
        """Whether any env is capped: checked once per step for all envs, outside the per-env loop."""
        self.ones = np.ones(E, dtype=np.int64)
        """Every env ends a structured step with every step."""
        self.everyone = ((self.key, self.all),)
        self.actor = ActorID(self.key, 0)

    def groups(self, steps_left: np.ndarray) -> Collection[tuple[StepKey, Group]]:
        return self.everyone if steps_left[0] > 0 else ()  # every env has the same number of steps left

    def slots(self, key: StepKey, group: Group) -> tuple[Rows, Cols]:
        return int(self.recorder.rows[0]) - 1, self.all  # every env awaits a decision at the same row

    def step(self, key: StepKey, group: Group, rows: Rows, cols: Cols, actions: NestedArrays) -> np.ndarray:
        t, recorder = int(rows), self.recorder
        if self.all_direct and not self.batch.checks_left.any():  # the first steps go the checked way
            taken = recorder.actions[ACTION_KEY][t, self.all]
            # Python ints for scalar (Discrete) actions: what envs check fastest; arrays otherwise
            self._step_direct(t, taken.tolist() if taken.ndim == 1 else list(taken))
        else:
            names = list(recorder.actions)
            row = {
                k: recorder.actions[k][t].tolist() if recorder.actions[k].ndim == 2 else recorder.actions[k][t]
                for k in names
            }
            for e in range(len(self.batch)):
                self._step_one(t, e, {k: row[k][e] for k in names})
        recorder.advance(t, self.all)
        return self.ones

    def _step_direct(self, t: int, actions: list) -> None:
        """Step ``t`` of every env, all plain Gymnasium envs: the per-env work is the ``step`` call alone."""
        recorder, envs = self.recorder, self.batch.envs
        next_obs, rewards, ended = [], [], []
        for e, (env, action) in enumerate(zip(self.direct, actions)):
            observation, reward, terminated, truncated, _ = env.step(action)
            next_obs.append(observation)
            rewards.append(reward)
            if terminated or truncated:
                ended.append((e, terminated))
            envs[e].tick()
        if self.capping:  # episodes that reach the cap this step and did not end by themselves
            done = {e for e, _ in ended}
            ended += [(int(e), False) for e in np.flatnonzero(self.lengths + 1 >= self.caps) if e not in done]
        stacked = np.asarray(next_obs)
        if stacked.shape[1:] != recorder.obs[OBS_KEY].shape[2:]:  # never broadcast a wrong shape into the buffer
            raise ValueError(
                f"step key {self.key!r}: observation {OBS_KEY!r} expected shape "
                f"{recorder.obs[OBS_KEY].shape[2:]} (its space), found {stacked.shape[1:]}"
            )
        recorder.obs[OBS_KEY][t + 1, self.all] = stacked
        returns = np.asarray(rewards, dtype=np.float64)  # episode returns add the rewards as the env gave them
        recorder.rewards[t, self.all] = returns
        self.returns += returns
        self.lengths += 1
        for e, terminated in ended:
            self._close(t, e, terminated, {OBS_KEY: next_obs[e]})

    def _step_one(self, t: int, e: int, action: Mapping) -> None:
        """Step ``t`` of env ``e``, directly if it is a plain Gymnasium env past its checked steps."""
        batch, direct = self.batch, self.direct[e]
        if direct is not None and not batch.checks_left[e]:
            observation, reward, terminated, truncated, _ = direct.step(action[ACTION_KEY])
            batch.envs[e].tick()
            observation = {OBS_KEY: observation}
        else:
            batch.logs[e].step = int(self.lengths[e])
            result = batch.envs[e].step(action)
            if batch.checks_left[e]:
                result = batch.check_substep(e, result)
            observation, reward, terminated, truncated, _ = result
        self.recorder.rewards[t, e] = reward
        self.returns[e] += reward
        self.lengths[e] += 1
        if terminated or truncated or self.lengths[e] >= self.caps[e]:
            self._close(t, e, terminated, observation)
        else:
            store(self.recorder.obs, (t + 1, e), observation)

    def _close(self, t: int, e: int, terminated: bool, final_obs: dict) -> None:
        """Env ``e`` ended its episode at step ``t``: close the decision, hand over the episode, start the next."""
        self.recorder.close(e, not terminated, final_obs)
        episode_return, length = float(self.returns[e]), int(self.lengths[e])
        capped = not terminated and length >= self.caps[e]
        episode = Episode(
            e,
            episode_return,
            length,
            {self.actor: episode_return},
            self.batch.finish_episode(e),
            truncated=not terminated,
            capped=capped,
        )
        self.episodes.finished(episode)
        self.returns[e], self.lengths[e] = 0.0, 0
        if not self._next_episode(e):
            raise RuntimeError(
                "the flat fast path plays every env in step: give each env another episode, or take "
                "the general stepping"
            )
        store(self.recorder.obs, (t + 1, e), self.batch.observations[e])
