"""Rollouts from actor processes to the learner through preallocated shared memory.

The learner allocates ``n_slots`` byte arenas ("slots") in shared memory before any
actor starts and keeps the list of free ones itself. It grants an actor one free slot
at a time; the actor writes its next rollout into it and answers with the slot's number
(see :mod:`maze_impala.actors.worker`):

* every numpy array of the rollout is copied into the slot once (one ``memcpy``),
  at a 64-byte aligned offset;
* everything else (the layout of those arrays, the events, the policy version) is
  a small pickle at the end of the slot, whose place the slot's header records.

The learner reads the rollout back as numpy views of the slot: nothing is
unpickled but the small skeleton, and no array is copied until the learner stacks
the batch. It frees the slots of a batch when it takes the next one, so the
rollouts that :meth:`SubprocessActors.collect` returns stay valid until the next
``collect``. A slot belongs to the learner or to exactly one actor: when an actor
dies, the slot it was granted goes back to the free list (unless its message
arrived), so repeated deaths never lose slots. A rollout larger than a slot (an env
whose agent count grows beyond the estimate) travels pickled instead, and a warning
says so once.
"""

from __future__ import annotations

import ctypes
import dataclasses
import io
import pickle
from multiprocessing.sharedctypes import RawArray
from typing import Any

import numpy as np

from maze_impala.actors.actor import ActorSpec
from maze_impala.core import Rollout
from maze_impala.envs.layout import decision_layouts
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventRecord
from maze_impala.play.spec import load_acting

ALIGN = 64
HEADER = 64
"""Bytes at the start of a slot: the offset and length of the pickled skeleton (two int64)."""


class SlotFullError(Exception):
    """The rollout does not fit into a slot."""


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class _SlotPickler(pickle.Pickler):
    """Pickles a rollout's skeleton; its numpy arrays go into the slot, referenced by offset."""

    def __init__(self, file: io.BytesIO, slot: np.ndarray):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.slot, self.end = slot, HEADER

    def persistent_id(self, obj: Any) -> tuple[int, str, tuple[int, ...]] | None:
        if type(obj) is not np.ndarray or obj.dtype.hasobject:
            return None
        start = _align(self.end)
        stop = start + obj.nbytes
        if stop > len(self.slot):
            raise SlotFullError
        np.copyto(self.slot[start:stop].view(obj.dtype).reshape(obj.shape), obj)
        self.end = stop
        return start, obj.dtype.str, obj.shape


class _SlotUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, slot: np.ndarray):
        super().__init__(file)
        self.slot = slot

    def persistent_load(self, pid: tuple[int, str, tuple[int, ...]]) -> np.ndarray:
        start, dtype, shape = pid
        dtype_ = np.dtype(dtype)
        return self.slot[start : start + dtype_.itemsize * int(np.prod(shape))].view(dtype_).reshape(shape)


class RolloutSlots:
    """``n_slots`` shared byte arenas of ``slot_bytes`` each.

    Made by the learner's process; pickles (as shared-memory handles) to the actor
    processes, which :meth:`write` into the slots they are granted. The
    learner reads them with :meth:`read`; which slots are free is the learner's bookkeeping.
    """

    def __init__(self, n_slots: int, slot_bytes: int):
        if n_slots < 1 or slot_bytes <= HEADER:
            raise ValueError(f"need at least one slot of more than {HEADER} bytes, got {n_slots} x {slot_bytes}")
        self.n_slots, self.slot_bytes = n_slots, _align(slot_bytes)
        self.memory = RawArray(ctypes.c_uint8, n_slots * self.slot_bytes)  # zeroed; freed with its last process
        self._view: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_view": None}

    @property
    def array(self) -> np.ndarray:
        """All slots as one ``[n_slots, slot_bytes]`` uint8 array: a view of the shared memory."""
        if self._view is None:
            self._view = np.frombuffer(self.memory, dtype=np.uint8).reshape(self.n_slots, self.slot_bytes)
        return self._view

    def _slot(self, slot: int) -> np.ndarray:
        return self.array[slot]

    def write(self, slot: int, rollout: Rollout) -> bool:
        """Write ``rollout`` into ``slot``; False (slot untouched but for scratch) if it does not fit."""
        memory, buffer = self._slot(slot), io.BytesIO()
        pickler = _SlotPickler(buffer, memory)
        # events as plain tuples: a NamedTuple pickles about 8 times slower, and a rollout carries dozens
        skeleton = dataclasses.replace(rollout, events=[tuple(record) for record in rollout.events])
        try:
            pickler.dump(skeleton)
        except SlotFullError:
            return False
        pickled = buffer.getbuffer()
        start = _align(pickler.end)
        if start + len(pickled) > len(memory):
            return False
        memory[start : start + len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
        memory[:16].view(np.int64)[:] = (start, len(pickled))
        return True

    def read(self, slot: int) -> Rollout:
        """The rollout in ``slot``, its arrays viewing the slot (valid until the slot is released)."""
        memory = self._slot(slot)
        start, length = (int(v) for v in memory[:16].view(np.int64))
        rollout = _SlotUnpickler(io.BytesIO(memory[start : start + length].tobytes()), memory).load()
        rollout.events = [EventRecord(*record) for record in rollout.events]
        return rollout


def estimate_rollout_bytes(env: StructuredEnv, spec: ActorSpec) -> int:
    """A generous bound on the size of one rollout of ``spec``'s actors on ``env``: each step key's
    :class:`~maze_impala.envs.layout.DecisionLayout` with every column full and every decision truncated, plus
    room for events. Step keys whose agent count varies (-1) are sized for 4 agents per env; a rollout that does
    not fit a slot still travels (pickled)."""
    total = 1 << 16  # the pickled skeleton: events, bookkeeping
    # the recurrent state's shapes as the policy's acting declares them (on the CPU: the shapes are the device's)
    learned = spec.lineup.learned
    acting = load_acting(dataclasses.replace(learned, device="cpu") if learned.device else learned, env)
    layouts = decision_layouts(
        list(env.agent_counts_dict),
        env.observation_spaces_dict,
        env.action_spaces_dict,
        acting.state_shapes,
        spec.lineup.records_ancestors,
    )
    for key, layout in layouts.items():
        count = env.agent_counts_dict.get(key, 1)
        columns = spec.envs_per_actor * (count if count > 0 else 4)
        total += layout.rollout_bytes(spec.n_rollout_steps + 2, columns) + layout.n_arrays * ALIGN  # a gap each
    return total
