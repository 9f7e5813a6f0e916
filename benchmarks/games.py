"""Two-player games: self-play through the CLI, then the trained policy against random play and search per seat.

    python benchmarks/games.py                                   # tictactoe and connect four, 3 seeds each
    python benchmarks/games.py --games connect_four --seeds 1 2 3 --budget 9984000 --mcts 100
    python benchmarks/games.py --games tictactoe --seeds 1 --set model.image_encoder=impala

Each run is ``maze-run -cn conf_train env=<game>``: the game's shipped config (``env=tictactoe``,
``env=connect_four``) with its own budget, or ``--budget`` env steps (epochs of 25 updates), then ``maze-run -cn
conf_rollout input_dir=<run> opponent=random n_episodes=<--games-per-seat>`` on the run's last model
(``model_last.pt``: the budget's end, not the best evaluation). The table gives, per game and seat, the
win and draw rates over the seeds' games (mean and lowest seed), and the random player's own rates in that seat
(the random policy against itself), and for tic-tac-toe the exact result of each seed's greedy policy against a
best response that searches every line (``tictactoe_reference.py``: perfect play draws). Runs that train against
an opponent (``--set algorithm.train_opponent=pool``, or ``random``) also give the win rate of their last epoch's
training games against it.

Over training, a second table gives each seat's evaluation against random play (win or draw, the run's own
evaluation games after each epoch) and the win rate of the training games against the pool, at fractions of the
budget, as means over the seeds. With ``--earlier F`` each seed is also trained to the fraction F of the budget (the
same seed and settings), and the final policy plays ``--games-per-seat`` games per seat against that earlier one
(both sampling their moves): its win rate against its own past.

Against search: each final policy (greedy, without search) also plays ``--search-games-per-seat`` games per seat against
OpenSpiel's MCTS bot with each of ``--mcts`` simulations per move (``opponent=mcts:<n>``; default 100 and 1,000;
``--mcts`` with no number: none), the third table; with ``--search N ...`` also with the policy deciding by a
search of N simulations a move guided by it and its critic (``search=N`` of the rollout CLI: AlphaZero's MCTS).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd
from harness import maze_run
from tictactoe_reference import against_best_response, trained_policy

from maze_impala.events.api import mean
from maze_impala.events.interfaces import GameEvents
from maze_impala.events.stats import StatKey

GAMES = ("tictactoe", "connect_four")
"""The games with a shipped self-play config (``env=<game>``)."""
SHIPPED_ROLLOUT_STEPS, SHIPPED_ENVS = 32, 32
MARKS = {"player_1": "X", "player_2": "O"}
"""Tic-tac-toe's seats and their marks (player_1 moves first)."""


def rates(
    run: Path,
    cwd: Path,
    games: int,
    checkpoint: str | None,
    env: list[str],
    opponent: str = "random",
    extra: tuple[str, ...] = (),
) -> pd.DataFrame:
    """The games_summary of ``games`` games per seat against ``opponent`` (random play, the search, a checkpoint)."""
    against = (
        ""
        if opponent == "random"
        else "_vs_" + (opponent.replace(":", "_") if opponent.startswith("mcts") else Path(opponent).parent.name)
    )
    out = cwd / f"games_{run.name}{against}"
    source = [f"input_dir={run}", f"policy.checkpoint={checkpoint}"] if checkpoint else ["policy=random_policy", *env]
    maze_run(
        [
            "-cn",
            "conf_rollout",
            *source,
            f"opponent={opponent}",
            f"n_episodes={games}",
            "progress=false",
            *extra,
            f"hydra.run.dir={out}",
        ],
        cwd,
    )
    return pd.read_csv(out / "games_summary.csv").set_index("seat")


VARIES = (
    "Each run trains with runner=local: its actors are processes whose rollouts reach the learner in the "
    "order they finish, so a seed's results vary from run to run (runner=sequential repeats them exactly)."
)
FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)
"""Where the curves over training are read: fractions of the budget."""


