"""The in-process backend: actors take turns in the learner's process (for debugging and tests)."""

from __future__ import annotations

from typing import Any

from threadpoolctl import threadpool_limits

from maze_impala.actors.actor import ActorSpec, RolloutActor
from maze_impala.core import ActorPool, Rollout, WeightSource


class SequentialActors(ActorPool):
    """Runs the same :class:`RolloutActor` components as the subprocess backend, one at a time.

    Rollouts are produced on demand, round-robin, so the queue is always empty and
    every rollout is made with the newest weights (policy lag 0).
    """

    def __init__(self, spec: ActorSpec, weights: WeightSource, num_actors: int):
        self.spec = spec
        self.weights = weights
        self.num_actors = num_actors
        self.actors: list[RolloutActor] = []
        self._next = 0
        self._blas: Any = None

    def start(self) -> None:
        if not self.actors:
            # Actors act in numpy; a BLAS that threads their small matrix products (32 x 128 and up)
            # runs them several times slower. One thread, as in the actor processes, until close().
            self._blas = threadpool_limits(limits=1, user_api="blas")
            self.actors = [self.spec.build(i, self.weights) for i in range(self.num_actors)]

    def collect(self, n: int, at_most: int | None = None) -> list[Rollout]:
        """``n`` rollouts, made now (nothing is ever ready in advance here, so ``at_most`` changes nothing)."""
        if not self.actors:
            raise RuntimeError("collect() before start(): use the pool as a context manager or call start()")
        rollouts = []
        for _ in range(n):
            rollouts.append(self.actors[self._next].rollout())
            self._next = (self._next + 1) % self.num_actors
        return rollouts

    def queue_size(self) -> int:
        return 0

    def close(self) -> None:
        for actor in self.actors:
            actor.close()
        self.actors = []
        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None
