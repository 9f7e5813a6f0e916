"""Learners 1..N-1 as processes on this machine (``runner=local`` and ``runner=dev``), owned like the actors.

Each learner process has a duplex pipe to learner 0, which sends it the learner's parts
(policy, critic, config) once, then states and shards; it reports ``ready`` once built,
and ``error`` with its traceback before it exits on a failure. It dies with learner 0's
process (PDEATHSIG, and a watch on its parent), ignores Ctrl-C (learner 0 stops it), and
exits at once when told to stop. The gradient sums go through the process group, not the
pipe (:mod:`maze_impala.impala.parallel`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import time
from typing import Any

import torch

from maze_impala.children import die_with_parent, failure_report, how_it_ended, run_child, stop_children
from maze_impala.impala.parallel import ProcessGroup, Shard, host_store
from maze_impala.impala.replicas import (
    STARTUP_TIMEOUT_S,
    LearnerFailedError,
    LearnerParts,
    Replicas,
    build_replica,
    timed_out,
)
from maze_impala.startup import enter_process

POLL_SECONDS = 0.1
"""How often a waiting learner process looks at its parent, and learner 0 at a starting one."""


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
        enter_process(threads)
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
            _send(conn, ("error", failure_report(error)))
        raise SystemExit(1) from None


def replica_process(*args: Any) -> None:
    """:func:`replica_main`, then an immediate exit (:func:`~maze_impala.children.run_child`, as an actor's)."""
    run_child(replica_main, *args)


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
            return LearnerFailedError(f"learner {rank} (pid {process.pid}) {how_it_ended(process.exitcode)}")
        return LearnerFailedError(f"learner {rank} (pid {process.pid}) {what}")

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                _send(conn, None)
        stop_children(self.processes)
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
