"""Job-shop scheduling on Taillard's instances: a policy trained with ``env=jobshop`` against dispatching rules and a
solver, one table per instance set (the gap of the makespan to the best known upper bound, mean over the set).

    python benchmarks/jobshop.py --train --seeds 1 2 3 --env-steps 3000000   # train, then judge each seed's policy
    python benchmarks/jobshop.py --runs outputs/train/<a> outputs/train/<b>  # judge trained runs (model_best.pt)
    python benchmarks/jobshop.py --cpsat-seconds 60                          # the rules and CP-SAT alone (ortools)

Each policy is judged greedy (the most likely job at each decision) and as the best of N sampled schedules
(``--samples``, 32 and 128 by the convention of the L2D line of work), on every instance of each set
(``--sets``: taillard15 is ta01-ta10, 15 x 15; taillard30 is ta41-ta50, 30 x 20): the same trained weights on both
sizes. The rules (MWKR, MOR, SPT, FIFO) choose from the same non-delay conflict sets as the policy, and from
Giffler and Thompson's active ones. CP-SAT (``pip install ortools``) runs with 2 workers and ``--cpsat-seconds`` per
instance. Times are per instance, on one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from harness import QUIET

from maze_impala.envs.jobshop import JobShopEnv, dispatch_by_rule, load_instances
from maze_impala.envs.jobshop.instances import Instance

RULE_NAMES = ("MWKR", "MOR", "SPT", "FIFO")


def policy_for(checkpoint: Path, instance: Instance) -> Any:
    """The checkpoint's policy for an env padded to ``instance``'s jobs (the weights do not depend on the count)."""
    from maze_impala.play.spec import PolicySpec

    env = JobShopEnv(instances=[], n_jobs=instance.n_jobs, n_machines=instance.n_machines)
    return PolicySpec.from_checkpoint(checkpoint).policy(env)


def schedules(policy: Any, instance: Instance, copies: int, seed: int | None) -> list[int]:
    """The makespans of ``copies`` schedules of ``instance`` by ``policy``: greedy where ``seed`` is None, else
    sampled (one batched forward pass per decision for all copies)."""
    from maze_impala.nn.acting import StreamNoise
    from maze_impala.nn.torch_acting import TorchActing

    acting = TorchActing(policy)
    noise = None if seed is None else StreamNoise(seed)
    envs = [JobShopEnv(instances=[], n_jobs=instance.n_jobs, n_machines=instance.n_machines) for _ in range(copies)]
    observations = []
    for env in envs:
        env.instances = [instance]
        observations.append(env.reset(seed=0)[0])
    live = list(range(copies))
    while live:
        batch = {k: np.stack([observations[i][k] for i in live]) for k in observations[0]}
        actions, _, _ = acting.act("dispatch", batch, {}, np.zeros(len(live), dtype=np.int64), noise)
        still = []
        for row, i in enumerate(live):
            observations[i], _, done, _, _ = envs[i].step({"job": int(actions["job"][row])})
            if not done:
                still.append(i)
        live = still
    return [env.schedule.makespan for env in envs]


def judge_policy(checkpoint: Path, instances: list[Instance], samples: list[int]) -> dict[str, dict]:
    """Per method (greedy, best of N): the gap of each instance and the seconds it took."""
    torch.set_num_threads(1)
    results: dict[str, dict] = {"greedy": {"gaps": [], "seconds": []}}
    results |= {f"best of {n}": {"gaps": [], "seconds": []} for n in samples}
    for instance in instances:
        policy = policy_for(checkpoint, instance)
        start = time.perf_counter()
        makespan = schedules(policy, instance, 1, None)[0]
        results["greedy"]["seconds"].append(time.perf_counter() - start)
        results["greedy"]["gaps"].append(makespan / instance.upper_bound - 1)
        for n in samples:
            start = time.perf_counter()
            best = min(schedules(policy, instance, n, seed=1))
            results[f"best of {n}"]["seconds"].append(time.perf_counter() - start)
            results[f"best of {n}"]["gaps"].append(min(best, makespan) / instance.upper_bound - 1)
    return results


def judge_rules(instances: list[Instance]) -> dict[str, dict]:
    results = {}
    for mode in ("nondelay", "active"):
        for rule in RULE_NAMES:
            gaps, seconds = [], []
            for instance in instances:
                start = time.perf_counter()
                gaps.append(dispatch_by_rule(instance, rule, mode).makespan / instance.upper_bound - 1)
                seconds.append(time.perf_counter() - start)
            results[f"{rule} ({mode})"] = {"gaps": gaps, "seconds": seconds}
    return results


def judge_cpsat(instances: list[Instance], seconds: float) -> dict[str, dict]:
    """CP-SAT's makespans within ``seconds`` per instance, 2 workers (empty without ortools)."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        print("CP-SAT skipped: pip install ortools")
        return {}
    gaps, times = [], []
    for instance in instances:
        model, horizon = cp_model.CpModel(), int(instance.durations.sum())
        ends, per_machine = [], {m: [] for m in range(instance.n_machines)}
        for j in range(instance.n_jobs):
            previous = None
            for k in range(instance.n_machines):
                d = int(instance.durations[j, k])
                start = model.NewIntVar(0, horizon, f"s{j}_{k}")
                per_machine[int(instance.machines[j, k])].append(model.NewIntervalVar(start, d, start + d, ""))
                if previous is not None:
                    model.Add(start >= previous)
                previous = start + d
            ends.append(previous)
        for intervals in per_machine.values():
            model.AddNoOverlap(intervals)
        makespan = model.NewIntVar(0, horizon, "makespan")
        model.AddMaxEquality(makespan, ends)
        model.Minimize(makespan)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers, solver.parameters.max_time_in_seconds = 2, seconds
        start = time.perf_counter()
        solver.Solve(model)
        times.append(time.perf_counter() - start)
        gaps.append(solver.Value(makespan) / instance.upper_bound - 1)
    return {f"CP-SAT, 2 workers, {seconds:g} s": {"gaps": gaps, "seconds": times}}


