"""Tic-tac-toe against the uniformly random player, solved exactly: the best a policy can do in each seat.

    python benchmarks/tictactoe_reference.py

For each seat, the policy that maximises the expected reward (+1 win, -1 loss, 0 draw: what training maximises)
and the policy that maximises the chance of not losing, found by expectimax over every position; their win,
draw and loss probabilities are the references for ``benchmarks/games.py``'s tic-tac-toe rows.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
Outcome = tuple[float, float, float]
"""Probabilities of win, draw and loss."""


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def solve(me: str, objective: Callable[[Outcome], tuple[float, ...] | float]) -> Outcome:
    """The outcome of the policy for ``me`` (X moves first) that maximises ``objective`` against random play."""
    other = "O" if me == "X" else "X"

    @lru_cache(None)
    def value(board: str, turn: str) -> Outcome:
        won = winner(board)
        if won is not None:
            return (1.0, 0.0, 0.0) if won == me else (0.0, 0.0, 1.0)
        free = [i for i, square in enumerate(board) if square == "."]
        if not free:
            return (0.0, 1.0, 0.0)
        after = [value(board[:i] + turn + board[i + 1 :], other if turn == me else me) for i in free]
        if turn == me:
            return max(after, key=objective)
        return tuple(sum(o[k] for o in after) / len(after) for k in range(3))  # type: ignore[return-value]

    return value("." * 9, "X")


def main() -> None:
    print("| seat | policy | win | draw | loss |\n|---|---|---|---|---|")
    for me, seat in (("X", "first"), ("O", "second")):
        for name, objective in (("most expected reward", lambda o: o[0] - o[2]),
                                ("fewest losses", lambda o: (o[0] + o[1], o[0]))):  # fmt: skip
            win, draw, loss = solve(me, objective)
            print(f"| {seat} | {name} | {win:.4f} | {draw:.4f} | {loss:.4f} |")


if __name__ == "__main__":
    main()
