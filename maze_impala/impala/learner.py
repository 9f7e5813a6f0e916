"""The IMPALA learner: one optimizer step per batch of rollouts, V-trace per step key."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from maze_impala.config import ImpalaAlgorithmConfig
from maze_impala.core import Learner, NonFiniteError, Rollout, StepKey
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.losses import impala_step_loss
from maze_impala.nn.critics import StructuredCritic
from maze_impala.nn.models import StructuredPolicy


@dataclass
class StepBatch:
    """The data of one step key across a batch of rollouts, ``N`` columns in all, on the device."""

    observations: dict[str, torch.Tensor]  # [T + 1, N, ...]
    actions: dict[str, torch.Tensor]  # [T, N, ...]
    behaviour_log_probs: torch.Tensor  # [T, N]
    rewards: torch.Tensor  # [T, N]
    terminated: torch.Tensor  # [T, N]
    truncated: torch.Tensor  # [T, N]
    truncated_observations: dict[str, torch.Tensor]  # [K, ...]
    truncated_index: torch.Tensor  # [K, 2] (t, column)
    mask: torch.Tensor  # [T, N] bool
    agent_ids: torch.Tensor  # [N]
    ancestors: dict[StepKey, dict[str, torch.Tensor]]  # [T + 1, N, ...] per earlier sub-step key


def stack_step(rollouts: list[Rollout], step_key: StepKey, device: torch.device) -> StepBatch:
    """Concatenate one step key's trajectories along the column axis, padded to a common length."""
    trajectories = [r.trajectories[step_key] for r in rollouts if step_key in r.trajectories]
    n_steps = max(tr.n_steps for tr in trajectories)
    trajectories = [tr.padded(n_steps) for tr in trajectories]

    def cat(arrays: list[np.ndarray], axis: int = 1) -> torch.Tensor:
        array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=axis)
        return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)

    def cat_nested(nested: list[dict[str, np.ndarray]], axis: int = 1) -> dict[str, torch.Tensor]:
        return {k: cat([n[k] for n in nested], axis) for k in nested[0]}

    offsets = np.cumsum([0, *(tr.n_columns for tr in trajectories[:-1])])
    shifted = [tr.truncated_index + np.array([0, off]) for tr, off in zip(trajectories, offsets)]
    first = trajectories[0]
    return StepBatch(
        observations=cat_nested([tr.observations for tr in trajectories]),
        actions=cat_nested([tr.actions for tr in trajectories]),
        behaviour_log_probs=cat([tr.behaviour_log_probs for tr in trajectories]),
        rewards=cat([tr.rewards for tr in trajectories]),
        terminated=cat([tr.terminated for tr in trajectories]),
        truncated=cat([tr.truncated for tr in trajectories]),
        truncated_observations=cat_nested([tr.truncated_observations for tr in trajectories], axis=0),
        truncated_index=torch.from_numpy(np.concatenate(shifted)).to(device),
        mask=cat([tr.mask for tr in trajectories]),
        agent_ids=cat([tr.agent_ids for tr in trajectories], axis=0),
        ancestors={key: cat_nested([tr.ancestors[key] for tr in trajectories]) for key in first.ancestors},
    )


