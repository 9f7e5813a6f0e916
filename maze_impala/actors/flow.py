"""How many rollouts the actors may have under way: as few as keep the learner busy, so that its data is fresh."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
WAIT_SECONDS = 0.05
"""How long a blocked :meth:`FinishedRollouts.collect` waits between polls (which check the actors' deadlines)."""


class InFlightLimit:
    """The most rollouts requested from actors and not yet taken by the learner (in the making or waiting).

    A rollout is made with the weights its actor has when it starts it, and every update that
    passes before the learner takes it adds to its policy lag. Actors therefore start a rollout
    only while fewer than :attr:`limit` are under way, and the limit follows the learner: it grows
    by one when the learner had to wait for a batch and shrinks by one when rollouts were left
    waiting after it took one, between ``low`` (a batch) and ``high`` (every actor busy and the
    queue full). A learner faster than the actors gets every actor; a slower one gets data made
    with the weights of the update before (a lag of about 1 instead of the queue's length).
    """

    def __init__(self, low: int, high: int):
        if low < 1:
            raise ValueError(f"InFlightLimit needs low >= 1, got {low}")
        self.low, self.high = low, max(low, high)
        self.limit = self.high
        """Starts high: every actor makes its first rollout at once."""

    def update(self, waited: bool, left: int) -> None:
        """After a batch was taken: ``waited``, the learner found fewer rollouts ready than it needed;
        ``left``, rollouts still ready after it took its batch."""
        if waited:
            self.limit = min(self.limit + 1, self.high)
        elif left > 0:
            self.limit = max(self.limit - 1, self.low)

    def room(self, under_way: int, at_least: int = 0) -> bool:
        """Whether another rollout may start while ``under_way`` are requested or waiting (the limit, but
        at least ``at_least``: a whole batch while the learner waits for one)."""
        return under_way < max(at_least, self.limit)


class FinishedRollouts(Generic[T]):
    """The learner's side of finished rollouts: the queue (at most ``bound``) and those finished beyond it.

    A rollout that finishes while the queue is full waits *parked* (in the subprocess backend, in its
    shared-memory slot; on Ray, in the object store) and enters the queue, oldest first, as the learner
    empties it. Both pools keep their rollouts here and ask :attr:`in_flight` whether another may start.
    """

    def __init__(self, bound: int, in_flight: InFlightLimit):
        self.bound, self.in_flight = bound, in_flight
        self.queue: deque[T] = deque()
        """Ready for the learner, at most ``bound``."""
        self.parked: deque[T] = deque()
        """Finished while the queue was full."""

    def add(self, item: T) -> None:
        """A rollout just finished."""
        self.parked.append(item)
        self._admit(self.bound)

    def __len__(self) -> int:
        """Finished and not yet taken, queued or parked."""
        return len(self.queue) + len(self.parked)

    def may_start(self, requested: int, at_least: int = 0) -> bool:
        """Whether another rollout may start while ``requested`` are being made (the in-flight limit,
        but at least ``at_least``: a whole batch while the learner waits for one)."""
        return self.in_flight.room(len(self) + requested, at_least)

    def collect(self, n: int, at_most: int, poll: Callable[[float, int], None]) -> list[T]:
        """Wait for ``n`` finished rollouts and take up to ``at_most``. ``poll(timeout, at_least)``: the pool's
        own step (take what finished, handle failed actors, start rollouts, at least ``at_least`` under way)."""
        poll(0.0, 0)  # rollouts finished meanwhile, so that "the learner waited" is measured fairly
        waited = len(self) < n
        while len(self) < n:
            poll(WAIT_SECONDS, n)
        return self.take(at_most, waited)

    def take(self, at_most: int, waited: bool) -> list[T]:
        """A batch of every finished rollout up to ``at_most`` (the queue's bound aside: the batch leaves it at
        once); ``waited``: the learner had to wait for it. Then the in-flight limit follows the learner."""
        self._admit(max(at_most, self.bound))
        batch = [self.queue.popleft() for _ in range(min(at_most, len(self.queue)))]
        self._admit(self.bound)
        self.in_flight.update(waited, left=len(self.queue))
        return batch

    def clear(self) -> None:
        self.queue.clear()
        self.parked.clear()

    def _admit(self, room: int) -> None:
        while self.parked and len(self.queue) < room:
            self.queue.append(self.parked.popleft())
