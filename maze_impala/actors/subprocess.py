"""The one-machine backend: each actor in its own process, rollouts through shared memory, restarts on failure.

Each actor process has a duplex pipe of its own (see :mod:`maze_impala.actors.worker`);
the learner grants an actor a slot to make its next rollout in, reads which slot holds a
new rollout, and watches every process' sentinel. Nothing else is shared but the
shared-memory slots and weights and a stop flag, none of which has a lock, so no actor
can block the learner or another actor, whatever state it dies in. How many rollouts are
under way at once follows the learner (:class:`~maze_impala.actors.flow.InFlightLimit`).

Failures: an actor that dies (any signal, e.g. SIGKILL or a segfault), raises, or holds
a granted slot for longer than its deadline (hung, e.g. SIGSTOPped) is killed and
restarted with a fresh env seed, up to ``max_restarts`` restarts within
``restart_window_s``; then, or when an actor raises before its first rollout (a broken
env fails alike in every restart), :class:`ActorFailedError` ends the run.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import time
from collections import deque
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from multiprocessing.sharedctypes import RawArray
from typing import Any

from maze_impala.actors.actor import ActorSpec, seed_for
from maze_impala.actors.flow import FinishedRollouts, InFlightLimit
from maze_impala.actors.restarts import ActorRecord, RestartBudget, RestartPolicy
from maze_impala.actors.transport import RolloutSlots, estimate_rollout_bytes
from maze_impala.actors.worker import actor_process
from maze_impala.children import how_it_ended, stop_children
from maze_impala.core import ActorPool, Rollout, WeightSource
from maze_impala.envs.factory import make_env
from maze_impala.events.interfaces import ActorEvents
from maze_impala.machine import THREAD_VARIABLES

ONE_THREAD = dict.fromkeys(THREAD_VARIABLES, "1")
"""The environment actor processes start with: one core each, for numpy's BLAS as for torch. A BLAS
that threads its (small) matrix products across cores other actors are using runs several times slower."""
__all__ = ["RestartPolicy", "SubprocessActors"]


@dataclass
class _Actor(ActorRecord):
    """The learner's view of one actor process."""

    process: Any = None
    conn: Any = None
    granted: int | None = None
    """The slot this actor makes its current rollout in (at most one)."""