class ImpalaLearner(Learner):
    """Owns the policy, the critics and the optimizer; :meth:`step` performs one update.

    Gradient norms are measured per step key, separately for each policy and each
    critic network, before clipping. Clipping (``max_grad_norm``) also applies per
    network, so that a large critic gradient cannot shrink the policy's step.
    """

    def __init__(
        self,
        policy: StructuredPolicy,
        critic: StructuredCritic,
        config: ImpalaAlgorithmConfig,
        events: MultiStepIMPALAEvents,
    ):
        self.config = config
        self.device = torch.device(config.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("algorithm.device=cuda but torch sees no CUDA device; use algorithm.device=cpu")
        self.policy = policy.to(self.device)
        self.critic = critic.to(self.device)
        # beta2 = 0.99 (torch's default is 0.999), like the decay of the IMPALA paper's RMSProp: after a
        # long stretch of near-zero policy gradients (a solved task), a slow second-moment estimate turns
        # one failure's gradient spike into steps of several times lr that saturate the softmax for good.
        self.optimizer = torch.optim.Adam(
            [*policy.parameters(), *critic.parameters()], lr=config.lr, betas=(0.9, 0.99), eps=config.eps
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        # What "the policy of step key k" means for gradient norms and clipping: its network and its
        # action distribution's own parameters (e.g. a Gaussian's log-std).
        self._policy_parts = {
            key: nn.ModuleList([self.policy.networks[str(key)], self.policy.distributions[str(key)]])
            for key in policy.step_keys
        }
        self.events = events
        self.version = 0
        """The policy version: the number of updates made so far."""

    def step(self, rollouts: list[Rollout], train_policy: bool = True, dequeue_seconds: float = 0.0) -> None:
        """One update on a batch of rollouts; bumps :attr:`version`."""
        cfg, ev = self.config, self.events
        t0 = time.perf_counter()
        for rollout in rollouts:
            ev.policy_lag(value=self.version - rollout.policy_version)
        present = {k for r in rollouts for k in r.trajectories}
        keys = [k for k in self.policy.step_keys if k in present]
        batches = {k: stack_step(rollouts, k, self.device) for k in keys}
        t1 = time.perf_counter()

        forward: dict[StepKey, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        for key, batch in batches.items():
            obs = {k: v[:-1] for k, v in batch.observations.items()}
            logits = self.policy.logits(key, obs, batch_dims=2, agent_ids=batch.agent_ids)
            values = self.critic.values(key, batch.observations, batch_dims=2, ancestors=batch.ancestors)
            forward[key] = (logits, values, self._rewards_with_truncation(key, batch))
        t2 = time.perf_counter()

        # Metrics stay on the device until the update is done: one host transfer for all of them.
        metrics: list[tuple[Any, dict[str, Any], torch.Tensor]] = []
        total = torch.zeros((), device=self.device)
        for key, batch in batches.items():
            logits, values, rewards = forward[key]
            done = batch.terminated | batch.truncated
            loss = impala_step_loss(
                self.policy.distribution(key),
                logits,
                batch.actions,
                batch.behaviour_log_probs,
                values,
                torch.where(batch.mask, rewards, 0.0),
                discounts=torch.where(batch.mask, cfg.gamma * (~done).float(), 1.0),
                clip_rho_threshold=cfg.vtrace_clip_rho_threshold,
                clip_pg_rho_threshold=cfg.vtrace_clip_pg_rho_threshold,
                lambda_=cfg.vtrace_lambda,
                mask=batch.mask,
            )
            total = total + cfg.value_loss_coef * loss.value_loss
            if train_policy:
                total = total + cfg.policy_loss_coef * loss.policy_loss - cfg.entropy_coef * loss.entropy
            metrics += [
                (ev.policy_loss, {"step_key": key}, loss.policy_loss),
                (ev.policy_entropy, {"step_key": key}, loss.entropy),
                (ev.critic_value, {"critic_key": key}, loss.mean_value),
                (ev.critic_value_loss, {"critic_key": key}, loss.value_loss),
            ]
        t3 = time.perf_counter()

        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        for critic_key, network in self.critic.networks_by_key().items():
            if any(p.grad is not None for p in network.parameters()):
                metrics.append((ev.critic_grad_norm, {"critic_key": critic_key}, self._clip(network)))
        if train_policy:
            for key in keys:
                metrics.append((ev.policy_grad_norm, {"step_key": key}, self._clip(self._policy_parts[key])))
        self.optimizer.step()
        ev.learning_rate(value=self.optimizer.param_groups[0]["lr"])
        self.scheduler.step()
        self.version += 1
        on_host = torch.stack([value.detach().float().reshape(()) for _, _, value in metrics]).tolist()
        for (event, args, _), value in zip(metrics, on_host):
            if not math.isfinite(value):
                what = ", ".join(f"{k} {v!r}" for k, v in args.items())
                raise NonFiniteError(f"update {self.version}: {event.__name__} is {value} ({what}); the weights are "
                                     "not published and the last checkpoint holds the last finite ones")  # fmt: skip
            event(**args, value=value)
        t4 = time.perf_counter()

        whole = dequeue_seconds + (t4 - t0)
        share = lambda seconds: 100.0 * seconds / whole if whole > 0 else 0.0  # noqa: E731
        ev.time_dequeuing_actors(time=dequeue_seconds, percent=share(dequeue_seconds))
        ev.time_collecting_actors(time=t1 - t0, percent=share(t1 - t0))
        ev.time_learner_rollout(time=t2 - t1, percent=share(t2 - t1))
        ev.time_loss_computation(time=t3 - t2, percent=share(t3 - t2))
        ev.time_backprop(time=t4 - t3, percent=share(t4 - t3))

    def _lr_factor(self, updates: int) -> float:
        if self.config.lr_schedule == "linear":
            return max(0.0, 1.0 - updates / self.config.total_updates)
        return 1.0

    def _rewards_with_truncation(self, key: StepKey, batch: StepBatch) -> torch.Tensor:
        """r_t, plus gamma * V(final obs) where an episode was cut off by a time limit.

        Truncated steps get discount 0 (the next observation belongs to a new
        episode); adding the discounted value of the observation the episode really
        ended in keeps the target that of an unfinished episode.
        """
        rewards = batch.rewards
        if batch.truncated_index.numel() == 0:
            return rewards
        t, col = batch.truncated_index[:, 0], batch.truncated_index[:, 1]
        # The delta critic values the final observation on top of the earlier sub-steps of its decision.
        ancestors = {k: {n: v[t, col] for n, v in obs.items()} for k, obs in batch.ancestors.items()}
        with torch.no_grad():
            final_values = self.critic.values(key, batch.truncated_observations, batch_dims=1, ancestors=ancestors)
        rewards = rewards.clone()
        rewards[t, col] += self.config.gamma * final_values
        return rewards

    def _clip(self, module: nn.Module) -> torch.Tensor:
        """The module's gradient norm before clipping (on the device); clips it to max_grad_norm unless that is 0."""
        params = [p for p in module.parameters() if p.grad is not None]
        if not params:
            return torch.zeros((), device=self.device)
        return torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm or math.inf)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer state and the policy version."""
        return {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.version = int(state["version"])
