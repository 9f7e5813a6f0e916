"""IMPALA's losses: pure functions of a batch and the learner's forward pass over it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import torch

from maze_impala.config import TRUST_REGIONS, ImpalaAlgorithmConfig
from maze_impala.core import StepKey
from maze_impala.impala.vtrace import vtrace
from maze_impala.nn.distributions import DictActionDistribution

if TYPE_CHECKING:
    from maze_impala.impala.batch import StepBatch

RHO_NOISE = 1e-4
"""A weight counts as clipped when it exceeds rho-bar by more than this share. On-policy data (no policy lag) has
weights of 1 up to float rounding, as the actors' and the learner's forward passes batch differently; compared
exactly, about half of them would count as clipped at rho-bar = 1."""
LOG_RATIO_LIMIT = 20.0
"""Log-ratios of two policies' probabilities are cut at this (a ratio of about 5e8) where they are exponentiated: an
action the anchor found nearly impossible (a probability of 1e-30 under a saturated softmax) would otherwise give a
ratio beyond float32's range, an infinite KL estimate and a NaN loss. Beyond it the surrogate is clipped anyway."""
ADVANTAGE_EPS = 1e-8
"""Added to the advantages' standard deviation where they are normalised (``normalize_advantages``)."""


class StepForward(NamedTuple):
    """The learner's forward pass over one step key's batch."""

    logits: torch.Tensor
    """The target policy's logits, ``[T, N, L]``."""
    values: torch.Tensor
    """The critic's V(x_t) for ``t = 0..T``, ``[T + 1, N]``."""
    rewards: torch.Tensor
    """r_t, plus gamma * V(final observation) where a time limit cut the episode off, ``[T, N]``."""


class BatchAnchor(NamedTuple):
    """What a batch's updates hold fixed, taken before its first optimizer step (per step key)."""

    log_probs: Mapping[StepKey, torch.Tensor] | None
    """log pi_0(a_t|x_t), the trust region's anchor and V-trace's target policy; None: the current policy's."""
    targets: Mapping[StepKey, StepForward] | None = None
    """The forward pass whose values and rewards V-trace's value targets and advantages bootstrap from
    (``algorithm.value_targets=batch``); None: the current critic's, recomputed at every optimizer step."""


class StepLoss(NamedTuple):
    """One step key's loss terms and, where asked for (``diagnostics``), what monitoring reads of them; a
    diagnostic computed without it is None."""

    policy_loss: torch.Tensor
    """-mean(A_t * log pi(a_t|x_t)) with the V-trace advantages A_t."""
    value_loss: torch.Tensor
    """0.5 * mean((v_t - V(x_t))^2) against the V-trace targets v_t."""
    entropy: torch.Tensor
    """mean entropy of pi(.|x_t)."""
    log_probs: torch.Tensor
    """log pi(a_t|x_t) of the actions taken, ``[T, N]``, without gradient (the anchor of later passes)."""
    value_targets: torch.Tensor
    """V-trace's value targets v_t, ``[T, N]``, without gradient, in the env's units (what a critic's value
    normaliser counts)."""
    mean_value: torch.Tensor | None = None
    """mean V(x_t), for monitoring."""
    clipped_rho_fraction: torch.Tensor | None = None
    """Share of the importance weights rho_t clipped at rho-bar, by more than float rounding (``RHO_NOISE``):
    diagnostics of a stale or diverged policy."""
    max_abs_logit: torch.Tensor | None = None
    """Largest |logit| of an allowed action (diagnostics: a saturating softmax has no gradient left)."""
    advantage_std: torch.Tensor | None = None
    """Standard deviation of the V-trace policy-gradient advantages (diagnostics: their scale)."""
    advantage_mean: torch.Tensor | None = None
    """Their mean (what data-parallel learners pool their standard deviations around)."""
    clipped_ratio_fraction: torch.Tensor | None = None
    """Share of the surrogate's ratios (pi/mu or pi/pi_0, see ``trust_region``) outside ``1 +- clip_range``, where
    the surrogate passes no gradient (0 without)."""
    behaviour_kl: torch.Tensor | None = None
    """KL(mu || pi) on the batch's actions, estimated as mean(r - 1 - log r) with r = pi/mu: how far the learner
    has moved from the policy that made the data (policy lag and earlier passes)."""
    update_kl: torch.Tensor | None = None
    """KL(pi_0 || pi) on the batch's actions, estimated as mean(r - 1 - log r) with r = pi/pi_0: how far this
    batch's earlier optimizer steps have moved the policy from the anchor (0 in the first pass)."""


