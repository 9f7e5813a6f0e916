"""Versioned policy weights in shared memory: the learner publishes, actors pull, nobody locks.

The weights live in one flat float32 tensor in shared memory plus a sequence counter
(a seqlock): the learner, the only writer, makes the counter odd, copies, and makes it
even again with the new version; an actor copies the weights and keeps the copy only if
the counter was the same even number before and after. Nothing can be held by an actor,
so an actor killed while it reads blocks nobody, and an actor that is up to date pays
one integer read. The same object works in-process (sequential backend) and across
processes (it pickles as shared-memory handles).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from maze_impala.core import WeightPublisher, WeightSource

RETRY_SECONDS = 1e-4
Layout = list[tuple[str, tuple[int, ...], int]]
"""(name, shape, number of elements) of each tensor of a state dict, in order."""


def flat_layout(module: nn.Module) -> Layout:
    """The layout of ``module``'s state in one flat float32 vector (floating-point state only)."""
    state = module.state_dict()
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise TypeError(f"published weights support floating-point state only; {name} is {tensor.dtype}")
    return [(name, tuple(t.shape), t.numel()) for name, t in state.items()]


def flatten(module: nn.Module) -> torch.Tensor:
    """``module``'s state as one flat float32 CPU vector."""
    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).float().cpu() for t in module.state_dict().values()])


def load_flat(module: nn.Module, flat: torch.Tensor, layout: Layout) -> None:
    """Load a vector :func:`flatten` made into ``module``."""
    state, offset = {}, 0
    for name, shape, numel in layout:
        state[name] = flat[offset : offset + numel].view(shape)
        offset += numel
    module.load_state_dict(state)


class SharedWeights(WeightSource, WeightPublisher):
    """Learner side: :meth:`publish`; actor side: :meth:`version` and :meth:`load_into`."""

    def __init__(self, module: nn.Module, version: int = 0):
        self._layout = flat_layout(module)
        total = sum(n for _, _, n in self._layout)
        self._flat = torch.zeros(total, dtype=torch.float32).share_memory_()
        self._meta = torch.zeros(2, dtype=torch.int64).share_memory_()
        """[sequence (odd while the learner writes), version]"""
        self.publish(module, version=version)

    def publish(self, module: nn.Module, version: int) -> None:
        """Make ``module``'s weights the newest, stamped with ``version``."""
        flat = flatten(module)
        if flat.numel() != self._flat.numel():
            raise ValueError("publish: the module does not have the layout these shared weights were made for")
        self._meta[0] += 1  # odd: a write is under way
        self._flat.copy_(flat)
        self._meta[1] = version
        self._meta[0] += 1  # even: consistent again

    def version(self) -> int:
        return int(self._meta[1])

    def load_into(self, module: nn.Module) -> int:
        while True:
            before = int(self._meta[0])
            if before % 2 == 0:
                flat, version = self._flat.clone(), int(self._meta[1])
                if int(self._meta[0]) == before:
                    break
            time.sleep(RETRY_SECONDS)  # the learner is writing: a copy takes microseconds
        load_flat(module, flat, self._layout)
        return version
