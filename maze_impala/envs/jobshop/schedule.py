"""A job-shop schedule built one dispatch at a time, from a conflict set of jobs whose next operation may go next.

Two conflict sets (``mode``), the two classic ways of generating schedules:

- ``nondelay``: the operations that can start earliest, at ``t*``, on the machine of the first of them. No machine
  is ever left idle while an operation waits for it (a non-delay schedule).
- ``active``: Giffler and Thompson's. The operation that could complete first fixes a machine and a time ``t*``; the
  jobs whose next operation runs on that machine and could start before ``t*`` form the set. Every active schedule
  (no operation can start earlier without delaying another) can be built, an optimal one among them.

A dispatched operation starts as early as its job and its machine allow. Decisions whose set holds one job are taken
at once (:meth:`Schedule.advance`). The dispatching rules of the literature choose from the same set (:data:`RULES`).
Non-delay schedules need not contain an optimum, yet on Taillard's instances every rule does better in them
(docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from maze_impala.envs.jobshop.instances import Instance

MODES = ("nondelay", "active")
"""The conflict sets a :class:`Schedule` dispatches from."""


class Schedule:
    """The state of one instance's schedule: each job's next operation and ready time, each machine's ready time."""

    def __init__(self, instance: Instance, mode: str = "nondelay"):
        if mode not in MODES:
            raise ValueError(f"conflict set mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.instance, self.mode = instance, mode
        jobs, machines = instance.n_jobs, instance.n_machines
        self.next_op = np.zeros(jobs, dtype=np.int64)
        self.job_ready = np.zeros(jobs, dtype=np.int64)
        self.machine_ready = np.zeros(machines, dtype=np.int64)
        self.machine_busy = np.zeros(machines, dtype=np.int64)
        self.starts = np.full((jobs, machines), -1, dtype=np.int64)
        """Start time of each operation (job, position in the job); -1 until scheduled."""
        self.remaining_work = instance.durations.sum(axis=1).astype(np.int64)
        self.machine_remaining = np.bincount(
            instance.machines.ravel(), weights=instance.durations.ravel(), minlength=machines
        ).astype(np.int64)
        self.dispatched = 0
        self.conflict = np.zeros(jobs, dtype=bool)
        self.time = 0
        """``t*`` of the current decision: the earliest start (nondelay) or completion (active) of a next operation."""
        self._find_conflict()

    @property
    def done(self) -> bool:
        return self.dispatched == self.instance.machines.size

    @property
    def makespan(self) -> int:
        """The latest completion of the operations scheduled so far (the makespan once :attr:`done`)."""
        return int(self.job_ready.max())

    def open_jobs(self) -> np.ndarray:
        return self.next_op < self.instance.n_machines

    def next_machines(self) -> np.ndarray:
        """The machine of each job's next operation (a finished job's last one)."""
        position = np.minimum(self.next_op, self.instance.n_machines - 1)
        return self.instance.machines[np.arange(self.instance.n_jobs), position]

    def next_durations(self) -> np.ndarray:
        """The processing time of each job's next operation (0 for a finished job)."""
        position = np.minimum(self.next_op, self.instance.n_machines - 1)
        durations = self.instance.durations[np.arange(self.instance.n_jobs), position]
        return np.where(self.open_jobs(), durations, 0)

    def earliest_starts(self) -> np.ndarray:
        return np.maximum(self.job_ready, self.machine_ready[self.next_machines()])

    def _find_conflict(self) -> None:
        if self.done:
            self.conflict[:] = False
            return
        open_jobs, machines = self.open_jobs(), self.next_machines()
        starts = self.earliest_starts()
        if self.mode == "nondelay":
            earliest = np.where(open_jobs, starts, np.iinfo(np.int64).max)
            first = int(np.argmin(earliest))
            self.time = int(earliest[first])
            self.conflict = open_jobs & (machines == machines[first]) & (starts == self.time)
            return
        completions = np.where(open_jobs, starts + self.next_durations(), np.iinfo(np.int64).max)
        first = int(np.argmin(completions))
        self.time = int(completions[first])
        self.conflict = open_jobs & (machines == machines[first]) & (starts < self.time)

    def dispatch(self, job: int) -> None:
        """Starts ``job``'s next operation as early as possible; ``job`` must be in the conflict set."""
        if not self.conflict[job]:
            raise ValueError(f"job {job} is not in the conflict set {np.flatnonzero(self.conflict).tolist()}")
        position = int(self.next_op[job])
        machine = int(self.instance.machines[job, position])
        duration = int(self.instance.durations[job, position])
        start = max(int(self.job_ready[job]), int(self.machine_ready[machine]))
        self.starts[job, position] = start
        self.job_ready[job] = self.machine_ready[machine] = start + duration
        self.machine_busy[machine] += duration
        self.remaining_work[job] -= duration
        self.machine_remaining[machine] -= duration
        self.next_op[job] += 1
        self.dispatched += 1
        self._find_conflict()

    def advance(self) -> None:
        """Takes every decision that has one choice, until one has several or the schedule is done."""
        while not self.done and self.conflict.sum() == 1:
            self.dispatch(int(np.argmax(self.conflict)))

    def estimate(self) -> int:
        """A lower bound of the final makespan given the schedule so far: the latest of each job's ready time plus
        its work left, and of each machine's ready time plus its work left (the makespan itself once done)."""
        jobs = self.job_ready + self.remaining_work
        machines = self.machine_ready + self.machine_remaining
        return int(max(jobs.max(), machines.max()))

    def machine_idle(self) -> np.ndarray:
        """Each machine's idle time until the makespan."""
        return self.makespan - self.machine_busy


def _mwkr(s: Schedule) -> np.ndarray:
    return s.remaining_work.astype(float)


def _mor(s: Schedule) -> np.ndarray:
    return (s.instance.n_machines - s.next_op).astype(float)


def _spt(s: Schedule) -> np.ndarray:
    return -s.next_durations().astype(float)


def _fifo(s: Schedule) -> np.ndarray:
    return -s.job_ready.astype(float)


RULES: dict[str, Callable[[Schedule], np.ndarray]] = {"MWKR": _mwkr, "MOR": _mor, "SPT": _spt, "FIFO": _fifo}
"""Dispatching rules as priorities (the highest in the conflict set goes first, ties to the lower job index): most
work remaining, most operations remaining, shortest processing time, first in first out (the job ready first)."""


def rule_choice(schedule: Schedule, rule: str) -> int:
    """The job that ``rule`` dispatches next."""
    priority = np.where(schedule.conflict, RULES[rule](schedule), -np.inf)
    return int(np.argmax(priority))


def dispatch_by_rule(instance: Instance, rule: str, mode: str = "nondelay") -> Schedule:
    """The whole schedule that ``rule`` builds from ``mode``'s conflict sets."""
    if rule not in RULES:
        raise ValueError(f"unknown dispatching rule {rule!r}; one of {', '.join(RULES)}")
    schedule = Schedule(instance, mode)
    while not schedule.done:
        schedule.dispatch(rule_choice(schedule, rule))
    return schedule
