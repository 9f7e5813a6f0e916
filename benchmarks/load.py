"""Training speed on a busy machine: each shipped family quiet and beside busy programs, alternating.

    python benchmarks/load.py                              # every family, loads 0 1 2, one round
    python benchmarks/load.py --families minatar lstm --loads 0 2 --rounds 2
    python benchmarks/load.py --families minatar lstm --against runner.learner_cores=2   # beside a pinned setting
    python benchmarks/load.py --families local_cartpole --against algorithm.n_sgd_minibatches=4  # another setting

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
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from harness import Load, round_order

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, train
from maze_impala.config.workloads import shipped_env, shipped_model
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey

RATE = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()
THREADS = StatKey.of(RunEvents.learner_threads, "mean", "train").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()
EPOCH = StatKey.of(RunEvents.epoch_seconds, "last", "train").column()
QUIET = OutputConfig(console=False, tensorboard=False, progress=False, plot=False, csv=False)
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


@dataclass
class Trace:
    """One run's epochs: training env steps/s, the learner's mean threads, and when each epoch began and ended
    (seconds from the run's start, its evaluation included)."""

    rates: list[float]
    threads: list[float]
    begins: list[float]
    ends: list[float]

    def rate(self, epochs: str) -> float:
        """``first``: the first epoch's rate; ``later``: the median of the epochs after it."""
        return self.rates[0] if epochs == "first" or len(self.rates) == 1 else statistics.median(self.rates[1:])

    def mean_threads(self, epochs: str) -> float:
        return self.threads[0] if epochs == "first" or len(self.threads) == 1 else statistics.mean(self.threads[1:])

    def recovery(self, stopped: float, quiet: float, share: float = 0.8) -> float | None:
        """Seconds from ``stopped`` (the load's end) to the end of the first epoch begun after it at ``share`` of
        ``quiet``'s rate or faster; None: none was."""
        for rate, begin, end in zip(self.rates, self.begins, self.ends):
            if begin >= stopped and rate >= share * quiet:
                return end - stopped
        return None


def run(family: Family, epochs: int, settings: dict[str, Any], load: Load) -> Trace:
    """One run of ``family`` beside ``load`` (started with the run, stopped by its own timer if it has one)."""
    env, algorithm = shipped_env(family.env)
    algorithm = {
        **algorithm,
        **family.algorithm,
        **settings.get("algorithm", {}),
        "n_epochs": epochs,
        "epoch_length": family.epoch_length,
        "rollout_evaluator": {**algorithm.get("rollout_evaluator", {}), "n_episodes": 1},
    }
    runner = {"type": family.runner, **settings.get("runner", {})}
    model = {**shipped_model(family.env), **family.model, **settings.get("model", {})}
    with tempfile.TemporaryDirectory() as out, load:
        result = train(
            env,
            ImpalaAlgorithmConfig(**algorithm),
            ModelConfig(**model),
            RunnerConfig(**runner),
            output=QUIET,
            output_dir=out,
            seed=1,
        )
    ends = [float(e) for e in result.column(ELAPSED)]
    begins = [end - float(seconds) for end, seconds in zip(ends, result.column(EPOCH))]
    return Trace([float(r) for r in result.column(RATE)], [float(t) for t in result.column(THREADS)], begins, ends)


def _settings(changes: list[str]) -> dict[str, dict[str, Any]]:
    """``runner.KEY=VALUE``, ``model.KEY=VALUE`` and ``algorithm.KEY=VALUE`` as nested settings (values as YAML)."""
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
        help="runner, model or algorithm settings of every run (values as YAML)",
    )
    parser.add_argument(
        "--against",
        nargs="+",
        action="append",
        default=[],
        metavar="runner.KEY=VALUE",
        help="also run every cell with these settings, alternating with the shipped ones (repeatable; e.g. "
        "--against runner.learner_cores=1 --against runner.learner_cores=2: each thread count pinned)",
    )
    parser.add_argument(
        "--first-epoch",
        action="store_true",
        help="report the first epoch's rate (how fast a run starts), not the median of the epochs after it",
    )
    parser.add_argument(
        "--stop-load-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop the busy programs this many seconds into each loaded run, and report how long after that the "
        "run was back at 0.8x its quiet rate (needs load 0 among --loads)",
    )
    args = parser.parse_args()
    variants = {"shipped": _settings(args.set)}
    for against in args.against:
        variants[" ".join(against)] = {**variants["shipped"], **_settings(against)}
    epochs = "first" if args.first_epoch else "later"
    print(f"{os.cpu_count()} cores; loads {args.loads}; {args.rounds} round(s) of {args.epochs} epochs", flush=True)
    rows, recoveries = [], []
    for name in args.families:
        family = FAMILIES[name]
        if args.epoch_length:
            family = replace(family, epoch_length=args.epoch_length)
        traces: dict[tuple[str, int], list[Trace]] = {(v, load): [] for v in variants for load in args.loads}
        for index in range(args.rounds):
            for position, load in enumerate(round_order(args.loads, index)):
                for variant in round_order(list(variants), index + position):
                    trace = run(family, args.epochs, variants[variant], Load(load, args.stop_load_after))
                    traces[variant, load].append(trace)
                    print(
                        f"{name} round {index + 1} load {load} {variant}: {trace.rate(epochs):,.0f} env steps/s, "
                        f"learner threads {trace.mean_threads(epochs):.2f}; epochs "
                        + ", ".join(
                            f"{r:,.0f} ({b:.0f}-{e:.0f} s)" for r, b, e in zip(trace.rates, trace.begins, trace.ends)
                        ),
                        flush=True,
                    )
        for variant in variants:
            rate = {load: statistics.median(t.rate(epochs) for t in traces[variant, load]) for load in args.loads}
            quiet = rate[args.loads[0]]
            cells = [
                f"{rate[load]:,.0f} ({rate[load] / quiet:.2f}x, "
                f"{statistics.mean(t.mean_threads(epochs) for t in traces[variant, load]):.1f} threads)"
                for load in args.loads
            ]
            rows.append(f"| {name} | {variant} | " + " | ".join(cells) + " |")
            if args.stop_load_after is not None and 0 in args.loads:
                quiet_later = statistics.median(t.rate("later") for t in traces[variant, 0])
                for load in (n for n in args.loads if n):
                    found = [t.recovery(args.stop_load_after, quiet_later) for t in traces[variant, load]]
                    recoveries.append(
                        f"| {name} | {variant} | {load} | "
                        + ", ".join("never" if f is None else f"{f:.1f}" for f in found)
                        + " |"
                    )
    print(f"\n{'the first epoch' if args.first_epoch else 'the epochs after the first'}, medians over the rounds")
    print("| family | settings | " + " | ".join(f"load {load}" for load in args.loads) + " |")
    print("|---|---|" + "---|" * len(args.loads))
    print("\n".join(rows))
    if recoveries:
        print(f"\nseconds from the load's stop ({args.stop_load_after:.0f} s in) to the end of an epoch at 0.8x quiet")
        print("| family | settings | load | each round |\n|---|---|---|---|")
        print("\n".join(recoveries))


if __name__ == "__main__":
    main()
