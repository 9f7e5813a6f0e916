"""The actor: steps ``E`` structured envs side by side, one batched forward pass per step key and sub-step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from maze_impala.actors.recorder import StepRecorder, check_finite
from maze_impala.actors.stepping import FlatStepping, Stepping, SubStepping
from maze_impala.config import ModelConfig
from maze_impala.core import Actor, Rollout, StepKey, WeightSource
from maze_impala.envs.batch import EnvBatch
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventCollector, EventHub
from maze_impala.events.episodes import EpisodeSummary, KpiEvents
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.numpy_acting import Acting, NumpyActing, NumpyPolicySpec

if TYPE_CHECKING:
    from maze_impala.nn.models import StructuredPolicy


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
    numpy_policy: NumpyPolicySpec | None = None
    """The policy as plain data where it acts in numpy (:func:`~maze_impala.nn.acting.numpy_spec`): its actors
    then act without torch, and an actor process never imports it. None: the actor builds the torch policy."""

    def build(self, index: int, weights: WeightSource) -> RolloutActor:
        envs = [make_env(self.env) for _ in range(self.envs_per_actor)]
        return RolloutActor(envs, weights, self.model, self.n_rollout_steps, seed_for(self.seed, index), index,
                            numpy_policy=self.numpy_policy)  # fmt: skip


class RolloutActor(Actor):
    """Produces rollouts of ``n_rollout_steps`` structured steps of each of its environments.

    Every sub-step, the envs whose next actor shares a step key are acted for in one
    batched forward pass. Each actor's decisions are recorded in its own column (see
    :class:`~maze_impala.actors.recorder.StepRecorder`), credited with rewards as the
    :class:`~maze_impala.envs.structured.StructuredEnv` contract says, and closed
    when the actor leaves or the episode ends. One loop (:meth:`_run`) does it for every
    env; how the envs are stepped and recorded is its :class:`~.stepping.Stepping`
    strategy's (a fast path for flat envs, the general one otherwise).
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
        stepping: str = "auto",
        numpy_policy: NumpyPolicySpec | None = None,
    ):
        """``env_seeds`` (default: derived from ``seed``) seed the envs' first episodes; ``deterministic``
        takes the most likely actions (for tests and demonstrations; training samples); ``acting`` picks
        the backend of the forward passes (see :func:`~maze_impala.nn.acting.make_acting`); ``stepping``:
        ``general`` takes the general strategy for flat envs too (see :mod:`.stepping`); ``numpy_policy``: see
        :attr:`ActorSpec.numpy_policy` (used unless ``acting="torch"``)."""
        self.batch = EnvBatch(envs, auto_reset=True)
        self.deterministic = deterministic
        self.weights = weights
        self.policy: StructuredPolicy | None = None
        """The torch policy the actor acts with and loads weights into; None where it acts from a numpy spec."""
        self.acting: Acting
        if numpy_policy is not None and acting != "torch":
            self.acting = NumpyActing(numpy_policy, seed)
        else:
            from maze_impala.nn.acting import make_acting
            from maze_impala.nn.models import make_policy

            self.policy = make_policy(envs[0], model)
            self.policy.requires_grad_(False)
            self.acting = make_acting(self.policy, seed, acting)
        self.version = self._load_weights()
        self.n_steps = n_rollout_steps
        self.index = index
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
        flat = all(env.is_flat for env in envs) and not self.ancestors
        if stepping not in ("auto", "general"):
            raise ValueError(f"stepping must be auto or general, got {stepping!r}")
        self.stepping: Stepping = (
            FlatStepping(self.batch, self.recorders, self.publish_episode)
            if flat and stepping == "auto"
            else SubStepping(self.batch, self.recorders, self.publish_episode, self.order, self.ancestors)
        )
        """How the envs take their sub-steps: the fast path for flat envs (one actor, every step a structured
        step), the general strategy otherwise (see :mod:`.stepping`)."""
        for e in range(len(envs)):
            self.stepping.start(e, env_seeds[e] if env_seeds is not None else seed_for(seed, e))

    def rollout(self) -> Rollout:
        if self.weights.version() != self.version:
            self.version = self._load_weights()
        env_steps = self._run()
        trajectories = {key: tr for key, rec in self.recorders.items() if (tr := rec.finish()) is not None}
        for key, trajectory in trajectories.items():
            check_finite(trajectory, key)
        return Rollout(trajectories, self.version, self.index, env_steps, self.collector.drain())

    def _load_weights(self) -> int:
        """Load the newest weights; their version."""
        if self.policy is not None:
            return self.weights.load_into(self.policy)
        flat, version = self.weights.read()
        cast(NumpyActing, self.acting).load(flat)
        return version

    def _run(self) -> int:
        """The loop: ``n_steps`` structured steps of every env, one batched forward pass per group of envs whose
        next actor shares a step key; returns the env steps (structured steps) taken."""
        steps_left = np.full(len(self.batch), self.n_steps)
        while groups := self.stepping.groups(steps_left):
            for key, group in groups:
                recorder = self.recorders[key]
                rows, cols = self.stepping.slots(key, group)
                obs = recorder.gather(rows, cols)
                actions, log_probs = self.acting.act(key, obs, self.deterministic, recorder.agent_ids[cols])
                recorder.decide(rows, cols, actions, log_probs)
                steps_left[group] -= self.stepping.step(key, group, rows, cols, actions)
        return self.n_steps * len(self.batch)

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

    def close(self) -> None:
        self.batch.close()
