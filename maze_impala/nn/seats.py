"""Acting for some agents with one policy and for the others with another: the trained policy in one seat of a game,
a fixed opponent in the others; and an opponent drawn from past snapshots of the trained policy.

:class:`RoutedActing` is an :class:`~maze_impala.nn.acting.Acting` like any other, so the actor's one loop plays
games against an opponent as it plays every episode: a :class:`PolicyMapping` gives each agent its policy, each
batch of a step key is split by policy, and the results are put back in row order. Weights loaded by the actor
(:meth:`RoutedActing.load`) are the learned policy's; the others keep their own. :func:`seated` maps one trained
seat against an opponent. :class:`PoolOpponent` is an opponent whose weights are the learner's snapshots of the
trained policy (self-play against a pool of its past selves); it keeps which snapshot plays each game and says
which played when a game ends; the learner's pool keeps how the games against each one ended.

Nothing in this module imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from maze_impala.core import ActorID, NestedArrays, StepKey, WeightSource
from maze_impala.nn.acting import Acting, Actions, Noise, State

TRAINED, OPPONENT = "trained", "opponent"
"""The policy names of a trained seat against an opponent (:func:`seated`)."""
OPPONENT_STATE = OPPONENT + "."
"""The prefix of the opponent's recurrent state names, so that both policies may keep a state of their own."""
SNAPSHOT_STATE = "snapshot"
"""The state name under which a :class:`PoolOpponent` keeps, per env and agent, which snapshot plays its episode."""
SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0}
"""The trained policy's score for a game's result."""


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


@dataclass(frozen=True)
class PolicyMapping:
    """Which policy acts for each agent, by policy name (Sample Factory's ``AgentPolicyMapping``): the agents in
    ``agents`` with the policy their entry names, every other agent with ``default``; ``learned`` names the policy
    that the learner trains, whose decisions go into the rollouts. Several agents may share a policy (a group).
    A trained seat against a fixed opponent: ``PolicyMapping({seat: "trained"}, "opponent", "trained")``."""

    agents: Mapping[ActorID, str]
    default: str
    learned: str

    def policy_of(self, actor: ActorID) -> str:
        return self.agents.get(actor, self.default)

    def learned_agents(self) -> frozenset[ActorID]:
        """The agents named in ``agents`` whose policy is the learned one."""
        return frozenset(actor for actor, name in self.agents.items() if name == self.learned)


