"""What every multi-process backend does when an actor fails: detect it, restart it with a fresh seed, or give up.

The subprocess and Ray backends share these rules, so that ``runner.max_restarts`` and
``runner.actor_timeout_s`` mean the same on both:

* an actor that dies (any signal, a lost node), raises, or holds a rollout request for
  longer than its deadline (hung) is stopped and replaced by a new one with the same
  index and a fresh env seed (``seed_for(seed, index, generation)``);
* at most ``max_restarts`` restarts within ``window_s`` (all actors together); one more
  failure ends the run with :class:`~maze_impala.core.ActorFailedError`;
* an actor that raises before its first rollout ends the run at once: its env or policy
  is broken, and a restart would fail alike.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from maze_impala.core import ActorFailedError
from maze_impala.events.interfaces import ActorEvents

log = logging.getLogger("maze_impala")


@dataclass
class RestartPolicy:
    """When a failed actor is restarted, and when a silent one counts as hung."""

    max_restarts: int = 5
    """Restarts allowed within ``window_s`` (all actors together); 0: the first failure ends the run."""
    window_s: float = 600.0
    actor_timeout_s: float | None = None
    """Seconds a requested rollout may take; None: 10x the actor's median rollout time, at least
    ``min_timeout_s`` (``startup_timeout_s`` until its first rollout)."""
    min_timeout_s: float = 3.0
    startup_timeout_s: float = 120.0


@dataclass
class ActorRecord:
    """The learner's bookkeeping of one actor, whatever runs it: its generation, requests and timings."""

    generation: int
    requested_at: float = field(default_factory=time.monotonic)
    """When the actor was last asked for a rollout (or started)."""
    started_at: float = field(default_factory=time.monotonic)
    delivered: int = 0
    durations: deque[float] = field(default_factory=lambda: deque(maxlen=32))
    """Seconds from a request to its rollout, recently."""

    def deadline(self, policy: RestartPolicy) -> float:
        """Seconds the current request may take before the actor counts as hung."""
        if not self.durations:
            return policy.startup_timeout_s
        if policy.actor_timeout_s is not None:
            return policy.actor_timeout_s
        median = sorted(self.durations)[len(self.durations) // 2]
        return max(policy.min_timeout_s, 10 * median)

    def overdue(self, policy: RestartPolicy, now: float) -> bool:
        return now - self.requested_at > self.deadline(policy)

    def delivered_one(self, now: float) -> float | None:
        """Count a delivered rollout; returns the seconds since the restart for a restarted actor's first one."""
        self.durations.append(now - self.requested_at)
        self.requested_at, self.delivered = now, self.delivered + 1
        return now - self.started_at if self.delivered == 1 and self.generation > 0 else None


class RestartBudget:
    """Decides whether a failed actor may be restarted, and publishes restarts and recoveries."""

    def __init__(self, policy: RestartPolicy, events: ActorEvents | None = None):
        self.policy, self.events = policy, events
        self._restarts: deque[float] = deque()

    def failed(self, who: str, record: ActorRecord, cause: str, raised: bool = False, hung: bool = False) -> None:
        """Allow one restart of the actor ``who`` (e.g. ``actor 1 (pid 42)``), or raise :class:`ActorFailedError`."""
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > self.policy.window_s:
            self._restarts.popleft()
        broken = raised and record.delivered == 0  # its env or policy raises before any rollout: no restart helps
        if len(self._restarts) >= self.policy.max_restarts or broken:
            if broken and self.policy.max_restarts:
                why = "before its first rollout, so a restart would fail alike"
            else:
                why = f"{len(self._restarts)} restarts in {self.policy.window_s:.0f} s already, runner.max_restarts="
                why += str(self.policy.max_restarts)
            first, _, rest = cause.partition("\n")
            details = f"\n{rest}" if rest else ""
            raise ActorFailedError(f"{who} {first} ({why}){details}")
        self._restarts.append(now)
        log.warning(
            "%s %s; restarting it (%d of %d restarts in %.0f s)",
            who,
            cause.partition("\n")[0],
            len(self._restarts),
            self.policy.max_restarts,
            self.policy.window_s,
        )
        if self.events is not None:
            self.events.restarted(cause="hung" if hung else "raised" if raised else "died", value=1)

    def recovered(self, who: str, seconds: float) -> None:
        """A restarted actor delivered its first rollout ``seconds`` after its restart."""
        log.info("%s is back: first rollout %.2f s after its restart", who, seconds)
        if self.events is not None:
            self.events.recovery_seconds(value=seconds)