class LossSettings(NamedTuple):
    """How one step key's losses are computed from its data: V-trace's clipping and lambda (see :func:`vtrace`) and
    the policy loss's surrogate (see :func:`impala_step_loss`); :meth:`of` reads them from the algorithm's config."""

    clip_rho_threshold: float | None = 1.0
    clip_pg_rho_threshold: float | None = 1.0
    lambda_: float = 1.0
    clip_c_threshold: float | None = 1.0
    clip_range: float | None = None
    """None: IMPALA's policy gradient; a float eps: PPO's clipped surrogate (see :func:`impala_step_loss`)."""
    trust_region: str = "learner"
    """With ``clip_range``, the policy the surrogate's ratio is measured from: ``learner`` or ``behaviour``."""
    importance_weights: bool = True
    """False: plain n-step bootstrapped targets (V-trace with every importance weight 1)."""
    normalize_advantages: bool = False
    """The policy loss's advantages scaled to mean 0 and standard deviation 1 over the valid entries."""

    @classmethod
    def of(cls, config: ImpalaAlgorithmConfig) -> LossSettings:
        return cls(
            clip_rho_threshold=config.vtrace_clip_rho_threshold,
            clip_pg_rho_threshold=config.vtrace_clip_pg_rho_threshold,
            lambda_=config.vtrace_lambda,
            clip_c_threshold=config.vtrace_clip_c_threshold,
            clip_range=config.clip_range,
            trust_region=config.trust_region,
            importance_weights=config.vtrace,
            normalize_advantages=config.normalize_advantages,
        )


PLAIN_VTRACE = LossSettings()
"""V-trace with rho-bar = c-bar = 1 and lambda 1, IMPALA's policy gradient: the paper's losses."""


