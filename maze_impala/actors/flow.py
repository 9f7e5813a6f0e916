"""How many rollouts the actors may have under way: as few as keep the learner busy, so that its data is fresh."""

from __future__ import annotations


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

    def room(self, under_way: int) -> bool:
        """Whether another rollout may start while ``under_way`` are requested or waiting."""
        return under_way < self.limit
