"""Games against a fixed opponent: the trained policy plays every seat of a multi-agent env in turn, a fixed policy
(random, or a checkpoint of another run) plays the others; wins, draws and losses per seat.

The games run through the actor's loop (:meth:`~maze_impala.actors.actor.RolloutActor.play`) with a
:func:`~maze_impala.play.lineup.seated` acting, during training (``algorithm.rollout_evaluator.opponent``) and in the
rollout CLI (``maze-run -cn conf_rollout ... opponent=random``). In two-player zero-sum self-play the mean episode
return is 0 by construction; these rates are what shows whether a policy learnt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from maze_impala.actors.actor import PLAY_CHUNK, RolloutActor, seed_for
from maze_impala.actors.results import EpisodeResult
from maze_impala.actors.weights import ModuleWeights
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import GameEvents
from maze_impala.nn.torch_acting import make_acting
from maze_impala.play.games import OUTCOMES, outcome, publish_game
from maze_impala.play.lineup import seated, seats
from maze_impala.play.spec import PolicySpec, load_acting

if TYPE_CHECKING:
    from maze_impala.nn.acting import Acting
    from maze_impala.nn.models import StructuredPolicy


@dataclass
class GameResult:
    """One game, seen from the seat the trained policy played."""

    seat: str
    outcome: str
    """win, draw or loss: the seat's return above every other seat's, tying the highest, or below it."""
    seat_return: float
    episode: EpisodeResult


class Games:
    """``n_games`` games per seat against a fixed opponent (its spec, as
    :func:`~maze_impala.play.lineup.resolve_opponents` made it), side by side, with fixed seeds (so that epochs
    compare); each game's outcome is published as :class:`~maze_impala.events.interfaces.GameEvents`."""

    def __init__(
        self,
        env: EnvSpec,
        opponent: PolicySpec,
        n_games: int,
        deterministic: bool,
        seed: int,
        hub: EventHub | None = None,
        max_episode_steps: int | None = None,
    ):
        """``max_episode_steps``: a game of an env without a time limit of its own ends as truncated (a draw, in
        a zero-sum game) after this many structured steps."""
        self.max_episode_steps = max_episode_steps
        self.envs = [make_env(env) for _ in range(n_games)]
        self.agents = seats(opponent, self.envs[0])
        self.opponent = opponent
        self.seed, self.deterministic = seed, deterministic
        self.games = [(i, seed_for(seed, 2**31 - 2, i)) for i in range(n_games)]
        self.events = hub.publisher(GameEvents) if hub is not None else None
        self._opponent = load_acting(self.opponent, self.envs[0], seed)  # a bad opponent fails here, before training
        self._players: dict[str, RolloutActor] = {}
        self._policy: StructuredPolicy | None = None

    def play(
        self,
        policy: StructuredPolicy,
        on_game: Callable[[GameResult], None] | None = None,
        acting: Acting | None = None,
    ) -> list[GameResult]:
        """Every seat's games with ``policy``'s current weights, seat after seat; ``acting``: what decides for the
        policy instead of its own acting (a search guided by it)."""
        if self._policy is not policy or acting is not None:
            self._policy, self._players = policy, {}
        # random play (or the search) from its first draws again: the same games in every evaluation
        if self.opponent.has_no_model:
            self._opponent, self._players = load_acting(self.opponent, self.envs[0], self.seed), {}
        results: list[GameResult] = []
        for seat, actor in self.agents.items():
            if seat not in self._players:
                mine = acting if acting is not None else make_acting(policy)
                lineup = seated(mine, self._opponent, frozenset({actor}))
                self._players[seat] = RolloutActor(
                    self.envs,
                    ModuleWeights(policy),
                    lineup,
                    PLAY_CHUNK,
                    seed=0,
                    deterministic=self.deterministic,
                    stepping="general",
                    max_episode_steps=self.max_episode_steps,
                )
            for episode in self._players[seat].play(self.games):
                game = GameResult(
                    seat,
                    outcome(episode.actor_returns, actor, self.agents),
                    episode.actor_returns.get(actor, 0.0),
                    episode,
                )
                if self.events is not None:
                    publish_game(self.events, game.seat, game.outcome, game.seat_return)
                results.append(game)
                if on_game is not None:
                    on_game(game)
        return results

    def close(self) -> None:
        for env in self.envs:
            env.close()


def summary(results: list[GameResult]) -> list[dict[str, float | str]]:
    """Per seat: games, win, draw and loss rates, mean return (``games_summary.csv``)."""
    rows: list[dict[str, float | str]] = []
    for seat in dict.fromkeys(r.seat for r in results):
        mine = [r for r in results if r.seat == seat]
        row: dict[str, float | str] = {"seat": seat, "games": len(mine)}
        row.update({name: sum(r.outcome == name for r in mine) / len(mine) for name in OUTCOMES})
        row["return"] = sum(r.seat_return for r in mine) / len(mine)
        rows.append(row)
    return rows
