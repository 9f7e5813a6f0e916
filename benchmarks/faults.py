"""Fault injection during CartPole training with ``runner=local``: what random actor deaths and a stopped actor cost.

python benchmarks/faults.py                          # 4 actors, a SIGKILL every 2 s, then a SIGSTOP run
python benchmarks/faults.py --every 1 --seeds 1 2 3

Three runs per seed with the shipped settings (``algorithm=impala_cartpole``, 4 actors):
undisturbed; a random actor SIGKILLed every ``--every`` seconds; one actor SIGSTOPped
once. For each: whether the mean training return reached 475 within the env-step
budget, env steps per second of training, kills, restarts, the time from a kill to its
detection and to the restarted actor's first rollout, and the SIGSTOP's detection time.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from harness import QUIET

from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, train
from maze_impala.events.api import mean
from maze_impala.events.interfaces import ActorEvents, EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey

RETURN = StatKey.of(EpisodeEvents.episode_return, mean).column()
RATE = StatKey.of(RunEvents.env_steps_per_second, "last").column()


def restarts_column(cause: str) -> str:
    return StatKey.of(ActorEvents.restarted, "sum", group=f"cause={cause}").column()


def actor_pids() -> list[int]:
    """This process' actor processes."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and b"spawn_main" in cmdline:
            pids.append(int(stat.parent.name))
    return pids


class Restarts(logging.Handler):
    """Times of the pool's restart and recovery log lines."""

    def __init__(self) -> None:
        super().__init__()
        self.detected: list[float] = []
        self.recovered: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "restarting it" in record.getMessage():
            self.detected.append(time.monotonic())
        elif "is back" in record.getMessage():
            self.recovered.append(time.monotonic())


def run(seed: int, fault: str, every: float) -> dict:
    restarts = Restarts()
    logging.getLogger("maze_impala").addHandler(restarts)
    logging.getLogger("maze_impala").setLevel(logging.INFO)
    kills: list[float] = []
    done = threading.Event()

    def inject() -> None:
        rng = random.Random(seed)
        while not done.wait(every if fault == "kill" else 8.0):
            pids = actor_pids()
            if not pids:
                continue
            if fault == "kill":
                os.kill(rng.choice(pids), signal.SIGKILL)
                kills.append(time.monotonic())
            elif fault == "stop" and not kills:
                os.kill(rng.choice(pids), signal.SIGSTOP)
                kills.append(time.monotonic())

    injector = threading.Thread(target=inject, daemon=True)
    if fault != "none":
        injector.start()
    algorithm = ImpalaAlgorithmConfig(eps=1e-3, num_actors=4)
    try:
        with tempfile.TemporaryDirectory() as out:
            result = train(
                "CartPole-v1",
                algorithm,
                runner=RunnerConfig("local", max_restarts=1000),
                output=QUIET,
                seed=seed,
                output_dir=out,
            )
    finally:
        done.set()
        logging.getLogger("maze_impala").removeHandler(restarts)
    returns, steps_per_s = result.column(RETURN), result.column(RATE)
    restarted = sum(v for c in ("died", "hung") for v in result.column(restarts_column(c)) if v == v)
    detection = [d - k for k, d in zip(kills, restarts.detected)]
    recovery = [r - k for k, r in zip(kills, restarts.recovered)]
    return {
        "seed": seed,
        "fault": fault,
        "reached_475": max(returns) >= 475,
        "env_steps_per_s": statistics.median(steps_per_s[1:]),
        "faults": len(kills),
        "restarts": int(restarted),
        "detect_s": statistics.median(detection) if detection else float("nan"),
        "recover_s": statistics.median(recovery) if recovery else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[1])
    parser.add_argument("--every", type=float, default=2.0, help="seconds between kills")
    parser.add_argument("--faults", nargs="+", default=["kill", "stop"], choices=["kill", "stop"])
    args = parser.parse_args()
    rows = [run(seed, fault, args.every) for seed in args.seeds for fault in ("none", *args.faults)]
    print(
        f"{'seed':>4} {'fault':>5} {'475':>5} {'steps/s':>9} {'faults':>6} {'restarts':>8} {'detect s':>9} "
        f"{'first rollout s':>15}"
    )
    for r in rows:
        print(
            f"{r['seed']:>4} {r['fault']:>5} {r['reached_475']!s:>5} {r['env_steps_per_s']:>9,.0f} {r['faults']:>6} "
            f"{r['restarts']:>8} {r['detect_s']:>9.2f} {r['recover_s']:>15.2f}"
        )
    for seed in args.seeds:
        base = next(r for r in rows if r["seed"] == seed and r["fault"] == "none")["env_steps_per_s"]
        for fault in args.faults:
            rate = next(r for r in rows if r["seed"] == seed and r["fault"] == fault)["env_steps_per_s"]
            print(f"seed {seed}, {fault}: {100 * (1 - rate / base):.1f}% of the undisturbed throughput lost")


if __name__ == "__main__":
    main()
