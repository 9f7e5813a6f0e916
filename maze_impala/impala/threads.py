"""How many threads a CPU learner computes with: one rule for every runner, and a tuner that follows the load.

A learner thread waiting for a core that another process holds stalls every parallel operation of the update, and what a
second thread gains or loses changes while a run trains (docs/benchmarks.md, "what the code's choices rest on"). So the
rule (:func:`plan_threads`) gives a learner a range of counts, from 1 up to the cores the actors leave or all of them,
and :class:`ThreadTuner` times its updates with each and keeps the fastest. A number, or ``OMP_NUM_THREADS``, pins the
threads; several learners each take their share, untuned; ``runner=dev`` takes one, to repeat a run for its seed.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from maze_impala.core import Learner, LearnerWrapper, Rollout
from maze_impala.events.interfaces import RunEvents
from maze_impala.machine import LoadMeter, pinned_by_environment, usable_cores
from maze_impala.startup import set_torch_threads, torch_threads

log = logging.getLogger("maze_impala")

BUSY_LOAD = 0.75  # a load this high at the start starts a learner that may take every core on the leftover ones
BUDGET, MARGIN = 0.05, 0.9  # probes cost at most this share of the time; a probe this much faster is chosen
WINDOW, FIRST_PROBE = 3, 3  # the chosen count's time: the median of its latest updates; updates before a first probe
REGRESSION, RELIEF = 1.5, 1.25  # the chosen count's time rising (a program started) or falling (one stopped) this much
PROBE_SECONDS, MAX_WAIT = 5.0, 30.0  # a never-timed count is probed after these seconds; any count, at the latest
FREE_CORE, IDLE_SECONDS = 0.5, 1.0  # idle cores rising this much make a larger count's time stale; seconds a reading


@dataclass(frozen=True)
class ThreadPlan:
    """The thread counts a learner may use (ascending; one: pinned), the one it starts with, and why (for the log)."""

    choices: tuple[int, ...]
    start: int
    why: str

    @property
    def adaptive(self) -> bool:
        return len(self.choices) > 1

    def describe(self) -> str:
        return f"learner threads {'/'.join(map(str, self.choices))}, starting at {self.start} ({self.why})"


def plan_threads(
    setting: str,
    actor_cores: float,
    num_learners: int = 1,
    cores: int | None = None,
    deterministic: bool = False,
    load: float | None = None,
) -> ThreadPlan:
    """The rule for ``runner.learner_cores=setting`` (leftover, all or a number), ``actor_cores`` the actors' cores
    here, ``cores`` this process's (default: usable) and ``load`` the machine's before the run's own work;
    ``deterministic`` (``runner=dev``): one thread unless pinned (a timed count changes the order of float sums)."""
    pinned = (int(setting), f"runner.learner_cores={setting}") if setting.isdigit() else pinned_by_environment()
    if pinned is not None:
        return ThreadPlan((pinned[0],), pinned[0], f"pinned by {pinned[1]}")
    if deterministic:
        why = "one thread: runner=dev repeats a run exactly for its seed (pin more with runner.learner_cores=N)"
        return ThreadPlan((1,), 1, why)
    cores = cores or usable_cores()
    leftover = max(1, cores - math.ceil(actor_cores))
    if num_learners > 1:
        share = max(1, leftover // num_learners)
        why = f"each of {num_learners} learners' share of the {leftover} cores the actors leave of {cores}"
        return ThreadPlan((share,), share, why)
    if setting not in ("leftover", "all"):
        raise ValueError(f"runner.learner_cores={setting!r}: leftover, all or a number of threads here")
    top = cores if setting == "all" else leftover
    why, start = f"learner_cores={setting}: {cores} usable cores, {leftover} left by the actors", top
    if top > leftover and load is not None and load >= BUSY_LOAD:
        start, why = leftover, f"{why}; the machine's load {load:.2f} at the start: first {leftover}"
    return ThreadPlan(tuple(sorted({1, leftover, top})), start, why)


class ThreadTuner:
    """Keeps the fastest of a :class:`ThreadPlan`'s counts while the machine's load changes: it times every update
    (seconds per sample) and now and then runs one with another count (a probe); a probe faster by ``MARGIN`` wins.
    A probe costs what the other count is slower (beside busy programs, tens of times): the next one waits until the
    updates since have taken ``1 / BUDGET`` times that. The load leaving shows as the chosen count's updates getting
    faster, or, for a count that does not feel it, as idle cores rising."""

    def __init__(self, plan: ThreadPlan, set_threads: Callable[[int], None]):
        self.plan, self._set, self.chosen = plan, set_threads, plan.start
        self.times: dict[int, deque[float]] = {c: deque(maxlen=WINDOW) for c in plan.choices}
        self.estimate: dict[int, float] = {}  # seconds per sample: the chosen count's median, the others' last probe
        self.idle: float | None = None  # idle cores during the chosen count's latest IDLE_SECONDS of updates
        self._idle_sum, self._idle_seconds = 0.0, 0.0  # the reading being gathered
        self._idle_at: dict[int, float] = {}  # the idle cores when each count was last probed
        self._warm, self._interval, self._next_probe = False, FIRST_PROBE, 0
        self._since_updates, self._since_seconds, self._samples = 0, 0.0, 1
        self._decided: float | None = None  # the chosen count's time when it was chosen (or first measured)
        self._probing: int | None = None  # the count of the coming update, if a probe
        self._applied: int | None = None  # the count set in torch

    def threads(self) -> int:
        """The threads of the coming update (the choice, or a probe's), set in torch."""
        self._probing = self._probe_due()
        threads = self.chosen if self._probing is None else self._probing
        if threads != self._applied:
            self._set(threads)
            self._applied = threads
        return threads

    def record(self, seconds: float, samples: int, idle: float | None = None) -> None:
        """The update just run took ``seconds`` for ``samples`` samples, with ``idle`` idle core-seconds (or None)."""
        if not self._warm:  # the first update (no probe yet) builds what the others reuse: not timed
            self._warm = True
            return
        per_sample, self._samples = seconds / max(samples, 1), max(samples, 1)
        if self._probing is None:
            self.times[self.chosen].append(per_sample)
            self._since_updates, self._since_seconds = self._since_updates + 1, self._since_seconds + seconds
            if idle is not None:
                self._idle_sum, self._idle_seconds = self._idle_sum + idle, self._idle_seconds + seconds
                if self._idle_seconds >= IDLE_SECONDS:
                    self.idle, self._idle_sum, self._idle_seconds = self._idle_sum / self._idle_seconds, 0.0, 0.0
            if len(self.times[self.chosen]) == WINDOW:
                self.estimate[self.chosen] = self._median()
                self._decided = self.estimate[self.chosen] if self._decided is None else self._decided
            return
        probed, self._probing, current = self._probing, None, self._median()
        self.estimate[probed] = per_sample
        if self.idle is not None:
            self._idle_at[probed] = self.idle
        self._since_updates, self._since_seconds = 0, 0.0
        if per_sample < MARGIN * current:
            ms = (per_sample * 1e3, current * 1e3)
            log.info("learner threads %d -> %d: %.3g against %.3g ms per sample", self.chosen, probed, *ms)
            if self.idle is not None:
                self._idle_at[self.chosen] = self.idle  # the idle cores that the count left was timed with
            self.chosen, self._decided, self._interval = probed, per_sample, FIRST_PROBE
            self.times[probed] = deque([per_sample], maxlen=WINDOW)
            self.idle, self._idle_sum, self._idle_seconds = None, 0.0, 0.0
        elif per_sample < current:
            self._interval = FIRST_PROBE  # faster, though not by the margin: free to look again soon
        else:
            self._interval = min(2 * self._interval, 64 * FIRST_PROBE)

    def _median(self) -> float:
        return statistics.median(self.times[self.chosen])

    def _probe_due(self) -> int | None:
        if not self.plan.adaptive or not self._warm or not self.times[self.chosen]:
            return None
        others = [c for c in self.plan.choices if c != self.chosen]
        candidate = others[(self._next_probe + 1) % len(others)]
        if candidate not in self.estimate and self._since_seconds >= PROBE_SECONDS:
            self._next_probe += 1  # never timed, and the chosen count's updates are slow: time it now
            return candidate
        if len(self.times[self.chosen]) < WINDOW:
            return None
        current = self._median()
        if self._decided is not None and current > REGRESSION * self._decided:
            self._interval, self._decided = 0, current  # the load rose: look again now (where it costs little)
        elif self._decided is not None and current * RELIEF < self._decided:
            self._interval, self._decided = 0, current  # the load fell: the others' times are stale, look again
            self.estimate = {c: t for c, t in self.estimate.items() if c == self.chosen}
        for other in others:  # cores left idle beside a count that did not feel the load leave
            freed = self.idle is not None and self.idle >= self._idle_at.get(other, math.inf) + FREE_CORE
            if freed and other > self.chosen and other in self.estimate and self._since_seconds >= PROBE_SECONDS:
                self._interval = 0
                del self.estimate[other]
        if self._since_updates < self._interval and self._since_seconds < MAX_WAIT:
            return None
        excess = max(0.0, self.estimate.get(candidate, 0.0) - current) * self._samples
        if self._since_seconds * BUDGET < excess:
            return None
        self._next_probe += 1
        return candidate


class TunedLearner(LearnerWrapper):
    """A CPU learner on its :class:`ThreadPlan`'s threads: the tuner sets the count before each update (published as
    ``RunEvents.learner_threads``) and times it after; :meth:`close` gives the process back the count it had."""

    def __init__(self, learner: Learner, plan: ThreadPlan, events: RunEvents | None = None):
        super().__init__(learner)
        self.events, self.tuner, self._before = events, ThreadTuner(plan, set_torch_threads), torch_threads()
        meter = LoadMeter() if plan.adaptive else None
        self._idle = meter.read if meter is not None and meter.available else lambda: None
        log.info("%s", plan.describe())

    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        threads = self.tuner.threads()
        if self.events is not None:
            self.events.learner_threads(value=threads)
        idle_before, started = self._idle(), time.perf_counter()
        self.learner.step(rollouts, train_policy)
        seconds, idle_after = time.perf_counter() - started, self._idle()
        idle = idle_after - idle_before if idle_before is not None and idle_after is not None else None
        self.tuner.record(seconds, sum(r.env_steps for r in rollouts), idle)

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._before is not None:
                set_torch_threads(self._before)
