"""The recurrent core: an LSTM or GRU between a step key's observation encoder and its output layer.

Its state is an explicit input and output (a dict of ``[B, units]`` tensors, ``h`` and for an LSTM ``c``), never
kept in the module: the actors keep one per env and agent, zeroed where that agent's episode ends (the initial
state is zeros), and record the state each rollout starts from; the learner re-unrolls the core from it over the
rollout (:meth:`RecurrentCore.unroll`), zeroing the state before every decision that starts a new episode, so
that it computes what the actors computed.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from maze_impala.nn.numpy_forms import CoreForm

TorchState = dict[str, torch.Tensor]
RECURRENT_KINDS = ("lstm", "gru")


class Unrolled(NamedTuple):
    out: torch.Tensor
    """The core's output for every row, ``[T, N, units]``."""
    ends: dict[int, TorchState]
    """The state after row ``t`` for every ``t`` that ends a run of rows without a reset (the row before each
    reset, and the last row): where a truncated episode's final observation is valued from."""


class RecurrentCore(nn.Module):
    """A one-layer LSTM or GRU of ``units`` units over ``n_in`` input features."""

    def __init__(self, kind: str, n_in: int, units: int):
        super().__init__()
        if kind not in RECURRENT_KINDS:
            raise ValueError(f"a recurrent core is one of {RECURRENT_KINDS}, got {kind!r}")
        self.kind, self.units = kind, units
        self.rnn = nn.LSTM(n_in, units) if kind == "lstm" else nn.GRU(n_in, units)

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"h": (self.units,), "c": (self.units,)} if self.kind == "lstm" else {"h": (self.units,)}

    def _pack(self, state: TorchState) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if self.kind == "lstm":
            return state["h"].unsqueeze(0).contiguous(), state["c"].unsqueeze(0).contiguous()
        return state["h"].unsqueeze(0).contiguous()

    def _unpack(self, packed: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> TorchState:
        if self.kind == "lstm":
            return {"h": packed[0][0], "c": packed[1][0]}
        return {"h": packed[0]}  # type: ignore[index]

    def step(self, x: torch.Tensor, state: TorchState) -> tuple[torch.Tensor, TorchState]:
        """One step for a batch: ``x`` ``[B, n_in]``, the state ``[B, units]`` per name."""
        out, packed = self.rnn(x.unsqueeze(0), self._pack(state))
        return out[0], self._unpack(packed)

    def unroll(self, x: torch.Tensor, state: TorchState, first: torch.Tensor) -> Unrolled:
        """The core over ``x`` ``[T, N, n_in]`` from ``state`` (``[N, units]`` per name), the state zeroed before
        every row ``t`` where ``first[t]`` (``[T, N]`` bool: the decision starts a new episode).

        Runs of rows without a reset go through torch's fused recurrence in one call each.
        """
        T = x.shape[0]
        resets = first.any(1).nonzero().flatten().tolist()  # one host transfer for the whole unroll
        starts = sorted({0, *resets})
        packed = self._pack(state)
        outs, ends = [], {}
        for start, stop in zip(starts, [*starts[1:], T]):
            if start in resets:
                keep = (~first[start]).to(x.dtype).unsqueeze(-1)
                packed = tuple(p * keep for p in packed) if self.kind == "lstm" else packed * keep
            out, packed = self.rnn(x[start:stop], packed)
            outs.append(out)
            ends[stop - 1] = self._unpack(packed)
        return Unrolled(torch.cat(outs) if len(outs) > 1 else outs[0], ends)

    def numpy_form(self, prefix: str) -> CoreForm:
        name = f"{prefix}rnn."
        return CoreForm(
            self.kind,
            self.units,
            name + "weight_ih_l0",
            name + "weight_hh_l0",
            name + "bias_ih_l0",
            name + "bias_hh_l0",
        )
