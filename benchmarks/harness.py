"""What the benchmarks share: quiet output, running the installed CLI, alternating rounds and a busy program.

A benchmark imports it as a sibling module (``benchmarks/`` is on ``sys.path`` when a script in it runs)::

    from harness import QUIET, alternating, maze_run

On a shared machine speed drifts from minute to minute, so the benchmarks compare settings in rounds that
alternate their order (:func:`alternating`) and report each one's median over its rounds.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TypeVar

from maze_impala import OutputConfig

QUIET = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
"""A run's output without the console, TensorBoard, the progress line or the plots (``stats.csv`` is kept)."""

Case = TypeVar("Case", bound=Hashable)


def maze_run(args: Sequence[str], cwd: Path | str) -> None:
    """``maze-run *args`` of the installed package in ``cwd``; a failed run raises with the end of its stderr."""
    proc = subprocess.run([sys.executable, "-m", "maze_impala", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"maze-run {' '.join(args)} failed:\n{proc.stderr[-3000:]}")


def round_order(cases: Sequence[Case], index: int) -> list[Case]:
    """The cases in round ``index``'s order: rotated by one each round, so that each case goes first equally often
    (with two cases: forwards, then backwards)."""
    shift = index % len(cases) if cases else 0
    return list(cases[shift:]) + list(cases[:shift])


def alternating(
    rounds: int,
    cases: Sequence[Case],
    measure: Callable[[Case], float],
    report: Callable[[int, Case, float], None] | None = None,
) -> dict[Case, list[float]]:
    """Each case measured once in each of ``rounds`` rounds, in :func:`round_order`; ``report(round, case,
    figure)`` hears each figure as it comes, so that a run cut short still shows what it measured."""
    figures: dict[Case, list[float]] = {case: [] for case in cases}
    for index in range(rounds):
        for case in round_order(cases, index):
            figures[case].append(measure(case))
            if report is not None:
                report(index, case, figures[case][-1])
    return figures


def medians(figures: dict[Case, list[float]]) -> dict[Case, float]:
    """Each case's median over its rounds."""
    return {case: statistics.median(values) for case, values in figures.items()}


SPIN = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    for _ in range(100000): pass\n"
"""A busy program: one core spun until its parent goes."""


class Load:
    """``n`` busy processes while the ``with`` block runs, or until ``stop_after`` seconds into it."""

    def __init__(self, n: int, stop_after: float | None = None):
        self.n, self.stop_after, self.processes = n, stop_after, []
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Load:
        self.processes = [subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid())]) for _ in range(self.n)]
        if self.stop_after is not None and self.n:
            self._timer = threading.Timer(self.stop_after, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.stop()
