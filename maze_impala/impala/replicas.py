"""Several learners (``algorithm.num_learners``): learner 0 in the training process, the others beside it.

:class:`DataParallelLearner` is one :class:`~maze_impala.core.Learner` to the training
loop. It prepares each batch once (stacked, normalised, cut into minibatches), gives
every learner its share of each minibatch's columns (:mod:`maze_impala.impala.parallel`)
and takes its own share's update, in which the learners' gradients are summed. Only
learner 0 publishes weights and is checkpointed: the others start from its state (a
resumed run's included) and stay equal to it by construction.

Where learners 1..N-1 run is a :class:`Replicas` backend: processes on this machine
(:class:`ReplicaProcesses`) or Ray actors in a placement group
(:class:`~maze_impala.impala.ray_replicas.RayReplicas`). A learner that raises, dies or
hangs fails the run with :class:`LearnerFailedError` (a hang after
``runner.learner_timeout_s``); nothing waits on it for longer.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any

import torch

from maze_impala.actors.worker import die_with_parent
from maze_impala.config import ImpalaAlgorithmConfig
from maze_impala.core import Learner, Rollout
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.parallel import ProcessGroup, Shard, host_store

STARTUP_TIMEOUT_S = 120.0
"""Seconds a learner process may take to start (import torch, rebuild the networks) before the run fails."""
POLL_SECONDS = 0.1


class LearnerFailedError(RuntimeError):
    """A learner raised, died or stopped answering: the update cannot complete without its share."""


LearnerParts = tuple[torch.nn.Module, torch.nn.Module, ImpalaAlgorithmConfig]
"""What another learner is built from: learner 0's policy and critic (copied) and the algorithm's config."""


def build_replica(
    parts: LearnerParts, rank: int, size: int, address: str, port: int, timeout_s: float
) -> ImpalaLearner:
    """Learner ``rank`` of ``size``, joined to the group whose store learner 0 hosts at ``address:port`` (a CUDA
    learner on the GPU of its rank, round robin); it records its events nowhere (learner 0 records the pooled
    ones)."""
    policy, critic, config = parts
    if config.device.startswith("cuda"):
        config = replace(config, device=f"cuda:{rank % max(torch.cuda.device_count(), 1)}")
    device = torch.device(config.device)
    group = ProcessGroup(rank, size, timeout_s, address, port, device=device)
    return ImpalaLearner(policy, critic, config, EventHub().publisher(MultiStepIMPALAEvents), group=group)


class Replicas(ABC):
    """Learners 1..``size - 1``: started beside learner 0, fed their shards, stopped."""

    size: int
    """All learners, learner 0 included."""

    @abstractmethod
    def start(self, parts: LearnerParts) -> ProcessGroup:
        """Start the other learners from ``parts`` and return learner 0's link to them."""

    @abstractmethod
    def load(self, state: dict[str, Any]) -> None:
        """Make every other learner's state ``state`` (learner 0's :meth:`ImpalaLearner.state_dict`)."""

    @abstractmethod
    def submit(self, shards: list[Shard]) -> None:
        """Start learner ``r``'s update on ``shards[r - 1]`` (it completes with learner 0's own)."""

    @abstractmethod
    def finish(self) -> None:
        """Wait until every learner is done with the update; raise :class:`LearnerFailedError` if one failed."""

    @abstractmethod
    def failure(self, error: BaseException) -> LearnerFailedError | None:
        """What failed when learner 0's update raised ``error``: another learner (it died, raised, or a collective
        timed out waiting for it), or None: learner 0 itself."""

    @abstractmethod
    def close(self) -> None:
        """Stop every other learner; safe to call twice."""


def timed_out(error: BaseException, timeout_s: float) -> LearnerFailedError | None:
    """The error of a collective that waited ``timeout_s`` for a learner (None: ``error`` is another one)."""
    if "timed out" not in str(error).lower():
        return None
    return LearnerFailedError(f"a learner did not answer within runner.learner_timeout_s={timeout_s:g} s (it hangs, "
                              f"or runs far behind the others): {error}")  # fmt: skip


