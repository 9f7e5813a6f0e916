"""What one learner update records: its loss metrics, kept on the device until the update's one host transfer, and
the seconds of its phases."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

from maze_impala.core import NonFiniteError, StepKey
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.losses import StepLoss
from maze_impala.impala.parallel import MAX, MEAN, SPREAD, Metric, ProcessGroup


class PhaseClock:
    """Seconds per phase of one learner step, accumulated over its passes.

    On a CUDA device each lap waits for the device's queued work first, so that a phase's seconds are its kernels'
    time and not only their launches (a CPU learner's laps cost nothing extra)."""

    PHASES = ("stack", "forward", "loss", "apply")

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        device = torch.device(device)
        self._synchronize = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        """Adds the seconds since the last lap to ``phase``."""
        self._synchronize()
        now = time.perf_counter()
        self.seconds[phase] += now - self._last
        self._last = now

    def share(self, phase: str) -> float:
        """``phase``'s percentage of the step so far."""
        whole = sum(self.seconds.values())
        return 100.0 * self.seconds[phase] / whole if whole > 0 else 0.0

    def record(self, events: MultiStepIMPALAEvents) -> None:
        """Each phase's seconds and share, as the learner's timing events."""
        seconds, share = self.seconds, self.share
        events.time_stacking(time=seconds["stack"], percent=share("stack"))
        events.time_learner_rollout(time=seconds["forward"], percent=share("forward"))
        events.time_loss_computation(time=seconds["loss"], percent=share("loss"))
        events.time_backprop(time=seconds["apply"], percent=share("apply"))


def loss_metrics(
    events: MultiStepIMPALAEvents,
    losses: dict[StepKey, StepLoss],
    shares: dict[StepKey, float] | None,
    critic_key: Callable[[StepKey], str],
) -> list[Metric]:
    """The batch as the policy that arrived at it saw it (a first pass's ``losses``): each step key's losses and
    diagnostics, its critic's under ``critic_key(step key)`` (a shared critic: one name)."""
    metrics = []
    for key, loss in losses.items():
        share = 1.0 if shares is None else shares[key]
        step, critic = {"step_key": key}, {"critic_key": critic_key(key)}
        metrics += [
            Metric(events.policy_loss, step, loss.policy_loss, MEAN, share),
            Metric(events.policy_entropy, step, loss.entropy, MEAN, share),
            Metric(events.critic_value, critic, loss.mean_value, MEAN, share),
            Metric(events.critic_value_loss, critic, loss.value_loss, MEAN, share),
            Metric(events.policy_clipped_rho_fraction, step, loss.clipped_rho_fraction, MEAN, share),
            Metric(events.policy_max_abs_logit, step, loss.max_abs_logit, MAX),
            Metric(events.policy_advantage_std, step, loss.advantage_std, SPREAD, share, loss.advantage_mean),
            Metric(events.policy_behaviour_kl, step, loss.behaviour_kl, MEAN, share),
        ]
    return metrics


def last_pass_metrics(
    events: MultiStepIMPALAEvents, losses: dict[StepKey, StepLoss], shares: dict[StepKey, float] | None, clips: bool
) -> list[Metric]:
    """How far the batch moved the policy (a last pass's ``losses``), and with a clipped surrogate (``clips``) what
    the region held back."""
    metrics = []
    for key, loss in losses.items():
        share = 1.0 if shares is None else shares[key]
        metrics.append(Metric(events.policy_update_kl, {"step_key": key}, loss.update_kl, MEAN, share))
        if clips:
            metrics.append(
                Metric(
                    events.policy_clipped_ratio_fraction, {"step_key": key}, loss.clipped_ratio_fraction, MEAN, share
                )
            )
    return metrics


def publish(metrics: list[Metric], group: ProcessGroup | None, version: int) -> None:
    """Records the update's metrics (pooled over ``group``'s learners) with one host transfer; a non-finite one
    raises :class:`NonFiniteError` before any is recorded."""
    values = group.pool(metrics) if group is not None else [m.value for m in metrics]
    on_host = torch.stack([value.detach().float().reshape(()) for value in values]).tolist()
    for (event, args, *_), value in zip(metrics, on_host):
        if not math.isfinite(value):
            what = ", ".join(f"{k} {v!r}" for k, v in args.items())
            raise NonFiniteError(
                f"update {version}: {event.__name__} is {value} ({what}); the weights are not "
                "published and the last checkpoint holds the last finite ones"
            )
        event(**args, value=value)
