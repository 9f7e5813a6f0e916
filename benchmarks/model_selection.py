"""How many evaluation episodes ``model_best.pt`` needs: the epoch each count would choose, judged on fresh episodes.

    python benchmarks/model_selection.py                                  # LunarLander-v3, seeds 1 2 3
    python benchmarks/model_selection.py --envs Acrobot-v1 minigrid-doorkey --seeds 1 --counts 8 16 32 64

Each run trains a task of ``benchmarks/learning.py`` with the shipped settings and epochs (its budget), and keeps
the policy of every epoch. Every kept policy then plays the evaluator's own episodes (greedy, the seeds the
rollout evaluator gives its first ``max(--counts)`` envs; the evaluator with ``n_episodes=n`` plays the first
``n``) and ``--truth`` fresh episodes (seeds that no evaluation uses), the judge. For each count ``n`` the
table gives the epoch that ``model_best.pt`` would hold (the last best mean of the first ``n`` episodes, as the
trainer keeps it: ties go to the later epoch), that epoch's judged return, and how far it falls short of the
best judged epoch (the regret), beside the last epoch's; and the seconds one evaluation of ``n`` episodes takes
beside the seconds of one epoch's training (its cost).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from harness import QUIET
from learning import JUDGE_SEEDS, SUITE, Task, algorithm_for, episode_returns

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, TrainingConfig
from maze_impala.actors.actor import seed_for
from maze_impala.config.evaluation import RolloutEvaluatorConfig
from maze_impala.events.writers import StatsWriter


class Keep(StatsWriter):
    """Keeps a copy of the policy's weights at the end of every epoch (when its statistics are written)."""

    def __init__(self, policy):
        self.policy, self.kept, self.seconds = policy, [], []
        self._start = time.perf_counter()

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        self.kept.append(copy.deepcopy(self.policy.state_dict()))
        self.seconds.append(time.perf_counter() - self._start)


def returns(task: Task, policy, seeds: list[int]) -> tuple[np.ndarray, float]:
    """The greedy returns of one episode per seed, and the seconds they took."""
    start = time.perf_counter()
    scores = episode_returns(task, policy, seeds)
    return scores, time.perf_counter() - start


def run(task: Task, seed: int, counts: list[int], truth: int) -> dict:
    """One training run, its epochs judged (see the module's docstring)."""
    from maze_impala.train.setup import build_trainer

    shipped = ImpalaAlgorithmConfig()
    algorithm = algorithm_for(shipped.epoch_length, {}, task.budget, task.algorithm)
    algorithm = replace(algorithm, rollout_evaluator=RolloutEvaluatorConfig(n_episodes=1))  # judged here instead
    with tempfile.TemporaryDirectory() as out:
        config = TrainingConfig(
            task.env,
            algorithm,
            ModelConfig(**task.model),
            RunnerConfig("local", **task.runner),
            output=QUIET,
            seed=seed,
        )
        trainer = build_trainer(config, Path(out))
        keep = Keep(trainer.learner.policy)
        trainer.outputs.writers.append(keep)
        trainer.train()
        policy = trainer.learner.policy
        own = [seed_for(seed, 2**31 - 1, i) for i in range(max(counts))]  # the rollout evaluator's seeds
        fresh = [JUDGE_SEEDS + i for i in range(truth)]
        evaluated, judged, eval_seconds = [], [], {}
        for weights in keep.kept:
            policy.load_state_dict(weights)
            scores = returns(task, policy, own)[0]
            evaluated.append(scores)
            judged.append(float(returns(task, policy, fresh)[0].mean()))
        for n in counts:  # the cost, on the last policy: what one evaluation of n episodes takes
            eval_seconds[n] = returns(task, policy, own[:n])[1]
    epoch_seconds = float(np.median(np.diff([0.0, *keep.seconds])))
    row = {
        "seed": seed,
        "epochs": len(judged),
        "judged": judged,
        "epoch_seconds": epoch_seconds,
        "last": judged[-1],
        "oracle": max(judged),
        "by_count": {},
    }
    for n in counts:
        means = [float(scores[:n].mean()) for scores in evaluated]
        chosen = max(range(len(means)), key=lambda e: (means[e], e))  # ties or beats: the later epoch
        row["by_count"][n] = {
            "epoch": chosen + 1,
            "evaluated": means[chosen],
            "judged": judged[chosen],
            "regret": max(judged) - judged[chosen],
            "eval_seconds": eval_seconds[n],
        }
    return row


def print_table(name: str, counts: list[int], rows: list[dict]) -> None:
    print(f"\n{name}: judged return of the chosen epoch (median over {len(rows)} seeds), its regret, and the cost")
    print(
        "| episodes | chosen epochs | evaluated | judged | evaluated - judged | regret (median, worst) "
        "| eval s / epoch s |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in counts:
        picks = [row["by_count"][n] for row in rows]
        regrets = [p["regret"] for p in picks]
        cost = statistics.median(p["eval_seconds"] / row["epoch_seconds"] for p, row in zip(picks, rows))
        print(
            f"| {n} | {', '.join(str(p['epoch']) for p in picks)} "
            f"| {statistics.median(p['evaluated'] for p in picks):.4g} "
            f"| {statistics.median(p['judged'] for p in picks):.4g} "
            f"| {statistics.median(p['evaluated'] - p['judged'] for p in picks):.3g} "
            f"| {statistics.median(regrets):.3g}, {max(regrets):.3g} | {cost:.2f} |"
        )
    last = [row["oracle"] - row["last"] for row in rows]
    print(
        f"| last epoch | {', '.join(str(row['epochs']) for row in rows)} | | "
        f"{statistics.median(row['last'] for row in rows):.4g} | | {statistics.median(last):.3g}, {max(last):.3g} | |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["LunarLander-v3"], choices=list(SUITE))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--counts", nargs="+", type=int, default=[8, 16, 32])
    parser.add_argument("--truth", type=int, default=100, help="fresh episodes that judge each epoch's policy")
    parser.add_argument("--json", help="also write every run to this JSON file")
    parser.add_argument("--tables", help="print the tables of a JSON file this script wrote, and nothing else")
    args = parser.parse_args()
    if args.tables:
        for name, rows in json.loads(Path(args.tables).read_text()).items():
            for row in rows:
                row["by_count"] = {int(n): pick for n, pick in row["by_count"].items()}
            print_table(name, sorted(rows[0]["by_count"]), rows)
        return
    everything = {}
    for name in args.envs:
        rows = []
        for seed in args.seeds:
            rows.append(run(SUITE[name], seed, args.counts, args.truth))
            print(f"{name} seed {seed}: {json.dumps(rows[-1])}", flush=True)
        print_table(name, args.counts, rows)
        everything[name] = rows
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
