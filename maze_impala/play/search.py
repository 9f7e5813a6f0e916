"""Search as an opponent and a judge: ``opponent=mcts`` (or ``mcts:<simulations>``) plays OpenSpiel's MCTS bot.

The bot searches the game's OpenSpiel twin: UCT with random rollouts (``uct_c=2``, one rollout per leaf) and the
solver on, as OpenSpiel's own examples and the strength tables of game papers use it. An :class:`MctsActing` is an
:class:`~maze_impala.nn.acting.Acting` like any other opponent, so games against it are played by the actor's one
loop, in evaluation, the rollout CLI and training alike. It sees what any opponent sees, the board from its seat,
and rebuilds the OpenSpiel state from it: :class:`SearchGame` replays a move order that reaches the board (every
order of the same pieces reaches the same state in these games; in connect four each column's pieces go in from
the bottom up).

Why OpenSpiel's bot and not a search over copies of the structured env: the structured env is the PettingZoo game
behind adapters, which copies slowly (``copy.deepcopy``, where PettingZoo's wrappers allow it at all) and rolls out
slowly; OpenSpiel's C++ states search about ten times as many simulations in the same time (docs/benchmarks.md,
"what the code's choices rest on"). Games OpenSpiel has are the ones it covers: PettingZoo's connect four and
tic-tac-toe (``pip install "maze_impala[search]"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from maze_impala.config import ConfigError
from maze_impala.core import NestedArrays, StepKey
from maze_impala.envs.gym_adapter import ACTION_KEY, OBS_KEY
from maze_impala.masking import MASK_SUFFIX
from maze_impala.nn.acting import Acting, Actions, Noise, State

if TYPE_CHECKING:
    from maze_impala.envs.structured import StructuredEnv

SEARCH = "mcts"
"""The opponent name of OpenSpiel's MCTS bot: ``mcts`` (:data:`DEFAULT_SIMULATIONS`) or ``mcts:<simulations>``."""
DEFAULT_SIMULATIONS = 100
MIN_SIMULATIONS = 2
"""The first simulation expands the root, the second is the first to try a move."""
UCT_C = 2.0


def check_simulations(simulations: Any, setting: str, example: str = "") -> int:
    """``simulations`` as a count of simulations per move, or a clear error naming ``setting`` (its key=value) and an
    ``example`` of a good one."""
    if isinstance(simulations, str) and simulations.isdigit():
        simulations = int(simulations)
    if isinstance(simulations, bool) or not isinstance(simulations, int) or simulations < MIN_SIMULATIONS:
        said = f"{setting}: the simulations per move must be a whole number >= {MIN_SIMULATIONS}"
        raise ConfigError(f"{said}, as in {example}" if example else said)
    return simulations


def search_simulations(name: str) -> int | None:
    """The simulations per move that an opponent name asks of the search (``mcts``, ``mcts:400``); None: no
    search."""
    kind, _, count = name.partition(":")
    if kind != SEARCH:
        return None
    if not count:
        return DEFAULT_SIMULATIONS
    return check_simulations(count, f"opponent={name!r}", "opponent=mcts:400")


def _tictactoe_moves(first: np.ndarray, second: np.ndarray) -> list[int] | None:
    """The cells of the first and the second player's marks, alternately (PettingZoo's square ``3 * i + j`` is
    board ``[i, j]``; OpenSpiel numbers the same cells ``3 * row + column``, the board transposed, which maps every
    line to a line, so the square numbers are used as they are)."""
    ones, twos = list(np.flatnonzero(first.ravel())), list(np.flatnonzero(second.ravel()))
    if len(ones) - len(twos) not in (0, 1):
        return None
    moves: list[int] = []
    for i, cell in enumerate(ones):
        moves.append(int(cell))
        if i < len(twos):
            moves.append(int(twos[i]))
    return moves


def _connect_four_moves(first: np.ndarray, second: np.ndarray) -> list[int] | None:
    """Columns in an order that stacks the pieces as on the board (row 0 is the top), the players alternating, the
    first one first: a depth-first search over which column's next piece comes next."""
    stacks = [
        [
            1 if first[row, col] else 2
            for row in range(first.shape[0] - 1, -1, -1)
            if first[row, col] or second[row, col]
        ]
        for col in range(first.shape[1])
    ]
    total = sum(len(s) for s in stacks)
    failed: set[tuple[int, ...]] = set()

    def search(heights: list[int], moves: list[int]) -> list[int] | None:
        if len(moves) == total:
            return moves
        if tuple(heights) in failed:
            return None
        player = 1 + len(moves) % 2
        for col, stack in enumerate(stacks):
            if heights[col] < len(stack) and stack[heights[col]] == player:
                heights[col] += 1
                found = search(heights, [*moves, col])
                heights[col] -= 1
                if found is not None:
                    return found
        failed.add(tuple(heights))
        return None

    return search([0] * len(stacks), [])


