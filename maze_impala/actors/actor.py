"""The actor: steps ``E`` structured envs side by side, one batched forward pass per step key and sub-step.

One loop serves training (:meth:`RolloutActor.rollout`), evaluation and rollouts (:meth:`RolloutActor.play`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from maze_impala.actors.recorder import StepRecorder, check_finite
from maze_impala.actors.results import EpisodePublisher, EpisodeResult, agent_returns
from maze_impala.actors.stepping import Episode, Episodes, FlatStepping, Stepping, SubStepping
from maze_impala.core import Actor, ActorID, Rollout, StepKey, Trajectory, WeightSource
from maze_impala.envs.batch import EnvBatch, FrameSink
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.envs.layout import decision_layouts, select_columns
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventCollector, EventHub
from maze_impala.events.interfaces import GameEvents
from maze_impala.nn.acting import Acting, Noise, RowNoise, StreamNoise
from maze_impala.play.games import GameListener, outcome, publish_game

if TYPE_CHECKING:
    from maze_impala.nn.numpy_forms import NumpyPolicyForm
    from maze_impala.play.lineup import Lineup

SEED_BOUND = 2**31
"""Env seeds lie below this: every env takes them, those that read a signed 32-bit int too."""


def seed_for(*entropy: int) -> int:
    """A well-mixed seed below 2**31 from the run seed and indices (actor, env, ...)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0]) % SEED_BOUND


@dataclass
class ActorSpec:
    """Everything needed to build an actor, picklable so that it can travel to a worker process: the env, the
    rollouts' sizes, the seed, and what acts (its :class:`~maze_impala.play.lineup.Lineup`: the trained policy and
    whom it plays against)."""

    env: EnvSpec
    lineup: Lineup
    n_rollout_steps: int
    envs_per_actor: int
    seed: int
    max_episode_steps: int | None = None
    """Episodes of an env without a time limit of its own end as truncated after this many structured steps."""

    def in_numpy(self, form: NumpyPolicyForm | None) -> ActorSpec:
        """This spec with its trained policy acting in numpy through ``form`` where it acts on no device: its actor
        processes then never import torch."""
        return replace(self, lineup=self.lineup.in_numpy(form))

    def build(self, index: int, weights: WeightSource) -> RolloutActor:
        envs = [make_env(self.env) for _ in range(self.envs_per_actor)]
        acting, learned, games = self.lineup.acting(envs[0], index, seed_for(self.seed, index, 1), weights)
        return RolloutActor(
            envs,
            weights,
            acting,
            self.n_rollout_steps,
            seed_for(self.seed, index),
            index,
            record_ancestors=self.lineup.records_ancestors,
            learned=learned,
            max_episode_steps=self.max_episode_steps,
            games=games,
        )


class _Training(Episodes):
    """Training: every episode is published as events, and followed by another (the env's own stream goes on)."""

    def __init__(self, actor: RolloutActor):
        self.actor = actor

    def finished(self, episode: Episode) -> None:
        self.actor.publish_episode(episode)

    def next(self, env: int) -> tuple[bool, int | None]:
        return True, None


