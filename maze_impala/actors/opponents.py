"""Opponents of a multi-agent env: who they are (``random``, a checkpoint, a run dir, or a pool of snapshots of the
trained policy), which seats exist, and who won a game.

Used by the games against an opponent (:mod:`maze_impala.train.games`) and by actors that train against one
(``algorithm.train_opponent``), which route their agents to the trained policy and the opponent
(:func:`~maze_impala.nn.seats.seated`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.config import ConfigError
from maze_impala.core import ActorID, WeightSource
from maze_impala.run_files import BEST_MODEL

if TYPE_CHECKING:
    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.events.interfaces import GameEvents
    from maze_impala.nn.acting import Acting
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.nn.policy_spec import PolicySpec

RANDOM = "random"
OUTCOMES = ("win", "draw", "loss")
"""A game's outcome for a seat (see :func:`outcome`)."""
POOL = "pool"
"""``algorithm.train_opponent=pool``: past snapshots of the trained policy (training only)."""


def opponent_spec(name: str) -> PolicySpec:
    """The fixed opponent ``name`` says: ``random``, a checkpoint of a training run, or a run's output dir (its
    ``model_best.pt``), resolved once, in the process that builds the run (actors get the spec, weights included)."""
    from maze_impala.nn.policy_spec import PolicySpec

    if name == POOL:
        raise ConfigError("opponent=pool: the pool of the trained policy's snapshots is an opponent to train against "
                          "(algorithm.train_opponent=pool); games are played against random, a checkpoint or a run "
                          "dir")  # fmt: skip
    if name == RANDOM:
        return PolicySpec.random()
    path = Path(name)
    checkpoint = path / BEST_MODEL if path.is_dir() else path
    if not checkpoint.is_file():
        raise ConfigError(f"opponent={name!r}: neither 'random' nor a checkpoint file or a training output dir "
                          "holding model_best.pt")  # fmt: skip
    return PolicySpec.from_checkpoint(checkpoint)


def opponent_policy(spec: PolicySpec, env: StructuredEnv, seed: int = 0) -> StructuredPolicy:
    """The opponent ``spec`` describes, for ``env`` (whose spaces it must play), frozen."""
    policy = spec.policy(env, seed)
    if not plays(policy, env):
        raise ConfigError(f"opponent={spec.source!r} was trained on an env with other spaces than this one's: an "
                          "opponent must play the same game")  # fmt: skip
    policy.requires_grad_(False)
    return policy


def plays(policy: StructuredPolicy, env: StructuredEnv) -> bool:
    """Whether ``policy`` acts in ``env``: the same step keys and actions, and observations it reads that ``env``
    gives (a policy does not read the critic-only keys)."""
    observations = env.observation_spaces_dict
    return policy.action_spaces == env.action_spaces_dict and all(
        key in observations and all(observations[key].spaces.get(name) == sub for name, sub in space.spaces.items())
        for key, space in policy.observation_spaces.items()
    )


def seats(spec: str | PolicySpec, env: StructuredEnv) -> dict[str, ActorID]:
    """The env's seats (its named agents), or a clear error where playing against an opponent makes no sense."""
    agents = env.agents_dict
    if len(agents) < 2:
        name = spec if isinstance(spec, str) else spec.source
        raise ConfigError(f"opponent={name!r}: games against an opponent need an env with two or more agents (a "
                          f"PettingZoo env, or a step key that several agents share); this env has "
                          f"{len(agents)} named agents")  # fmt: skip
    return agents


def against_opponent(acting: Acting, make: Callable[[], Acting], env: StructuredEnv, spec: str | PolicySpec, index: int,
           seed: int, weights: WeightSource, draw: str = "uniform") -> tuple[Acting, frozenset[ActorID]]:  # fmt: skip
    """The acting of actor ``index`` that trains against opponent ``spec``: the trained policy plays seat
    ``index % seats``, the opponent every other seat; and that seat, whose decisions are learned. A fixed opponent
    (a :class:`~maze_impala.nn.policy_spec.PolicySpec`) acts in torch; ``"pool"`` plays the snapshots that
    ``weights`` holds (the learner's pool) through actings that ``make`` builds, each game's snapshot drawn by the
    rule ``draw`` names (``opponent_pool.draw``)."""
    from maze_impala.nn.seats import PoolOpponent, seated
    from maze_impala.nn.torch_acting import make_acting

    all_seats = list(seats(spec, env).values())
    seat = frozenset({all_seats[index % len(all_seats)]})
    if isinstance(spec, str):
        opponent: Acting = PoolOpponent(make, weights, seed, draw)
    else:
        opponent = make_acting(opponent_policy(spec, env, seed))
    routed = seated(acting, opponent, seat)
    return routed, routed.mapping.learned_agents()


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
