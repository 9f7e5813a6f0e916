"""Tic-tac-toe against the uniformly random player, solved exactly: the best a policy can do in each seat, and
where a trained policy falls short of it.

    python benchmarks/tictactoe_reference.py
    python benchmarks/tictactoe_reference.py --checkpoint outputs/train/<time>/model_last.pt

For each seat, the policy that maximises the expected reward (+1 win, -1 loss, 0 draw: what training maximises)
and the policy that maximises the chance of not losing, found by expectimax over every position; their win,
draw and loss probabilities are the references for ``benchmarks/games.py``'s tic-tac-toe rows.

With ``--checkpoint`` (a feed-forward policy trained on ``pettingzoo.classic.tictactoe_v3``), the same figures for
that policy, computed exactly over every game against random play rather than estimated from played games: with
its action probabilities (as in training) and with its most likely actions (as in the games against random), and
the positions where its most likely action costs the most expected reward, weighted by how often random play
reaches them. Last, exploitability: the result of the greedy policy in each seat against a best response, an
opponent that searches every line (perfect play draws in both seats).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import lru_cache

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
Outcome = tuple[float, float, float]
"""Probabilities of win, draw and loss."""
Policy = Callable[[str, str], dict[int, float]]
"""A board (9 squares of X, O or ., row by row) and the mark to move -> the probability of each free square."""


def winner(board: str) -> str | None:
    for a, b, c in LINES:
        if board[a] != "." and board[a] == board[b] == board[c]:
            return board[a]
    return None


def free(board: str) -> list[int]:
    return [i for i, square in enumerate(board) if square == "."]


def place(board: str, square: int, mark: str) -> str:
    return board[:square] + mark + board[square + 1 :]


def expected(outcomes: list[tuple[float, Outcome]]) -> Outcome:
    return tuple(sum(p * o[k] for p, o in outcomes) for k in range(3))  # type: ignore[return-value]


def solve(me: str, choose: Callable[[str, list[tuple[int, Outcome]]], Outcome]) -> Callable[[str, str], Outcome]:
    """The outcome, from each position, of ``me`` (X moves first) choosing its moves by ``choose`` (from the
    position and each free square's outcome) against random play."""
    other = "O" if me == "X" else "X"

    @lru_cache(None)
    def value(board: str, turn: str) -> Outcome:
        won = winner(board)
        if won is not None:
            return (1.0, 0.0, 0.0) if won == me else (0.0, 0.0, 1.0)
        if not free(board):
            return (0.0, 1.0, 0.0)
        after = [(i, value(place(board, i, turn), other if turn == me else me)) for i in free(board)]
        if turn == me:
            return choose(board, after)
        return expected([(1 / len(after), o) for _, o in after])

    return value


def best(objective: Callable[[Outcome], tuple[float, ...] | float]):
    return lambda board, after: max((o for _, o in after), key=objective)


def reward(o: Outcome) -> float:
    return o[0] - o[2]


def most_reward(o: Outcome) -> tuple[float, float]:
    """The expected reward (rounded, as below), then the fewest losses."""
    return round(reward(o), 9), -o[2]


def not_losing(o: Outcome) -> tuple[float, float]:
    """The chance of not losing (rounded: sums in another order must not break ties), then of winning."""
    return round(o[0] + o[1], 9), o[0]


def sampled(policy: Policy, me: str) -> Callable[[str, list[tuple[int, Outcome]]], Outcome]:
    return lambda board, after: expected([(policy(board, me)[i], o) for i, o in after])


def likeliest(policy: Policy, me: str) -> Callable[[str, list[tuple[int, Outcome]]], Outcome]:
    def choose(board: str, after: list[tuple[int, Outcome]]) -> Outcome:
        probs = policy(board, me)
        return dict(after)[max(probs, key=probs.get)]

    return choose


RESULTS = {1: "win", 0: "draw", -1: "loss"}


def against_best_response(policy: Policy, me: str) -> str:
    """The result (win, draw or loss) of ``policy``'s most likely moves in seat ``me`` against an opponent that
    searches every line for its own best result: the exact worst case of the greedy policy, whatever the opponent."""
    other = "O" if me == "X" else "X"

    @lru_cache(None)
    def value(board: str, turn: str) -> int:  # +1: me wins, 0: draw, -1: me loses
        won = winner(board)
        if won is not None:
            return 1 if won == me else -1
        if not free(board):
            return 0
        if turn == me:
            probs = policy(board, me)
            return value(place(board, max(probs, key=probs.get), me), other)
        return min(value(place(board, i, other), me) for i in free(board))

    return RESULTS[value("." * 9, "X")]


def perfect(board: str, mark: str) -> dict[int, float]:
    """Perfect play (minimax): probability 1 on the first square of the best result against any opponent."""
    other = "O" if mark == "X" else "X"

    @lru_cache(None)
    def value(position: str, turn: str) -> int:  # for ``mark``
        won = winner(position)
        if won is not None:
            return 1 if won == mark else -1
        if not free(position):
            return 0
        results = [value(place(position, i, turn), other if turn == mark else mark) for i in free(position)]
        return max(results) if turn == mark else min(results)

    scores = {i: value(place(board, i, mark), other) for i in free(board)}
    top = max(scores, key=scores.get)
    return {i: float(i == top) for i in free(board)}


def trained_policy(checkpoint: str) -> Policy:
    """A checkpoint's action probabilities for a board, with its observation built as PettingZoo's tictactoe_v3
    builds it: plane 0 the mover's marks, plane 1 the other's, and the action mask."""
    import numpy as np
    import torch

    from maze_impala import load_policy

    policy, env = load_policy(checkpoint)
    agents = env.agents_dict
    env.close()
    if policy.recurrent:
        raise SystemExit("--checkpoint: a recurrent policy depends on its history, not on the position alone")

    @lru_cache(None)
    def probabilities(board: str, mark: str) -> dict[int, float]:
        planes = np.zeros((3, 3, 2), dtype=np.int8)
        for i, square in enumerate(board):
            if square != ".":
                planes[i // 3, i % 3, 0 if square == mark else 1] = 1
        mask = np.array([square == "." for square in board], dtype=np.int8)
        actor = agents["player_1" if mark == "X" else "player_2"]
        obs = {"observation": torch.as_tensor(planes)[None], "action_mask": torch.as_tensor(mask)[None]}
        with torch.no_grad():
            logits = policy.logits(
                actor.step_key, policy.normalize(actor.step_key, obs), agent_ids=torch.tensor([actor.agent_id])
            )
        p = torch.softmax(logits[0], -1).numpy()
        return {i: float(p[i]) for i in free(board)}

    return probabilities


def mistakes(me: str, policy: Policy, optimum: Callable[[str, str], Outcome]) -> list[tuple[float, str, int, int]]:
    """The positions where ``policy``'s most likely move loses expected reward against the optimum's best move:
    (the reward lost, weighted by how often play reaches the position; the board; that move; the best move)."""
    other = "O" if me == "X" else "X"
    found: dict[str, tuple[float, str, int, int]] = {}

    def walk(board: str, turn: str, reach: float) -> None:
        if winner(board) is not None or not free(board):
            return
        nxt = other if turn == me else me
        if turn == me:
            probs = policy(board, me)
            move = max(probs, key=probs.get)
            values = {i: reward(optimum(place(board, i, me), nxt)) for i in free(board)}
            top = max(values, key=values.get)
            if values[move] < values[top] - 1e-9:
                cost = found.get(board, (0.0,))[0] + reach * (values[top] - values[move])
                found[board] = (cost, board, move, top)
            walk(place(board, move, me), nxt, reach)
        else:
            for i in free(board):
                walk(place(board, i, turn), nxt, reach / len(free(board)))

    walk("." * 9, "X", 1.0)
    return sorted(found.values(), reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="also evaluate this policy exactly (tictactoe_v3, feed-forward)")
    parser.add_argument("--mistakes", type=int, default=5, help="the costliest positions to list per seat")
    args = parser.parse_args()
    policy = trained_policy(args.checkpoint) if args.checkpoint else None
    print("| seat | policy | win | draw | loss | expected reward |\n|---|---|---|---|---|---|")
    for me, seat in (("X", "first"), ("O", "second")):
        rows = [("most expected reward", best(most_reward)), ("fewest losses", best(not_losing))]
        if policy is not None:
            rows += [("checkpoint, sampled", sampled(policy, me)), ("checkpoint, most likely", likeliest(policy, me))]
        for name, choose in rows:
            win, draw, loss = solve(me, choose)("." * 9, "X")
            print(f"| {seat} | {name} | {win:.4f} | {draw:.4f} | {loss:.4f} | {win - loss:.4f} |")
    print("\n| seat | policy | against a best response (searching every line) |\n|---|---|---|")
    for me, seat in (("X", "first"), ("O", "second")):
        for name, player in [("perfect play", perfect), *([("checkpoint, most likely", policy)] if policy else [])]:
            print(f"| {seat} | {name} | {against_best_response(player, me)} |")
    if policy is not None:
        for me, seat in (("X", "first"), ("O", "second")):
            print(f"\nThe {seat} seat's costliest most likely moves (board rows, move, best move; 0-8 row by row):")
            for cost, board, move, top in mistakes(me, policy, solve(me, best(most_reward)))[: args.mistakes]:
                print(f"  {board[:3]}/{board[3:6]}/{board[6:]}: plays {move}, best {top}; costs {cost:.4f}")


if __name__ == "__main__":
    main()
