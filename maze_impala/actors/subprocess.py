"""The one-machine backend: each actor in its own process, rollouts through shared memory and a bounded queue."""

from __future__ import annotations

import os
import queue
import signal
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as tmp

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.transport import RolloutSlots, estimate_rollout_bytes
from maze_impala.core import ActorFailedError, ActorPool, Rollout, WeightSource
from maze_impala.envs.factory import make_env

POLL_SECONDS = 0.1
"""How often blocked calls look at the stop flag, the other side's liveness and errors."""

ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""The environment actor processes start with: one core each, for numpy's BLAS as for torch. A BLAS
that threads its (small) matrix products across cores other actors are using runs several times slower."""


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the processes started inside the block (spawn reads them at start)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class _ActorCrash:
    index: int
    message: str


@dataclass
class _Inline:
    """A rollout too large for a slot, pickled through the pipe instead."""

    rollout: Rollout


def _actor_main(
    spec: ActorSpec,
    index: int,
    weights: WeightSource,
    slots: RolloutSlots,
    rollouts: Any,
    errors: Any,
    stop: Any,
    parent: int,
) -> None:
    """Entry point of an actor process: produce rollouts until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it stops us.
    torch.set_num_threads(1)  # one core per actor; the processes must not fight over cores
    stopping = lambda: stop.is_set() or os.getppid() != parent  # noqa: E731
    actor, slot, warned = None, None, False
    try:
        actor = spec.build(index, weights)
        while not stop.is_set():
            rollout = actor.rollout()
            while slot is None:
                slot = slots.acquire(POLL_SECONDS)
                if slot is None and stopping():
                    return
            message: int | _Inline
            if slots.write(slot, rollout):
                message, slot = slot, None  # the slot is the learner's once the message is queued
            else:
                message = _Inline(rollout)
                if not warned:
                    warnings.warn(f"actor {index}: a rollout exceeds the shared-memory slot size "
                                  f"({slots.slot_bytes} bytes) and travels pickled", stacklevel=1)  # fmt: skip
                    warned = True
            while True:
                try:
                    rollouts.put(message, timeout=POLL_SECONDS)
                    break
                except queue.Full:
                    if stopping():
                        return
    except BaseException as error:  # report every failure, then exit non-zero
        errors.put(_ActorCrash(index, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None
    finally:
        rollouts.cancel_join_thread()  # never block exit on a queue nobody reads any more
        if actor is not None:
            actor.close()


class SubprocessActors(ActorPool):
    """``num_actors`` actor processes feeding a queue bounded at ``queue_size_limit`` rollouts.

    Rollouts travel through shared-memory slots (:mod:`maze_impala.actors.transport`):
    ``queue_size_limit + num_actors + batch_size`` of them, enough for a full queue,
    one being written by every actor and a batch held by the learner. The rollouts
    :meth:`collect` returns view their slots and stay valid until the next ``collect``.
    """

    def __init__(
        self,
        spec: ActorSpec,
        weights: WeightSource,
        num_actors: int,
        queue_size_limit: int,
        start_method: str = "spawn",
        failure_timeout: float = 120.0,
        batch_size: int | None = None,
        slot_bytes: int | None = None,
    ):
        """``batch_size``: the most rollouts one ``collect`` takes (default ``queue_size_limit``);
        ``slot_bytes``: the size of a slot (default: a bound estimated from the env's spaces)."""
        self.spec = spec
        self.weights = weights
        self.num_actors = num_actors
        self.queue_size_limit = queue_size_limit
        self.ctx = tmp.get_context(start_method)
        self.failure_timeout = failure_timeout
        self.batch_size = batch_size or queue_size_limit
        self.slot_bytes = slot_bytes
        self.processes: list[Any] = []
        self._held: list[int] = []

    def _estimate_slot_bytes(self) -> int:
        env = make_env(self.spec.env)
        try:
            return estimate_rollout_bytes(env, self.spec)
        finally:
            env.close()

    def start(self) -> None:
        if self.processes:
            return
        n_slots = self.queue_size_limit + self.num_actors + self.batch_size
        self.slots = RolloutSlots(n_slots, self.slot_bytes or self._estimate_slot_bytes(), self.ctx)
        self.rollouts = self.ctx.Queue(maxsize=self.queue_size_limit)
        self.errors = self.ctx.Queue()
        self.stop = self.ctx.Event()
        with _environment(ONE_THREAD):
            for index in range(self.num_actors):
                self._start_actor(index)

    def _start_actor(self, index: int) -> None:
        process = self.ctx.Process(
            target=_actor_main,
            args=(self.spec, index, self.weights, self.slots, self.rollouts, self.errors, self.stop, os.getpid()),
            name=f"maze-actor-{index}",
            daemon=True,
        )
        process.start()
        self.processes.append(process)

    def collect(self, n: int) -> list[Rollout]:
        if not self.processes:
            raise RuntimeError("collect() before start(): use the pool as a context manager or call start()")
        if n > self.batch_size:
            raise ValueError(
                f"collect({n}): this pool was made for batches of at most {self.batch_size} rollouts "
                "(its shared-memory slots hold a full queue plus one batch); raise its batch_size"
            )
        self.slots.release(self._held)  # the previous batch is done with
        self._held = []
        batch: list[Rollout] = []
        waited_since = time.monotonic()
        while len(batch) < n:
            self._raise_on_failure()
            try:
                message = self.rollouts.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if time.monotonic() - waited_since > self.failure_timeout:
                    raise ActorFailedError(
                        f"no rollout arrived for {self.failure_timeout:.0f} s although all actors are alive"
                    ) from None
                continue
            if isinstance(message, _Inline):
                batch.append(message.rollout)
            else:
                self._held.append(message)
                batch.append(self.slots.read(message))
            waited_since = time.monotonic()
        return batch

    def _raise_on_failure(self) -> None:
        try:
            crash = self.errors.get_nowait()
        except queue.Empty:
            crash = None
        if crash is not None:
            raise ActorFailedError(f"actor {crash.index} failed: {crash.message}")
        for index, process in enumerate(self.processes):
            if process.exitcode is not None:
                raise ActorFailedError(
                    f"actor {index} (pid {process.pid}) died with exit code {process.exitcode}; "
                    "a negative code is the signal that killed it (e.g. -9: out of memory or killed)"
                )

    def learner_threads(self) -> int | None:
        """The cores the actor processes (one core each) leave, at least one: no process fights another."""
        return max(1, (os.cpu_count() or 1) - self.num_actors)

    def queue_size(self) -> int:
        try:
            return self.rollouts.qsize()
        except NotImplementedError:  # macOS has no sem_getvalue
            return -1

    def close(self) -> None:
        if not self.processes:
            return
        # Actors never block on a full queue (they put with a timeout and look at the stop flag) and never
        # wait for their queue's feeder thread at exit, so they stop on their own. The queue is not drained:
        # an actor that exits (or is killed) halfway through writing a rollout leaves a partial message in
        # the pipe, and reading it would block forever.
        self.stop.set()
        deadline = time.monotonic() + 5.0
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=1.0)
        for q in (self.rollouts, self.errors):
            q.cancel_join_thread()
            q.close()
        self.slots.close()
        self.processes, self._held = [], []
