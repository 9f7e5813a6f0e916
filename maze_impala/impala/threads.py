"""How many threads a CPU learner computes with: one rule for every runner, and a tuner that follows the load.

A learner thread that waits for a core held by another process stalls every parallel operation of the update
(OpenMP's threads meet at a barrier after each one): a learner of 2 threads beside an actor process and a busy
program on 2 cores ran MinAtar's update 3-10x slower than one thread did. How much a second thread gains, or loses,
depends on what else the machine runs, which changes while a run trains. So the rule gives a learner a range of
thread counts, and :class:`ThreadTuner` times its updates with each and keeps the fastest:

- ``cores``: the cores this process may use (:func:`~maze_impala.machine.usable_cores`: its CPU affinity and a
  cgroup's CPU quota);
- ``leftover``: those the actors on this machine leave, at least 1 (:meth:`ActorPool.actor_cores`);
- the range is 1 up to ``leftover``, or up to ``cores`` for a learner that sets the pace while its actors wait
  (``runner.learner_cores=all``, or ``auto`` with a CNN on images or a recurrent core);
- a number (``runner.learner_cores=3``) or ``OMP_NUM_THREADS`` in the environment pins the threads;
- several learners each take their share of ``leftover``, without tuning (they must step together);
- ``runner=dev`` takes one thread, fixed: it repeats a run exactly for its seed.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from maze_impala.core import Learner, Rollout
from maze_impala.events.interfaces import RunEvents
from maze_impala.machine import IdleMeter, pinned_by_environment, set_torch_threads, torch_threads, usable_cores

log = logging.getLogger("maze_impala")


@dataclass(frozen=True)
class ThreadPlan:
    """The thread counts a learner may compute with, and the one it starts with."""

    choices: tuple[int, ...]
    """Ascending; one: pinned or fixed."""
    start: int
    why: str
    """How the rule came to them, for the run's log."""

    @property
    def adaptive(self) -> bool:
        return len(self.choices) > 1

    def describe(self) -> str:
        counts = "/".join(map(str, self.choices))
        return f"learner threads {counts}, starting at {self.start} ({self.why})"


BUSY_LOAD = 0.75
"""A one-minute load average at or above this when a run starts (another program busy on a core) makes a learner that
may take every core start on those the actors leave: beside a busy program two threads ran MinAtar's update 11x
slower than one, and the tuner's first probes came only after minutes of such updates."""


