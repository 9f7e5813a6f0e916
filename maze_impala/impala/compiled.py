"""``algorithm.compile``: a minibatch's forward pass and losses through ``torch.compile``.

The learner's update is many small operations; on a GPU each is a kernel launch that costs more than its arithmetic.
Compiled, the forward pass and the losses become a few fused kernels (``default``), replayed as one CUDA graph per
shape with ``reduce-overhead``. Backward, clipping and the optimizer step stay eager. The numbers a compiled update
gives are the eager update's up to float rounding (fused kernels sum in another order); ``tests/test_update_modes.py``
compares them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from maze_impala.core import StepKey
    from maze_impala.impala.batch import StepBatch
    from maze_impala.impala.losses import StepLoss

Losses = Callable[..., "tuple[torch.Tensor, dict[StepKey, StepLoss]]"]


def compiled_losses(losses: Losses, mode: str) -> Losses | None:
    """``losses`` (``(minibatch, train_policy, anchor, entropy_scale, shares, diagnostics, clock, value_scales) ->
    (total, per step key)``)
    compiled in ``mode`` (``algorithm.compile``); None for ``off``."""
    if mode == "off":
        return None
    import torch

    compiled = torch.compile(losses, mode=None if mode == "default" else mode)
    graphs = mode == "reduce-overhead"

    def call(
        minibatch: dict[StepKey, StepBatch],
        train_policy: bool,
        anchor: Any,
        entropy_scale: float,
        shares: dict[StepKey, float] | None,
        diagnostics: bool,
        clock: None = None,
        value_scales: dict[StepKey, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[StepKey, StepLoss]]:
        # Numbers that change between updates go in as tensors: a float would be compiled in as a constant
        device = next(iter(minibatch.values())).mask.device
        scale = torch.tensor(entropy_scale, device=device)
        parts = None if shares is None else {key: torch.tensor(share, device=device) for key, share in shares.items()}
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        total, losses = compiled(minibatch, train_policy, anchor, scale, parts, diagnostics, None, value_scales)
        if graphs:  # a graph's outputs live in its memory pool, which the next replay overwrites: keep copies
            losses = {
                key: type(loss)(*(None if t is None else t.clone() for t in loss)) for key, loss in losses.items()
            }
        return total, losses

    return call
