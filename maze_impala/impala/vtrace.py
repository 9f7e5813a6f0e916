"""V-trace off-policy targets (Espeholt et al. 2018, arXiv:1802.01561, section 4.1)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class VTraceReturns(NamedTuple):
    vs: torch.Tensor
    """v_s, the V-trace value targets, ``[T, B]``."""
    pg_advantages: torch.Tensor
    """rho_pg_s * (r_s + gamma_s * v_{s+1} - V(x_s)), the policy-gradient advantages, ``[T, B]``."""


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    clip_c_threshold: float | None = 1.0,
) -> VTraceReturns:
    """Compute V-trace targets and policy-gradient advantages over time-major tensors.

    With the paper's symbols, for ``t = 0 .. T-1`` and ``rho_t = pi(a_t|x_t) / mu(a_t|x_t)``::

        rho_bar_t = min(rho_bar, rho_t)                 # clip_rho_threshold
        c_t       = lambda * min(c_bar, rho_t)          # trace-cutting coefficient (c_bar: clip_c_threshold)
        delta_t   = rho_bar_t * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
        v_s - V(x_s) = delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1}))   with v_T = V(x_T)
        A_s       = min(rho_bar_pg, rho_s) * (r_s + gamma_s * v_{s+1} - V(x_s))

    The recursion runs as a scan of ``ceil(log2 T)`` vectorised steps over the whole batch (never a loop over
    the batch, nor one of ``T`` steps), on the device and in the dtype of the inputs.

    Args:
        log_rhos: log pi(a_t|x_t) - log mu(a_t|x_t), ``[T, B]``.
        discounts: gamma_t, the discount after step t, already zero where an episode
            ended at step t, ``[T, B]``.
        rewards: r_t, ``[T, B]``.
        values: V(x_t), ``[T, B]``.
        bootstrap_value: V(x_T), ``[B]``.
        clip_rho_threshold: rho-bar; ``None`` disables the clip.
        clip_pg_rho_threshold: the clip of the policy-gradient rho; ``None`` disables it.
        lambda_: the trace-mixing lambda of the paper's remark (1.0 is plain V-trace).
        clip_c_threshold: c-bar, the clip of the traces' weights (1.0 in the paper); ``None`` disables it.

    Returns:
        :class:`VTraceReturns` with ``vs`` and ``pg_advantages``, both without gradient.
    """
    if log_rhos.dim() != 2:
        raise ValueError(f"vtrace expects time-major [T, B] tensors, got log_rhos of shape {log_rhos.shape}")
    for name, tensor in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        if tensor.shape != log_rhos.shape:
            raise ValueError(f"vtrace: {name} has shape {tuple(tensor.shape)}, expected {tuple(log_rhos.shape)}")
    if bootstrap_value.shape != log_rhos.shape[1:]:
        raise ValueError(
            f"vtrace: bootstrap_value has shape {tuple(bootstrap_value.shape)}, expected ({log_rhos.shape[1]},)"
        )

    rhos = torch.exp(log_rhos)
    clipped_rhos = rhos if clip_rho_threshold is None else torch.clamp(rhos, max=clip_rho_threshold)
    cs = lambda_ * (rhos if clip_c_threshold is None else torch.clamp(rhos, max=clip_c_threshold))

    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_tp1 - values)

    vs = values + _discounted_sums(discounts * cs, deltas)
    vs_tp1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_rhos = rhos if clip_pg_rho_threshold is None else torch.clamp(rhos, max=clip_pg_rho_threshold)
    pg_advantages = pg_rhos * (rewards + discounts * vs_tp1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def _discounted_sums(decays: torch.Tensor, terms: torch.Tensor) -> torch.Tensor:
    """``x_t = terms_t + decays_t * x_{t+1}`` for ``t = T-1 .. 0`` with ``x_T = 0``, all ``[T, B]``.

    A scan by doubling (Hillis and Steele): after the round of offset ``k``, entry ``t`` of ``sums`` holds the
    recursion's sum over ``t .. t+2k-1`` and that of ``products`` the product of the decays over the same steps, so
    ``ceil(log2 T)`` rounds of a few batched operations replace ``T`` steps of one each. Only products and sums of
    the recursion's own factors are formed (never a division, so a zero decay at an episode's end is exact); the
    sums group the terms differently from the step-by-step loop, which changes float rounding only.
    """
    sums, products, offset, steps = terms, decays, 1, terms.shape[0]
    while offset < steps:
        head = torch.addcmul(sums[:-offset], products[:-offset], sums[offset:])
        sums = torch.cat([head, sums[-offset:]])
        if 2 * offset < steps:  # the last round's products are not read
            products = torch.cat([products[:-offset] * products[offset:], products[-offset:]])
        offset *= 2
    return sums