class SubprocessActors(ActorPool):
    """``num_actors`` actor processes; at most ``queue_size_limit`` rollouts wait for the learner.

    An actor makes a rollout only in a slot the learner granted it, and the learner grants
    slots while fewer rollouts than the in-flight limit are under way (granted, queued, or
    finished beyond the queue's bound, which wait in their slots until the queue has room).
    Slots: ``queue_size_limit + num_actors + batch_size``, enough for a full queue, one
    granted to every actor and a batch held by the learner. The rollouts :meth:`collect`
    returns view their slots and stay valid until the next ``collect``.
    """

    def __init__(
        self,
        spec: ActorSpec,
        weights: WeightSource,
        num_actors: int,
        queue_size_limit: int,
        start_method: str = "spawn",
        failure_timeout: float | None = None,
        batch_size: int | None = None,
        slot_bytes: int | None = None,
        restarts: RestartPolicy | None = None,
        events: ActorEvents | None = None,
    ):
        """``batch_size``: the most rollouts one ``collect`` takes (default ``queue_size_limit``);
        ``slot_bytes``: the size of a slot (default: a bound estimated from the env's spaces);
        ``failure_timeout``: seconds an actor may take to its first rollout (overrides ``restarts``);
        ``events``: where restarts are published (an :class:`ActorEvents` publisher)."""
        self.spec = spec
        self.weights = weights
        self.num_actors = num_actors
        self.queue_size_limit = queue_size_limit
        self.ctx = multiprocessing.get_context(start_method)
        self.batch_size = batch_size or queue_size_limit
        self.slot_bytes = slot_bytes
        self.policy = restarts or RestartPolicy(max_restarts=0)
        if failure_timeout is not None:
            self.policy = replace(self.policy, startup_timeout_s=failure_timeout)
        self.budget = RestartBudget(self.policy, events)
        self.actors: list[_Actor] = []
        self._free: deque[int] = deque()
        """Slots the learner may grant, oldest freed first (so every slot is used in turn)."""
        self.finished: FinishedRollouts[tuple[int, Rollout]] = FinishedRollouts(
            queue_size_limit, InFlightLimit(low=self.batch_size, high=queue_size_limit + num_actors)
        )
        """Delivered rollouts, (slot or -1 for an inlined one, rollout): the queue and those parked beyond it."""
        self._held: list[int] = []

    @property
    def processes(self) -> list[Any]:
        return [a.process for a in self.actors]

    def start(self) -> None:
        if self.actors:
            return
        n_slots = self.queue_size_limit + self.num_actors + self.batch_size
        self.slots = RolloutSlots(n_slots, self.slot_bytes or self._estimate_slot_bytes())
        self._free = deque(range(n_slots))
        self._stop = RawArray(ctypes.c_int32, 1)
        self.actors = [self._spawn(index, generation=0) for index in range(self.num_actors)]
        self._grant()

    def _estimate_slot_bytes(self) -> int:
        env = make_env(self.spec.env)
        try:
            return estimate_rollout_bytes(env, self.spec)
        finally:
            env.close()

    def _spawn(self, index: int, generation: int) -> _Actor:
        learner_end, actor_end = self.ctx.Pipe(duplex=True)
        spec = self.spec if generation == 0 else replace(self.spec, seed=seed_for(self.spec.seed, index, generation))
        saved = {name: os.environ.get(name) for name in ONE_THREAD}
        os.environ.update(ONE_THREAD)  # spawn reads the environment at start
        try:
            process = self.ctx.Process(
                target=actor_process,
                args=(spec, index, self.weights, self.slots, actor_end, self._stop, os.getpid()),
                name=f"maze-actor-{index}",
                daemon=True,
            )
            process.start()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        actor_end.close()  # the actor's end lives in the actor only: its death closes the pipe
        return _Actor(generation, process=process, conn=learner_end)

    def collect(self, n: int, at_most: int | None = None) -> list[Rollout]:
        if not self.actors:
            raise RuntimeError("collect() before start(): use the pool as a context manager or call start()")
        at_most = max(n, at_most or n)
        if at_most > self.batch_size:
            raise ValueError(
                f"collect({n}, at_most={at_most}): this pool was made for batches of at most {self.batch_size} "
                "rollouts (its shared-memory slots hold a full queue plus one batch); raise its batch_size"
            )
        self._free.extend(self._held)  # the previous batch is done with
        self._held = []
        batch = self.finished.collect(n, at_most, self._poll)
        self._held = [slot for slot, _ in batch if slot >= 0]
        self._grant()  # start the next rollouts with the weights of this update
        return [rollout for _, rollout in batch]

    def queue_size(self) -> int:
        if self.actors:
            self._poll(0.0)
        return len(self.finished.queue)

    def actor_cores(self) -> float:
        """One core per actor process."""
        return float(self.num_actors)

    def _grant(self, at_least: int = 0) -> None:
        """Grant a slot to actors without one while the rollouts under way stay within the in-flight limit
        (at least ``at_least``: a whole batch while the learner waits for one). Longest waiting first."""
        waiting = sorted((a for a in self.actors if a.granted is None), key=lambda a: a.requested_at)
        for actor in waiting:
            granted = sum(a.granted is not None for a in self.actors)
            if not self.finished.may_start(granted, at_least) or not self._free:
                return
            slot = self._free.popleft()
            try:
                actor.conn.send(slot)
            except OSError:  # it died; its sentinel says so at the next poll
                self._free.append(slot)
                continue
            actor.granted, actor.requested_at = slot, time.monotonic()

    def _poll(self, timeout: float, at_least: int = 0) -> None:
        """Take delivered rollouts, handle dead and hung actors; wait up to ``timeout`` for something to happen."""
        by_handle = {a.conn: a for a in self.actors} | {a.process.sentinel: a for a in self.actors}
        for handle in wait(list(by_handle), timeout):
            actor = by_handle[handle]
            if actor not in self.actors:
                continue  # replaced while handling an earlier handle
            if handle is actor.conn:
                self._receive(actor)
            else:
                self._drain(actor)
                if actor in self.actors:
                    actor.process.join(timeout=1.0)
                    self._failed(actor, how_it_ended(actor.process.exitcode))
        now = time.monotonic()
        for actor in list(self.actors):
            if actor.granted is not None and actor.overdue(self.policy, now):
                self._failed(
                    actor,
                    f"hung: no rollout for {now - actor.requested_at:.1f} s (deadline "
                    f"{actor.deadline(self.policy):.1f} s)",
                    hung=True,
                )
        self._grant(at_least)

    def _receive(self, actor: _Actor) -> None:
        try:
            message = actor.conn.recv()
        except (EOFError, OSError):
            return  # the pipe closed: the process is dying, and its sentinel will say how
        self._handle(actor, message)

    def _drain(self, actor: _Actor) -> None:
        """Take the complete messages a dead actor left in its pipe (a rollout it delivered is valid)."""
        while actor in self.actors and actor.conn.poll(0):
            try:
                message = actor.conn.recv()
            except (EOFError, OSError):
                return
            self._handle(actor, message)

    def _handle(self, actor: _Actor, message: tuple) -> None:
        kind, payload = message[0], message[1]
        if kind == "error":
            self._failed(actor, f"raised {payload}", raised=True)
            return
        rollout = self.slots.read(payload) if kind == "slot" else message[2]
        if kind == "inline":
            self._free.append(payload)
        actor.granted = None
        back = actor.delivered_one(time.monotonic())
        self.finished.add((payload if kind == "slot" else -1, rollout))
        if back is not None:
            self.budget.recovered(self._who(actor), back)

    def _who(self, actor: _Actor) -> str:
        return f"actor {self.actors.index(actor)} (pid {actor.process.pid})"

    def _failed(self, actor: _Actor, cause: str, raised: bool = False, hung: bool = False) -> None:
        """Restart a failed actor, or raise :class:`ActorFailedError` when that is not allowed."""
        self.budget.failed(self._who(actor), actor, cause, raised=raised, hung=hung)
        index = self.actors.index(actor)
        self._stop_process(actor)
        if actor.granted is not None:
            self._free.append(actor.granted)  # the slot it was granted is the learner's again
        self.actors[index] = self._spawn(index, actor.generation + 1)

    def _stop_process(self, actor: _Actor) -> None:
        if actor.process.is_alive():
            actor.process.kill()
        actor.process.join(timeout=5.0)
        actor.conn.close()

    def close(self) -> None:
        if not self.actors:
            return
        # Actors look at the stop flag whenever they wait for a slot, and never block on anything the learner
        # holds; one that does not exit in time is killed.
        self._stop[0] = 1
        for actor in self.actors:
            actor.conn.close()  # an actor waiting on its pipe sees EOF and exits
        stop_children(actor.process for actor in self.actors)
        self.actors, self._held, self._free = [], [], deque()
        self.finished.clear()
