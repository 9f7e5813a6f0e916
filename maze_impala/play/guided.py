"""Search at play time: MCTS guided by the trained policy and its critic, AlphaZero's step (Silver et al., 2018).

Where :class:`~maze_impala.play.search.MctsActing` searches with random rollouts, :class:`GuidedSearch` expands
each node with the policy's probabilities of the legal moves as priors (PUCT) and values each new leaf with the
critic instead of a rollout. It searches the game's OpenSpiel twin (the same games as ``opponent=mcts``) and sees
what the policy sees: every state it values is shown to the networks as PettingZoo shows it to the seat to move
(:meth:`~maze_impala.play.search.SearchGame.observation`). It is an :class:`~maze_impala.nn.acting.Acting`, so it
plays through the actor's one loop, in the rollout CLI (``search=<simulations>``) and through
:class:`~maze_impala.nn.torch_acting.Player` (:func:`searching_player`); the policy alone stays what training
evaluates.

The critic of a two-player zero-sum game trained by self-play predicts the mover's return (1 a win, -1 a loss,
discounted), so a state's value for the other seat is its negation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from maze_impala.config import ConfigError
from maze_impala.core import StepKey
from maze_impala.envs.gym_adapter import ACTION_KEY
from maze_impala.envs.pettingzoo_adapter import GLOBAL_STATE
from maze_impala.nn.flat import load_flat
from maze_impala.play.search import OpenSpielSearch, SearchGame, openspiel_modules

if TYPE_CHECKING:
    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.nn.critics import StructuredCritic
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.nn.torch_acting import Player

PUCT_C = 2.0
"""The exploration weight of PUCT, as OpenSpiel's AlphaZero uses it."""


class _Guide:
    """An OpenSpiel MCTS evaluator: priors and values of states from the policy and the critic, one forward pass
    per state (each state is asked for both, once expanded and once valued)."""

    def __init__(
        self,
        game: SearchGame,
        policy: StructuredPolicy,
        critic: StructuredCritic,
        step_key: StepKey,
        n_actions: int,
        joint: tuple[list[str], Callable[[dict[str, Any]], np.ndarray]] | None = None,
    ):
        """``joint``: the seats' PettingZoo names and the env's way of joining their observations, where the critic
        also reads every seat's (``env.global_state=observations``, a centralised critic)."""
        self.game, self.policy, self.critic = game, policy, critic
        self.step_key, self.n_actions, self.joint = step_key, n_actions, joint
        self.seen: dict[tuple[int, ...], tuple[int, np.ndarray, float]] = {}
        """Per move order: the seat to move, the policy's probabilities of the moves and the critic's value."""

    def _guess(self, state: Any) -> tuple[int, np.ndarray, float]:
        moves = tuple(state.history())
        if moves not in self.seen:
            seat, legal = state.current_player(), state.legal_actions()
            if self.joint is None:
                obs = self.game.observation(list(moves), seat, legal, self.n_actions)
            else:  # the mover's own view is one of every seat's, which the critic reads joined
                seats, join = self.joint
                views = self.game.views(list(moves), seat, legal, self.n_actions, seats)
                obs = {**views[seats[seat]], GLOBAL_STATE: join(views)}
            inputs = {k: torch.as_tensor(v[None]) for k, v in obs.items()}
            with torch.inference_mode():
                inputs = self.policy.normalize(self.step_key, inputs)
                logits = self.policy.logits(self.step_key, inputs, 1, torch.tensor([seat]))[0]
                value = float(self.critic.values(self.step_key, inputs, 1)[0])
            probs = torch.softmax(logits.double(), -1).numpy()
            self.seen[moves] = (seat, probs, float(np.clip(value, -1.0, 1.0)))
        return self.seen[moves]

    def evaluate(self, state: Any) -> np.ndarray:
        """The critic's value of ``state`` for each player."""
        seat, _, value = self._guess(state)
        return np.array([value, -value] if seat == 0 else [-value, value])

    def prior(self, state: Any) -> list[tuple[int, float]]:
        """The policy's probability of each legal move (renormalised over them)."""
        _, probs, _ = self._guess(state)
        legal = state.legal_actions()
        total = float(sum(probs[a] for a in legal)) or 1.0
        return [(a, float(probs[a]) / total) for a in legal]


class GuidedSearch(OpenSpielSearch):
    """MCTS over the game's OpenSpiel twin with ``simulations`` simulations per move, guided by ``policy`` (priors,
    PUCT) and ``critic`` (leaf values); its moves are the most visited. Loads the policy's weights like any acting."""

    def __init__(
        self, env: StructuredEnv, policy: StructuredPolicy, critic: StructuredCritic, simulations: int, seed: int = 0
    ):
        _, mcts = openspiel_modules()
        if policy.recurrent:
            raise ConfigError(
                "search at play time needs a feed-forward policy (a state is valued from its board "
                "alone); this one is recurrent"
            )
        (step_key,) = policy.action_spaces
        self.policy = policy.eval()
        n_actions = int(policy.action_spaces[step_key][ACTION_KEY].n)

        joint = None
        if getattr(env, "global_state", None) == "observations":
            joint = (list(env.agents_dict), env.joint_observation)  # type: ignore[attr-defined]

        def guide(game: SearchGame, rng: np.random.RandomState) -> _Guide:
            self.guide = _Guide(game, self.policy, critic.eval(), step_key, n_actions, joint)
            return self.guide

        super().__init__(env, simulations, seed, "search", guide, PUCT_C, mcts.SearchNode.puct_value)

    def _move(self, board: np.ndarray, seat: int) -> int:
        self.guide.seen.clear()  # the networks' guesses of one search (a move's tree is built anew)
        return super()._move(board, seat)

    def load(self, flat: np.ndarray) -> None:
        load_flat(self.policy, flat)


def searching_player(checkpoint: str | Path, simulations: int, seed: int = 0) -> tuple[Player, StructuredEnv]:
    """A :class:`~maze_impala.nn.torch_acting.Player` that decides by :class:`GuidedSearch` with a checkpoint's
    policy and critic, and a fresh env of its run::

        player, env = searching_player("outputs/.../model_best.pt", simulations=100)
        obs, _ = env.reset(seed=0)
        action = player(obs, env.actor_id())
    """
    from maze_impala.checkpoints import Checkpoint
    from maze_impala.nn.torch_acting import Player
    from maze_impala.play.spec import load_critic, load_policy

    read = Checkpoint.read(checkpoint)  # once, for the policy and the critic
    policy, env = load_policy(read)
    try:
        search = GuidedSearch(env, policy, load_critic(read, env), simulations, seed)
    except BaseException:
        env.close()
        raise
    return Player(policy, acting=search), env