def train_policy(seed: int, env_steps: int, out: Path) -> tuple[Path, float]:
    """Trains ``env=jobshop``'s shipped config for ``env_steps``; its best checkpoint and the seconds it took."""
    from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, TrainingConfig
    from maze_impala.config.workloads import shipped_env, shipped_model
    from maze_impala.train.setup import build_trainer

    env, algorithm = shipped_env("jobshop")
    settings = ImpalaAlgorithmConfig(**algorithm)
    updates = max(1, env_steps // settings.env_steps_per_update)
    epoch_length = min(50, updates)
    settings = ImpalaAlgorithmConfig(**{**algorithm, "epoch_length": epoch_length, "n_epochs": updates // epoch_length})
    config = TrainingConfig(
        env, settings, ModelConfig(**shipped_model("jobshop")), RunnerConfig(), output=QUIET, seed=seed
    )
    start = time.perf_counter()
    build_trainer(config, out).train()
    return out / "model_best.pt", time.perf_counter() - start


def print_table(name: str, results: dict[str, dict]) -> None:
    print(f"\n{name}\n")
    print("| method | mean gap to the best known upper bound | seconds per instance |")
    print("|---|---|---|")
    for method, r in results.items():
        gaps = r["gaps"]
        spread = f" ({min(gaps):.1%} to {max(gaps):.1%})" if len(gaps) > 1 else ""
        print(f"| {method} | {statistics.mean(gaps):.1%}{spread} | {statistics.median(r['seconds']):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", nargs="*", default=[], help="training output dirs to judge (their model_best.pt)")
    parser.add_argument("--train", action="store_true", help="train env=jobshop's shipped config once per seed")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--env-steps", type=int, default=3_000_000, help="training budget (dispatch decisions)")
    parser.add_argument("--sets", nargs="+", default=["taillard15", "taillard30"])
    parser.add_argument("--samples", nargs="*", type=int, default=[32, 128])
    parser.add_argument("--cpsat-seconds", type=float, default=0.0, help="CP-SAT's limit per instance (0: none)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args()
    checkpoints: dict[str, Path] = {f"policy of {run}": Path(run) / "model_best.pt" for run in args.runs}
    keep = tempfile.TemporaryDirectory()
    for seed in args.seeds if args.train else []:
        checkpoint, seconds = train_policy(seed, args.env_steps, Path(keep.name) / f"seed{seed}")
        print(f"seed {seed}: trained {args.env_steps:,} env steps in {seconds:.0f} s", flush=True)
        checkpoints[f"seed {seed}"] = checkpoint
    everything = {}
    for name in args.sets:
        instances = load_instances(name)
        results: dict[str, dict] = {}
        for label, checkpoint in checkpoints.items():
            for method, r in judge_policy(checkpoint, instances, args.samples).items():
                results[f"{label}, {method}"] = r
        if len(checkpoints) > 1:  # the median over seeds of each method's mean gap
            for method in ["greedy", *(f"best of {n}" for n in args.samples)]:
                rows = [results[f"{label}, {method}"] for label in checkpoints]
                middle = sorted(rows, key=lambda r: statistics.mean(r["gaps"]))[len(rows) // 2]
                results[f"policy, {method} (median seed)"] = middle
        results |= judge_rules(instances)
        if args.cpsat_seconds:
            results |= judge_cpsat(instances, args.cpsat_seconds)
        print_table(name, results)
        everything[name] = results
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
