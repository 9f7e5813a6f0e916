"""A live status line: epoch, env steps, steps per second and the mean return of the latest episodes."""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from typing import TextIO

from maze_impala.events.api import EventRecord, event_name
from maze_impala.events.interfaces import EpisodeEvents

RETURN_WINDOW = 100
"""The status line's return is the mean of this many latest episodes."""
_EPISODE_RETURN = event_name(EpisodeEvents.episode_return)


class Progress:
    """Rewrites one line in a terminal; elsewhere (logs, CI) prints a status line every ``interval`` seconds.

    As a listener of the event hub it sees every episode's return; :meth:`add_return` takes
    returns from elsewhere (e.g. a rollout's finished episodes).
    """

    def __init__(
        self,
        total: int,
        unit: str = "epoch",
        stream: TextIO | None = None,
        interval: float = 10.0,
        start_steps: int = 0,
        resumed_at: int | None = None,
    ):
        """``start_steps``: the env steps already taken when this process started (a resumed run's), which the rate
        leaves out; ``resumed_at``: the epoch a resumed run continues after (the line says so)."""
        self.total, self.unit = total, unit
        self.start_steps, self.resumed_at = start_steps, resumed_at
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.5 if self.tty else interval
        self.started = self.last_print = time.perf_counter()
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self._pending = False
        """A status line is on the terminal without its newline."""

    def __call__(self, record: EventRecord) -> None:
        if (record.interface, record.event) == _EPISODE_RETURN:
            self.returns.append(float(record.values["value"]))

    def add_return(self, value: float) -> None:
        self.returns.append(float(value))

    def line(self, done: int, env_steps: int) -> str:
        rate = (env_steps - self.start_steps) / max(time.perf_counter() - self.started, 1e-9)
        mean = sum(self.returns) / len(self.returns) if self.returns else math.nan
        since = "" if self.resumed_at is None else f" since the resume after {self.unit} {self.resumed_at}"
        return (
            f"{self.unit} {done}/{self.total} | {env_steps:,} env steps | {rate:,.0f} steps/s | "
            f"return {mean:.4g} (mean of the last {len(self.returns)} episodes{since})"
        )

    def update(self, done: int, env_steps: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_print < self.interval:
            return
        self.last_print = now
        if self.tty:
            self.stream.write("\r\033[K" + self.line(done, env_steps))
            self._pending = True
        else:
            self.stream.write(self.line(done, env_steps) + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        """End the status line, so that whatever is printed next starts on a line of its own."""
        if self._pending:
            self.stream.write("\n")
            self.stream.flush()
            self._pending = False

    def close(self) -> None:
        self.end_line()
