"""Facts about the host this process runs on: its usable cores, the threads a user pinned, and the machine's load.

The ground floor: nothing of the package is imported here, nor torch (its threads are set in :mod:`~.startup`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The environment variables that set a process's math threads: an actor process gets 1 in each; the first two, the
ones torch reads, set by a user pin a learner's threads."""


def usable_cores(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a scheduler's allocation), capped by the
    CPU quota of its cgroup (a container's ``--cpus``), at least 1. ``os.cpu_count()`` counts the machine's."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # macOS
    quota = cgroup_quota(cgroup)
    return max(1, min(cores, math.ceil(quota)) if quota is not None else cores)


def cgroup_quota(root: Path) -> float | None:
    """The CPU quota in cores of the cgroup at ``root`` (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), None if none."""
    v1 = root / "cpu" / "cpu.cfs_quota_us"
    with contextlib.suppress(OSError, ValueError):
        if (root / "cpu.max").is_file():
            quota, period = (root / "cpu.max").read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        if v1.is_file():
            quota_us = int(v1.read_text())
            return None if quota_us <= 0 else quota_us / int((root / "cpu" / "cpu.cfs_period_us").read_text())
    return None


def pinned_by_environment() -> tuple[int, str] | None:
    """``(threads, "OMP_NUM_THREADS=1 in the environment")`` when the environment pins torch's threads, or None."""
    for name in THREAD_VARIABLES[:2]:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value), f"{name}={value} in the environment"
    return None


@dataclass(frozen=True)
class LoadSample:
    """One reading of the machine's load (:meth:`LoadMeter.sample`), each figure None where the system does not say:
    when (``time.perf_counter``), the one-minute load average (runnable processes, a minute late), the threads running
    or waiting for a core now (the reader's included), and the idle core-seconds of this process's cores since boot."""

    seconds: float
    average: float | None
    runnable: int | None
    idle: float | None


class LoadMeter:
    """Reads the machine's load from ``/proc``: the load average and runnable threads (``loadavg``), and the idle
    time of this process's cores (``stat``: a core a busy program has just left shows there at once), :attr:`available`
    where the file is readable and no cgroup quota shares the cores with others (their idle time is not ours)."""

    def __init__(self, stat: Path = Path("/proc/stat"), cgroup: Path = Path("/sys/fs/cgroup")):
        self.stat = stat
        self.cpus = {f"cpu{n}" for n in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else set()
        self.tick = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        quota = cgroup_quota(cgroup)
        self.available = bool(self.cpus) and (quota is None or quota >= len(self.cpus)) and self.read() is not None

    def sample(self, idle: bool = True) -> LoadSample:
        """The load now, in one reading of each file (``idle``: of ``/proc/stat`` too)."""
        average, runnable = None, None
        try:
            fields = Path("/proc/loadavg").read_text().split()
            average, runnable = float(fields[0]), int(fields[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            with contextlib.suppress(AttributeError, OSError):
                average = os.getloadavg()[0]
        return LoadSample(time.perf_counter(), average, runnable, self.read() if idle and self.available else None)

    def busy_since(self, then: LoadSample, own: float = 1.0, shortest: float = 0.2) -> float | None:
        """The cores busy with other work since ``then``: this process's cores less those idle and less ``own`` (the
        cores this process kept busy meanwhile: its one thread building a run); None where less than ``shortest``
        seconds have passed (``/proc/stat`` counts in 10 ms ticks) or the idle time is unknown."""
        idle, seconds = self.read(), time.perf_counter() - then.seconds
        if idle is None or then.idle is None or seconds < shortest:
            return None
        return max(0.0, len(self.cpus) - (idle - then.idle) / seconds - own)

    def load(self, since: LoadSample | None = None) -> float | None:
        """The machine's load: its load average, or, if larger, the cores busy with other work since ``since`` (a
        program started a moment ago shows there at once, in the average only a minute later); None if neither."""
        busy = self.busy_since(since) if since is not None else None
        known = [value for value in (self.sample(idle=False).average, busy) if value is not None]
        return max(known) if known else None

    def read(self) -> float | None:
        """Idle core-seconds of this process's cores since boot (idle and waiting on I/O); None if unreadable."""
        try:
            lines = (line.split() for line in self.stat.read_text().splitlines() if line.startswith("cpu"))
            return sum(int(fields[4]) + int(fields[5]) for fields in lines if fields[0] in self.cpus) / self.tick
        except (OSError, ValueError, IndexError):
            return None
