"""Versioned policy weights in shared memory: the learner publishes, actors pull.

The weights live in one flat float32 tensor in shared memory plus a version
counter, so publishing costs one copy and an actor that is up to date pays one
integer read; nothing is pickled per update. The same object works in-process
(sequential backend) and across processes (it pickles as shared-memory handles).
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import torch
from torch import nn

from maze_impala.core import WeightPublisher, WeightSource


class SharedWeights(WeightSource, WeightPublisher):
    """Learner side: :meth:`publish`; actor side: :meth:`version` and :meth:`load_into`."""

    def __init__(self, module: nn.Module, ctx: Any = None, version: int = 0):
        state = module.state_dict()
        for name, tensor in state.items():
            if not tensor.is_floating_point():
                raise TypeError(f"SharedWeights supports floating-point state only; {name} is {tensor.dtype}")
        self._layout = [(name, tuple(t.shape), t.numel()) for name, t in state.items()]
        total = sum(n for _, _, n in self._layout)
        self._flat = torch.zeros(total, dtype=torch.float32).share_memory_()
        self._version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._lock = (ctx or mp.get_context("spawn")).Lock()
        self.publish(module, version=version)

    def publish(self, module: nn.Module, version: int) -> None:
        """Make ``module``'s weights the newest, stamped with ``version``."""
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).float().cpu() for t in module.state_dict().values()])
        if flat.numel() != self._flat.numel():
            raise ValueError("publish: the module does not have the layout these shared weights were made for")
        with self._lock:
            self._flat.copy_(flat)
            self._version[0] = version

    def version(self) -> int:
        return int(self._version[0])

    def load_into(self, module: nn.Module) -> int:
        with self._lock:
            flat = self._flat.clone()
            version = int(self._version[0])
        state, offset = {}, 0
        for name, shape, numel in self._layout:
            state[name] = flat[offset : offset + numel].view(shape)
            offset += numel
        module.load_state_dict(state)
        return version
