"""Two installed versions of maze_impala, alternating in one run: actors-only and training env steps/s on CartPole.

    python -m venv --system-site-packages /tmp/old
    /tmp/old/bin/pip install --no-deps <a checkout of the other version>
    python benchmarks/compare_versions.py --old-python /tmp/old/bin/python --old-benchmarks <that checkout>/benchmarks

Each round measures both versions one after the other, the order alternating from round to round, each in a
fresh process with its own ``benchmarks/throughput.py``: actors only (the shipped 2 actors x 32 envs, real
policy, rollouts discarded) for ``--seconds``, then training with ``runner=local`` (``--epochs`` epochs of 25
updates; the median over the epochs after the first). This machine's speed moves from minute to minute, so
only the ratios of figures taken side by side mean much: the medians over the rounds and their ratios are
printed at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROUND = """
import argparse, json, sys
sys.path.insert(0, sys.argv[1])
import throughput
if __name__ == "__main__":
    import torch  # imported before the timed parts, as the benchmarks do
    args = argparse.Namespace(env="CartPole-v1", hidden=[128, 128], num_actors=2, envs_per_actor=32,
                              n_rollout_steps=32, actors_batch_size=1, min_actors_batch_size=None, device="cpu")
    actors = throughput.actors_only(args, float(sys.argv[2]))
    training = throughput.training(args, "local", int(sys.argv[3]))
    print(json.dumps({"actors_only": actors, "training": training["env_steps_per_s"]}))
"""


def measure(python: str, benchmarks: Path, seconds: float, epochs: int) -> dict[str, float]:
    # from a directory without a source tree: each python imports the maze_impala installed in its environment
    proc = subprocess.run([python, "-c", ROUND, str(benchmarks), str(seconds), str(epochs)], capture_output=True,
                          text=True, cwd=tempfile.gettempdir())  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-python", required=True, help="the python of the environment holding the other version")
    parser.add_argument("--old-benchmarks", type=Path, required=True, help="that version's benchmarks/ folder")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of each actors-only measurement")
    parser.add_argument("--epochs", type=int, default=4, help="epochs of 25 updates of each training measurement")
    args = parser.parse_args()
    sides = {"old": (args.old_python, args.old_benchmarks), "new": (sys.executable, Path(__file__).parent)}
    results: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for index in range(args.rounds):
        for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
            python, benchmarks = sides[side]
            figures = measure(python, benchmarks.resolve(), args.seconds, args.epochs)
            for name, value in figures.items():
                results[side].setdefault(name, []).append(value)
            print(f"round {index} {side}: " + ", ".join(f"{k} {v:,.0f}" for k, v in figures.items()), flush=True)
    print()
    print("| env steps/s (median of rounds) | old | new | new / old |")
    print("|---|---|---|---|")
    for name in results["new"]:
        old, new = statistics.median(results["old"][name]), statistics.median(results["new"][name])
        print(f"| {name} | {old:,.0f} | {new:,.0f} | {new / old:.3f} |")


if __name__ == "__main__":
    main()
