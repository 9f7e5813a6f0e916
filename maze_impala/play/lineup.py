"""Who acts for whom: the trained policy in some seats of a game, an opponent in the others.

:class:`RoutedActing` is an :class:`~maze_impala.nn.acting.Acting` like any other, so the actor's one loop plays
games against an opponent as it plays every episode: a :class:`PolicyMapping` gives each agent its policy, each
batch of a step key is split by policy, and the results are put back in row order. Weights loaded by the actor
(:meth:`RoutedActing.load`) are the learned policy's; the others keep their own. :func:`seated` maps one trained
seat against an opponent; :func:`against_opponent` seats an actor's trained policy against a fixed opponent (a
:class:`~maze_impala.play.spec.PolicySpec`) or the learner's snapshot pool
(:class:`~maze_impala.play.pool.PoolOpponent`).

Nothing in this module imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from maze_impala.config import ConfigError, ModelConfig, TrainingConfig
from maze_impala.core import ActorID, NestedArrays, StepKey, WeightSource
from maze_impala.events.api import EventHub
from maze_impala.nn.acting import Acting, Actions, Noise, State, act_in_parts
from maze_impala.play.games import GameListener
from maze_impala.play.pool import PoolOpponent
from maze_impala.play.spec import POOL, PolicySpec, load_acting, opponent_spec

if TYPE_CHECKING:
    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.nn.numpy_forms import NumpyPolicyForm

TRAINED, OPPONENT = "trained", "opponent"
"""The policy names of a trained seat against an opponent (:func:`seated`)."""
OPPONENT_STATE = OPPONENT + "."
"""The prefix of the opponent's recurrent state names, so that both policies may keep a state of their own."""


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
    keep their own; a game's end (:meth:`game_over`) reaches each of ``listeners`` (policies that hear games' ends,
    by name) with its agents' rows."""

    def __init__(
        self,
        policies: Mapping[str, Acting],
        mapping: PolicyMapping,
        listeners: Mapping[str, GameListener] | None = None,
    ):
        names = {mapping.default, mapping.learned, *mapping.agents.values()}
        if missing := names - set(policies):
            raise ValueError(
                f"the policy mapping names policies {sorted(missing)} that are not among the policies "
                f"{sorted(policies)}"
            )
        self.policies, self.mapping, self.listeners = dict(policies), mapping, dict(listeners or {})
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
        return {
            self._prefix(name) + k: v
            for name, acting in self.policies.items()
            for k, v in acting.state_shapes(step_key).items()
        }

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

    def act(
        self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None
    ) -> Actions:
        parts = [(self.policies[name], rows, self._owns[name]) for name, rows in self._parts(step_key, agent_ids)]
        return act_in_parts(step_key, obs, state, agent_ids, noise, parts)

    def game_over(self, step_key: StepKey, state: State, agent_ids: np.ndarray, result: str, events: EventHub) -> None:
        for name, rows in self._parts(step_key, agent_ids):
            if len(rows) and name in self.listeners:
                own = self._owns[name]
                mine = {m: state[k][rows] for k in state if (m := own(k)) is not None}
                self.listeners[name].game_over(step_key, mine, agent_ids[rows], result, events)


def seated(
    trained: Acting, opponent: Acting, seat: frozenset[ActorID], listener: GameListener | None = None
) -> RoutedActing:
    """``trained`` (the learned policy) acts for the agents in ``seat``, ``opponent`` for every other agent, its
    state under :data:`OPPONENT_STATE`; ``listener``: the opponent's ear for each game's end (the pool's)."""
    mapping = PolicyMapping(dict.fromkeys(seat, TRAINED), OPPONENT, TRAINED)
    return RoutedActing(
        {TRAINED: trained, OPPONENT: opponent}, mapping, {OPPONENT: listener} if listener is not None else None
    )


def resolve_opponents(
    probe: StructuredEnv,
    train: str | None = None,
    judge: str | None = None,
    saved: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, PolicySpec]:
    """Every opponent of a run resolved once, by name: ``train``, the one the trained policy learns against
    (``algorithm.train_opponent``; ``pool`` is the trained policy's own and needs no spec), and ``judge``, the one
    games are played against (``rollout_evaluator.opponent``, the rollout CLI's ``opponent``). A resumed run plays
    the opponent its checkpoint ``saved``, even if the file has changed or gone. Each is checked by building it
    once for ``probe`` (one instance of the env): an env without seats, a name that is no opponent or one that
    cannot play this game raise :class:`~maze_impala.config.ConfigError` here, before any process starts."""
    specs: dict[str, PolicySpec] = {}
    try:
        for name, trains in ((train, True), (judge, False)):
            if name is None:
                continue
            seats(name, probe)
            if (trains and name == POOL) or name in specs:
                continue
            known = (saved or {}).get(name)
            specs[name] = PolicySpec.from_state_dict(known) if known else opponent_spec(name)
            load_acting(specs[name], probe)
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from error
    return specs


