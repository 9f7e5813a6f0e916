"""The snapshot pool, both halves: the learner's (:class:`SnapshotPool`) and the actors' (:class:`PoolOpponent`).

The learner's pool holds past weights of the trained policy, for self-play against past selves
(``algorithm.train_opponent=pool``).

The pool lives with the learner, not in the actors: it takes a snapshot when the policy's version reaches the
next multiple of ``snapshot_every`` (the first weights at once), keeps the newest ``size``, is published to every
actor through a :class:`PoolPublisher` (:class:`PooledPublisher` does it after each update) and is saved in every
checkpoint. So every actor plays the same pool, an actor that restarts finds it, and a resumed run goes on with
the pool it had. The games against it are kept here too: the pool opponent publishes each game that ended, which
snapshot played it and how (:class:`PoolEvents`), on its actor's event hub; the events travel with the rollout,
and the learner's pool hears them (:meth:`SnapshotPool.hear`), estimates the trained policy's score against every
snapshot from all of them, publishes the estimates (``opponent_pool.draw=pfsp`` draws by them) and saves them with
the snapshots, so that a restarted actor and a resumed run draw as before.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from maze_impala.config import OpponentPoolConfig
from maze_impala.core import NestedArrays, StepKey, WeightPublisher, WeightSource
from maze_impala.events.api import EventHub, EventInterface, EventRecord, event_name, record_only
from maze_impala.nn.acting import Acting, Actions, Noise, State, act_in_parts
from maze_impala.play.games import SCORES

if TYPE_CHECKING:
    from torch import nn


SNAPSHOT_STATE = "snapshot"
"""The state name under which a :class:`PoolOpponent` keeps, per env and agent, which snapshot plays its episode."""
PFSP_WINDOW = 100
"""The pool estimates the trained policy's score against a snapshot over about its last this many games against it
(each older game's weight decays by ``1 - 1/PFSP_WINDOW`` per newer one)."""


SNAPSHOT_POOL = "snapshot_pool"
"""The checkpoint key of a run's snapshot pool (:meth:`SnapshotPool.state_dict`)."""
Snapshots = dict[int, tuple[int, np.ndarray]]
"""A snapshot pool as the learner keeps it: snapshot number (counted from 1) -> (version, flat weights)."""


class PoolEvents(EventInterface):
    """Published by a :class:`PoolOpponent` on its actor's hub: the games against the learner's snapshot pool."""

    @record_only
    def pool_game(self, snapshot: int, score: float):
        """A game that snapshot ``snapshot`` played ended with the trained policy's ``score`` (win 1, draw 0.5,
        loss 0)."""


POOL_GAME = event_name(PoolEvents.pool_game)


class PoolSource(WeightSource):
    """A weight source that also carries the learner's snapshot pool (the actors' side)."""

    @abstractmethod
    def snapshots(self) -> dict[int, int]:
        """The learner's pool of past weights: snapshot number -> the version of its weights, oldest first; empty
        before the learner publishes one."""

    @abstractmethod
    def read_snapshot(self, number: int) -> np.ndarray:
        """A copy of the weights of snapshot ``number``; :class:`KeyError` if it is not (or no longer) in the pool."""

    @abstractmethod
    def pool_scores(self) -> dict[int, float]:
        """The trained policy's estimated score (win 1, draw 0.5) against each snapshot, as the learner keeps them
        from every actor's games (what ``opponent_pool.draw=pfsp`` draws by); a snapshot without one counts 0.5."""


class PoolPublisher(WeightPublisher):
    """A weight publisher that also carries the snapshot pool (the learner's side)."""

    @abstractmethod
    def publish_snapshots(self, snapshots: Snapshots) -> None:
        """Make ``snapshots`` the pool every actor reads through :meth:`PoolSource.snapshots` (all of it: a
        snapshot that is not in it leaves the pool)."""

    @abstractmethod
    def publish_pool_scores(self, scores: dict[int, float]) -> None:
        """Make ``scores`` what every actor reads through :meth:`PoolSource.pool_scores`."""


class SnapshotPool:
    """Snapshots of a policy's weights, numbered from 1, the newest ``config.size`` kept."""

    def __init__(self, config: OpponentPoolConfig):
        self.every, self.size = config.snapshot_every, config.size
        self.snapshots: Snapshots = {}
        """Snapshot number -> (the weights' version, the flat weights), oldest first."""
        self.taken = 0
        """Snapshots taken so far: the number of the newest."""
        self.results: dict[int, tuple[float, float]] = {}
        """Per snapshot held: the decayed count of games against it and the trained policy's decayed score in them."""

    @property
    def versions(self) -> list[int]:
        """The versions of the weights in the pool, oldest first."""
        return [version for version, _ in self.snapshots.values()]

    def due(self, version: int) -> bool:
        """Whether weights at ``version`` join the pool: the first weights, then each multiple of ``every`` past
        the newest snapshot's version."""
        if not self.snapshots:
            return True
        newest = next(reversed(self.snapshots.values()))[0]
        return version >= (newest // self.every + 1) * self.every

    def offer(self, module: nn.Module, version: int) -> bool:
        """Take a snapshot of ``module``'s weights at ``version`` if one is due; True if the pool changed."""
        if not self.due(version):
            return False
        from maze_impala.nn.flat import flatten

        self.add(version, flatten(module).numpy().copy())
        return True

    def add(self, version: int, flat: np.ndarray) -> None:
        self.taken += 1
        self.snapshots[self.taken] = (version, flat)
        self._keep_newest()

    def _keep_newest(self) -> None:
        while len(self.snapshots) > self.size:
            del self.snapshots[min(self.snapshots)]
        self.results = {n: r for n, r in self.results.items() if n in self.snapshots}

    def record(self, games: Iterable[tuple[int, float]]) -> None:
        """Games that ended: the snapshot that played each and the trained policy's score (win 1, draw 0.5, loss
        0). Each older game's weight decays by ``1 - 1/PFSP_WINDOW`` per newer one against the same snapshot; a
        snapshot that left the pool since is skipped."""
        keep = 1.0 - 1.0 / PFSP_WINDOW
        for number, score in games:
            if number in self.snapshots:
                played, scored = self.results.get(number, (0.0, 0.0))
                self.results[number] = (played * keep + 1.0, scored * keep + score)

    def hear(self, record: EventRecord) -> None:
        """A listener of the learner's hub: the :class:`PoolEvents` that the actors' rollouts bring."""
        if (record.interface, record.event) == POOL_GAME:
            self.record([(record.values["snapshot"], record.values["score"])])

    def publish(self, publisher: PoolPublisher) -> None:
        """Publish the snapshots and the scores (as a run starts: before any actor plays)."""
        publisher.publish_snapshots(self.snapshots)
        publisher.publish_pool_scores(self.scores())

    def scores(self) -> dict[int, float]:
        """The trained policy's estimated score against each snapshot held, starting from one game drawn: 0.5
        before any game against it."""
        scores = {}
        for number in self.snapshots:
            played, scored = self.results.get(number, (0.0, 0.0))
            scores[number] = (scored + 0.5) / (played + 1.0)
        return scores

    def state_dict(self) -> dict[str, Any]:
        """Tensors and numbers only: what ``torch.load(weights_only=True)`` reads back."""
        import torch

        numbers = list(self.snapshots)
        results = [self.results.get(n, (0.0, 0.0)) for n in numbers]
        return {
            "taken": self.taken,
            "numbers": torch.tensor(numbers, dtype=torch.int64),
            "versions": torch.tensor(self.versions, dtype=torch.int64),
            "weights": torch.from_numpy(np.stack([flat for _, flat in self.snapshots.values()])),
            "games": torch.tensor([played for played, _ in results], dtype=torch.float64),
            "scores": torch.tensor([scored for _, scored in results], dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The pool a checkpoint saved; with a smaller ``size`` now, its newest snapshots."""
        numbers, versions = state["numbers"].tolist(), state["versions"].tolist()
        weights = state["weights"].numpy()
        self.snapshots = {n: (v, weights[i].copy()) for i, (n, v) in enumerate(zip(numbers, versions, strict=True))}
        self.taken = int(state["taken"])
        if "games" in state:  # a checkpoint of before the pool kept its games starts every snapshot at 0.5
            played, scored = state["games"].tolist(), state["scores"].tolist()
            self.results = {n: (g, s) for n, g, s in zip(numbers, played, scored, strict=True) if g > 0}
        self._keep_newest()


class PooledPublisher(WeightPublisher):
    """A weight publisher that keeps the learner's snapshot pool: after publishing each update's weights, it offers
    them to ``pool`` and publishes the pool (where it changed) and its scores through ``publisher``."""

    def __init__(self, publisher: PoolPublisher, pool: SnapshotPool):
        self.publisher, self.pool = publisher, pool

    def publish(self, module: nn.Module, version: int) -> None:
        self.publisher.publish(module, version)
        if self.pool.offer(module, version):
            self.publisher.publish_snapshots(self.pool.snapshots)
        self.publisher.publish_pool_scores(self.pool.scores())


class PoolOpponent(Acting):
    """An opponent that plays with the learner's snapshot pool, past weights of the trained policy that ``weights``
    (the actor's weight source, which carries the pool) publishes through :meth:`PoolSource.snapshots`. Each agent's
    episode is played by one snapshot, drawn at its first decision (random draws from ``seed``) by the rule
    ``draw`` names:

    - ``uniform``: any snapshot of the pool, with equal chances;
    - ``latest``: the newest;
    - ``pfsp``: prioritised fictitious self-play (Vinyals et al. 2019, AlphaStar), chances in proportion to
      ``(1 - x)**2``, where ``x`` is the trained policy's score (win 1, draw 0.5) against the snapshot, as the
      learner's pool estimates it from every actor's games and publishes it (:meth:`PoolSource.pool_scores`):
      the snapshots that the policy beats least play most. A game's end (:meth:`game_over`) publishes which
      snapshots played it and the trained policy's score (:class:`PoolEvents`), for the learner's pool.

    If a snapshot left the pool when an episode of its goes on, another one is drawn. ``make``
    builds an acting of the trained policy's kind, one per snapshot held. Its :meth:`load` does nothing: the
    snapshots' weights come from the pool, so an actor that restarts finds the pool the learner keeps (and a
    resumed run the pool its checkpoint saved)."""

    def __init__(self, make: Callable[[], Acting], weights: WeightSource, seed: int, draw: str = "uniform"):
        if not isinstance(weights, PoolSource):
            raise TypeError(
                f"opponent=pool: the actor's weights ({type(weights).__name__}) carry no snapshot pool; "
                "the pool is played in training, where the learner publishes it"
            )
        self.make, self.draw = make, draw
        self.weights: PoolSource = weights
        self.rng = np.random.default_rng(seed)
        self.snapshots: dict[int, tuple[int, Acting]] = {}
        """Per snapshot number: the weights' version, and the acting that holds them."""
        self._numbers = np.zeros(0, dtype=np.int64)
        """The snapshot numbers held."""
        self._spare: list[Acting] = [make()]
        self._events: tuple[EventHub, PoolEvents] | None = None
        """The hub the games were last published on, and its publisher."""

    @property
    def versions(self) -> list[int]:
        """The versions of the weights held, oldest first."""
        return [version for version, _ in self.snapshots.values()]

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        acting = self._spare[0] if self._spare else next(iter(self.snapshots.values()))[1]
        return {**acting.state_shapes(step_key), SNAPSHOT_STATE: (1,)}

    def load(self, flat: np.ndarray) -> None:
        """Nothing: the snapshots' weights come from the pool."""

    def act(
        self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None
    ) -> Actions:
        drawn = state[SNAPSHOT_STATE][:, 0].astype(np.int64)
        if not np.isin(drawn, self._numbers).all():  # an episode starts, or its snapshot left the pool
            self._sync()
            fresh = np.flatnonzero(~np.isin(drawn, self._numbers))
            if self.draw == "latest":
                drawn[fresh] = self._numbers[-1]
            else:
                drawn[fresh] = self.rng.choice(self._numbers, size=len(fresh), p=self.chances())
        parts = [
            (self.snapshots[number][1], np.flatnonzero(drawn == number), _snapshot_state) for number in np.unique(drawn)
        ]
        actions, log_probs, state = act_in_parts(step_key, obs, state, agent_ids, noise, parts)
        state[SNAPSHOT_STATE] = drawn.astype(np.float32)[:, None]
        return actions, log_probs, state

    def chances(self) -> np.ndarray | None:
        """Per snapshot held, oldest first, its chance to play a game (None: uniform)."""
        if self.draw != "pfsp":
            return None
        scores = self.weights.pool_scores()
        weights = np.array([(1.0 - scores.get(int(number), 0.5)) ** 2 for number in self._numbers])
        return weights / weights.sum()  # each score is below 1 (the pool starts every estimate from a draw)

    def game_over(self, step_key: StepKey, state: State, agent_ids: np.ndarray, result: str, events: EventHub) -> None:
        """Publish each snapshot that played the game (an agent that never decided in it holds 0)."""
        if self._events is None or self._events[0] is not events:
            self._events = (events, events.publisher(PoolEvents))
        publish = self._events[1].pool_game
        for number in state[SNAPSHOT_STATE][:, 0].astype(np.int64).tolist():
            if number > 0:
                publish(snapshot=number, score=SCORES[result])

    def _sync(self) -> None:
        """Hold the snapshots the pool holds now: drop those that left it, load those that joined."""
        while True:
            pool = self.weights.snapshots()
            if not pool:
                raise RuntimeError(
                    "opponent=pool: the actor's weight source holds no snapshot pool; the "
                    "learner publishes one (publish_snapshots) before its actors play"
                )
            for number in [n for n in self.snapshots if n not in pool]:
                self._spare.append(self.snapshots.pop(number)[1])
            for number, version in pool.items():
                if number in self.snapshots:
                    continue
                try:
                    flat = self.weights.read_snapshot(number)
                except KeyError:  # it left the pool since it was listed
                    continue
                acting = self._spare.pop() if self._spare else self.make()
                acting.load(flat)
                self.snapshots[number] = (version, acting)
            self.snapshots = dict(sorted(self.snapshots.items()))
            self._numbers = np.array(list(self.snapshots), dtype=np.int64)
            if len(self._numbers):
                return


def _snapshot_state(name: str) -> str | None:
    return None if name == SNAPSHOT_STATE else name


def make_snapshot_pool(
    config: OpponentPoolConfig, policy: nn.Module, version: int, saved: dict[str, Any] | None = None
) -> SnapshotPool:
    """A run's snapshot pool: the one a resumed run's checkpoint ``saved`` (its state), holding at least ``policy``
    at ``version`` (a new run's first snapshot; or a run of a release that saved no pool)."""
    pool = SnapshotPool(config)
    if saved is not None and SNAPSHOT_POOL in saved:
        pool.load_state_dict(saved[SNAPSHOT_POOL])
    if not pool.snapshots:
        pool.offer(policy, version)
    return pool


def pooled(pool: SnapshotPool, weights: PoolPublisher, hub: EventHub) -> WeightPublisher:
    """``pool`` wired into a run: published to the actors' ``weights`` before any actor starts (its first game
    against the pool finds it), hearing the games against it on the learner's ``hub``; returns the publisher that
    keeps it after each update."""
    pool.publish(weights)
    hub.listeners.append(pool.hear)
    return PooledPublisher(weights, pool)
