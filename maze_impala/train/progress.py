"""A live status line: epoch, env steps, steps per second and the latest mean return."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from maze_impala.events.api import EventRecord


class Progress:
    """Rewrites one line in a terminal; elsewhere (logs, CI) prints a status line every ``interval`` seconds.

    It listens to the event hub for episode returns, so it shows the mean return of
    the episodes that ended since the last status.
    """

    def __init__(self, total: int, unit: str = "epoch", stream: TextIO | None = None, interval: float = 10.0):
        self.total, self.unit = total, unit
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 0.5 if self.tty else interval
        self.started = self.last_print = time.perf_counter()
        self.returns: list[float] = []
        self.latest_return = float("nan")

    def __call__(self, record: EventRecord) -> None:
        if record.event == "episode_return" and record.interface == "EpisodeEvents":
            self.returns.append(float(record.values["value"]))

    def update(self, done: int, env_steps: int, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self.last_print < self.interval:
            return
        if self.returns:
            self.latest_return, self.returns = sum(self.returns) / len(self.returns), []
        rate = env_steps / max(now - self.started, 1e-9)
        line = (
            f"{self.unit} {done}/{self.total} | {env_steps:,} env steps | {rate:,.0f} steps/s | "
            f"return {self.latest_return:.4g}"
        )
        self.last_print = now
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
