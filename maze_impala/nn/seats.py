"""Acting for some agents with one policy and for the others with another: the trained policy in one seat of a game,
a fixed opponent in the others; and an opponent drawn from past snapshots of the trained policy.

:class:`SeatedActing` is an :class:`~maze_impala.nn.acting.Acting` like any other, so the actor's one loop plays
games against an opponent as it plays every episode: each batch of a step key is split by agent, the trained
policy's rows go to its acting and the others to the opponent's, and the results are put back in row order.
Weights loaded by the actor (:meth:`SeatedActing.load`) are the trained policy's; the opponent keeps its own.
:class:`PoolOpponent` is such an opponent whose weights are the learner's snapshots of the trained policy (self-play
against a pool of its past selves).

Nothing in this module imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from maze_impala.core import ActorID, NestedArrays, StepKey, WeightSource
from maze_impala.nn.acting import Acting, Actions, Noise, State

OPPONENT_STATE = "opponent."
"""The prefix of the opponent's recurrent state names, so that both policies may keep a state of their own."""
SNAPSHOT_STATE = "snapshot"
"""The state name under which a :class:`PoolOpponent` keeps, per env and agent, which snapshot plays its episode."""


def act_in_parts(step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None,
                 parts: Sequence[tuple[Acting, np.ndarray, Callable[[str], str | None]]]) -> Actions:  # fmt: skip
    """Each ``(acting, rows, own)`` of ``parts`` acts for its ``rows`` of the batch, on the state names that
    ``own`` maps to a name of its own (None: not its state); actions, log-probabilities and states in row order."""
    state = {k: v.copy() for k, v in state.items()}
    actions: dict[str, np.ndarray] = {}
    log_probs = np.zeros(len(agent_ids), dtype=np.float32)
    for acting, rows, own in parts:
        if len(rows) == 0:
            continue
        names = {name: mine for name in state if (mine := own(name)) is not None}
        part, part_log_probs, part_state = acting.act(
            step_key, {k: v[rows] for k, v in obs.items()}, {mine: state[name][rows] for name, mine in names.items()},
            agent_ids[rows], noise.for_rows(rows.tolist()) if noise is not None else None,
        )  # fmt: skip
        for name, value in part.items():
            if name not in actions:
                actions[name] = np.zeros((len(agent_ids), *value.shape[1:]), dtype=value.dtype)
            actions[name][rows] = value
        log_probs[rows] = part_log_probs
        for name, mine in names.items():
            state[name][rows] = part_state[mine]
    return actions, log_probs, state


class SeatedActing(Acting):
    """``trained`` acts for the actors in ``seat``, ``opponent`` for every other actor."""

    def __init__(self, trained: Acting, opponent: Acting, seat: frozenset[ActorID]):
        self.trained, self.opponent, self.seat = trained, opponent, seat

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        shapes = dict(self.trained.state_shapes(step_key))
        shapes.update({OPPONENT_STATE + k: v for k, v in self.opponent.state_shapes(step_key).items()})
        return shapes

    def learned_state(self, step_key: StepKey) -> tuple[str, ...]:
        return self.trained.learned_state(step_key)

    def load(self, flat: np.ndarray) -> None:
        self.trained.load(flat)

    def act(self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray,
            noise: Noise | None) -> Actions:  # fmt: skip
        mine = np.array([ActorID(step_key, int(a)) in self.seat for a in agent_ids], dtype=bool)
        return act_in_parts(step_key, obs, state, agent_ids, noise, [
            (self.trained, np.flatnonzero(mine), _trained_state),
            (self.opponent, np.flatnonzero(~mine), _opponent_state),
        ])  # fmt: skip


def _trained_state(name: str) -> str | None:
    return None if name.startswith(OPPONENT_STATE) else name


def _opponent_state(name: str) -> str | None:
    return name[len(OPPONENT_STATE) :] if name.startswith(OPPONENT_STATE) else None


class PoolOpponent(Acting):
    """An opponent that plays with the learner's snapshot pool, past weights of the trained policy that ``weights``
    (the actor's weight source) publishes through :meth:`~maze_impala.core.WeightSource.snapshots`. Each agent's
    episode is played by one snapshot, drawn at its first decision: uniformly (with ``seed``), or the newest with
    ``draw="latest"``; if that snapshot left the pool when the next episode starts, another one is drawn. ``make``
    builds an acting of the trained policy's kind, one per snapshot held. Its :meth:`load` does nothing: the
    snapshots' weights come from the pool, so an actor that restarts finds the pool the learner keeps (and a
    resumed run the pool its checkpoint saved)."""

    def __init__(self, make: Callable[[], Acting], weights: WeightSource, seed: int, draw: str = "uniform"):
        self.make, self.weights, self.draw = make, weights, draw
        self.rng = np.random.default_rng(seed)
        self.snapshots: dict[int, tuple[int, Acting]] = {}
        """Per snapshot number: the weights' version, and the acting that holds them."""
        self._numbers = np.zeros(0, dtype=np.int64)
        """The snapshot numbers held."""
        self._spare: list[Acting] = [make()]

    @property
    def versions(self) -> list[int]:
        """The versions of the weights held, oldest first."""
        return [version for version, _ in self.snapshots.values()]

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        acting = self._spare[0] if self._spare else next(iter(self.snapshots.values()))[1]
        return {**acting.state_shapes(step_key), SNAPSHOT_STATE: (1,)}

    def load(self, flat: np.ndarray) -> None:
        """Nothing: the snapshots' weights come from the pool."""

    def act(self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray,
            noise: Noise | None) -> Actions:  # fmt: skip
        drawn = state[SNAPSHOT_STATE][:, 0].astype(np.int64)
        if not np.isin(drawn, self._numbers).all():  # an episode starts, or its snapshot left the pool
            self._sync()
            fresh = np.flatnonzero(~np.isin(drawn, self._numbers))
            if self.draw == "latest":
                drawn[fresh] = self._numbers[-1]
            else:
                drawn[fresh] = self.rng.choice(self._numbers, size=len(fresh))
        parts = [(self.snapshots[number][1], np.flatnonzero(drawn == number), _snapshot_state)
                 for number in np.unique(drawn)]  # fmt: skip
        actions, log_probs, state = act_in_parts(step_key, obs, state, agent_ids, noise, parts)
        state[SNAPSHOT_STATE] = drawn.astype(np.float32)[:, None]
        return actions, log_probs, state

    def _sync(self) -> None:
        """Hold the snapshots the pool holds now: drop those that left it, load those that joined."""
        while True:
            pool = self.weights.snapshots()
            if not pool:
                raise RuntimeError("opponent=pool: the actor's weight source holds no snapshot pool; the "
                                   "learner publishes one (publish_snapshots) before its actors play")  # fmt: skip
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
