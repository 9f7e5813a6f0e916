"""How long ``maze-run`` takes from process start: ``--help``, a refused key and a 1-update CartPole run
(``runner=dev``), the median over ``--rounds``; with ``--old-python``, another installed version alternating with
this one, round by round, and the ratio of their medians.

    python benchmarks/startup.py --rounds 5
    python -m venv --system-site-packages /tmp/old && /tmp/old/bin/pip install --no-deps <a checkout of the other>
    python benchmarks/startup.py --rounds 5 --old-python /tmp/old/bin/python

Each command runs in a fresh process in an empty directory, as a user types it (``maze-run`` is
``python -c "from maze_impala.cli import main; main()"``). This machine's speed moves from minute to minute: a plain
Python loop of 10^7 additions is timed at the end, so that figures taken at different moments can be told apart.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

CASES = {
    "help": ["--help"],
    "refused": ["-cn", "conf_train", "seeed=2"],
    "train": ["-cn", "conf_train", "runner=dev", "algorithm.n_epochs=1", "algorithm.epoch_length=1"],
}
"""What is timed: ``maze-run --help``, a key that does not exist (refused before Hydra) and a 1-update run."""
TITLES = {"help": "`maze-run --help`", "refused": "a refused key (`seeed=2`)", "train": "a 1-update CartPole run"}
MAIN = "from maze_impala.cli import main; main()"


def seconds(python: str, args: list[str], expect_ok: bool) -> float:
    """One command's seconds from process start to its end."""
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        proc = subprocess.run([python, "-c", MAIN, *args], cwd=directory, capture_output=True, text=True)
        took = time.perf_counter() - started
    if (proc.returncode == 0) != expect_ok:
        raise SystemExit(f"{python} maze-run {' '.join(args)} exited with {proc.returncode}:\n{proc.stderr[-2000:]}")
    return took


def loop_seconds() -> float:
    started, total = time.perf_counter(), 0
    for i in range(10**7):
        total += i
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--old-python", help="the interpreter of another installed version, measured alternately")
    args = parser.parse_args()
    versions = {"this": sys.executable, **({"old": args.old_python} if args.old_python else {})}
    times: dict[tuple[str, str], list[float]] = {(case, v): [] for case in args.cases for v in versions}
    for round_ in range(args.rounds):
        order = list(versions) if round_ % 2 == 0 else list(reversed(versions))
        for case in args.cases:
            for version in order:
                times[case, version].append(seconds(versions[version], CASES[case], expect_ok=case != "refused"))
    old = " | old | this / old" if args.old_python else ""
    print(f"| command | this version, median s{old} |")
    print("|---|---" + ("|---|---" if args.old_python else "") + "|")
    for case in args.cases:
        this = statistics.median(times[case, "this"])
        row = f"| {TITLES[case]} | {this:.2f}"
        if args.old_python:
            before = statistics.median(times[case, "old"])
            row += f" | {before:.2f} | {this / before:.2f}"
        print(row + " |")
    print(f"\n{args.rounds} rounds; a Python loop of 10^7 additions took {loop_seconds():.2f} s after them")


if __name__ == "__main__":
    main()
