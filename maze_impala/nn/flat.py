"""A module's state (parameters *and* buffers) as one flat float32 vector: how weights travel to the actors.

The learner flattens its policy's state dict in order (:func:`flatten`); the weight channel carries the vector;
an actor loads it back into a torch module (:func:`load_flat`) or views it as named arrays
(:func:`unflatten`, for acting in numpy). Buffers travel with the parameters, so that running statistics such as
observation normalisers reach the actors with the weights they belong to. Floating-point state of any precision
travels as float32 (a float64 buffer is rounded on the way; its module computes in float32 from it, so the
learner's and the actors' computations see the same values).

Nothing here imports torch at module level: an actor that acts in numpy uses :func:`unflatten` only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import nn

Layout = list[tuple[str, tuple[int, ...], int]]
"""(name, shape, number of elements) of each tensor of a state dict, in order: how a flat vector splits."""


def flat_layout(module: nn.Module) -> Layout:
    """The layout of ``module``'s state in one flat float32 vector (floating-point state only)."""
    state = module.state_dict()
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            raise TypeError(f"published weights support floating-point state only; {name} is {tensor.dtype}")
    return [(name, tuple(t.shape), t.numel()) for name, t in state.items()]


def flat_size(layout: Layout) -> int:
    return sum(numel for _, _, numel in layout)


def flatten(module: nn.Module) -> torch.Tensor:
    """``module``'s state as one flat float32 CPU vector."""
    import torch

    with torch.no_grad():
        parts = [t.detach().reshape(-1).float().cpu() for t in module.state_dict().values()]
        return torch.cat(parts) if parts else torch.zeros(0)


def unflatten(flat: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Views of ``flat`` shaped as ``layout`` says, by state-dict name."""
    arrays, offset = {}, 0
    for name, shape, numel in layout:
        arrays[name] = flat[offset : offset + numel].reshape(shape)
        offset += numel
    return arrays


def load_flat(module: nn.Module, flat: np.ndarray | torch.Tensor) -> None:
    """Load a vector :func:`flatten` made (or its numpy copy) into ``module``, laid out as its state dict."""
    import torch

    vector = torch.from_numpy(flat) if isinstance(flat, np.ndarray) else flat
    state, offset = {}, 0
    for name, shape, numel in flat_layout(module):
        state[name] = vector[offset : offset + numel].view(shape)
        offset += numel
    module.load_state_dict(state)