def threads_per_learner(threads: int | None, num_learners: int) -> int | None:
    """Each learner's share of ``threads``, the threads the actors leave (None: all cores; one learner keeps
    torch's default)."""
    if threads is None:
        return None if num_learners == 1 else max(1, (os.cpu_count() or 1) // num_learners)
    return max(1, threads // num_learners)


class DataParallelLearner(Learner):
    """``replicas.size`` learners as one: ``learner`` (learner 0, which the training loop publishes and saves)
    and the others, each updating on its share of every batch."""

    def __init__(self, learner: ImpalaLearner, replicas: Replicas):
        self.learner, self.replicas = learner, replicas
        self.policy = learner.policy
        self.events = learner.events
        try:
            learner.group = replicas.start((learner.policy, learner.critic, learner.config))
            replicas.load(learner.state_dict())
        except BaseException:
            replicas.close()
            raise

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.learner.version

    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        for rollout in rollouts:
            self.events.policy_lag(value=self.learner.version - rollout.policy_version)
        shards = self.learner.prepare(rollouts, train_policy).split(self.replicas.size)
        self.replicas.submit(shards[1:])
        try:
            self.learner.update(shards[0])
        except Exception as error:  # a collective that lost a learner or timed out; or a failure of our own
            failure = self.replicas.failure(error)
            if failure is None:
                raise
            raise failure from error
        self.replicas.finish()

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self.replicas.load(self.learner.state_dict())

    def close(self) -> None:
        self.replicas.close()


def _send(conn: Any, message: object) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def replica_main(
    conn: Any, parent: int, rank: int, size: int, port: int, timeout_s: float, threads: int | None
) -> None:
    """A learner process: build learner ``rank``, then take the updates and states learner 0 sends, until it
    sends ``None`` or goes away; a failure is reported on ``conn`` before the process exits 1."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is learner 0's to handle; it stops us
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        parts = pickle.loads(conn.recv_bytes())
        _send(conn, ("ready", os.getpid()))
        learner = build_replica(parts, rank, size, "127.0.0.1", port, timeout_s)
        while True:
            while not conn.poll(POLL_SECONDS):
                if os.getppid() != parent:
                    return
            message = pickle.loads(conn.recv_bytes())
            if message is None:
                return
            kind, payload = message
            if kind == "state":
                learner.load_state_dict(payload)
            else:
                learner.update(payload)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # learner 0 closed our pipe: it is stopping
    except BaseException as error:
        with contextlib.suppress(OSError):
            _send(conn, ("error", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None


def replica_process(*args: Any) -> None:
    """:func:`replica_main`, then an immediate exit (as an actor process, see
    :func:`~maze_impala.actors.worker.actor_process`)."""
    code = 0
    try:
        replica_main(*args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class ReplicaProcesses(Replicas):
    """Learners 1..``num_learners - 1`` as processes on this machine, each with ``threads`` torch threads."""

    def __init__(self, num_learners: int, timeout_s: float, threads: int | None = None, start_method: str = "spawn"):
        self.size, self.timeout_s, self.threads = num_learners, timeout_s, threads
        self.ctx = multiprocessing.get_context(start_method)
        self.processes: list[Any] = []
        self.conns: list[Any] = []

    def start(self, parts: LearnerParts) -> ProcessGroup:
        store = host_store(self.size, self.timeout_s)
        for rank in range(1, self.size):
            ours, theirs = self.ctx.Pipe(duplex=True)
            process = self.ctx.Process(
                target=replica_process,
                args=(theirs, os.getpid(), rank, self.size, store.port, self.timeout_s, self.threads),
                name=f"maze-learner-{rank}",
                daemon=True,
            )
            process.start()
            theirs.close()
            self.processes.append(process)
            self.conns.append(ours)
        message = pickle.dumps(parts, protocol=pickle.HIGHEST_PROTOCOL)
        for conn in self.conns:
            conn.send_bytes(message)
        self._wait_ready()
        device = torch.device(parts[2].device)
        return ProcessGroup(0, self.size, self.timeout_s, store=store, device=device)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        for rank, conn in enumerate(self.conns, start=1):
            while not conn.poll(POLL_SECONDS):
                if not self.processes[rank - 1].is_alive() or time.monotonic() > deadline:
                    raise self._failed(rank, f"did not start within {STARTUP_TIMEOUT_S:.0f} s")
            try:
                kind, payload = pickle.loads(conn.recv_bytes())
            except (OSError, EOFError) as error:  # it exited before its report (e.g. it could not import)
                raise self._failed(rank, "failed to start") from error
            if kind != "ready":
                raise LearnerFailedError(f"learner {rank} failed to start: {payload}")

    def load(self, state: dict[str, Any]) -> None:
        for rank in range(1, self.size):
            self._post(rank, ("state", state))

    def submit(self, shards: list[Shard]) -> None:
        for rank, shard in enumerate(shards, start=1):
            self._post(rank, ("update", shard))

    def _post(self, rank: int, message: object) -> None:
        try:
            _send(self.conns[rank - 1], message)
        except OSError as error:
            raise self._failed(rank, f"could not be reached ({error})") from error

    def finish(self) -> None:
        for rank, conn in enumerate(self.conns, start=1):
            if conn.poll() or not self.processes[rank - 1].is_alive():
                raise self._failed(rank, "stopped")

    def failure(self, error: BaseException) -> LearnerFailedError | None:
        deadline = time.monotonic() + 2.0  # a learner that raised is writing its report, or exiting
        while time.monotonic() < deadline:
            for rank, conn in enumerate(self.conns, start=1):
                if conn.poll() or not self.processes[rank - 1].is_alive():
                    return self._failed(rank, "stopped")
            time.sleep(POLL_SECONDS)
        return timed_out(error, self.timeout_s)

    def _failed(self, rank: int, what: str) -> LearnerFailedError:
        """The error of learner ``rank``: its own report if it sent one, else how its process ended."""
        conn, process = self.conns[rank - 1], self.processes[rank - 1]
        with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError):
            if conn.poll():
                kind, payload = pickle.loads(conn.recv_bytes())
                if kind == "error":
                    return LearnerFailedError(f"learner {rank} raised {payload.strip()}")
        process.join(timeout=1.0)
        if process.exitcode is not None:
            code = process.exitcode
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return LearnerFailedError(f"learner {rank} (pid {process.pid}) {how}")
        return LearnerFailedError(f"learner {rank} (pid {process.pid}) {what}")

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                _send(conn, None)
        deadline = time.monotonic() + 5.0
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