class _Playing(Episodes):
    """Evaluation: each env plays the next of a list of ``(episode id, seed)`` until none is left; the random
    numbers of an episode's actions come from a stream seeded by its seed."""

    def __init__(
        self,
        actor: RolloutActor,
        episodes: Sequence[tuple[int, int]],
        on_episode: Callable[[EpisodeResult], None] | None,
        record: Callable[[int], FrameSink | None] | None,
    ):
        self.actor, self.todo, self.on_episode, self.record = actor, list(episodes)[::-1], on_episode, record
        self.playing: dict[int, tuple[int, int]] = {}
        self.results: list[EpisodeResult] = []

    def finished(self, episode: Episode) -> None:
        episode_id, seed = self.playing.pop(episode.env)
        sinks = self.actor.batch.frame_sinks
        if sinks[episode.env] is not None:
            sinks[episode.env].close()
            sinks[episode.env] = None
        summary = episode.summary
        named = agent_returns(episode.actor_returns, self.actor.agents)
        result = EpisodeResult(
            episode_id,
            seed,
            episode.length,
            episode.episode_return,
            episode.actor_returns,
            named,
            summary.kpis,
            summary.records,
            summary.raw,
            episode.truncated,
            episode.capped,
        )
        self.results.append(result)
        if self.on_episode is not None:
            self.on_episode(result)

    def next(self, env: int) -> tuple[bool, int | None]:
        if not self.todo:
            return False, None
        episode_id, seed = self.todo.pop()
        self.playing[env] = (episode_id, seed)
        self.actor.episode_noise(env, seed)
        self.actor.batch.frame_sinks[env] = self.record(episode_id) if self.record is not None else None
        return True, seed


@dataclass(frozen=True)
class PlayProgress:
    """How far :meth:`RolloutActor.play` is: episodes done of all, and the longest episode so far (finished or
    playing), in structured steps."""

    done: int
    total: int
    longest: int


PLAY_CHUNK = 64
"""Structured steps between two clear-outs of a playing actor's buffers (an evaluation's or a game's episodes, of which
nothing is learned)."""


