"""Adam and RMSProp for the learner, without ``torch.optim``.

``torch.optim.Optimizer``'s methods import ``torch._dynamo`` on their first call
(they are wrapped to stay out of ``torch.compile`` graphs). That import takes about
1.1 s on a quiet core, and every training run paid it before its first update. The
learner needs Adam's update and nothing of the framework around it, so :class:`Adam`
calls the kernel that ``torch.optim.Adam(fused=True)`` calls (one kernel for all
parameters, on the CPU and on CUDA devices), with the same arguments: the same
update, bit for bit. Its state has ``torch.optim.Adam``'s ``state_dict`` format, so
that checkpoints load either way. :class:`RMSProp` (the IMPALA paper's and torchbeast's optimizer) is written
the same way, with ``torch._foreach`` kernels and ``torch.optim.RMSprop``'s update and state format.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from maze_impala.config import ImpalaAlgorithmConfig


class Adam:
    """Adam (Kingma and Ba, 2015) without weight decay or AMSGrad, as ``torch.optim.Adam`` computes it.

    A parameter whose gradient is ``None`` at a :meth:`step` is left alone, its moments and step count included
    (the policy's parameters during the critics' burn-in). :attr:`lr` may change between steps (the schedule).
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, betas: tuple[float, float], eps: float):
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got no parameters to optimize")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Adam's betas must lie in [0, 1), got {betas}")
        self.lr, self.betas, self.eps = lr, betas, eps
        self.steps = [self._zero_step(p) for p in self.params]
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        """Drop the gradients (the next backward pass allocates them afresh)."""
        for p in self.params:
            p.grad = None

    @staticmethod
    def _zero_step(param: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), dtype=torch.float32, device=param.device)

    @torch.no_grad()
    def step(self) -> None:
        """One Adam update of every parameter that has a gradient."""
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        steps = [self.steps[i] for i in live]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            [self.params[i] for i in live],
            [self.params[i].grad for i in live],
            [self.exp_avgs[i] for i in live],
            [self.exp_avg_sqs[i] for i in live],
            [],  # AMSGrad's maxima: none
            steps,
            lr=self.lr,
            beta1=self.betas[0],
            beta2=self.betas[1],
            weight_decay=0.0,
            eps=self.eps,
            amsgrad=False,
            maximize=False,
        )

    def state_dict(self) -> dict[str, Any]:
        """The moments and step counts, in ``torch.optim.Adam``'s format (parameters by index)."""
        state = {
            i: {"step": s.clone(), "exp_avg": m, "exp_avg_sq": v}
            for i, (s, m, v) in enumerate(zip(self.steps, self.exp_avgs, self.exp_avg_sqs))
            if s.item() > 0
        }
        group = {
            "lr": self.lr,
            "betas": self.betas,
            "eps": self.eps,
            "weight_decay": 0.0,
            "amsgrad": False,
            "maximize": False,
            "params": list(range(len(self.params))),
        }
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` (or ``torch.optim.Adam.state_dict``, one group) returned."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"the optimizer state holds parameter groups of sizes {sizes}, but this learner has one "
                f"group of {len(self.params)} parameters: the checkpoint is of another model"
            )
        self.steps = [self._zero_step(p) for p in self.params]
        for position, index in enumerate(groups[0]["params"]):
            saved = state_dict["state"].get(index)
            if saved is None:
                continue
            param = self.params[position]
            if (shape := tuple(saved["exp_avg"].shape)) != tuple(param.shape):
                raise ValueError(
                    f"the optimizer state of parameter {position} has shape {shape}, the parameter "
                    f"{tuple(param.shape)}: the checkpoint is of another model"
                )
            self.steps[position] = torch.as_tensor(saved["step"], dtype=torch.float32).to(param.device).clone()
            self.exp_avgs[position] = saved["exp_avg"].to(param.device, param.dtype).clone()
            self.exp_avg_sqs[position] = saved["exp_avg_sq"].to(param.device, param.dtype).clone()


class RMSProp:
    """RMSProp without momentum or centering, as ``torch.optim.RMSprop`` computes it: a running mean of squared
    gradients (decay ``alpha``) and steps of ``lr * g / (sqrt(mean) + eps)``.

    As :class:`Adam`: parameters without a gradient at a :meth:`step` are left alone; :attr:`lr` may change.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, alpha: float, eps: float):
        self.params = list(params)
        if not self.params:
            raise ValueError("RMSProp got no parameters to optimize")
        self.lr, self.alpha, self.eps = lr, alpha, eps
        self.steps = [0] * len(self.params)
        self.square_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params, grads = [self.params[i] for i in live], [self.params[i].grad for i in live]
        squares = [self.square_avgs[i] for i in live]
        for i in live:
            self.steps[i] += 1
        torch._foreach_mul_(squares, self.alpha)
        torch._foreach_addcmul_(squares, grads, grads, value=1.0 - self.alpha)
        scales = torch._foreach_sqrt(squares)
        torch._foreach_add_(scales, self.eps)
        torch._foreach_addcdiv_(params, grads, scales, value=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        """The running means and step counts, in ``torch.optim.RMSprop``'s format (parameters by index)."""
        state = {
            i: {"step": torch.tensor(float(n)), "square_avg": avg}
            for i, (n, avg) in enumerate(zip(self.steps, self.square_avgs))
            if n > 0
        }
        group = {
            "lr": self.lr,
            "alpha": self.alpha,
            "eps": self.eps,
            "weight_decay": 0.0,
            "momentum": 0.0,
            "centered": False,
            "params": list(range(len(self.params))),
        }
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params) or "alpha" not in groups[0]:
            raise ValueError(
                "the optimizer state is not RMSProp's for this learner's parameters: the checkpoint is "
                "of another model or optimizer"
            )
        self.steps = [0] * len(self.params)
        for position, index in enumerate(groups[0]["params"]):
            saved = state_dict["state"].get(index)
            if saved is None:
                continue
            param = self.params[position]
            if tuple(saved["square_avg"].shape) != tuple(param.shape):
                raise ValueError(
                    f"the optimizer state of parameter {position} does not fit it: the checkpoint is of another model"
                )
            self.steps[position] = int(float(saved["step"]))
            self.square_avgs[position] = saved["square_avg"].to(param.device, param.dtype).clone()


def clip_grad_norms(
    groups: Sequence[Sequence[torch.Tensor]], max_norm: float, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Each group's gradient norm, measured before clipping, on ``device``, and each group's gradients scaled in place
    so that its norm is at most ``max_norm`` (``math.inf``: none is clipped).

    ``torch.nn.utils.clip_grad_norm_`` applied to every group on its own, in a few operations for all of them: one
    norm kernel over every gradient, the groups' norms from those by one indexed sum, one scaling per group. The
    gradients are on ``device`` in one dtype (one learner's); an empty group's norm is 0.
    """
    grads = [grad for group in groups for grad in group]
    if not grads:
        return torch.zeros(len(groups), device=device)
    squares = torch.stack(torch._foreach_norm(grads)).square()
    owners = _owners(tuple(len(group) for group in groups), squares.device)
    norms = squares.new_zeros(len(groups)).index_add_(0, owners, squares).sqrt()
    scales = (max_norm / (norms + 1e-6)).clamp(max=1.0)  # clip_grad_norm_'s coefficient
    for group, scale in zip(groups, scales.unbind()):
        if group:
            torch._foreach_mul_(list(group), scale)
    return norms


@functools.lru_cache(maxsize=64)
def _owners(sizes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The group of each gradient, for groups of ``sizes`` gradients (kept: a learner's groups repeat every step)."""
    return torch.tensor([group for group, size in enumerate(sizes) for _ in range(size)], device=device)


def make_optimizer(params: Iterable[torch.Tensor], config: ImpalaAlgorithmConfig) -> Adam | RMSProp:
    """The optimizer ``config.optimizer`` names, with its settings."""
    if config.optimizer == "rmsprop":  # the IMPALA paper's decay
        return RMSProp(params, config.lr, alpha=0.99, eps=config.optimizer_eps)
    # beta2 = 0.99 (torch's default is 0.999), like the decay of the IMPALA paper's RMSProp: after a long stretch
    # of near-zero policy gradients (a solved task), a slow second-moment estimate turns one failure's gradient
    # spike into steps of several times lr that saturate the softmax for good.
    return Adam(params, config.lr, (0.9, 0.99), config.optimizer_eps)