def seats(spec: str | PolicySpec, env: StructuredEnv) -> dict[str, ActorID]:
    """The env's seats (its named agents), or a clear error where playing against an opponent makes no sense."""
    agents = env.agents_dict
    if len(agents) < 2:
        name = spec if isinstance(spec, str) else spec.source
        raise ConfigError(
            f"opponent={name!r}: games against an opponent need an env with two or more agents (a "
            f"PettingZoo env, or a step key that several agents share); this env has "
            f"{len(agents)} named agents"
        )
    return agents


@dataclass(frozen=True)
class Lineup:
    """What acts in an actor, picklable (it travels in the :class:`~maze_impala.actors.actor.ActorSpec`): the
    trained policy ``learned`` (:meth:`PolicySpec.learned <maze_impala.play.spec.PolicySpec.learned>`), and whom it
    plays against. Without an ``opponent`` it plays every seat; with one, the first ``actors`` actors play it, actor
    ``i`` seat ``i % seats`` with the trained policy and the opponent every other seat, and the other actors play
    every seat.

    ``opponent``: ``pool`` (the learner's snapshots of the trained policy, which the actor's weight source holds,
    drawn by the rule ``draw`` names: ``uniform``, ``latest`` or ``pfsp``), or a fixed opponent's
    :class:`~maze_impala.play.spec.PolicySpec`, which :func:`resolve_opponents` made of its name where the run is
    built, so that no actor process reads a checkpoint."""

    learned: PolicySpec
    opponent: PolicySpec | str | None = None
    actors: int = 0
    draw: str = "uniform"

    def __post_init__(self) -> None:
        if isinstance(self.opponent, str) and self.opponent != POOL:
            raise ValueError(
                f"Lineup(opponent={self.opponent!r}): a fixed opponent goes in as its PolicySpec "
                "(resolve_opponents resolves names)"
            )

    @classmethod
    def of(
        cls,
        model: ModelConfig,
        opponent: PolicySpec | str | None = None,
        actors: int = 0,
        draw: str = "uniform",
        numpy_form: NumpyPolicyForm | None = None,
        device: str | None = None,
    ) -> Lineup:
        """The lineup of a trained policy of ``model`` (acting as :meth:`PolicySpec.learned` says)."""
        return cls(PolicySpec.learned(model, numpy_form, device), opponent, actors, draw)

    @property
    def records_ancestors(self) -> bool:
        """Whether the trained policy's critic reads each decision's earlier sub-steps (the delta critic)."""
        return (self.learned.model or {}).get("critic") == "delta"

    def in_numpy(self, form: NumpyPolicyForm | None) -> Lineup:
        """This lineup with its trained policy acting in numpy through ``form`` (see :meth:`PolicySpec.in_numpy`)."""
        return replace(self, learned=self.learned.in_numpy(form))

    def acting(
        self, env: StructuredEnv, index: int, seed: int, weights: WeightSource
    ) -> tuple[Acting, frozenset[ActorID] | None, GameListener | None]:
        """Actor ``index``'s acting in ``env``, the agents whose decisions are learned (None: all of them), and what
        hears each game's end (None: no game against an opponent)."""
        acting = load_acting(self.learned, env)
        if self.opponent is None or index >= self.actors:
            return acting, None, None
        return against_opponent(
            acting, lambda: load_acting(self.learned, env), env, self.opponent, index, seed, weights, self.draw
        )


def against_opponent(
    acting: Acting,
    make: Callable[[], Acting],
    env: StructuredEnv,
    spec: str | PolicySpec,
    index: int,
    seed: int,
    weights: WeightSource,
    draw: str = "uniform",
) -> tuple[Acting, frozenset[ActorID], GameListener]:
    """The acting of actor ``index`` that trains against opponent ``spec``: the trained policy plays seat
    ``index % seats``, the opponent every other seat; and that seat, whose decisions are learned. A fixed opponent
    (a :class:`~maze_impala.play.spec.PolicySpec`) acts as :func:`~maze_impala.play.spec.load_acting` builds it;
    ``"pool"`` plays the snapshots that ``weights`` holds (the learner's pool) through actings that ``make``
    builds, each game's snapshot drawn by the rule ``draw`` names (``opponent_pool.draw``)."""
    all_seats = list(seats(spec, env).values())
    seat = frozenset({all_seats[index % len(all_seats)]})
    if isinstance(spec, str):
        pool = PoolOpponent(make, weights, seed, draw)
        routed = seated(acting, pool, seat, listener=pool)
    else:
        routed = seated(acting, load_acting(spec, env, seed), seat)
    return routed, routed.mapping.learned_agents(), routed


def run_lineup(config: TrainingConfig, opponents: Mapping[str, PolicySpec]) -> Lineup:
    """A training run's lineup: its trained policy (acting on ``runner.actor_device``, if set), and the opponent it
    trains against (``algorithm.train_opponent``: ``pool``, or one of the ``opponents`` resolved by name), played by
    ``algorithm.opponent_actors`` of the actors, the pool's snapshots drawn by ``opponent_pool.draw``."""
    algorithm, opponent = config.algorithm, config.algorithm.train_opponent
    return Lineup.of(
        config.model,
        opponents.get(opponent, opponent) if opponent else None,
        algorithm.opponent_actors,
        algorithm.opponent_pool.draw,
        device=config.runner.actor_device,
    )