class RolloutActor(Actor):
    """Produces rollouts of ``n_rollout_steps`` structured steps of each of its environments, and plays episodes.

    Every sub-step, the envs whose next actor shares a step key are acted for in one batched forward pass, from
    the recurrent state of each acting env and agent. Each actor's decisions are recorded in its own column (see
    :class:`~maze_impala.actors.recorder.StepRecorder`, which also keeps the columns' states), credited with
    rewards as the :class:`~maze_impala.envs.structured.StructuredEnv` contract says, and closed when the actor
    leaves or the episode ends. One loop (:meth:`_run`) does it for every env, in training and in :meth:`play`;
    how the envs are stepped is its :class:`~.stepping.Stepping` strategy's (a fast path for flat envs in
    training, the general one otherwise).
    """

    def __init__(
        self,
        envs: list[StructuredEnv],
        weights: WeightSource | None,
        acting: Acting,
        n_rollout_steps: int,
        seed: int,
        index: int = 0,
        deterministic: bool = False,
        env_seeds: list[int] | None = None,
        stepping: str = "auto",
        record_ancestors: bool = False,
        keep_raw_events: bool = False,
        learned: frozenset[ActorID] | None = None,
        max_episode_steps: int | None = None,
        games: GameListener | None = None,
    ):
        """``weights`` and ``acting``: the weights to act with and how (see :mod:`maze_impala.nn.acting`); no
        ``weights``: the acting keeps its own (a fixed policy, as :func:`~maze_impala.play.spec.load_acting` builds it);
        ``env_seeds`` (default: derived from ``seed``) seed the envs' first training episodes; ``deterministic``
        takes the most likely actions (for tests and demonstrations; training samples); ``stepping``: ``general``
        takes the general strategy for flat envs too (see :mod:`.stepping`); ``record_ancestors``: record the earlier
        sub-steps' observations of each decision (the delta critic); ``keep_raw_events``: keep every event of a
        played episode; ``learned``: the actors whose decisions go into the rollouts (None: every one), where the
        others are a fixed opponent's, part of the env for the learner; ``max_episode_steps``: the structured steps
        after which an episode of an env without a time limit of its own ends as truncated (None: never); ``games``:
        what hears each game's end against an opponent (:class:`~maze_impala.play.games.GameListener`)."""
        self.batch = EnvBatch(envs, keep_raw_events, max_episode_steps)
        self.learned = learned
        self.weights, self.acting, self.games = weights, acting, games
        self.noise: Noise | None = None if deterministic else StreamNoise(seed)
        self.version = self._load_weights()
        self.n_steps = n_rollout_steps
        self.index = index
        self.hub = EventHub()
        self.collector = EventCollector()
        self.hub.listeners.append(self.collector)
        self.publisher = EpisodePublisher(self.hub)
        self.agents = envs[0].agents_dict
        """The env's named agents, whose returns are published next to the episode's."""
        self.game_events = self.hub.publisher(GameEvents)
        self.seat = _seat(learned, self.agents)
        """The name of the one seat this actor trains against an opponent, if it does."""
        self.order = list(self.batch.step_keys)
        layouts = decision_layouts(
            self.order,
            envs[0].observation_spaces_dict,
            envs[0].action_spaces_dict,
            acting.state_shapes,
            record_ancestors,
        )
        self.recorders = {
            key: StepRecorder(
                layout,
                n_rollout_steps + 1,
                columns=len(envs) * max(self.batch.agent_counts[key], 1),
                learned=acting.learned_state(key),
            )
            for key, layout in layouts.items()
        }
        for e in range(len(envs)):  # fixed agents get fixed columns: e * n + agent
            for key, count in self.batch.agent_counts.items():
                for agent in range(max(count, 0)):
                    self.recorders[key].column(e, agent)
        flat = all(env.is_flat for env in envs) and not record_ancestors
        if stepping not in ("auto", "general"):
            raise ValueError(f"stepping must be auto or general, got {stepping!r}")
        self.stepping: Stepping = (
            FlatStepping(self.batch, self.recorders, _Training(self))
            if flat and stepping == "auto"
            else SubStepping(self.batch, self.recorders, _Training(self), self.order, record_ancestors)
        )
        """How the envs take their sub-steps in training: the fast path for flat envs (one actor, every step a
        structured step), the general strategy otherwise (see :mod:`.stepping`)."""
        self._started = False
        self._env_seeds = env_seeds if env_seeds is not None else [seed_for(seed, e) for e in range(len(envs))]
        self._streams: list[np.random.Generator] = []
        """Per env, the random stream of the episode it plays (:meth:`play`)."""

    def rollout(self) -> Rollout:
        if not self._started:  # the envs' first episodes start with the first rollout
            for e, env_seed in enumerate(self._env_seeds):
                self.stepping.start(e, env_seed)
            self._started = True
        if self.weights is not None and self.weights.version() != self.version:
            self.version = self._load_weights()
        steps_left = np.full(len(self.batch), self.n_steps)
        self._run(self.stepping, steps_left, self.noise)
        trajectories = {key: tr for key, rec in self.recorders.items() if (tr := rec.finish()) is not None}
        if self.learned is not None:
            trajectories = {key: tr for key, tr in self._learned_columns(trajectories).items() if tr.n_columns}
        for key, trajectory in trajectories.items():
            check_finite(trajectory, key)
        return Rollout(trajectories, self.version, self.index, self.n_steps * len(self.batch), self.collector.drain())

    def _learned_columns(self, trajectories: dict[StepKey, Trajectory]) -> dict[StepKey, Trajectory]:
        learned = self.learned or frozenset()
        return {
            key: select_columns(tr, np.flatnonzero([ActorID(key, int(a)) in learned for a in tr.agent_ids]))
            for key, tr in trajectories.items()
        }

    def play(
        self,
        episodes: Sequence[tuple[int, int]],
        on_episode: Callable[[EpisodeResult], None] | None = None,
        record: Callable[[int], FrameSink | None] | None = None,
        on_progress: Callable[[PlayProgress], None] | None = None,
    ) -> list[EpisodeResult]:
        """Play ``episodes`` (``(episode id, seed)`` pairs) with the newest weights, nothing recorded for learning:
        each env takes the next episode when its last one ends. Sampled actions draw from a stream per episode,
        seeded by its seed, so an episode's actions depend on its seed and the policy only. Results in episode
        order; ``on_episode`` sees each one as it ends; ``record`` gives the episodes to film their frame sink (a
        video file) by id, None for the others; ``on_progress`` sees how far the play is after every chunk of
        :data:`PLAY_CHUNK` structured steps. Not to be mixed with :meth:`rollout` on one actor."""
        self.version = self._load_weights()
        schedule = _Playing(self, episodes, on_episode, record)
        stepping = SubStepping(self.batch, self.recorders, schedule, self.order)  # envs idle at different times
        stepping.idle[:] = True
        self._streams = [np.random.default_rng(0) for _ in range(len(self.batch))]
        for e in range(min(len(self.batch), len(episodes))):
            stepping.start(e, schedule.next(e)[1])
        noise = RowNoise(self._streams) if self.noise is not None else None
        steps_left = np.full(len(self.batch), self.n_steps)
        longest = 0
        while not stepping.idle.all():
            self._run(stepping, steps_left, noise)  # in chunks, so that the recorders' buffers stay small
            for recorder in self.recorders.values():
                recorder.discard()
            steps_left[:] = self.n_steps
            if on_progress is not None:
                longest = max([longest, *self.batch.lengths(~stepping.idle), *(r.steps for r in schedule.results)])
                on_progress(PlayProgress(len(schedule.results), len(episodes), longest))
        return sorted(schedule.results, key=lambda r: r.episode_id)

    def episode_noise(self, env: int, seed: int) -> None:
        """Restart env ``env``'s random stream for an episode played with ``seed``."""
        self._streams[env] = np.random.default_rng(seed_for(seed, 1))

    def _load_weights(self) -> int:
        """Load the newest weights; their version (0 for an acting that keeps its own)."""
        if self.weights is None:
            return 0
        flat, version = self.weights.read()
        self.acting.load(flat)
        return version

    def _run(self, stepping: Stepping, steps_left: np.ndarray, noise: Noise | None) -> None:
        """The loop: until ``steps_left`` is spent, one batched forward pass per group of envs whose next actor
        shares a step key, from and into the recorded states of the acting columns."""
        while groups := stepping.groups(steps_left):
            for key, group in groups:
                recorder = self.recorders[key]
                rows, cols = stepping.slots(key, group)
                obs, state = recorder.gather(rows, cols), recorder.gather_state(cols)
                group_noise = noise.for_rows(group) if noise is not None else None
                actions, log_probs, state = self.acting.act(key, obs, state, recorder.agent_ids[cols], group_noise)
                recorder.decide(rows, cols, actions, log_probs, state)
                steps_left[group] -= stepping.step(key, group, rows, cols, actions)

    def publish_episode(self, episode: Episode) -> None:
        """A finished training episode (see :class:`EpisodePublisher`), and its game's outcome where this actor
        plays one seat against an opponent."""
        returns = episode.actor_returns
        self.publisher.publish(
            episode.episode_return,
            episode.length,
            returns,
            agent_returns(returns, self.agents),
            episode.summary.records,
            episode.summary.kpis,
            episode.truncated,
        )
        if self.seat is not None:  # a game against the training opponent, seen from the trained seat
            seat = self.agents[self.seat]
            result = outcome(returns, seat, self.agents)
            publish_game(self.game_events, self.seat, result, returns.get(seat, 0.0))
            for key, recorder in self.recorders.items():  # the game's end, to every policy that played it
                cols = recorder.columns_of(episode.env)
                state = recorder.take_closing_state(cols)
                if self.games is not None:
                    self.games.game_over(key, state, recorder.agent_ids[cols], result, self.hub)

    def close(self) -> None:
        self.batch.close()


def _seat(learned: frozenset[ActorID] | None, agents: dict[str, ActorID]) -> str | None:
    """The name of the seat in ``learned``, where that is one seat of a game of named agents."""
    if learned is None or len(learned) != 1 or len(agents) < 2:
        return None
    return next((name for name, actor in agents.items() if actor in learned), None)
