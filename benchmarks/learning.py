"""How reliably and how fast the shipped defaults learn: a suite of envs over several seeds, one table.

    python benchmarks/learning.py                                   # the whole suite, 3 seeds, runner=local
    python benchmarks/learning.py --envs CartPole-v1 --seeds 1 2 3 4 5 6 7 8 9 10 --runners local dev
    python benchmarks/learning.py --envs Pendulum-v1 --set n_sgd_passes=1   # change a setting of every run

Every run trains with the shipped algorithm settings (``maze-run -cn conf_train algorithm=impala``, the same
for every env), except that an epoch is shorter
(``epoch_length`` updates, with ``n_epochs`` scaled so that the number of updates, and with it the
learning-rate schedule and the env-step budget, is the shipped one), so that the return is seen at a
finer grain. Per env and runner the table gives: the seeds whose mean training return (per epoch)
reached the threshold; the median env steps and seconds (from the call of ``train``, start-up and
evaluations included) to the first epoch at the threshold; the mean final return (last 10% of each
run's epochs); and collapses: seeds whose return fell below the env's floor after first reaching the
threshold, within ``--window`` env steps of reaching it (``--window 0``: until the end of the run). Each run's
``drift`` is the median ``policy_update_kl`` over those epochs (the table: the median over the seeds): how far one
update moves a policy that has learnt: in every run, a view of the drift that ends in the rare falls.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train
from maze_impala.events.api import mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.impala.events import MultiStepIMPALAEvents

if TYPE_CHECKING:  # the actor processes re-import this script: only what they need, so no torch
    from maze_impala.train.trainer import TrainingResult

RETURN = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
STEPS = StatKey.of(RunEvents.env_steps, "last", "train").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()
UPDATE_KL = StatKey.of(MultiStepIMPALAEvents.policy_update_kl, mean, "train").column()  # + "/step_key=..."


@dataclass(frozen=True)
class Task:
    """One env of the suite: what it trains with, and what counts as learnt and as a collapse."""

    env: str | dict[str, Any]
    threshold: float
    floor: float


SUITE: dict[str, Task] = {
    "CartPole-v1": Task("CartPole-v1", threshold=475.0, floor=400.0),
    "Acrobot-v1": Task("Acrobot-v1", threshold=-100.0, floor=-150.0),
    "Pendulum-v1": Task("Pendulum-v1", threshold=-400.0, floor=-600.0),
    "cutting": Task({"_target_": "maze_impala.envs.examples.CuttingEnv"}, threshold=6.5, floor=5.0),
    "coordination": Task({"_target_": "maze_impala.envs.examples.CoordinationEnv"}, threshold=9.5, floor=8.0),
    "claims-parallel": Task(  # a PettingZoo ParallelEnv through the adapter; returns sum 3 agents' rewards
        {
            "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
            "name": "maze_impala.envs.examples.claims_parallel",
            "api": "parallel",
        },
        threshold=28.5,
        floor=24.0,
    ),
}


def _value(text: str, default: Any) -> Any:
    if text == "None":
        return None
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes")
    if default is None:  # an optional field: an int where the text is one (min_actors_batch_size), else a float
        return int(text) if text.lstrip("-").isdigit() else float(text)
    return type(default)(text)


def algorithm_for(epoch_length: int, changes: dict[str, str]) -> ImpalaAlgorithmConfig:
    """The shipped settings (the same for every env), epochs of ``epoch_length`` updates, the same updates."""
    defaults = ImpalaAlgorithmConfig()
    settings = {k: _value(v, getattr(defaults, k)) for k, v in changes.items()}
    shipped = ImpalaAlgorithmConfig(**settings)
    return ImpalaAlgorithmConfig(
        **{**settings, "epoch_length": epoch_length, "n_epochs": max(1, shipped.total_updates // epoch_length)}
    )


def run_once(task: Task, runner: str, seed: int, algorithm: ImpalaAlgorithmConfig, window: int) -> dict:
    """One training run, summarised."""
    with tempfile.TemporaryDirectory() as out:
        result = train(
            task.env,
            algorithm,
            runner=RunnerConfig(runner),
            output=OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
            seed=seed,
            output_dir=out,
        )
    returns = np.array(result.column(RETURN), dtype=float)
    steps = np.array(result.column(STEPS), dtype=float)
    elapsed = np.array(result.column(ELAPSED), dtype=float)  # from the start of train's set-up: start-up included
    tail = returns[-max(1, len(returns) // 10) :]
    row = {"seed": seed, "final": float(np.nanmean(tail)), "steps": None, "seconds": None, "collapsed": False}
    reached = np.flatnonzero(returns >= task.threshold)
    if len(reached):
        first = int(reached[0])
        after = steps > steps[first]
        if window:
            after &= steps <= steps[first] + window
        low = np.nanmin(returns[after]) if after.any() and not np.isnan(returns[after]).all() else math.inf
        row.update(steps=int(steps[first]), seconds=round(float(elapsed[first]), 2),
                   collapsed=bool(low < task.floor), lowest_after=float(low),
                   drift=solved_drift(result, after))  # fmt: skip
    return row


def solved_drift(result: TrainingResult, epochs: np.ndarray) -> float | None:
    """The median over ``epochs`` of the policy's per-update KL (its largest step key's): how far each update moves
    a policy that has reached the threshold, the drift that ends in a fall."""
    columns = {name for row in result.history for name in row if name.startswith(UPDATE_KL + "/")}
    per_epoch = np.fmax.reduce([result.column(name) for name in columns], axis=0) if columns else np.array([])
    chosen = per_epoch[epochs] if len(per_epoch) else per_epoch
    return float(np.nanmedian(chosen)) if len(chosen) and not np.isnan(chosen).all() else None


def summarise(name: str, runner: str, rows: list[dict]) -> dict:
    hits = [r for r in rows if r["steps"] is not None]
    median = lambda key: statistics.median(r[key] for r in hits) if hits else None  # noqa: E731
    return {
        "env": name,
        "runner": runner,
        "reached": f"{len(hits)}/{len(rows)}",
        "median_steps": median("steps"),
        "median_seconds": median("seconds"),
        "final_return": statistics.mean(r["final"] for r in rows),
        "collapses": sum(r["collapsed"] for r in hits),
        "median_drift": statistics.median(d) if (d := [r["drift"] for r in hits if r["drift"] is not None]) else None,
        "runs": rows,
    }


def print_table(summaries: list[dict]) -> None:
    print("| env | runner | reached | median env steps | median s | final return | collapses | drift |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summaries:
        steps = "-" if s["median_steps"] is None else f"{s['median_steps']:,.0f}"
        seconds = "-" if s["median_seconds"] is None else f"{s['median_seconds']:.1f}"
        drift = "-" if s["median_drift"] is None else f"{s['median_drift']:.1e}"
        print(f"| {s['env']} | {s['runner']} | {s['reached']} | {steps} | {seconds} | "
              f"{s['final_return']:.1f} | {s['collapses']} | {drift} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(SUITE), choices=list(SUITE))
    parser.add_argument("--runners", nargs="+", default=["local"], choices=["dev", "local", "ray"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--epoch-length", type=int, default=10, help="updates per epoch (the grain of the table)")
    parser.add_argument("--window", type=int, default=200_000, help="env steps after reaching to watch for a collapse")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings to change")
    parser.add_argument("--json", help="also write every run to this JSON file")
    args = parser.parse_args()
    changes = dict(item.split("=", 1) for item in args.set)
    # train imports torch on its first call; import it here, so that every run's seconds are those of a process
    # that has it (as they were when `from maze_impala import train` imported it), not the first run's alone
    importlib.import_module("maze_impala.train.setup")
    summaries = []
    for name in args.envs:
        task = SUITE[name]
        algorithm = algorithm_for(args.epoch_length, changes)
        for runner in args.runners:
            rows = []
            for seed in args.seeds:
                rows.append(run_once(task, runner, seed, algorithm, args.window))
                print(f"{name} {runner} seed {seed}: {json.dumps(rows[-1])}", flush=True)
            summaries.append(summarise(name, runner, rows))
    print()
    print_table(summaries)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summaries, f, indent=1)


if __name__ == "__main__":
    main()
