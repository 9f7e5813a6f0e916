"""The LSTM's re-unroll in one autograd node, against the shipped unroll (one fused call per run of rows without a
reset), alternating in one process. Measured and not adopted (docs/benchmarks.md): it is kept here, outside the
package, so that the figures can be reproduced.

    python benchmarks/lstm_unroll.py check                  # exact: values and gradients against nn.LSTM
    python benchmarks/lstm_unroll.py learner 6 1            # rounds, the learner's threads: samples/s
    python benchmarks/lstm_unroll.py training 4 all         # rounds, runner.learner_cores of the one-node runs

``learner`` times the shipped CartPole learner with ``model.recurrent=lstm`` on one batch, 3 s per variant per
round; ``training`` trains the shipped CartPole config with ``runner=local`` for 3 epochs of 25 updates per variant
per round (the shipped unroll with the shipped cores, the one-node unroll with the cores given) and takes the
median env steps/s of the epochs after the first. Both print the medians and the ratio of every round.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from typing import Any

import torch
from calibration import learner_and_batch
from harness import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, train
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.nn.recurrent import RecurrentCore, Unrolled

RATE = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()
MODEL = ModelConfig(recurrent="lstm")


def lstm_sequence(
    x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor, keep: torch.Tensor, lstm: torch.nn.LSTM
) -> tuple[torch.Tensor, torch.Tensor]:
    """``lstm`` (one layer) over ``x`` ``[T, N, I]`` from ``h0``, ``c0`` ``[N, H]``, the state entering row ``t``
    multiplied by ``keep[t]`` ``[T, N, 1]``: the output and the cell state of every row (the latter without a
    gradient)."""
    return _LSTMSequence.apply(x, h0, c0, keep, lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0)


class _LSTMSequence(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        h0: torch.Tensor,
        c0: torch.Tensor,
        keep: torch.Tensor,
        w_ih: torch.Tensor,
        w_hh: torch.Tensor,
        b_ih: torch.Tensor,
        b_hh: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        T, N, n_in = x.shape
        H = w_hh.shape[1]
        like = {"dtype": x.dtype, "device": x.device}
        gates = torch.addmm(b_ih + b_hh, x.reshape(T * N, n_in), w_ih.t()).view(T, N, 4 * H)
        resets = keep.view(T, N).eq(0).any(1).tolist()  # one host transfer for the whole batch
        hs, cs, tanh_c = (torch.empty(T, N, H, **like) for _ in range(3))
        w_hh_t = w_hh.t()
        h, c = h0, c0
        for t in range(T):
            if resets[t]:
                h, c = h * keep[t], c * keep[t]
            g = gates[t].addmm_(h, w_hh_t)  # pre-activations, then the activations, in place
            g[:, : 2 * H].sigmoid_()
            g[:, 2 * H : 3 * H].tanh_()
            g[:, 3 * H :].sigmoid_()
            c = torch.mul(g[:, H : 2 * H], c, out=cs[t]).addcmul_(g[:, :H], g[:, 2 * H : 3 * H])
            h = torch.mul(g[:, 3 * H :], torch.tanh(c, out=tanh_c[t]), out=hs[t])
        ctx.save_for_backward(x, h0, c0, keep, w_ih, w_hh, gates, hs, cs, tanh_c)
        ctx.resets = resets
        ctx.mark_non_differentiable(cs)
        return hs, cs

    @staticmethod
    def backward(ctx: Any, grad_h: torch.Tensor, _grad_c: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x, h0, c0, keep, w_ih, w_hh, gates, hs, cs, tanh_c = ctx.saved_tensors
        T, N, n_in = x.shape
        H = w_hh.shape[1]
        h_in = torch.cat([h0.unsqueeze(0), hs[:-1]]) * keep  # the state entering each row
        c_in = torch.cat([c0.unsqueeze(0), cs[:-1]]) * keep
        i, f, g, o = gates.split(H, dim=-1)
        # Every elementwise factor of the backward recurrence, for all rows at once.
        dc_from_h = o * (1 - tanh_c * tanh_c)  # dc_t += dh_t * dc_from_h
        dgates_from_c = torch.stack([g * i * (1 - i), c_in * f * (1 - f), i * (1 - g * g)], dim=2)  # [T, N, 3, H]
        dgate_o = tanh_c * o * (1 - o)
        f_keep = f * keep if any(ctx.resets) else f
        grad_gates = torch.empty(T, N, 4 * H, dtype=x.dtype, device=x.device)
        dh = torch.zeros_like(h0)
        dc = torch.zeros_like(c0)
        for t in range(T - 1, -1, -1):
            dh = dh + grad_h[t]
            dc = dc.addcmul_(dh, dc_from_h[t])
            gg = grad_gates[t]
            torch.mul(dc.unsqueeze(1), dgates_from_c[t], out=gg[:, : 3 * H].view(N, 3, H))
            torch.mul(dh, dgate_o[t], out=gg[:, 3 * H :])
            dc = dc * f_keep[t]
            dh = gg @ w_hh
            if ctx.resets[t]:
                dh = dh * keep[t]
        flat = grad_gates.view(T * N, 4 * H)
        grad_x = (flat @ w_ih).view(T, N, n_in) if ctx.needs_input_grad[0] else None
        grad_w_ih = flat.t() @ x.reshape(T * N, n_in)
        grad_w_hh = flat.t() @ h_in.view(T * N, H)
        grad_b = flat.sum(0)
        return grad_x, dh, dc, None, grad_w_ih, grad_w_hh, grad_b, grad_b


def unroll_in_one_node(core: RecurrentCore, x: torch.Tensor, state: dict, first: torch.Tensor) -> Unrolled:
    """:meth:`RecurrentCore.unroll` with :func:`lstm_sequence` (LSTM cores only)."""
    keep = (~first).to(x.dtype).unsqueeze(-1)
    h, c = lstm_sequence(x, state["h"], state["c"], keep, core.rnn)
    ends = sorted({*first[1:].any(1).nonzero().flatten().tolist(), x.shape[0] - 1})
    return Unrolled(h, {t: {"h": h[t], "c": c[t]} for t in ends})


SHIPPED = RecurrentCore.unroll
VARIANTS = {"shipped": SHIPPED, "one node": unroll_in_one_node}


def check() -> None:
    torch.manual_seed(0)
    core = RecurrentCore("lstm", 7, 6).double()
    x = torch.randn(12, 5, 7, dtype=torch.float64, requires_grad=True)
    h0, c0 = (torch.randn(5, 6, dtype=torch.float64, requires_grad=True) for _ in range(2))
    first = torch.rand(12, 5) < 0.25
    inputs, weights = [x, h0, c0, *core.parameters()], torch.randn(12, 5, 6, dtype=torch.float64)
    ours, theirs = unroll_in_one_node(core, x, {"h": h0, "c": c0}, first), SHIPPED(core, x, {"h": h0, "c": c0}, first)
    grads = [torch.autograd.grad((u.out * weights).sum(), inputs) for u in (ours, theirs)]
    print("largest difference in value:", (ours.out - theirs.out).abs().max().item())
    print("largest difference in gradient:", max((a - b).abs().max().item() for a, b in zip(*grads, strict=True)))
    keep = (~first).to(x.dtype).unsqueeze(-1)
    print("gradcheck:", torch.autograd.gradcheck(lambda *a: lstm_sequence(*a[:3], keep, core.rnn)[0], (x, h0, c0)))


def learner_rates(rounds: int, threads: int) -> dict[str, list[float]]:
    torch.set_num_threads(threads)
    learner, batch = learner_and_batch(model=MODEL)
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(rounds):
        for name in list(VARIANTS)[:: 1 if round_ % 2 == 0 else -1]:
            RecurrentCore.unroll = VARIANTS[name]  # type: ignore[method-assign]
            learner.step(batch)
            updates, started = 0, time.perf_counter()
            while time.perf_counter() - started < 3:
                learner.step(batch)
                updates += 1
            rates[name].append(updates * sum(r.env_steps for r in batch) / (time.perf_counter() - started))
    return rates


def training_rates(rounds: int, cores: str) -> dict[str, list[float]]:
    algorithm = ImpalaAlgorithmConfig(n_epochs=3, epoch_length=25, rollout_evaluator={"n_episodes": 1})
    rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for round_ in range(rounds):
        for name in list(VARIANTS)[:: 1 if round_ % 2 == 0 else -1]:
            RecurrentCore.unroll = VARIANTS[name]  # type: ignore[method-assign]
            runner = RunnerConfig("local", learner_cores=cores if name == "one node" else "auto")
            with tempfile.TemporaryDirectory() as out:
                result = train("CartPole-v1", algorithm, MODEL, runner, output=QUIET, output_dir=out, seed=1)
            rates[name].append(statistics.median(result.column(RATE)[1:]))
    return rates


def report(rates: dict[str, Any]) -> None:
    ratios = [new / old for new, old in zip(rates["one node"], rates["shipped"], strict=True)]
    medians = {name: round(statistics.median(values)) for name, values in rates.items()}
    print(
        f"medians {medians}; one node / shipped by round {[round(r, 2) for r in ratios]}, "
        f"median {statistics.median(ratios):.2f}"
    )


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "check"
    if mode == "check":
        check()
    elif mode == "learner":
        report(learner_rates(int(sys.argv[2]), int(sys.argv[3])))
    elif mode == "training":
        report(training_rates(int(sys.argv[2]), sys.argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
