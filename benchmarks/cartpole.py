"""Env steps per second and wall-clock seconds to a mean training return of 475 on CartPole-v1.

    python benchmarks/cartpole.py                      # runner=dev and runner=local, seeds 1-3
    python benchmarks/cartpole.py --runners local --seeds 1 2 3 4 5 --json out.json
    python benchmarks/cartpole.py --set envs_per_actor=32 n_rollout_steps=16   # other algorithm settings

Each run uses the shipped settings (``algorithm=impala``). "Seconds to 475" is measured from
the call of ``train`` (process start-up included) to the end of the first epoch whose mean training episode return
is at least 475; "steps/s" is env steps per second of the
update loop (evaluation excluded), averaged over epochs, and "overall" is all env steps
over all wall-clock time, evaluation and start-up included.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import tempfile
import time

from harness import QUIET

from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, train
from maze_impala.events.api import mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey

RETURN = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()
STEPS = StatKey.of(RunEvents.env_steps, "last", "train").column()
STEPS_PER_SECOND = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()


def run_once(runner: str, seed: int, overrides: dict[str, str] | None = None) -> dict:
    defaults = ImpalaAlgorithmConfig()
    changed = {k: type(getattr(defaults, k))(v) for k, v in (overrides or {}).items()}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = train(
            "CartPole-v1",
            ImpalaAlgorithmConfig(**changed),
            runner=RunnerConfig(runner),
            output=QUIET,
            seed=seed,
            output_dir=out,
        )
    wall = time.perf_counter() - started
    returns, elapsed = result.column(RETURN), result.column(ELAPSED)
    steps = result.column(STEPS)
    first = next((i for i, r in enumerate(returns) if r >= 475), None)
    return {
        "runner": runner,
        "seed": seed,
        "seconds_to_475": None if first is None else round(elapsed[first], 2),
        "env_steps_to_475": None if first is None else int(steps[first]),
        "update_loop_steps_per_second": round(statistics.mean(result.column(STEPS_PER_SECOND))),
        "overall_steps_per_second": round(result.env_steps / wall),
        "wall_seconds": round(wall, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runners", nargs="+", default=["dev", "local"], choices=["dev", "local"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings to change")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    importlib.import_module("maze_impala.train.setup")  # torch, which train imports on its first call: not in a run
    rows = []
    header = (
        f"{'runner':<7}{'seed':>5}{'s to 475':>10}{'steps to 475':>14}{'steps/s':>10}{'overall/s':>11}{'wall s':>8}"
    )
    print(header)
    for runner in args.runners:
        for seed in args.seeds:
            row = run_once(runner, seed, overrides)
            rows.append(row)
            print(
                f"{runner:<7}{seed:>5}{row['seconds_to_475']!s:>10}{row['env_steps_to_475']!s:>14}"
                f"{row['update_loop_steps_per_second']:>10}{row['overall_steps_per_second']:>11}{row['wall_seconds']:>8}",
                flush=True,
            )
    for runner in args.runners:
        times = [r["seconds_to_475"] for r in rows if r["runner"] == runner and r["seconds_to_475"] is not None]
        rates = [r["update_loop_steps_per_second"] for r in rows if r["runner"] == runner]
        reached = f"{len(times)}/{len(args.seeds)} reached 475"
        median = f"median {statistics.median(times):.1f} s (range {min(times):.1f}-{max(times):.1f})" if times else ""
        print(f"{runner}: {reached}; {median}; median {statistics.median(rates):,.0f} env steps/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
