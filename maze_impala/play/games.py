"""Games between seats: who won a game, the trained policy's score for it, and the events that report it.

Nothing here acts or imports torch: the actors' games against an opponent (:mod:`maze_impala.play.lineup`), the
snapshot pool's statistics (:mod:`maze_impala.play.pool`) and the evaluation's games
(:mod:`maze_impala.evaluate.games`) read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from maze_impala.core import ActorID, StepKey

if TYPE_CHECKING:
    from maze_impala.events.api import EventHub
    from maze_impala.events.interfaces import GameEvents
    from maze_impala.nn.acting import State

OUTCOMES = ("win", "draw", "loss")
"""A game's outcome for a seat (see :func:`outcome`)."""
SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0}
"""The trained policy's score for a game's result."""


class GameListener(Protocol):
    """What hears a game's end in an actor: the routed acting of a game against an opponent, which passes it on to the
    policies that played it and listen (the snapshot pool's opponent, :class:`~maze_impala.play.pool.PoolOpponent`)."""

    def game_over(self, step_key: StepKey, state: State, agent_ids: np.ndarray, result: str, events: EventHub) -> None:
        """A game in which agents ``agent_ids`` of ``step_key`` acted ended in ``result`` (win, draw or loss, seen
        from the trained policy's seat); ``state`` is where their last decisions left their state; ``events``: the
        actor's hub, whose events go to the learner with the rollout."""


def publish_game(events: GameEvents, seat: str, result: str, seat_return: float) -> None:
    """One game's outcome and return, seen from ``seat``, as :class:`~maze_impala.events.interfaces.GameEvents`."""
    for name in OUTCOMES:
        getattr(events, name)(seat=seat, value=float(result == name))
    events.seat_return(seat=seat, value=seat_return)


def outcome(actor_returns: dict[ActorID, float], seat: ActorID, agents: dict[str, ActorID]) -> str:
    """win, draw or loss of ``seat`` against the best of the other agents."""
    mine = actor_returns.get(seat, 0.0)
    best = max(actor_returns.get(actor, 0.0) for actor in agents.values() if actor != seat)
    return "win" if mine > best else "draw" if mine == best else "loss"
