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
flattened or loaded.
"""

from __future__ import annotations

import ctypes
import time
from multiprocessing.sharedctypes import RawArray
from typing import TYPE_CHECKING, Any

import numpy as np

from maze_impala.core import WeightPublisher, WeightSource
from maze_impala.nn.flat import flat_layout, flat_size, flatten

if TYPE_CHECKING:
    from torch import nn

RETRY_SECONDS = 1e-4
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


class SharedWeights(WeightSource, WeightPublisher):
    """Learner side: :meth:`publish`; actor side: :meth:`version` and :meth:`read`."""

    def __init__(self, module: nn.Module, version: int = 0):
        self._size = flat_size(flat_layout(module))
        self._raw_flat = RawArray(ctypes.c_float, max(1, self._size))  # a RawArray has at least one element
        self._raw_meta = RawArray(ctypes.c_int64, 2)
        """[sequence (odd while the learner writes), version]"""
        self._views: tuple[np.ndarray, np.ndarray] | None = None
        self.publish(module, version=version)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_views": None}

    @property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._views is None:
            self._views = (np.frombuffer(self._raw_flat, dtype=np.float32), np.frombuffer(self._raw_meta, np.int64))
        return self._views

    def publish(self, module: nn.Module, version: int) -> None:
        """Make ``module``'s weights the newest, stamped with ``version``."""
        flat = flatten(module).numpy()
        shared, meta = self._arrays
        if flat.size != self._size:
            raise ValueError("publish: the module does not have the layout these shared weights were made for")
        meta[0] += 1  # odd: a write is under way
        shared[: flat.size] = flat
        meta[1] = version
        meta[0] += 1  # even: consistent again

    def version(self) -> int:
        return int(self._arrays[1][1])

    def read(self) -> tuple[np.ndarray, int]:
        shared, meta = self._arrays
        while True:
            before = int(meta[0])
            if before % 2 == 0:
                flat, version = shared[: self._size].copy(), int(meta[1])
                if int(meta[0]) == before:
                    return flat, version
            time.sleep(RETRY_SECONDS)  # the learner is writing: a copy takes microseconds
