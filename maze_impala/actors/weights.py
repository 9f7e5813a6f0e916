"""Versioned policy weights in shared memory: the learner publishes, actors pull, nobody locks.

The weights live in one flat float32 vector in shared memory plus a sequence counter
(a seqlock): the learner, the only writer, makes the counter odd, copies, and makes it
even again with the new version; an actor copies the weights and keeps the copy only if
the counter was the same even number before and after. Nothing can be held by an actor,
so an actor killed while it reads blocks nobody, and an actor that is up to date pays
one integer read. The same object works in-process (sequential backend) and across
processes: the memory is a ``multiprocessing`` shared array, which reaches actor
processes as they start (as their arguments) and is released when the last process
that maps it exits, however it exits. Actors that act in numpy read the vector as it is
(:meth:`SharedWeights.read`), so this module imports torch only where a module is
flattened or loaded. The learner's snapshot pool (self-play against past selves) lives
beside them the same way: a slot per snapshot under a sequence counter of its own, so a
restarted actor finds the pool as the learner keeps it, and so do the learner's estimates of
the trained policy's score against each snapshot.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from multiprocessing.sharedctypes import RawArray
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from maze_impala.core import WeightSource
from maze_impala.nn.flat import flat_layout, flat_size, flatten
from maze_impala.play.pool import PoolPublisher, PoolSource, Snapshots

if TYPE_CHECKING:
    from torch import nn

RETRY_SECONDS = 1e-4
T = TypeVar("T")
__all__ = ["ModuleWeights", "SharedWeights"]


class ModuleWeights(WeightSource):
    """The weights of a module in this process, as a weight source: every :meth:`read` is the module's state as it
    is now (for the evaluator and the rollout CLI, which act with a module's current weights)."""

    def __init__(self, module: nn.Module, version: int = 0):
        self.module, self._version = module, version

    def version(self) -> int:
        return self._version

    def read(self) -> tuple[np.ndarray, int]:
        return flatten(self.module).numpy(), self._version


class SharedWeights(PoolSource, PoolPublisher):
    """Learner side: :meth:`publish` (and :meth:`publish_snapshots`); actor side: :meth:`version`, :meth:`read`
    (and :meth:`snapshots`, :meth:`read_snapshot`). ``snapshot_slots``: how many snapshots of the weights the pool
    holds at most (0: no pool), each in a slot of its own, published under a seqlock of its own."""

    def __init__(self, module: nn.Module, version: int = 0, snapshot_slots: int = 0):
        self._size = flat_size(flat_layout(module))
        self._slots = snapshot_slots
        self._raw_flat = RawArray(ctypes.c_float, max(1, self._size))  # a RawArray has at least one element
        self._raw_meta = RawArray(ctypes.c_int64, 2)
        """[sequence (odd while the learner writes), version]"""
        self._raw_pool = RawArray(ctypes.c_float, max(1, self._size * snapshot_slots))
        self._raw_pool_meta = RawArray(ctypes.c_int64, 1 + 2 * snapshot_slots)
        """[sequence, then (snapshot number, version) per slot]; number 0 marks a free slot."""
        self._raw_scores = RawArray(ctypes.c_double, 1 + 2 * snapshot_slots)
        """[sequence, then (snapshot number, score) per snapshot with an estimate]; number 0 ends the list."""
        self._views: tuple[np.ndarray, ...] | None = None
        self.publish(module, version=version)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_views": None}

    @property
    def _arrays(self) -> tuple[np.ndarray, ...]:
        if self._views is None:
            self._views = (
                np.frombuffer(self._raw_flat, dtype=np.float32),
                np.frombuffer(self._raw_meta, dtype=np.int64),
                np.frombuffer(self._raw_pool, dtype=np.float32),
                np.frombuffer(self._raw_pool_meta, dtype=np.int64),
                np.frombuffer(self._raw_scores, dtype=np.float64),
            )
        return self._views

    def publish(self, module: nn.Module, version: int) -> None:
        """Make ``module``'s weights the newest, stamped with ``version``."""
        flat = flatten(module).numpy()
        shared, meta = self._arrays[:2]
        if flat.size != self._size:
            raise ValueError("publish: the module does not have the layout these shared weights were made for")
        meta[0] += 1  # odd: a write is under way
        shared[: flat.size] = flat
        meta[1] = version
        meta[0] += 1  # even: consistent again

    def version(self) -> int:
        return int(self._arrays[1][1])

    def read(self) -> tuple[np.ndarray, int]:
        shared, meta = self._arrays[:2]
        return _consistent(meta, lambda: (shared[: self._size].copy(), int(meta[1])))

    def publish_snapshots(self, snapshots: Snapshots) -> None:
        if len(snapshots) > self._slots:
            raise ValueError(
                f"publish_snapshots: {len(snapshots)} snapshots, but these shared weights were made "
                f"with snapshot_slots={self._slots}"
            )
        if any(flat.size != self._size for _, flat in snapshots.values()):  # checked before the counter goes odd
            raise ValueError("publish_snapshots: a snapshot does not have the layout of these shared weights")
        pool, meta = self._arrays[2:4]
        slots = meta[1:].reshape(self._slots, 2)
        kept = {int(number) for number in slots[:, 0] if int(number) in snapshots}
        free = iter([slot for slot in range(self._slots) if int(slots[slot, 0]) not in kept])
        meta[0] += 1
        for slot in range(self._slots):
            if int(slots[slot, 0]) not in kept:
                slots[slot] = 0
        for number, (version, flat) in snapshots.items():
            if number in kept:
                continue
            slot = next(free)
            pool[slot * self._size : (slot + 1) * self._size] = flat
            slots[slot] = number, version
        meta[0] += 1

    def snapshots(self) -> dict[int, int]:
        meta = self._arrays[3]
        slots = _consistent(meta, lambda: meta[1:].copy()).reshape(self._slots, 2)
        return {int(number): int(version) for number, version in sorted(slots.tolist()) if number > 0}

    def read_snapshot(self, number: int) -> np.ndarray:
        pool, meta = self._arrays[2:4]

        def copy() -> np.ndarray | None:
            slots = meta[1:].reshape(self._slots, 2)
            found = np.flatnonzero(slots[:, 0] == number)
            if len(found) == 0:
                return None
            slot = int(found[0])
            return pool[slot * self._size : (slot + 1) * self._size].copy()

        flat = _consistent(meta, copy)
        if flat is None:
            raise KeyError(f"snapshot {number} is not in the pool")
        return flat

    def publish_pool_scores(self, scores: dict[int, float]) -> None:
        if len(scores) > self._slots:
            raise ValueError(
                f"publish_pool_scores: {len(scores)} scores, but these shared weights were made with "
                f"snapshot_slots={self._slots}"
            )
        shared = self._arrays[4]
        shared[0] += 1
        entries = shared[1:].reshape(self._slots, 2)
        entries[:] = 0.0
        for row, (number, score) in enumerate(scores.items()):
            entries[row] = number, score
        shared[0] += 1

    def pool_scores(self) -> dict[int, float]:
        shared = self._arrays[4]
        entries = _consistent(shared, lambda: shared[1:].copy()).reshape(self._slots, 2)
        return {int(number): float(score) for number, score in entries.tolist() if number > 0}


def _consistent(meta: np.ndarray, copy: Callable[[], T]) -> T:
    """What ``copy`` returns while the sequence counter ``meta[0]`` stayed the same even number (the seqlock's
    read: retried while the learner writes, which takes microseconds)."""
    while True:
        before = int(meta[0])
        if before % 2 == 0:
            value = copy()
            if int(meta[0]) == before:
                return value
        time.sleep(RETRY_SECONDS)
