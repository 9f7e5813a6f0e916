"""Acting for some agents with one policy and for the others with another: the trained policy in one seat of a game,
a fixed opponent in the others.

:class:`SeatedActing` is an :class:`~maze_impala.nn.acting.Acting` like any other, so the actor's one loop plays
games against an opponent as it plays every episode: each batch of a step key is split by agent, the trained
policy's rows go to its acting and the others to the opponent's, and the results are put back in row order.
Weights loaded by the actor (:meth:`SeatedActing.load`) are the trained policy's; the opponent keeps its own.

Nothing in this module imports torch.
"""

from __future__ import annotations

import numpy as np

from maze_impala.core import ActorID, NestedArrays, StepKey
from maze_impala.nn.acting import Acting, Actions, Noise, State

OPPONENT_STATE = "opponent."
"""The prefix of the opponent's recurrent state names, so that both policies may keep a state of their own."""


class SeatedActing(Acting):
    """``trained`` acts for the actors in ``seat``, ``opponent`` for every other actor."""

    def __init__(self, trained: Acting, opponent: Acting, seat: frozenset[ActorID]):
        self.trained, self.opponent, self.seat = trained, opponent, seat

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        shapes = dict(self.trained.state_shapes(step_key))
        shapes.update({OPPONENT_STATE + k: v for k, v in self.opponent.state_shapes(step_key).items()})
        return shapes

    def load(self, flat: np.ndarray) -> None:
        self.trained.load(flat)

    def act(self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray,
            noise: Noise | None) -> Actions:  # fmt: skip
        mine = np.array([ActorID(step_key, int(a)) in self.seat for a in agent_ids], dtype=bool)
        state = {k: v.copy() for k, v in state.items()}
        actions: dict[str, np.ndarray] = {}
        log_probs = np.zeros(len(agent_ids), dtype=np.float32)
        for acting, rows, prefix in ((self.trained, np.flatnonzero(mine), ""),
                                     (self.opponent, np.flatnonzero(~mine), OPPONENT_STATE)):  # fmt: skip
            if len(rows) == 0:
                continue
            own = {k[len(prefix) :]: v[rows] for k, v in state.items() if _owned(k, prefix)}
            part, part_log_probs, part_state = acting.act(
                step_key, {k: v[rows] for k, v in obs.items()}, own, agent_ids[rows],
                noise.for_rows(rows.tolist()) if noise is not None else None,
            )  # fmt: skip
            for name, value in part.items():
                if name not in actions:
                    actions[name] = np.zeros((len(agent_ids), *value.shape[1:]), dtype=value.dtype)
                actions[name][rows] = value
            log_probs[rows] = part_log_probs
            for name, value in part_state.items():
                state[prefix + name][rows] = value
        return actions, log_probs, state


def _owned(name: str, prefix: str) -> bool:
    """Whether the state ``name`` belongs to the acting whose names carry ``prefix`` ("" for the trained one)."""
    return name.startswith(OPPONENT_STATE) if prefix else not name.startswith(OPPONENT_STATE)