def impala_step_loss(
    distribution: DictActionDistribution,
    logits: torch.Tensor,
    actions: dict[str, torch.Tensor],
    behaviour_log_probs: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    settings: LossSettings = PLAIN_VTRACE,
    mask: torch.Tensor | None = None,
    anchor_log_probs: torch.Tensor | None = None,
    diagnostics: bool = True,
    target_values: torch.Tensor | None = None,
    value_scale: torch.Tensor | float = 1.0,
) -> StepLoss:
    """The losses of one step key over ``[T, N]`` data.

    Args:
        distribution: the step key's action distribution.
        logits: the target policy's logits, ``[T, N, L]``.
        actions: the actions taken, ``[T, N, ...]`` per action key.
        behaviour_log_probs: log mu(a_t|x_t) recorded by the actor, ``[T, N]``.
        values: V(x_t) for ``t = 0..T``, ``[T + 1, N]`` (the last row bootstraps).
        rewards: r_t, ``[T, N]``.
        discounts: gamma_t, zero after a terminal step, ``[T, N]``.
        settings: V-trace's clipping and lambda, and the policy loss's surrogate:

            - ``clip_range`` ``None``: IMPALA's policy gradient, ``-mean(A_t log pi(a_t|x_t))`` with the V-trace
              advantages ``A_t = min(rho_bar_pg, rho_t) (r_t + gamma_t v_{t+1} - V(x_t))``. A float eps: PPO's
              clipped surrogate ``-mean(min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t))`` of a ratio ``r_t``, which
              stops an update from pushing pi further than ``eps`` where the advantage already agrees.
            - ``trust_region`` ``"behaviour"``: ``r_t = pi(a_t|x_t) / mu(a_t|x_t)``, the importance weight of the
              actors' data, lag included, over the advantages ``A_t = r_t + gamma_t v_{t+1} - V(x_t)`` of the
              V-trace targets (a trust region around the data's policy). ``"learner"``: the ratio to the learner's
              policy before its first pass over this batch (``anchor_log_probs``, or the current one), as in
              IMPACT (Luo et al. 2019): ``r_t = pi(a_t|x_t) / pi_0(a_t|x_t)`` over V-trace's policy-gradient
              advantages ``min(rho_bar_pg, pi_0/mu) (r_t + gamma_t v_{t+1} - V(x_t))``, so that each batch may
              move the policy by ``eps`` whatever the lag, which V-trace's weights correct.
            - ``importance_weights`` False: the value targets and policy-gradient advantages are plain n-step
              bootstrapped ones (no correction for the actors' lag); the surrogate's ratio is unchanged.
            - ``normalize_advantages``: the policy loss's advantages scaled to mean 0 and standard deviation 1 over
              the (valid entries of the) data; the diagnostics report them unscaled.
        mask: ``[T, N]``, true where an entry holds a decision. Padding entries must
            come with reward 0, discount 1 and ``values`` that repeat the column's
            bootstrap value (as :func:`~maze_impala.envs.layout.padded` lays them out): V-trace is
            then exact on the valid entries, and the means below skip the padding.
        anchor_log_probs: log pi_0(a_t|x_t) of the learner's policy before its first pass over this batch,
            ``[T, N]``; V-trace's importance weights are then pi_0/mu in every pass, so that the value
            targets stay those of the batch. ``None``: the current policy's.
        diagnostics: False: the loss terms only (the learner's passes that publish no metrics skip the rest).
        target_values: the V(x_t), ``t = 0..T``, that V-trace's value targets and advantages bootstrap from: the
            critic's before the batch's first step (``algorithm.value_targets=batch``), so that the targets stay
            those of the batch as the critic fits them. ``None``: ``values``, the current critic's.
        value_scale: sigma of the critic's value normaliser (:mod:`~maze_impala.nn.value_norm`): the value loss is
            ``0.5 * mean(((v_t - V(x_t)) / sigma)^2)``, the squared error of the network's own (normalised) output
            against the normalised target, as ``V = mu + sigma * output``. 1: the loss in the env's units.
    """
    if settings.trust_region not in TRUST_REGIONS:
        raise ValueError(f"trust_region must be one of {TRUST_REGIONS}, got {settings.trust_region!r}")
    target_log_probs, entropies = distribution.log_prob_and_entropy(logits, actions)
    reference = target_log_probs.detach() if anchor_log_probs is None else anchor_log_probs
    log_rhos = reference - behaviour_log_probs
    log_ratios = target_log_probs - behaviour_log_probs
    if mask is None:
        average = torch.mean
    else:
        weights = mask.to(values.dtype)
        log_rhos, log_ratios = log_rhos * weights, log_ratios * weights
        count = weights.sum().clamp(min=1.0)
        average = lambda x: (x * weights).sum() / count  # noqa: E731
    bootstrap = values.detach() if target_values is None else target_values
    returns = vtrace(
        log_rhos=log_rhos if settings.importance_weights else torch.zeros_like(log_rhos),
        discounts=discounts,
        rewards=rewards,
        values=bootstrap[:-1],
        bootstrap_value=bootstrap[-1],
        clip_rho_threshold=settings.clip_rho_threshold,
        clip_pg_rho_threshold=settings.clip_pg_rho_threshold,
        lambda_=settings.lambda_,
        clip_c_threshold=settings.clip_c_threshold,
    )
    clip_range, ratios = settings.clip_range, None
    if clip_range is not None and settings.trust_region == "behaviour":  # r = pi/mu, advantages of the targets
        ratios = log_ratios.clamp(max=LOG_RATIO_LIMIT).exp()
        vs_tp1 = torch.cat([returns.vs[1:], bootstrap[-1:]], dim=0)
        advantages = rewards + discounts * vs_tp1 - bootstrap[:-1]
    else:  # V-trace's policy-gradient advantages (learner: r = pi/pi_0, weighted by min(rho_bar_pg, pi_0/mu))
        advantages = returns.pg_advantages
        if clip_range is not None:
            ratios = (log_ratios - log_rhos).clamp(max=LOG_RATIO_LIMIT).exp()
    scaled = advantages
    if settings.normalize_advantages:
        centred = advantages - average(advantages)
        scaled = centred / (average(centred.pow(2)).sqrt() + ADVANTAGE_EPS)
    if ratios is None:
        policy_loss = -average(scaled * target_log_probs)
    else:
        clipped = torch.clamp(ratios, 1.0 - clip_range, 1.0 + clip_range)
        policy_loss = -average(torch.minimum(ratios * scaled, clipped * scaled))
    terms = StepLoss(
        policy_loss=policy_loss,
        value_loss=0.5 * average(((returns.vs - values[:-1]) / value_scale).pow(2)),
        entropy=average(entropies),
        log_probs=target_log_probs.detach(),
        value_targets=returns.vs.detach(),
    )
    if not diagnostics:
        return terms
    return _with_diagnostics(terms, settings, average, logits, values, advantages, log_rhos, log_ratios, ratios)


