"""Facts about the host this process runs on: its usable cores, the threads a user pinned, and the machine's load.

The ground floor: nothing of the package is imported here, nor torch. The learner's thread rule
(:mod:`maze_impala.impala.threads`), the pace watch (:mod:`maze_impala.train.pace`) and the rollout CLI's worker count
read the host through these; torch's thread count is set at the door (:mod:`maze_impala.startup`).
"""

from __future__ import annotations

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
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cores = os.cpu_count() or 1
    quota = cgroup_quota(cgroup)
    return max(1, min(cores, math.ceil(quota)) if quota is not None else cores)


def cgroup_quota(root: Path) -> float | None:
    """The CPU quota in cores of the cgroup at ``root`` (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), None if none."""
    try:
        v2 = root / "cpu.max"
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1 = root / "cpu" / "cpu.cfs_quota_us"
        if v1.is_file():
            quota_us = int(v1.read_text())
            return None if quota_us <= 0 else quota_us / int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None


def pinned_by_environment() -> tuple[int, str] | None:
    """``(threads, "OMP_NUM_THREADS=1")`` when the environment pins torch's threads; None otherwise."""
    for name in THREAD_VARIABLES[:2]:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value), f"{name}={value}"
    return None


@dataclass(frozen=True)
class LoadSample:
    """One reading of the machine's load (:meth:`LoadMeter.sample`); None where the system does not say."""

    seconds: float
    """When (``time.perf_counter``)."""
    average: float | None
    """The one-minute load average: runnable processes, a minute late."""
    runnable: int | None
    """The threads running or waiting for a core now, the reader's included."""
    idle: float | None
    """Idle core-seconds of this process's cores since boot (idle and waiting on I/O)."""


class LoadMeter:
    """Reads the machine's load from ``/proc``: the load average and runnable threads (``loadavg``), and the idle
    time of this process's cores (``stat``: a core a busy program has just left shows there at once). The idle time
    is :attr:`available` only where the file is readable and no cgroup quota shares the cores with others (their idle
    time is not this process's to take)."""

    def __init__(self, stat: Path = Path("/proc/stat"), cgroup: Path = Path("/sys/fs/cgroup")):
        self.stat = stat
        try:
            self.cpus = {f"cpu{n}" for n in os.sched_getaffinity(0)}
            self.tick = float(os.sysconf("SC_CLK_TCK"))
        except (AttributeError, OSError, ValueError):
            self.cpus, self.tick = set(), 100.0
        quota = cgroup_quota(cgroup)
        self.available = bool(self.cpus) and (quota is None or quota >= len(self.cpus)) and self.read() is not None

    def sample(self, idle: bool = True) -> LoadSample:
        """The load now, in one reading of each file (``idle``: of ``/proc/stat`` too)."""
        average: float | None
        runnable: int | None
        try:
            with open("/proc/loadavg") as file:
                fields = file.read().split()
            average, runnable = float(fields[0]), int(fields[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            runnable = None
            try:
                average = os.getloadavg()[0]
            except (AttributeError, OSError):
                average = None
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
            with open(self.stat) as file:
                idle = sum(
                    int(fields[4]) + int(fields[5])
                    for fields in (line.split() for line in file if line.startswith("cpu"))
                    if fields[0] in self.cpus
                )
        except (OSError, ValueError, IndexError):
            return None
        return idle / self.tick