def plan_threads(
    setting: str,
    actor_cores: float,
    num_learners: int = 1,
    cores: int | None = None,
    deterministic: bool = False,
    load: float | None = None,
) -> ThreadPlan:
    """The rule for ``runner.learner_cores=setting`` (leftover, all or a number; ``auto`` is resolved to one of the
    first two by the model first): ``actor_cores``: the cores the actors take on this machine; ``cores``: those
    this process may use (default :func:`~maze_impala.machine.usable_cores`); ``load``: the machine's load before
    the run's own work (:func:`~maze_impala.machine.machine_load`), from which a learner that may take every core
    starts on fewer where the machine is busy already; ``deterministic``: the run must repeat itself bit for bit
    (``runner=dev``), so its thread count is fixed, one unless pinned (a count chosen by timing would change the
    order of float sums, and one thread never waits for a busy core)."""
    if setting.isdigit():
        return ThreadPlan((int(setting),), int(setting), f"pinned by runner.learner_cores={setting}")
    pinned = pinned_by_environment()
    if pinned is not None:
        return ThreadPlan((pinned[0],), pinned[0], f"pinned by {pinned[1]} in the environment")
    if deterministic:
        return ThreadPlan(
            (1,), 1, "one thread: runner=dev repeats a run exactly for its seed (pin more with runner.learner_cores=N)"
        )
    cores = cores or usable_cores()
    leftover = max(1, cores - math.ceil(actor_cores))
    if num_learners > 1:
        share = max(1, leftover // num_learners)
        return ThreadPlan(
            (share,),
            share,
            f"each of {num_learners} learners' share of the {leftover} cores the actors leave of {cores}",
        )
    if setting not in ("leftover", "all"):
        raise ValueError(f"runner.learner_cores={setting!r}: leftover, all or a number of threads here")
    top = cores if setting == "all" else leftover
    why = f"learner_cores={setting}: {cores} usable cores, {leftover} left by the actors"
    start = top
    if top > leftover and load is not None and load >= BUSY_LOAD:
        start, why = leftover, f"{why}; the machine's load {load:.2f} at the start: first {leftover}"
    return ThreadPlan(tuple(sorted({1, leftover, top})), start, why)


class ThreadTuner:
    """Keeps the fastest of a :class:`ThreadPlan`'s thread counts while the machine's load changes.

    It times every update (seconds per sample) and, now and then, runs one update with another count (a probe);
    a probe that is faster by ``margin`` or more becomes the choice. A probe costs what the other count is slower,
    as last measured: the next probe of it waits until the updates since have taken ``1 / budget`` times that
    excess, so probes cost at most about ``budget`` of the learner's time, however slow the other count is (two
    threads beside two busy programs made an LSTM's training 30x slower than one). The chosen count's recent times
    rising by ``regression`` over those it was chosen on (a program started beside the run) brings the next probe
    of a count that was faster forward. Probes are counted in time as well as in updates: one is due at the latest
    after ``max_wait`` seconds of updates (within the budget), and a probe that came out faster, though not by the
    margin, costs nothing and is repeated soon rather than backed off.

    The load leaving is seen two ways: the chosen count's own updates getting faster (``relief``), and, for a count
    that does not feel the load (one thread that had a core of its own beside a busy program), the machine's idle
    cores during its updates (:class:`~maze_impala.machine.IdleMeter`) rising by ``free_core`` over those when a
    larger count was last timed: that count's time is stale, and it is probed at once.
    """

    def __init__(
        self,
        plan: ThreadPlan,
        set_threads: Callable[[int], None],
        budget: float = 0.05,
        margin: float = 0.9,
        window: int = 3,
        first_probe: int = 3,
        regression: float = 1.5,
        warmup: int = 1,
        probe_seconds: float = 5.0,
        relief: float = 1.25,
        max_wait: float = 30.0,
        free_core: float = 0.5,
        idle_seconds: float = 1.0,
    ):
        """``probe_seconds``: a count never timed is probed once the chosen one's updates have taken this long, even
        before ``first_probe`` updates (under load one update can take tens of seconds); ``relief``: the chosen
        count's recent times falling by this factor below those it was chosen on (a busy program stopped) makes every
        other count's last time stale and probes one at once; ``max_wait``: the most seconds of updates between probes
        that the budget allows; ``free_core``: the rise in idle cores that makes a larger count's time stale;
        ``idle_seconds``: the seconds of updates each idle reading spans (``/proc/stat`` counts in 10 ms ticks)."""
        self.plan, self._set = plan, set_threads
        self.budget, self.margin, self.window = budget, margin, window
        self.first_probe, self.regression = first_probe, regression
        self.probe_seconds, self.relief = probe_seconds, relief
        self.max_wait, self.free_core, self.idle_seconds = max_wait, free_core, idle_seconds
        self.idle: float | None = None
        """The machine's idle cores during the chosen count's latest ``idle_seconds`` of updates; None: unknown."""
        self._idle_sum = [0.0, 0.0]  # idle core-seconds, update seconds: the reading being gathered
        self._idle_at: dict[int, float] = {}
        """The idle cores when each count was last probed."""
        self.chosen = plan.start
        self.times: dict[int, deque[float]] = {c: deque(maxlen=window) for c in plan.choices}
        self.estimate: dict[int, float] = {}
        """Each count's latest seconds per sample: the chosen one's recent median, the others' last probe."""
        self._warmup = warmup
        self._interval = first_probe
        self._since_updates, self._since_seconds, self._samples = 0, 0.0, 1
        self._decided: float | None = None
        """Seconds per sample of the chosen count when it was chosen (or first measured)."""
        self._probing: int | None = None
        self._next_probe = 0
        self._applied: int | None = None

    def threads(self) -> int:
        """The threads of the coming update (the choice, or a probe's), set in torch."""
        self._probing = self._probe_due()
        threads = self.chosen if self._probing is None else self._probing
        if threads != self._applied:
            self._set(threads)
            self._applied = threads
        return threads

    def record(self, seconds: float, samples: int, idle: float | None = None) -> None:
        """The update just run took ``seconds`` for ``samples`` samples, while the machine's cores were idle for
        ``idle`` core-seconds (None: not known)."""
        if self._warmup > 0:
            self._warmup = max(0, self._warmup - (self._probing is None))
            self._probing = None
            return
        per_sample, self._samples = seconds / max(samples, 1), max(samples, 1)
        if self._probing is None:
            self.times[self.chosen].append(per_sample)
            self._since_updates += 1
            self._since_seconds += seconds
            self._gather_idle(seconds, idle)
            if len(self.times[self.chosen]) == self.window:
                self.estimate[self.chosen] = self._median()
                if self._decided is None:
                    self._decided = self.estimate[self.chosen]
            return
        probed, self._probing = self._probing, None
        current = self._median()
        self.estimate[probed] = per_sample
        if self.idle is not None:
            self._idle_at[probed] = self.idle
        self._since_updates, self._since_seconds = 0, 0.0
        if per_sample < self.margin * current:
            log.info(
                "learner threads %d -> %d: %.3g against %.3g ms per sample",
                self.chosen,
                probed,
                per_sample * 1e3,
                current * 1e3,
            )
            if self.idle is not None:
                self._idle_at[self.chosen] = self.idle  # the idle cores that the count left was timed with
            self.chosen, self._decided = probed, per_sample
            self.times[probed].clear()
            self.times[probed].append(per_sample)
            self._interval = self.first_probe
            self.idle, self._idle_sum = None, [0.0, 0.0]
        elif per_sample < current:
            self._interval = self.first_probe  # faster, though not by the margin: free to look again soon
        else:
            self._interval = min(2 * self._interval, 64 * self.first_probe)

    def _gather_idle(self, seconds: float, idle: float | None) -> None:
        if idle is None:
            return
        self._idle_sum[0] += idle
        self._idle_sum[1] += seconds
        if self._idle_sum[1] >= self.idle_seconds:
            self.idle = self._idle_sum[0] / self._idle_sum[1]
            self._idle_sum = [0.0, 0.0]

    def _median(self) -> float:
        return statistics.median(self.times[self.chosen])

    def _probe_due(self) -> int | None:
        if not self.plan.adaptive or self._warmup > 0 or not self.times[self.chosen]:
            return None
        others = [c for c in self.plan.choices if c != self.chosen]
        candidate = others[(self._next_probe + 1) % len(others)]
        if candidate not in self.estimate and self._since_seconds >= self.probe_seconds:
            self._next_probe += 1  # never timed, and the chosen count's updates are slow: time it now
            return candidate
        if len(self.times[self.chosen]) < self.window:
            return None
        current = self._median()
        if self._decided is not None and current > self.regression * self._decided:
            self._interval, self._decided = 0, current  # the load rose: look again now (where it costs little)
        elif self._decided is not None and current * self.relief < self._decided:
            self._interval, self._decided = 0, current  # the load fell: the others' times are stale, look again
            for other in others:
                self.estimate.pop(other, None)
        for other in others:  # cores left idle beside a count that did not feel the load leave
            then = self._idle_at.get(other)
            known = other in self.estimate and then is not None and self.idle is not None
            if known and other > self.chosen and self._since_seconds >= self.probe_seconds:
                if self.idle >= then + self.free_core:
                    self._interval = 0
                    del self.estimate[other]
        if self._since_updates < self._interval and self._since_seconds < self.max_wait:
            return None
        excess = max(0.0, self.estimate.get(candidate, 0.0) - current) * self._samples
        if self._since_seconds * self.budget < excess:
            return None
        self._next_probe += 1
        return candidate


class TunedLearner(Learner):
    """A CPU learner on the threads its :class:`ThreadPlan` allows: before each update the tuner sets the count
    (the choice, or a probe's), after it the update's time is recorded; each update's count is published as
    ``RunEvents.learner_threads``. It wraps a learner as
    :class:`~maze_impala.impala.replicas.DataParallelLearner` does, so that the training loop neither tunes nor
    passes thread counts; :meth:`close` gives the process back the count it had."""

    def __init__(self, learner: Learner, plan: ThreadPlan, events: RunEvents | None = None):
        self.learner, self.events = learner, events
        self.policy = learner.policy
        self.tuner = ThreadTuner(plan, set_torch_threads)
        meter = IdleMeter() if plan.adaptive else None
        self._idle = meter if meter is not None and meter.available else None
        self._before = torch_threads()
        log.info("%s", plan.describe())

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.learner.version

    @property
    def threads(self) -> int:  # type: ignore[override]
        return self.tuner.chosen

    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        threads = self.tuner.threads()
        if self.events is not None:
            self.events.learner_threads(value=threads)
        idle_before = self._idle.read() if self._idle is not None else None
        started = time.perf_counter()
        self.learner.step(rollouts, train_policy)
        seconds = time.perf_counter() - started
        idle_after = self._idle.read() if self._idle is not None else None
        idle = idle_after - idle_before if idle_before is not None and idle_after is not None else None
        self.tuner.record(seconds, sum(r.env_steps for r in rollouts), idle)

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def close(self) -> None:
        try:
            self.learner.close()
        finally:
            if self._before is not None:
                set_torch_threads(self._before)