def _with_diagnostics(
    terms: StepLoss,
    settings: LossSettings,
    average: Callable[[torch.Tensor], torch.Tensor],
    logits: torch.Tensor,
    values: torch.Tensor,
    advantages: torch.Tensor,
    log_rhos: torch.Tensor,
    log_ratios: torch.Tensor,
    ratios: torch.Tensor | None,
) -> StepLoss:
    """``terms`` with what monitoring reads of the step's data (the fields of :class:`StepLoss` after the terms):
    ``log_rhos`` (log pi_0/mu), ``log_ratios`` (log pi/mu) and the surrogate's ``ratios`` (None without one)."""
    if ratios is None:
        clipped_ratios = torch.zeros((), device=values.device)
    else:
        clipped_ratios = average(((ratios.detach() - 1.0).abs() > settings.clip_range).to(values.dtype))
    mean_advantage = average(advantages)
    rho_bar = settings.clip_rho_threshold if settings.clip_rho_threshold is not None else float("inf")
    allowed = logits.detach().abs() < 1e8  # masked actions carry a huge negative logit
    log_ratios = log_ratios.detach()
    moved = log_ratios - log_rhos.detach()  # log pi/pi_0
    return terms._replace(
        mean_value=average(values[:-1].detach()),
        clipped_rho_fraction=average((log_rhos.exp() > rho_bar * (1.0 + RHO_NOISE)).to(values.dtype)),
        max_abs_logit=torch.where(allowed, logits.detach().abs(), 0.0).amax(),
        advantage_std=average((advantages - mean_advantage).pow(2)).sqrt(),
        advantage_mean=mean_advantage.detach(),
        clipped_ratio_fraction=clipped_ratios,
        behaviour_kl=average(kl_estimate(log_ratios)),
        update_kl=average(kl_estimate(moved)),
    )