def _tictactoe_board(moves: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The first and the second player's planes after ``moves`` (OpenSpiel's cells, PettingZoo's squares)."""
    planes = np.zeros((2, 9), dtype=np.int8)
    for i, cell in enumerate(moves):
        planes[i % 2, cell] = 1
    return planes[0].reshape(3, 3), planes[1].reshape(3, 3)


def _connect_four_board(moves: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The first and the second player's planes after ``moves`` (columns; row 0 is the top, pieces fall down)."""
    planes = np.zeros((2, 6, 7), dtype=np.int8)
    heights = [0] * 7
    for i, col in enumerate(moves):
        planes[i % 2, 5 - heights[col], col] = 1
        heights[col] += 1
    return planes[0], planes[1]


@dataclass(frozen=True)
class SearchGame:
    """A PettingZoo game and its OpenSpiel twin: the twin's name, how a board seen from one seat is replayed, and
    the board a move order reaches (what a seat is shown of an OpenSpiel state)."""

    openspiel: str
    moves: Callable[[np.ndarray, np.ndarray], list[int] | None]
    """The moves that reach a board, from the first and the second player's planes of it."""
    board: Callable[[list[int]], tuple[np.ndarray, np.ndarray]]
    """The first and the second player's planes after a move order (the inverse of :attr:`moves`)."""

    def observation(self, moves: list[int], seat: int, legal: list[int], n_actions: int) -> dict[str, np.ndarray]:
        """What PettingZoo shows ``seat`` after ``moves``: its own pieces' plane first, then the other's, and the
        mask of the ``legal`` actions."""
        first, second = self.board(moves)
        mine, theirs = (first, second) if seat == 0 else (second, first)
        mask = np.zeros(n_actions, dtype=np.int8)
        mask[legal] = 1
        return {OBS_KEY: np.stack([mine, theirs], axis=-1), ACTION_KEY + MASK_SUFFIX: mask}

    def views(
        self, moves: list[int], seat: int, legal: list[int], n_actions: int, seats: list[str]
    ) -> dict[str, dict[str, np.ndarray]]:
        """What PettingZoo shows every seat (by its name in ``seats``) after ``moves``: the legal moves' mask only to
        ``seat``, the seat to move (a centralised critic reads them joined)."""
        return {name: self.observation(moves, i, legal if i == seat else [], n_actions) for i, name in enumerate(seats)}


GAMES: dict[str, SearchGame] = {
    "connect_four_v3": SearchGame("connect_four", _connect_four_moves, _connect_four_board),
    "tictactoe_v3": SearchGame("tic_tac_toe", _tictactoe_moves, _tictactoe_board),
}
"""PettingZoo's name of each game (its ``metadata["name"]``) and its OpenSpiel twin."""


def search_game(env: StructuredEnv) -> SearchGame:
    """The OpenSpiel twin of ``env``, or a clear error naming the games that have one."""
    name = getattr(env, "game_name", None)
    if name not in GAMES:
        raise ConfigError(
            f"opponent=mcts plays the games OpenSpiel has a twin of, PettingZoo's "
            f"{', '.join(sorted(GAMES))}; this env is {name or type(env).__name__}"
        )
    return GAMES[name]


def replay(game: SearchGame, openspiel: Any, board: np.ndarray, seat: int) -> Any:
    """The OpenSpiel state in which ``seat`` is shown ``board`` (its own pieces' plane first), or a clear error."""
    mine, theirs = board[..., 0], board[..., 1]
    first, second = (mine, theirs) if seat == 0 else (theirs, mine)
    moves = game.moves(first, second)
    state = openspiel.new_initial_state()
    for move in moves or []:
        state.apply_action(move)
    if moves is None or state.is_terminal() or state.current_player() != seat:
        raise ValueError(
            f"the search cannot rebuild {game.openspiel}'s state for seat {seat} from the board it was "
            f"shown: {board.tolist()}"
        )
    return state


def openspiel_modules() -> tuple[Any, Any]:
    """``pyspiel`` and OpenSpiel's ``mcts`` module, or a clear error saying how to install them."""
    try:
        import pyspiel
        from open_spiel.python.algorithms import mcts
    except ImportError as error:
        raise ConfigError(f'the search needs OpenSpiel ({error}): pip install "maze_impala[search]"') from None
    return pyspiel, mcts


class OpenSpielSearch(Acting):
    """An acting that searches the game's OpenSpiel twin with OpenSpiel's MCTS bot: per decision, the OpenSpiel state
    replayed from the board the seat sees and ``simulations`` simulations searched from it (a move: the most
    visited); it keeps no recurrent state. ``evaluator``: the bot's leaf evaluator and priors, given the game and the
    rng;
    ``uct_c`` and ``child_selection``: its exploration (UCT by default)."""

    def __init__(
        self,
        env: StructuredEnv,
        simulations: int,
        seed: int,
        setting: str,
        evaluator: Callable[[SearchGame, np.random.RandomState], Any],
        uct_c: float = UCT_C,
        child_selection: Callable[..., float] | None = None,
    ):
        pyspiel, mcts = openspiel_modules()
        simulations = check_simulations(simulations, f"{setting}={simulations!r}")
        self.game = search_game(env)
        self.openspiel = pyspiel.load_game(self.game.openspiel)
        rng = np.random.RandomState(seed % 2**32)
        selection = {"child_selection_fn": child_selection} if child_selection is not None else {}
        self.bot = mcts.MCTSBot(
            self.openspiel, uct_c, simulations, evaluator(self.game, rng), solve=True, random_state=rng, **selection
        )

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        return {}

    def act(
        self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None
    ) -> Actions:
        boards = np.asarray(obs[OBS_KEY])
        actions = np.array([self._move(board, int(seat)) for board, seat in zip(boards, agent_ids, strict=True)])
        return {ACTION_KEY: actions.astype(np.int64)}, np.zeros(len(agent_ids), dtype=np.float32), state

    def _move(self, board: np.ndarray, seat: int) -> int:
        return int(self.bot.step(replay(self.game, self.openspiel, board, seat)))


class MctsActing(OpenSpielSearch):
    """OpenSpiel's MCTS bot with random rollouts (one per leaf), the opponent ``mcts:<simulations>``; it loads no
    weights."""

    def __init__(self, env: StructuredEnv, simulations: int, seed: int = 0):
        _, mcts = openspiel_modules()
        rollouts = lambda game, rng: mcts.RandomRolloutEvaluator(1, rng)  # noqa: E731
        super().__init__(env, simulations, seed, "opponent=mcts:<simulations>", rollouts)

    def load(self, flat: Any) -> None:
        """The search has no weights."""
