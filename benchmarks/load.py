"""Training speed on a busy machine: each shipped family quiet and beside busy programs, alternating.

    python benchmarks/load.py                              # every family, loads 0 1 2, one round
    python benchmarks/load.py --families minatar lstm --loads 0 2 --rounds 2
    python benchmarks/load.py --families minatar lstm --against runner.learner_cores=2   # beside a pinned setting

A load of N is N processes that spin in a Python loop (``while True: pass``), as a browser tab or another job
would take a core; this script starts them before a run and stops them after it (they also end with this
process, however it ends). Each run trains the shipped ``env=<family>`` config for ``--epochs`` epochs of the
family's length here, with one evaluation episode per epoch, and reports the training env steps/s of the epochs
after the first (their median). The loads alternate within a round (0, 1, 2, then 2, 1, 0 in the next), and each
loaded rate is given as a ratio to the quiet rate of the same round.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, train
from maze_impala.config.workloads import shipped_env, shipped_model
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey

RATE = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()
THREADS = StatKey.of(RunEvents.learner_threads, "mean", "train").column()
QUIET = OutputConfig(console=False, tensorboard=False, progress=False, plot=False, csv=False)
SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(100000): pass\n"
"""A busy program that ends when its parent does (checked every few milliseconds)."""


@dataclass
class Family:
    """One shipped workload: its env config, the runner, the updates an epoch and model settings beside its own."""

    env: str
    runner: str = "local"
    epoch_length: int = 25
    model: dict[str, Any] = field(default_factory=dict)
    algorithm: dict[str, Any] = field(default_factory=dict)


FAMILIES = {
    "minatar": Family("minatar", epoch_length=6),
    "atari": Family("atari", epoch_length=8),
    "pixel_goal": Family("pixel_goal", epoch_length=25),
    "tictactoe": Family("tictactoe", epoch_length=10),
    "lstm": Family("stateless_cartpole", epoch_length=25, model={"recurrent": "lstm"}),
    "dev_cartpole": Family("gym_env", runner="dev", epoch_length=50),
    "local_cartpole": Family("gym_env", epoch_length=50),
}


class Load:
    """``n`` busy processes while the ``with`` block runs."""

    def __init__(self, n: int):
        self.n, self.processes = n, []

    def __enter__(self) -> Load:
        self.processes = [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def run(family: Family, epochs: int, settings: dict[str, Any]) -> tuple[float, float]:
    """The median training env steps/s of the epochs after the first, and the learner's mean threads."""
    env, algorithm = shipped_env(family.env)
    algorithm = {
        **algorithm,
        **family.algorithm,
        "n_epochs": epochs,
        "epoch_length": family.epoch_length,
        "rollout_evaluator": {**algorithm.get("rollout_evaluator", {}), "n_episodes": 1},
    }
    runner = {"type": family.runner, **settings.get("runner", {})}
    model = {**shipped_model(family.env), **family.model, **settings.get("model", {})}
    with tempfile.TemporaryDirectory() as out:
        result = train(
            env,
            ImpalaAlgorithmConfig(**algorithm),
            ModelConfig(**model),
            RunnerConfig(**runner),
            output=QUIET,
            output_dir=out,
            seed=1,
        )
    return statistics.median(result.column(RATE)[1:]), statistics.mean(result.column(THREADS)[1:])


def _settings(changes: list[str]) -> dict[str, dict[str, Any]]:
    """``runner.KEY=VALUE`` and ``model.KEY=VALUE`` as nested settings (values as YAML)."""
    settings: dict[str, dict[str, Any]] = {}
    for change in changes:
        key, value = change.split("=", 1)
        section, name = key.split(".", 1)
        settings.setdefault(section, {})[name] = yaml.safe_load(value)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--loads", nargs="+", type=int, default=[0, 1, 2], help="busy processes beside a run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--epoch-length", type=int, default=None, help="updates an epoch (default: the family's)")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="runner.KEY=VALUE",
        help="runner or model settings of every run (values as YAML)",
    )
    parser.add_argument(
        "--against",
        nargs="*",
        default=[],
        metavar="runner.KEY=VALUE",
        help="also run every cell with these settings, alternating with the shipped ones (e.g. "
        "runner.learner_cores=2: the threads before they followed the load)",
    )
    args = parser.parse_args()
    variants = {"shipped": _settings(args.set)}
    if args.against:
        variants[" ".join(args.against)] = {**variants["shipped"], **_settings(args.against)}
    print(f"{os.cpu_count()} cores; loads {args.loads}; {args.rounds} round(s) of {args.epochs} epochs", flush=True)
    rows = []
    for name in args.families:
        rates = {(v, load): [] for v in variants for load in args.loads}
        threads = {(v, load): [] for v in variants for load in args.loads}
        for index in range(args.rounds):
            for position, load in enumerate(args.loads if index % 2 == 0 else args.loads[::-1]):
                order = list(variants) if (index + position) % 2 == 0 else list(variants)[::-1]
                for variant in order:
                    with Load(load):
                        family = FAMILIES[name]
                        if args.epoch_length:
                            family = replace(family, epoch_length=args.epoch_length)
                        rate, mean_threads = run(family, args.epochs, variants[variant])
                    rates[variant, load].append(rate)
                    threads[variant, load].append(mean_threads)
                    print(
                        f"{name} round {index + 1} load {load} {variant}: {rate:,.0f} env steps/s, "
                        f"learner threads {mean_threads:.2f}",
                        flush=True,
                    )
        for variant in variants:
            quiet = statistics.median(rates[variant, args.loads[0]])
            cells = [
                f"{statistics.median(rates[variant, load]):,.0f} "
                f"({statistics.median(rates[variant, load]) / quiet:.2f}x, "
                f"{statistics.mean(threads[variant, load]):.1f} threads)"
                for load in args.loads
            ]
            rows.append(f"| {name} | {variant} | " + " | ".join(cells) + " |")
    print("\n| family | settings | " + " | ".join(f"load {load}" for load in args.loads) + " |")
    print("|---|---|" + "---|" * len(args.loads))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