def kl_estimate(log_ratios: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per sample of p, ``r - 1 - log r`` with ``r = q/p`` (Schulman's k3: unbiased, never negative), the
    log-ratios cut at :data:`LOG_RATIO_LIMIT` so that it stays finite."""
    log_ratios = log_ratios.clamp(max=LOG_RATIO_LIMIT)
    return log_ratios.exp() - 1.0 - log_ratios


def impala_loss(
    batches: Mapping[StepKey, StepBatch],
    forward: Mapping[StepKey, StepForward],
    distributions: Mapping[StepKey, DictActionDistribution],
    config: ImpalaAlgorithmConfig,
    train_policy: bool = True,
    anchor: BatchAnchor | None = None,
    entropy_scale: float | torch.Tensor = 1.0,
    shares: Mapping[StepKey, float] | None = None,
    diagnostics: bool = True,
    value_scales: Mapping[StepKey, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[StepKey, StepLoss]]:
    """The loss of one update and its parts per step key.

    Per step key: ``value_loss_coef`` x the value loss and, when the policy trains (after the
    critic burn-in), ``policy_loss_coef`` x the policy loss minus the entropy bonus's weight x the entropy: the step
    key's weight (``config.step_entropy_coef``: continuous actions have their own) x ``entropy_scale`` (this
    update's factor of ``entropy_schedule``).
    Discounts are ``gamma``, 0 after a decision that ended its actor's episode (terminated or
    truncated: a truncated one's bootstrap is in ``forward.rewards``); padding entries get
    reward 0 and discount 1 (see :func:`impala_step_loss`, also for the settings of :class:`LossSettings`).
    ``anchor``: what the batch's updates hold fixed (:class:`BatchAnchor`: pi_0's log-probabilities per step key,
    and with ``algorithm.value_targets=batch`` the forward pass whose values and rewards V-trace bootstraps from).

    ``shares``: each step key's share of the decisions of the joint batch that ``batches`` is a part of
    (data-parallel learners, :mod:`maze_impala.impala.parallel`): its terms are weighted by it, so that the
    learners' gradients sum to the joint batch's. None: ``batches`` is the whole batch. ``diagnostics``: see
    :func:`impala_step_loss`, and for ``value_scales`` (each step key's critic's sigma; None: 1) its
    ``value_scale``.
    """
    total = torch.zeros((), device=next(iter(forward.values())).values.device)
    losses: dict[StepKey, StepLoss] = {}
    settings = LossSettings.of(config)
    log_probs, targets = anchor if anchor is not None else (None, None)
    for key, batch in batches.items():
        step = forward[key]
        fixed = None if targets is None else targets[key]
        rewards, discounts = _rewards_and_discounts(batch, step if fixed is None else fixed, config.gamma)
        loss = impala_step_loss(
            distributions[key],
            step.logits,
            batch.actions,
            batch.behaviour_log_probs,
            step.values,
            rewards,
            discounts,
            settings,
            mask=None if batch.dense else batch.mask,
            anchor_log_probs=None if log_probs is None else log_probs[key],
            diagnostics=diagnostics,
            target_values=None if fixed is None else fixed.values,
            value_scale=1.0 if value_scales is None else value_scales[key],
        )
        share = 1.0 if shares is None else shares[key]
        total = total + share * config.value_loss_coef * loss.value_loss
        if train_policy:
            entropy_coef = config.step_entropy_coef(distributions[key].continuous) * entropy_scale
            total = total + share * config.policy_loss_coef * loss.policy_loss - share * entropy_coef * loss.entropy
        losses[key] = loss
    return total, losses


def _rewards_and_discounts(batch: StepBatch, step: StepForward, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """A step key's rewards (truncations bootstrapped, :class:`StepForward`'s) and discounts: gamma, 0 after a
    decision that ended its actor's episode; padding entries get reward 0 and discount 1."""
    discounts = gamma * batch.continues
    rewards = step.rewards
    if not batch.dense:
        rewards, discounts = torch.where(batch.mask, rewards, 0.0), torch.where(batch.mask, discounts, 1.0)
    return rewards, discounts


def value_targets(
    batches: Mapping[StepKey, StepBatch],
    forward: Mapping[StepKey, StepForward],
    distributions: Mapping[StepKey, DictActionDistribution],
    config: ImpalaAlgorithmConfig,
) -> dict[StepKey, torch.Tensor]:
    """V-trace's value targets v_t, ``[T, N]`` per step key, of ``forward`` (the learner's policy and critic over
    the batch) as :func:`impala_loss` computes them, without the losses: what a critic's value normaliser counts."""
    settings, targets = LossSettings.of(config), {}
    for key, batch in batches.items():
        step = forward[key]
        rewards, discounts = _rewards_and_discounts(batch, step, config.gamma)
        log_rhos = distributions[key].log_prob(step.logits, batch.actions) - batch.behaviour_log_probs
        if not batch.dense:
            log_rhos = log_rhos * batch.mask.to(log_rhos.dtype)
        targets[key] = vtrace(
            log_rhos=log_rhos if settings.importance_weights else torch.zeros_like(log_rhos),
            discounts=discounts,
            rewards=rewards,
            values=step.values[:-1],
            bootstrap_value=step.values[-1],
            clip_rho_threshold=settings.clip_rho_threshold,
            clip_pg_rho_threshold=settings.clip_pg_rho_threshold,
            lambda_=settings.lambda_,
            clip_c_threshold=settings.clip_c_threshold,
        ).vs
    return targets