class RoutedActing(Acting):
    """Acting by several policies, each agent's decisions by the policy ``mapping`` gives it: every batch of a step
    key is split by policy and the results put back in row order. The learned policy keeps its state names, every
    other policy ``name`` keeps its own under ``name + "."`` (so that a fixed opponent's recurrent state and which
    snapshot plays stay with it); weights loaded by the actor (:meth:`load`) are the learned policy's, the others
    keep their own; a game's end (:meth:`game_over`) reaches every policy with its agents' rows."""

    def __init__(self, policies: Mapping[str, Acting], mapping: PolicyMapping):
        names = {mapping.default, mapping.learned, *mapping.agents.values()}
        if missing := names - set(policies):
            raise ValueError(f"the policy mapping names policies {sorted(missing)} that are not among the policies "
                             f"{sorted(policies)}")  # fmt: skip
        self.policies, self.mapping = dict(policies), mapping
        self.names = list(self.policies)
        self._owns = {name: self._own(name) for name in self.names}
        """Per policy, which state names are its own, and under which name it knows each."""
        self._rows: dict[tuple[StepKey, int], int] = {}
        """Per step key and agent id, the index in ``names`` of the policy that acts for it."""

    def _prefix(self, name: str) -> str:
        return "" if name == self.mapping.learned else name + "."

    def _own(self, name: str) -> Callable[[str], str | None]:
        prefix, others = self._prefix(name), [self._prefix(n) for n in self.names if n != name and self._prefix(n)]

        def own(state_name: str) -> str | None:
            if prefix:
                return state_name[len(prefix) :] if state_name.startswith(prefix) else None
            return None if any(state_name.startswith(p) for p in others) else state_name

        return own

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        return {self._prefix(name) + k: v for name, acting in self.policies.items()
                for k, v in acting.state_shapes(step_key).items()}  # fmt: skip

    def learned_state(self, step_key: StepKey) -> tuple[str, ...]:
        return self.policies[self.mapping.learned].learned_state(step_key)

    def load(self, flat: np.ndarray) -> None:
        self.policies[self.mapping.learned].load(flat)

    def _policy_rows(self, step_key: StepKey, agent_ids: np.ndarray) -> np.ndarray:
        """Per row, the index in ``names`` of the policy that acts for its agent."""
        rows = np.empty(len(agent_ids), dtype=np.int64)
        for i, agent in enumerate(agent_ids.tolist()):
            index = self._rows.get((step_key, agent))
            if index is None:
                index = self._rows[step_key, agent] = self.names.index(self.mapping.policy_of(ActorID(step_key, agent)))
            rows[i] = index
        return rows

    def _parts(self, step_key: StepKey, agent_ids: np.ndarray) -> list[tuple[str, np.ndarray]]:
        policy_rows = self._policy_rows(step_key, agent_ids)
        return [(name, np.flatnonzero(policy_rows == i)) for i, name in enumerate(self.names)]

    def act(self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray,
            noise: Noise | None) -> Actions:  # fmt: skip
        parts = [(self.policies[name], rows, self._owns[name]) for name, rows in self._parts(step_key, agent_ids)]
        return act_in_parts(step_key, obs, state, agent_ids, noise, parts)

    def game_over(self, step_key: StepKey, state: State, agent_ids: np.ndarray, result: str) -> list[int]:
        played: list[int] = []
        for name, rows in self._parts(step_key, agent_ids):
            if len(rows):
                own = self._owns[name]
                mine = {m: state[k][rows] for k in state if (m := own(k)) is not None}
                played += self.policies[name].game_over(step_key, mine, agent_ids[rows], result) or []
        return played


def seated(trained: Acting, opponent: Acting, seat: frozenset[ActorID]) -> RoutedActing:
    """``trained`` (the learned policy) acts for the agents in ``seat``, ``opponent`` for every other agent, its
    state under :data:`OPPONENT_STATE`."""
    return RoutedActing({TRAINED: trained, OPPONENT: opponent},
                        PolicyMapping(dict.fromkeys(seat, TRAINED), OPPONENT, TRAINED))  # fmt: skip


class PoolOpponent(Acting):
    """An opponent that plays with the learner's snapshot pool, past weights of the trained policy that ``weights``
    (the actor's weight source) publishes through :meth:`~maze_impala.core.WeightSource.snapshots`. Each agent's
    episode is played by one snapshot, drawn at its first decision (random draws from ``seed``) by the rule
    ``draw`` names:

    - ``uniform``: any snapshot of the pool, with equal chances;
    - ``latest``: the newest;
    - ``pfsp``: prioritised fictitious self-play (Vinyals et al. 2019, AlphaStar), chances in proportion to
      ``(1 - x)**2``, where ``x`` is the trained policy's score (win 1, draw 0.5) against the snapshot, as the
      learner's pool estimates it from every actor's games and publishes it (:meth:`WeightSource.pool_scores`):
      the snapshots that the policy beats least play most. A game's end (:meth:`game_over`) returns the
      snapshots that played it, which the actor reports to the learner.

    If a snapshot left the pool when an episode of its goes on, another one is drawn. ``make``
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
                drawn[fresh] = self.rng.choice(self._numbers, size=len(fresh), p=self.chances())
        parts = [(self.snapshots[number][1], np.flatnonzero(drawn == number), _snapshot_state)
                 for number in np.unique(drawn)]  # fmt: skip
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

    def game_over(self, step_key: StepKey, state: State, agent_ids: np.ndarray, result: str) -> list[int]:
        """The snapshots that played the game (an agent that never decided in it holds 0)."""
        return [number for number in state[SNAPSHOT_STATE][:, 0].astype(np.int64).tolist() if number > 0]

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
