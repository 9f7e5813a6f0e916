"""The one-machine backend: each actor in its own process, rollouts through a bounded queue."""

from __future__ import annotations

import os
import queue
import signal
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing as tmp

from maze_impala.actors.actor import ActorSpec
from maze_impala.core import ActorFailedError, ActorPool, Rollout, WeightSource

POLL_SECONDS = 0.1
"""How often blocked calls look at the stop flag, the other side's liveness and errors."""


@dataclass
class _ActorCrash:
    index: int
    message: str


def _actor_main(
    spec: ActorSpec, index: int, weights: WeightSource, rollouts: Any, errors: Any, stop: Any, parent: int
) -> None:
    """Entry point of an actor process: produce rollouts until told to stop or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the learner's to handle; it stops us.
    torch.set_num_threads(1)  # one core per actor; the processes must not fight over cores
    actor = None
    try:
        actor = spec.build(index, weights)
        while not stop.is_set():
            rollout = actor.rollout()
            while True:
                try:
                    rollouts.put(rollout, timeout=POLL_SECONDS)
                    break
                except queue.Full:
                    if stop.is_set() or os.getppid() != parent:
                        return
    except BaseException as error:  # report every failure, then exit non-zero
        errors.put(_ActorCrash(index, f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None
    finally:
        rollouts.cancel_join_thread()  # never block exit on a queue nobody reads any more
        if actor is not None:
            actor.close()


class SubprocessActors(ActorPool):
    """``num_actors`` actor processes feeding a queue bounded at ``queue_size_limit`` rollouts."""

    def __init__(
        self,
        spec: ActorSpec,
        weights: WeightSource,
        num_actors: int,
        queue_size_limit: int,
        start_method: str = "spawn",
        failure_timeout: float = 120.0,
    ):
        self.spec = spec
        self.weights = weights
        self.num_actors = num_actors
        self.queue_size_limit = queue_size_limit
        self.ctx = tmp.get_context(start_method)
        self.failure_timeout = failure_timeout
        self.processes: list[Any] = []

    def start(self) -> None:
        if self.processes:
            return
        self.rollouts = self.ctx.Queue(maxsize=self.queue_size_limit)
        self.errors = self.ctx.Queue()
        self.stop = self.ctx.Event()
        for index in range(self.num_actors):
            process = self.ctx.Process(
                target=_actor_main,
                args=(self.spec, index, self.weights, self.rollouts, self.errors, self.stop, os.getpid()),
                name=f"maze-actor-{index}",
                daemon=True,
            )
            process.start()
            self.processes.append(process)

    def collect(self, n: int) -> list[Rollout]:
        if not self.processes:
            raise RuntimeError("collect() before start(): use the pool as a context manager or call start()")
        batch: list[Rollout] = []
        waited_since = time.monotonic()
        while len(batch) < n:
            self._raise_on_failure()
            try:
                batch.append(self.rollouts.get(timeout=POLL_SECONDS))
                waited_since = time.monotonic()
            except queue.Empty:
                if time.monotonic() - waited_since > self.failure_timeout:
                    raise ActorFailedError(
                        f"no rollout arrived for {self.failure_timeout:.0f} s although all actors are alive"
                    ) from None
        return batch

    def _raise_on_failure(self) -> None:
        try:
            crash = self.errors.get_nowait()
        except queue.Empty:
            crash = None
        if crash is not None:
            raise ActorFailedError(f"actor {crash.index} failed:\n{crash.message}")
        for index, process in enumerate(self.processes):
            if process.exitcode is not None:
                raise ActorFailedError(
                    f"actor {index} (pid {process.pid}) died with exit code {process.exitcode}; "
                    "a negative code is the signal that killed it (e.g. -9: out of memory or killed)"
                )

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
        self.processes = []
