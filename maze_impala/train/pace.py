"""Telling the user, once, that training is starved: another program takes the cores it trains on."""

from __future__ import annotations

import os

from maze_impala.events.api import EventRecord, event_name
from maze_impala.events.interfaces import RunEvents
from maze_impala.machine import LoadMeter

SLOW_SHARE = 0.5
"""An epoch under this share of the run's best training rate counts as starved."""
THREADS = event_name(RunEvents.learner_threads)


class PaceWatch:
    """Watches the training rate epoch by epoch and says, once, when it starves: an epoch far below the run's best
    rate, or a machine that runs more than it has cores beyond what this run itself can keep busy (its actor processes
    on this machine, ``actor_cores``, and the learner's threads). It hears the learner's threads from the events of a
    tuned learner (``RunEvents.learner_threads``): its own cores count with the first it heard, 1 if none."""

    def __init__(self, actor_cores: float, cores: int | None = None):
        self.actor_cores, self.cores = actor_cores, cores or os.cpu_count() or 1
        self.best, self.said = 0.0, False
        self.threads: int | None = None  # the learner's threads now (None: not tuned, no event heard)
        self.own = actor_cores + 1  # the cores this run keeps busy: the actors' and the learner's first threads
        self._meter = LoadMeter()
        self._runnable: list[int] = []

    def __call__(self, record: EventRecord) -> None:
        if (record.interface, record.event) == THREADS:
            if self.threads is None:  # its own cores count with the first threads it heard
                self.own = self.actor_cores + int(record.values["value"])
            self.threads = int(record.values["value"])

    def sample(self) -> None:
        """Count the machine's runnable threads now (once an update: /proc/loadavg only); their mean is the epoch's
        load."""
        count = self._meter.sample(idle=False).runnable
        if count is not None:
            self._runnable.append(count)

    def epoch(self, epoch: int, rate: float, load: float | None = None) -> str | None:
        """The notice for ``epoch``'s training rate (env steps/s), if it is the first starved one; ``load``: the
        machine's runnable threads over the epoch (default: the mean of the samples taken in it)."""
        samples, self._runnable = self._runnable, []
        if epoch == 1:  # the actors' start-up is in the first epoch's rate
            return None
        load = sum(samples) / len(samples) if load is None and samples else load
        crowded = load is not None and load > max(self.cores, self.own) + 0.75
        slow = self.best > 0 and rate < SLOW_SHARE * self.best
        self.best = max(self.best, rate)
        if self.said or not (crowded or slow):
            return None
        self.said = True
        starved = f"training ran at {rate:,.0f} env steps/s in epoch {epoch}, under half its best ({self.best:,.0f})"
        parts = [starved] if slow else []
        if crowded:
            parts.append(
                f"the machine ran {load:.1f} threads at a time on {self.cores} cores, more than this run "
                f"keeps busy (about {self.own:g})"
            )
        learner = f" The learner's threads follow the load (now {self.threads})." if self.threads is not None else ""
        return (
            f"{'; '.join(parts)}: another program may be taking cores from the actors and the learner.{learner} "
            "Closing it gives training its speed back; fewer actors (algorithm.num_actors) leave it room."
        )
