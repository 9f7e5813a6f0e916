"""The recurrent core: an LSTM or GRU between a step key's observation encoder and its output layer.

Its state is an explicit input and output (a dict of ``[B, units]`` tensors, ``h`` and for an LSTM ``c``), never
kept in the module: the actors keep one per env and agent, zeroed where that agent's episode ends (the initial
state is zeros), and record the state each rollout starts from; the learner re-unrolls the core from it over the
rollout (:meth:`RecurrentCore.unroll`), zeroing the state before every decision that starts a new episode, so
that it computes what the actors computed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import torch
from torch import nn

from maze_impala.nn.numpy_forms import CoreForm

TorchState = dict[str, torch.Tensor]
RECURRENT_KINDS = ("lstm", "gru")


class Unrolled(NamedTuple):
    out: torch.Tensor
    """The core's output for every row, ``[T, N, units]``."""
    state_after: Callable[[torch.Tensor, torch.Tensor], TorchState]
    """``state_after(rows, columns)``: the state after each cell ``(rows[k], columns[k])`` (``[K]`` each), as
    ``[K, units]`` per name, without gradients: where a truncated episode's final observation is valued from."""


class _Runs(NamedTuple):
    """The rows of an unroll cut at their resets into runs, and the runs grouped by length into a few fused calls
    (see :meth:`RecurrentCore.unroll`)."""

    calls: list[tuple[torch.Tensor, torch.Tensor]]
    """Per call, ``gather`` ``[L, R]``: the flat index ``t * N + n`` of the row cell at each step of each of its
    ``R`` runs (``T * N``: padding after a run shorter than ``L``), and ``column`` ``[R]``: the column whose
    recorded state a run starts from, or -1 for a run after a reset (a zero state)."""
    scatter: torch.Tensor
    """``[T * N]``: each row cell's index in the calls' outputs, concatenated flat in call order."""
    starts: torch.Tensor
    """``[T, N]``: the row where the run holding each cell starts."""


def _runs(first: torch.Tensor) -> _Runs:
    """The runs of ``first`` (``[T, N]``, on the host). Runs of up to 2, 4, 8, ... rows share a call, each run a
    column starting at row 0: at most ``log2(T) + 1`` calls, each at most twice the rows its runs need."""
    T, N = first.shape
    resets = first.clone()
    resets[0] = True  # every column's first run starts at row 0
    rows = torch.arange(T).unsqueeze(1).expand(T, N)
    starts = torch.cummax(torch.where(resets, rows, 0), 0).values
    offset = (rows - starts).reshape(-1)  # a cell's step in its run
    flat_resets = resets.reshape(-1)
    ids = flat_resets.cumsum(0) - 1  # runs numbered in (row, column) order: later runs of a column, larger ids
    run = torch.cummax(torch.where(flat_resets, ids, -1).view(T, N), 0).values.reshape(-1)
    lengths = torch.bincount(run)
    width = torch.minimum(2 ** torch.ceil(torch.log2(lengths.double())).long(), torch.tensor(T))
    start_row, column = flat_resets.view(T, N).nonzero(as_tuple=True)
    column = torch.where((start_row == 0) & ~first[0, column], column, -1)
    position = torch.zeros_like(lengths)
    base, calls, bases, counts = 0, [], torch.zeros_like(lengths), torch.zeros_like(lengths)
    for call_rows in torch.unique(width).tolist():
        members = (width == call_rows).nonzero().flatten()
        position[members] = torch.arange(len(members))
        bases[members], counts[members] = base, len(members)
        calls.append((call_rows, members))
        base += call_rows * len(members)
    scatter = bases[run] + offset * counts[run] + position[run]
    gather = torch.full((base,), T * N, dtype=torch.long)
    gather[scatter] = torch.arange(T * N)
    laid_out, done = [], 0
    for call_rows, members in calls:
        size = call_rows * len(members)
        laid_out.append((gather[done : done + size].view(call_rows, len(members)), column[members]))
        done += size
    return _Runs(laid_out, scatter, starts)


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

        Each column is cut at its resets into runs, and every run becomes a column of its own, from its column's
        state or (after a reset) a zero state; runs of similar length share one call of torch's fused recurrence
        (see :func:`_runs`). A batch of many short episodes costs a few calls, not one per reset.
        """
        T, N = first.shape
        on_host = first.cpu()  # one host transfer for the whole unroll
        if not on_host[1:].any():
            keep = (~first[0]).to(x.dtype).unsqueeze(-1)
            out, _ = self.rnn(x, self._pack({k: v * keep for k, v in state.items()}))
            starts = torch.zeros(T, N, dtype=torch.long)
        else:
            runs = _runs(on_host)
            flat = torch.cat([x.reshape(T * N, -1), x.new_zeros(1, x.shape[-1])])
            padded = {k: torch.cat([v, v.new_zeros(1, v.shape[-1])]) for k, v in state.items()}  # row -1: zeros
            outs = []
            for gather, column in runs.calls:
                gather, column = gather.to(x.device), column.to(x.device)
                initial = {k: v[column] for k, v in padded.items()}
                out, _ = self.rnn(flat[gather.reshape(-1)].view(*gather.shape, -1), self._pack(initial))
                outs.append(out.reshape(-1, out.shape[-1]))
            out = torch.cat(outs)[runs.scatter.to(x.device)].view(T, N, -1)
            starts = runs.starts
        return Unrolled(out, partial(self._state_after, x.detach(), state, on_host, starts))

    @torch.no_grad()
    def _state_after(self, x: torch.Tensor, state: TorchState, first: torch.Tensor, starts: torch.Tensor,
                     rows: torch.Tensor, columns: torch.Tensor) -> TorchState:  # fmt: skip
        """The state after cells ``(rows, columns)`` of an unroll over ``x`` from ``state`` reset where ``first``:
        each cell's run again, from the run's start (``starts``) to the cell."""
        cells = list(zip(rows.tolist(), columns.tolist()))
        out = {k: v.new_zeros(len(cells), v.shape[-1]) for k, v in state.items()}
        for i, (t, n) in enumerate(cells):
            start = int(starts[t, n])
            keep = 0.0 if bool(first[start, n]) else 1.0
            initial = {k: v[n : n + 1] * keep for k, v in state.items()}
            _, packed = self.rnn(x[start : t + 1, n : n + 1], self._pack(initial))
            for k, v in self._unpack(packed).items():
                out[k][i] = v[0]
        return out

    def numpy_form(self, prefix: str) -> CoreForm:
        name = f"{prefix}rnn."
        return CoreForm(self.kind, self.units, name + "weight_ih_l0", name + "weight_hh_l0", name + "bias_ih_l0",
                        name + "bias_hh_l0")  # fmt: skip