def curves(runs: list[Path]) -> str:
    """Each seat's evaluation win-or-draw rate against random, and the training games' win rate against the pool
    (where the run plays one), at :data:`FRACTIONS` of the budget: means over ``runs`` (a markdown table)."""
    tables = [pd.read_csv(run / "stats.csv") for run in runs]
    seats = sorted({c.split("seat=")[1] for t in tables for c in t.columns if c.startswith("eval/GameEvents/win/")})
    lines = [
        "| env steps | "
        + " | ".join(f"{s}: win or draw against random" for s in seats)
        + " | "
        + " | ".join(f"{s}: training games won against the pool" for s in seats)
        + " |",
        "|---" * (1 + 2 * len(seats)) + "|",
    ]
    shortest = min(len(t) for t in tables)
    epochs = sorted({max(0, round(fraction * shortest) - 1) for fraction in FRACTIONS})  # a short run: fewer rows
    for epoch in epochs:
        rows = [t.iloc[epoch] for t in tables]
        cells = []
        for seat in seats:
            judged = [
                StatKey.of(getattr(GameEvents, o), mean, "eval", group=f"seat={seat}").column() for o in ("win", "draw")
            ]
            cells.append(f"{sum(r[judged[0]] + r[judged[1]] for r in rows) / len(rows):.3f}")
        for seat in seats:
            trained = StatKey.of(GameEvents.win, mean, "train", group=f"seat={seat}").column()
            won = [r[trained] for r in rows if trained in r and pd.notna(r[trained])]
            cells.append(f"{sum(won) / len(won):.3f}" if won else "-")
        lines.append(f"| {int(rows[0]['env_steps']):,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--games", nargs="+", choices=GAMES, default=list(GAMES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--budget", type=int, help="env steps of every run (default: the shipped config's)")
    parser.add_argument("--games-per-seat", type=int, default=500, help="games per seat against random play")
    parser.add_argument("--search-games-per-seat", type=int, default=100, help="games per seat against the bot")
    parser.add_argument(
        "--mcts",
        type=int,
        nargs="*",
        default=[100, 1000],
        metavar="SIMULATIONS",
        help="also play each final policy against OpenSpiel's MCTS bot with these simulations per move",
    )
    parser.add_argument(
        "--search",
        type=int,
        nargs="*",
        default=[],
        metavar="SIMULATIONS",
        help="against the MCTS bot, also with the policy searching this many simulations a move (search=N)",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more maze-run overrides")
    parser.add_argument("--output", type=Path, help="keep the runs in this folder (default: a temporary one)")
    earlier = "also play each final policy against its seed's policy trained to F of the budget"
    parser.add_argument("--earlier", type=float, default=0.0, metavar="F", help=earlier)
    args = parser.parse_args()
    batch = next((int(s.split("=")[1]) for s in args.set if s.startswith("algorithm.actors_batch_size=")), 1)
    update = SHIPPED_ROLLOUT_STEPS * SHIPPED_ENVS * batch
    rows: list[dict] = []
    search_rows: list[dict] = []
    runs: dict[str, list[Path]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        if args.output:
            cwd = args.output.resolve()
            cwd.mkdir(parents=True, exist_ok=True)
        for game in args.games:
            env = [f"env={game}"]
            random = rates(cwd / f"{game}_random", cwd, args.games_per_seat, None, env)
            for seed in args.seeds:
                run = cwd / f"{game}_{seed}"
                epochs = max(1, round(args.budget / update / 25)) if args.budget else None
                budgeted = [f"seed={seed}"] + (
                    [f"algorithm.n_epochs={epochs}", "algorithm.epoch_length=25"] if epochs else []
                )
                quiet = ["output.progress=false", "output.console=false", f"hydra.run.dir={run}"]
                opponent = ["algorithm.rollout_evaluator.opponent=random"]
                maze_run(["-cn", "conf_train", *env, *budgeted, *opponent, *quiet, *args.set], cwd)
                runs.setdefault(game, []).append(run)
                table = rates(run, cwd, args.games_per_seat, "model_last.pt", env)
                against_past = None
                if args.earlier:
                    past = cwd / f"{game}_{seed}_earlier"
                    shipped_epochs = int(pd.read_csv(run / "stats.csv")["epoch"].max()) if epochs is None else epochs
                    shorter = [
                        f"seed={seed}",
                        f"algorithm.n_epochs={max(1, round(shipped_epochs * args.earlier))}",
                        "algorithm.epoch_length=25",
                        f"hydra.run.dir={past}",
                    ]
                    maze_run(["-cn", "conf_train", *env, *shorter, *opponent, *quiet[:2], *args.set], cwd)
                    against_past = rates(
                        run,
                        cwd,
                        args.games_per_seat,
                        "model_last.pt",
                        env,
                        str(past / "model_last.pt"),
                        ("deterministic=false",),
                    )
                for n in args.mcts:
                    for own in [0, *args.search]:
                        against = rates(
                            run, cwd, args.search_games_per_seat, "model_last.pt", env, f"mcts:{n}", (f"search={own}",)
                        )
                        for seat, row in against.iterrows():
                            player = f"search {own}" if own else "policy alone"
                            search_rows.append(
                                {
                                    "game": game,
                                    "seed": seed,
                                    "seat": seat,
                                    "simulations": n,
                                    "player": player,
                                    **row[["win", "draw", "loss"]],
                                }
                            )
                stats = pd.read_csv(run / "stats.csv")
                exact = trained_policy(str(run / "model_last.pt")) if game == "tictactoe" else None
                for seat, row in table.iterrows():
                    trained = StatKey.of(GameEvents.win, mean, "train", group=f"seat={seat}").column()
                    train_win = stats[trained].iloc[-1] if trained in stats else float("nan")
                    rows.append(
                        {
                            "game": game,
                            "seed": seed,
                            "seat": seat,
                            "win": row["win"],
                            "draw": row["draw"],
                            "random_win": random.loc[seat, "win"],
                            "random_draw": random.loc[seat, "draw"],
                            "env_steps": int(stats["env_steps"].iloc[-1]),
                            "train_win": train_win,
                            "best_response": against_best_response(exact, MARKS[seat]) if exact else "-",
                            "past_win": against_past.loc[seat, "win"] if against_past is not None else float("nan"),
                        }
                    )
                    print(f"{game} seed {seed} {seat}: win {row['win']:.3f}, draw {row['draw']:.3f}", flush=True)
        for game, done in runs.items():
            print(f"\n{game} over training (means over {len(done)} seeds):\n{curves(done)}")
    print(f"\n{VARIES}")
    results = pd.DataFrame(rows)
    results["win_or_draw"] = results["win"] + results["draw"]
    print(
        "\n| game, env steps | seat | win (mean, lowest seed) | win or draw (mean, lowest) | random player: win, "
        "draw | training games won, last epoch (mean) | against a best response, per seed |\n"
        "|---|---|---|---|---|---|---|"
    )
    for (game, seat), part in results.groupby(["game", "seat"], sort=False):
        print(
            f"| {game}, {part['env_steps'].iloc[0]:,} | {seat} | {part['win'].mean():.3f} ({part['win'].min():.3f}) "
            f"| {part['win_or_draw'].mean():.3f} ({part['win_or_draw'].min():.3f}) | "
            f"{part['random_win'].iloc[0]:.3f}, {part['random_draw'].iloc[0]:.3f} | "
            f"{part['train_win'].mean():.3f} | {', '.join(part['best_response'])} |"
        )
    if search_rows:
        print(
            "\nAgainst OpenSpiel's MCTS bot (uct_c 2, random rollouts, solver on), "
            f"{args.search_games_per_seat} games per seat, the policy alone (greedy) or searching with it (search N): "
            "mean over the seeds (lowest seed)\n"
            "| game | seat | bot's simulations | player | win | draw | loss |\n"
            "|---|---|---|---|---|---|---|"
        )
        searched = pd.DataFrame(search_rows)
        for (game, seat, n, player), part in searched.groupby(["game", "seat", "simulations", "player"], sort=False):
            print(
                f"| {game} | {seat} | {n:,} | {player} | {part['win'].mean():.3f} ({part['win'].min():.3f}) | "
                f"{part['draw'].mean():.3f} | {part['loss'].mean():.3f} ({part['loss'].max():.3f} highest) |"
            )
    if args.earlier:
        print(
            f"\nAgainst the policy trained to {args.earlier:g} of the budget, both sampling: the final policy's wins "
            "per seat (mean, lowest seed)"
        )
        for (game, seat), part in results.groupby(["game", "seat"], sort=False):
            print(f"| {game} | {seat} | {part['past_win'].mean():.3f} ({part['past_win'].min():.3f}) |")


if __name__ == "__main__":
    main()
