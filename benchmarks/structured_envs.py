"""Random vs trained returns of the shipped structured envs, and the time to train them.

    python benchmarks/structured_envs.py --seeds 1 2 3 [--runner local] [--epochs 12]

For each env: the mean return of a uniformly random policy (2,000 episodes), and per
seed the wall-clock seconds (actor start-up included) until the mean training return
first reaches the threshold, the best training return and the final evaluation return,
with the shipped algorithm settings (``maze_impala/conf/algorithm/impala.yaml``) and
``epoch_length=25``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, train
from maze_impala.events.api import EventHub, mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey

ENVS = {
    "cutting": ({"_target_": "maze_impala.envs.examples.CuttingEnv"}, 6.5, 8.0),
    "coordination": ({"_target_": "maze_impala.envs.examples.CoordinationEnv"}, 9.5, 10.0),
}
TRAIN = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
EVAL = StatKey.of(EpisodeEvents.episode_return, mean, "eval").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()


def random_return(env: dict, episodes: int = 2000) -> float:
    # torch and pandas are imported where used: the actor processes re-import this script, and need neither
    from maze_impala.envs.factory import make_env
    from maze_impala.evaluate.evaluator import RolloutEvaluator, mean_return
    from maze_impala.nn.models import make_random_policy

    evaluator = RolloutEvaluator(env, episodes, False, 0, EventHub())
    return mean_return(evaluator.evaluate(make_random_policy(make_env(env))))


def run(env: dict, threshold: float, seed: int, runner: str, epochs: int, critic: str) -> dict:
    import pandas as pd

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        train(
            env,
            ImpalaAlgorithmConfig(n_epochs=epochs, epoch_length=25),
            ModelConfig(critic=critic),
            RunnerConfig(type=runner),
            output=OutputConfig(console=False, tensorboard=False),
            seed=seed,
            output_dir=out,
        )
        total = time.perf_counter() - start
        stats = pd.read_csv(Path(out) / "stats.csv")
    reached = stats[stats[TRAIN] >= threshold]
    return {
        "seed": seed,
        "seconds_to_threshold": float(reached[ELAPSED].iloc[0]) if len(reached) else None,
        "best_train_return": float(stats[TRAIN].max()),
        "final_eval_return": float(stats[EVAL].iloc[-1]),
        "seconds": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--runner", choices=["dev", "local"], default="local")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--critic", choices=["step", "shared", "delta"], default="step")
    parser.add_argument("--envs", nargs="+", choices=sorted(ENVS), default=sorted(ENVS))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = {}
    print(
        f"{'env':<14}{'random':>8}{'optimum':>9}{'threshold':>10}{'reached':>9}{'s to threshold (median, range)':>32}"
        f"{'best train':>11}{'final eval':>11}"
    )
    for name in args.envs:
        env, threshold, optimum = ENVS[name]
        baseline = random_return(env)
        runs = [run(env, threshold, seed, args.runner, args.epochs, args.critic) for seed in args.seeds]
        times = [r["seconds_to_threshold"] for r in runs if r["seconds_to_threshold"] is not None]
        span = f"{statistics.median(times):.1f} ({min(times):.1f}-{max(times):.1f})" if times else "-"
        best = statistics.median(r["best_train_return"] for r in runs)
        final = statistics.median(r["final_eval_return"] for r in runs)
        print(
            f"{name:<14}{baseline:>8.2f}{optimum:>9.1f}{threshold:>10.1f}{len(times):>5}/{len(runs):<3}{span:>32}"
            f"{best:>11.2f}{final:>11.2f}"
        )
        report[name] = {"random": baseline, "optimum": optimum, "threshold": threshold, "runs": runs}
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
