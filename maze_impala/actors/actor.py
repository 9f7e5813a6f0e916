"""The actor: steps ``E`` structured envs side by side, one batched forward pass per step key and sub-step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from maze_impala.actors.flat import flat_state, run_flat
from maze_impala.actors.recorder import StepRecorder, check_finite
from maze_impala.config import ModelConfig
from maze_impala.core import Actor, ActorID, Rollout, StepKey, WeightSource
from maze_impala.envs.batch import EnvBatch, SubStep
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventCollector, EventHub
from maze_impala.events.episodes import EpisodeSummary, KpiEvents
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.acting import make_acting
from maze_impala.nn.models import make_policy


def to_torch(arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Zero-copy view of numpy storage as tensors."""
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def seed_for(*entropy: int) -> int:
    """A well-mixed 32-bit seed from the run seed and indices (actor, env, ...)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


@dataclass
class ActorSpec:
    """Everything needed to build an actor, picklable so that it can travel to a worker process."""

    env: EnvSpec
    model: ModelConfig
    n_rollout_steps: int
    envs_per_actor: int
    seed: int

    def build(self, index: int, weights: WeightSource) -> RolloutActor:
        envs = [make_env(self.env) for _ in range(self.envs_per_actor)]
        return RolloutActor(envs, weights, self.model, self.n_rollout_steps, seed_for(self.seed, index), index)


class RolloutActor(Actor):
    """Produces rollouts of ``n_rollout_steps`` structured steps of each of its environments.

    Every sub-step, the envs whose next actor shares a step key are acted for in one
    batched forward pass. Each actor's decisions are recorded in its own column (see
    :class:`~maze_impala.actors.recorder.StepRecorder`), credited with rewards as the
    :class:`~maze_impala.envs.structured.StructuredEnv` contract says, and closed
    when the actor leaves or the episode ends.
    """

    def __init__(
        self,
        envs: list[StructuredEnv],
        weights: WeightSource,
        model: ModelConfig,
        n_rollout_steps: int,
        seed: int,
        index: int = 0,
        deterministic: bool = False,
        env_seeds: list[int] | None = None,
        acting: str = "auto",
    ):
        """``env_seeds`` (default: derived from ``seed``) seed the envs' first episodes; ``deterministic``
        takes the most likely actions (for tests and demonstrations; training samples); ``acting`` picks
        the backend of the forward passes (see :func:`~maze_impala.nn.acting.make_acting`)."""
        self.batch = EnvBatch(envs, auto_reset=True)
        self.deterministic = deterministic
        self.policy = make_policy(envs[0], model)
        self.policy.requires_grad_(False)
        self.weights = weights
        self.version = weights.load_into(self.policy)
        self.n_steps = n_rollout_steps
        self.index = index
        self.acting = make_acting(self.policy, seed, acting)
        self.hub = EventHub()
        self.collector = EventCollector()
        self.hub.listeners.append(self.collector)
        self.episode_events = self.hub.publisher(EpisodeEvents)
        self.kpi_events = self.hub.publisher(KpiEvents)
        self.order = list(self.batch.step_keys)
        self.ancestors = model.critic == "delta"
        obs_spaces, act_spaces = envs[0].observation_spaces_dict, envs[0].action_spaces_dict
        self.recorders = {
            key: StepRecorder(
                obs_spaces[key],
                act_spaces[key],
                n_rollout_steps + 1,
                {k: obs_spaces[k] for k in self.order[:position]} if self.ancestors else None,
                columns=len(envs) * max(self.batch.agent_counts[key], 1),
            )
            for position, key in enumerate(self.order)
        }
        for e in range(len(envs)):  # fixed agents get fixed columns: e * n + agent
            for key, count in self.batch.agent_counts.items():
                for agent in range(max(count, 0)):
                    self.recorders[key].column(e, agent)
        self.current = np.zeros(len(envs), dtype=np.int64)
        """The column of every env's next actor."""
        self.pot = np.zeros(len(envs))
        """Rewards of the current structured step awaiting default crediting."""
        self.in_step: list[list[tuple[StepKey, int, int]]] = [[] for _ in envs]
        """(step key, column, row) of the decisions taken in the current structured step."""
        self.credited: list[dict[tuple[StepKey, int], float]] = [{} for _ in envs]
        """Reward credited to each actor in the current episode."""
        self.flat = all(env.is_flat for env in envs) and not self.ancestors
        """Flat envs (one actor, every step a structured step) take the fast path of :mod:`.flat`."""
        self.flat_returns, self.flat_lengths = flat_state(len(envs))
        for e in range(len(envs)):
            self.batch.reset(e, seed=env_seeds[e] if env_seeds is not None else seed_for(seed, e))
            self._observe(e)

    def rollout(self) -> Rollout:
        if self.weights.version() != self.version:
            self.version = self.weights.load_into(self.policy)
        env_steps = run_flat(self) if self.flat else self._run_structured()
        trajectories = {key: tr for key, rec in self.recorders.items() if (tr := rec.finish()) is not None}
        for key, trajectory in trajectories.items():
            check_finite(trajectory, key)
        return Rollout(trajectories, self.version, self.index, env_steps, self.collector.drain())

    def _run_structured(self) -> int:
        """The general loop: ``n_steps`` structured steps of every env, sub-step by sub-step."""
        steps_left = np.full(len(self.batch), self.n_steps)
        env_steps = 0
        while (active := np.flatnonzero(steps_left > 0)).size:
            for key, group in self.batch.groups(active).items():
                recorder = self.recorders[key]
                cols = self.current[group]
                rows = recorder.awaiting_rows(cols)
                if self.ancestors:
                    for e, row, col in zip(group, rows, cols):
                        self._record_ancestors(e, key, int(row), int(col))
                obs = recorder.gather(rows, cols)
                actions, log_probs = self.acting.act(key, obs, self.deterministic, recorder.agent_ids[cols])
                recorder.decide(rows, cols, actions, log_probs)
                for i, e in enumerate(group):
                    sub = self.batch.step(e, {k: a[i] for k, a in actions.items()})
                    self.in_step[e].append((key, int(cols[i]), int(rows[i])))
                    self._account(e, sub)
                    if sub.step_ended:
                        steps_left[e] -= 1
                        env_steps += 1
                    self._observe(e)
        return env_steps

    def _observe(self, e: int) -> None:
        actor = self.batch.actors[e]
        recorder = self.recorders[actor.step_key]
        col = recorder.column(e, actor.agent_id)
        recorder.observe(col, self.batch.observations[e])
        self.current[e] = col

    def _credit(self, e: int, actor: ActorID, reward: float) -> None:
        recorder = self.recorders[actor.step_key]
        col = recorder.column(e, actor.agent_id)
        if recorder.credit(col, reward):
            key = (actor.step_key, col)
            self.credited[e][key] = self.credited[e].get(key, 0.0) + reward

    def _account(self, e: int, sub: SubStep) -> None:
        """Credit rewards, close the decisions of leaving actors, and end steps and episodes."""
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
        if sub.episode_ended:
            for key, recorder in self.recorders.items():
                for col in recorder.columns_of(e):
                    own = sub.final_actor is not None and tuple(sub.final_actor) == (key, recorder.agent_ids[col])
                    recorder.close(int(col), sub.truncated, sub.final_observation if own else None)
            self._end_episode(e, sub)

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

    def publish_episode(
        self, episode_return: float, length: int, key_returns: dict[StepKey, float], summary: EpisodeSummary
    ) -> None:
        """A finished episode's return, length, return per step key, the env's reduced events and its KPIs."""
        self.episode_events.episode_return(value=episode_return)
        self.episode_events.episode_length(value=length)
        for key, value in key_returns.items():
            self.episode_events.step_key_return(step_key=key, value=value)
        self.hub.replay(summary.records)  # the env's own events, reduced per step and episode
        for name, value in summary.kpis.items():
            self.kpi_events.kpi(name=name, value=value)

    def _end_episode(self, e: int, sub: SubStep) -> None:
        by_key: dict[StepKey, list[float]] = {}
        for (key, _), value in self.credited[e].items():
            by_key.setdefault(key, []).append(value)
        key_returns = {key: float(np.mean(values)) for key, values in by_key.items()}  # mean over the key's actors
        self.publish_episode(sub.episode_return, sub.episode_length, key_returns, sub.summary)
        self.credited[e].clear()
        self.pot[e] = 0.0
        self.in_step[e].clear()

    def close(self) -> None:
        self.batch.close()
