"""Facts about the host this process runs on, and the one place that sets torch's thread count.

The ground floor: nothing of the package is imported here, and torch only where a caller asks for it, so that an
actor whose policy acts in numpy never loads it. The learner's thread rule (:mod:`maze_impala.impala.threads`), the
pace watch (:mod:`maze_impala.train.pace`) and the rollout CLI's worker count all read the host through these.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PIN_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Environment variables whose value pins a learner's threads (a user's setting is kept)."""


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
    """``(threads, "OMP_NUM_THREADS=1")`` when the environment pins the threads; None otherwise."""
    for name in PIN_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value), f"{name}={value}"
    return None


def machine_load(since: IdleMark | None = None) -> float | None:
    """The machine's load: its one-minute load average (runnable processes), or, if larger, the cores busy with other
    work since ``since`` (:meth:`IdleMeter.busy_since`: a program started a moment ago shows there at once, in the
    average only a minute later); None where the system says neither."""
    try:
        average: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        average = None
    busy = since.meter.busy_since(since) if since is not None else None
    known = [value for value in (average, busy) if value is not None]
    return max(known) if known else None


def runnable() -> int | None:
    """The threads of the machine running or waiting for a core now (``/proc/loadavg``), this one included; None
    where there is no such file. The load average would say the same a minute late."""
    try:
        with open("/proc/loadavg") as file:
            return int(file.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class IdleMark:
    """A reading of :class:`IdleMeter` to measure from: when, and the idle core-seconds then."""

    meter: IdleMeter
    seconds: float
    idle: float


class IdleMeter:
    """The idle time of the cores this process may use, from ``/proc/stat``: :meth:`read` gives their idle
    core-seconds so far, the difference of two reads those idle between them (a core a busy program has just left
    shows here at once, where the load average follows in a minute). Unavailable (:attr:`available` false) where
    there is no such file, or where a cgroup's CPU quota shares the cores with others (their idle time is not this
    process's to take)."""

    def __init__(self, stat: Path = Path("/proc/stat"), cgroup: Path = Path("/sys/fs/cgroup")):
        self.stat = stat
        try:
            self.cpus = {f"cpu{n}" for n in os.sched_getaffinity(0)}
            self.tick = float(os.sysconf("SC_CLK_TCK"))
        except (AttributeError, OSError, ValueError):
            self.cpus, self.tick = set(), 100.0
        quota = cgroup_quota(cgroup)
        self.available = bool(self.cpus) and (quota is None or quota >= len(self.cpus)) and self.read() is not None

    def mark(self) -> IdleMark | None:
        """Now and the idle core-seconds so far, for :meth:`busy_since`; None where unavailable."""
        idle = self.read() if self.available else None
        return IdleMark(self, time.perf_counter(), idle) if idle is not None else None

    def busy_since(self, mark: IdleMark, own: float = 1.0, shortest: float = 0.2) -> float | None:
        """The cores busy with other work since ``mark``: this process's cores less those idle and less ``own``
        (the cores this process kept busy meanwhile: its one thread building a run); None where less than
        ``shortest`` seconds have passed (``/proc/stat`` counts in 10 ms ticks) or the file cannot be read."""
        idle, seconds = self.read(), time.perf_counter() - mark.seconds
        if idle is None or seconds < shortest:
            return None
        return max(0.0, len(self.cpus) - (idle - mark.idle) / seconds - own)

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


def set_torch_threads(threads: int, load: bool = False) -> None:
    """Set torch's intra-op threads in this process to ``threads``: where torch is loaded already, or, with
    ``load``, after loading it (an actor acting in numpy leaves it unloaded)."""
    torch = importlib.import_module("torch") if load else sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)


def torch_threads() -> int | None:
    """torch's intra-op threads in this process; None where torch is not loaded."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def missing_device(key: str, device: str | None, device_count: int | None = None) -> str | None:
    """What is wrong with a GPU ``device`` that torch does not see here, for ``key`` (``algorithm.device``,
    ``runner.actor_device``), named as given; None where the device is fine (``device_count``: the GPUs torch
    sees; torch is asked only for a ``cuda`` device)."""
    if device is None or not device.startswith("cuda"):
        return None
    if device_count is None:
        import torch

        device_count = torch.cuda.device_count()
    if (int(device[5:]) if device.startswith("cuda:") else 0) < device_count:
        return None
    seen = "no GPU" if device_count == 0 else f"{device_count} GPU(s)"
    instead = (
        "learn on the CPU (algorithm.device=cpu)"
        if key == "algorithm.device"
        else ("act on the CPU (drop runner.actor_device)")
    )
    return f"{key}={device}, and torch sees {seen} here: {instead} or name a GPU that torch sees"
