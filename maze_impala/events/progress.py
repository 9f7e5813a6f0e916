"""A live status line: epoch, env steps, steps per second and the mean return of the latest episodes."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import TextIO

from maze_impala.events.api import EventRecord, event_name
from maze_impala.events.interfaces import EpisodeEvents, GameEvents

RETURN_WINDOW = 100
"""The status line's return is the mean of this many latest episodes (and its game rates of as many games a seat)."""
_EPISODE_RETURN = event_name(EpisodeEvents.episode_return)
_OUTCOMES = {event_name(e): e.__name__ for e in (GameEvents.win, GameEvents.draw, GameEvents.loss)}


class Progress:
    """Rewrites one line in a terminal; elsewhere (logs, CI) prints a status line every ``interval`` seconds.

    As a listener of the event hub it sees every episode's return, and the outcome of every game against an
    opponent (:class:`~maze_impala.events.interfaces.GameEvents`); :meth:`add_return` takes returns from elsewhere
    (e.g. a rollout's finished episodes), and :meth:`evaluation_games` listens to an evaluation's games. In a
    two-player zero-sum game the mean return is 0 by construction: the win, draw and loss rates per seat are what
    the line shows then.
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
        self.games: dict[str, dict[str, deque[str]]] = {"train": {}, "eval": {}}
        """Per source, per seat: the latest games' outcomes."""
        self._pending = False
        """A status line is on the terminal without its newline."""

    def __call__(self, record: EventRecord) -> None:
        if (record.interface, record.event) == _EPISODE_RETURN:
            self.returns.append(float(record.values["value"]))
        else:
            self._game(record, "train")

    def evaluation_games(self, record: EventRecord) -> None:
        """A listener of the evaluation's hub: the games of the evaluations (shown when training plays none)."""
        self._game(record, "eval")

    def _game(self, record: EventRecord, source: str) -> None:
        outcome = _OUTCOMES.get((record.interface, record.event))
        if outcome is not None and record.values["value"]:
            seat = str(record.values["seat"])
            self.games[source].setdefault(seat, deque(maxlen=RETURN_WINDOW)).append(outcome)

    def _games(self) -> str:
        """`` | win/draw/loss of the last 100 evaluation games a seat: player_0 0.60/0.10/0.30, ...``: the
        evaluations' rates per seat over their latest ``RETURN_WINDOW`` games, which may span several evaluations
        (the epoch table shows the latest one's), against their fixed opponent, what the docs and the epoch table
        judge a policy by; before the first evaluation,
        the training games', labelled as such (against a pool of the policy's past snapshots, they say little)."""
        source = "eval" if self.games["eval"] else "train"
        seats = self.games[source]
        if not seats:
            return ""
        rates = ", ".join(
            f"{seat} " + "/".join(f"{games.count(o) / len(games):.2f}" for o in _OUTCOMES.values())
            for seat, games in sorted(seats.items())
        )
        window = max(len(games) for games in seats.values())  # the epoch table: the latest evaluation's alone
        where = "evaluation" if source == "eval" else "training"
        games = f"{window} {where} game{'s' if window != 1 else ''}"
        return f" | win/draw/loss of the last {games} a seat: {rates}"

    def add_return(self, value: float) -> None:
        self.returns.append(float(value))

    def line(self, done: int, env_steps: int, part: str = "") -> str:
        """The status after ``done`` of :attr:`total` (or in it: ``part``, e.g. ``update 20/50``)."""
        rate = (env_steps - self.start_steps) / max(time.perf_counter() - self.started, 1e-9)
        since = "" if self.resumed_at is None else f" since the resume after {self.unit} {self.resumed_at}"
        where = f"{self.unit} {done}/{self.total}" + (f", {part}" if part else "")
        head = f"{where} | {env_steps:,} env steps | {rate:,.0f} steps/s | "
        if not self.returns:
            return head + f"no episode finished yet{since}"
        games = self._games()
        if games:  # a two-player game's mean return is 0 by construction: its rates say what the return cannot
            return head + games.removeprefix(" | ") + since
        mean = sum(self.returns) / len(self.returns)
        episodes = "the last episode" if len(self.returns) == 1 else f"the last {len(self.returns)} episodes"
        return head + f"return {mean:.4g} (mean of {episodes}{since}){games}"

    def update(self, done: int, env_steps: int, force: bool = False, part: str = "") -> None:
        """Show the status (every :attr:`interval` seconds, or now with ``force``); ``part``: how far into ``done``
        it is (a line in the middle of an epoch says so, and is not taken for the epoch's end)."""
        now = time.perf_counter()
        if not force and now - self.last_print < self.interval:
            return
        self.last_print = now
        if self.tty:
            self.stream.write("\r\033[K" + self.line(done, env_steps, part))
            self._pending = True
        else:
            self.stream.write(self.line(done, env_steps, part) + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        """End the status line, so that whatever is printed next starts on a line of its own."""
        if self._pending:
            self.stream.write("\n")
            self.stream.flush()
            self._pending = False

    def close(self) -> None:
        self.end_line()
