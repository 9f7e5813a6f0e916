"""The IMPALA learner: one optimizer step per batch of rollouts, V-trace per step key."""

from __future__ import annotations

import contextlib
import math
from dataclasses import fields, replace
from typing import Any

import torch

from maze_impala.config import ImpalaAlgorithmConfig
from maze_impala.config.algorithm import KL_STOP_FACTOR
from maze_impala.core import ANCESTRAL, OBSERVED, Learner, Rollout, StepKey, Trajectory
from maze_impala.impala.batch import StepBatch, split_columns, stack_step
from maze_impala.impala.compiled import compiled_losses
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.losses import BatchAnchor, StepForward, StepLoss, impala_loss, kl_estimate, value_targets
from maze_impala.impala.metrics import PhaseClock, last_pass_metrics, loss_metrics, publish
from maze_impala.impala.optim import clip_grad_norms, make_optimizer
from maze_impala.impala.parallel import Metric, ProcessGroup, Shard
from maze_impala.nn.critics import StructuredCritic
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.models import PolicyUnroll, StructuredPolicy
from maze_impala.nn.value_norm import fit_mean, preserve_outputs


def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients the last backward pass left on ``params`` (a network a loss did not reach has none)."""
    return [p.grad for p in params if p.grad is not None]


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
        group: ProcessGroup | None = None,
    ):
        """``group``: the other learners of a data-parallel learner (see :mod:`maze_impala.impala.parallel`);
        None: this learner learns alone."""
        self.config = config
        self.group = group
        self.device = torch.device(config.device)
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("algorithm.device=cuda but torch sees no CUDA device; use algorithm.device=cpu")
        self.policy = policy.to(self.device)
        self.critic = critic.to(self.device)
        self._params = [*self.policy.parameters(), *self.critic.parameters()]
        self.optimizer = make_optimizer(self._params, config)
        # What "the policy of step key k" means for gradient norms and clipping: its network and its action
        # distribution's own parameters (e.g. a Gaussian's log-std); with a network per agent or group, each of
        # them on its own (``<k>/network_<i>``), the distribution's parameters as ``<k>/heads``.
        self._policy_params = {key: _policy_groups(key, policy) for key in policy.step_keys}
        self._critic_params = {key: list(network.parameters()) for key, network in critic.networks_by_key().items()}
        self.events = events
        self.version = 0
        """The policy version: the number of updates made so far."""
        self._compiled = compiled_losses(self._forward_and_loss, config.compile)
        """The forward pass and losses of a minibatch compiled (``algorithm.compile``); None: eager."""

    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        """One update on a batch of rollouts (``n_sgd_passes`` x ``n_sgd_minibatches`` optimizer steps); bumps
        :attr:`version`."""
        self.record_lag(rollouts)
        clock = PhaseClock(self.device)
        shard = self.prepare(rollouts, train_policy)
        clock.lap("stack")
        self._update(shard, clock)

    def record_lag(self, rollouts: list[Rollout]) -> None:
        """Each rollout's policy lag: this learner's version minus the version that made it."""
        for rollout in rollouts:
            self.events.policy_lag(value=self.version - rollout.policy_version)

    def prepare(self, rollouts: list[Rollout], train_policy: bool = True) -> Shard:
        """The batch as the update reads it: each step key's trajectories stacked on the device, observations
        normalised (the policy's statistics updated with the batch first), cut into ``n_sgd_minibatches``."""
        present = {k for r in rollouts for k in r.trajectories}
        keys = [k for k in self.policy.step_keys if k in present]
        batches = {k: self._normalized(k, stack_step(rollouts, k, self.device)) for k in keys}
        minibatches = split_columns(batches, self.config.sgd_minibatches)
        return Shard(minibatches, train_policy, version=self.version)

    def normalizer_statistics(self) -> dict[str, torch.Tensor]:
        """The policy's observation statistics (empty: it does not normalise), for the other learners."""
        return dict(self.policy.normalizers.state_dict()) if self.policy.normalizes else {}

    def update(self, shard: Shard) -> None:
        """One update on ``shard``: the whole batch (:meth:`prepare`'s), or with :attr:`group` this learner's part
        of it, whose gradients and metrics are summed with the other learners'."""
        clock = PhaseClock(self.device)
        self.version = shard.version
        if shard.normalizers and self.group is not None and self.group.rank > 0:
            self.policy.normalizers.load_state_dict(shard.normalizers)
        self._update(shard, clock)

    def _update(self, shard: Shard, clock: PhaseClock) -> None:
        cfg, ev, train_policy = self.config, self.events, shard.train_policy
        self.optimizer.lr = cfg.lr * self._schedule(cfg.lr_schedule)
        entropy_scale = self._schedule(cfg.entropy_schedule)
        minibatches = shard.minibatches
        distributions = {key: self.policy.distribution(key) for mb in minibatches for key in mb}
        # What the batch's steps hold fixed: the trust region's anchor pi_0, the policy before the batch's first
        # optimizer step, and with value_targets=batch the critic's values V-trace bootstraps from. With one
        # minibatch and moving targets, the first pass's own log-probabilities; else a forward pass over them all
        # before any step.
        fixed_targets = cfg.value_targets == "batch" and cfg.n_sgd_passes * len(minibatches) > 1
        normalize = cfg.value_normalization != "off"
        whole = fixed_targets or normalize  # the whole forward pass before the first step, not only pi_0's logits
        anchors: list[BatchAnchor | None] = (
            [self._anchor(mb, distributions, whole) for mb in minibatches] if whole or len(minibatches) > 1 else [None]
        )
        value_scales, metrics = None, list[Metric]()
        if normalize:
            metrics = self._update_value_statistics(minibatches, distributions, anchors)
            value_scales = {key: self.critic.normalizer(key).scale() for mb in minibatches for key in mb}
            if not fixed_targets:  # the forward pass served the statistics; V-trace bootstraps from the current critic
                anchors = [BatchAnchor(anchor.log_probs) for anchor in anchors if anchor is not None]
        clock.lap("forward")

        steps = 0
        for sgd_pass in range(cfg.n_sgd_passes):
            for index, minibatch in enumerate(minibatches):
                shares = shard.shares(index)
                first, last = sgd_pass == 0, sgd_pass == cfg.n_sgd_passes - 1  # the passes whose metrics are read
                step_args = (minibatch, train_policy, anchors[index], entropy_scale, shares, first or last)
                if self._compiled is None:  # eager: the forward pass and the losses timed apart
                    total, losses = self._forward_and_loss(*step_args, clock, value_scales)
                else:
                    with self._precision():
                        total, losses = self._compiled(*step_args, None, value_scales)
                if first:  # the batch as the policy that arrived at it saw it
                    metrics += loss_metrics(self.events, losses, shares, self.critic.critic_key)
                    if anchors[index] is None:  # one minibatch: pi_0 is this pass's own policy
                        anchors[index] = BatchAnchor({key: loss.log_probs for key, loss in losses.items()})
                if steps > 0 and cfg.target_kl is not None:
                    moved = self._update_kls(minibatch, losses, anchors[index], shares)
                    if moved.max().item() > KL_STOP_FACTOR * cfg.target_kl:  # stop before this step
                        metrics += [Metric(ev.policy_update_kl, {"step_key": k}, kl) for k, kl in zip(losses, moved)]
                        break
                if last:  # how far the batch moved the policy, what the region held back
                    metrics += last_pass_metrics(self.events, losses, shares, cfg.clip_range is not None)
                clock.lap("loss")
                metrics += self._apply(total, list(minibatch), train_policy)
                steps += 1
                clock.lap("apply")
            else:
                continue
            break
        ev.policy_sgd_steps(value=steps)
        ev.learning_rate(value=self.optimizer.lr)
        continuous = any(distribution.continuous for distribution in distributions.values())
        ev.entropy_coef(value=cfg.step_entropy_coef(continuous) * entropy_scale)
        self.version += 1
        publish(metrics, self.group, self.version)
        clock.lap("apply")
        clock.record(ev)

    def _forward_and_loss(
        self,
        minibatch: dict[StepKey, StepBatch],
        train_policy: bool,
        anchor: BatchAnchor | None,
        entropy_scale: torch.Tensor | float,
        shares: dict[StepKey, torch.Tensor | float] | None,
        diagnostics: bool,
        clock: PhaseClock | None = None,
        value_scales: dict[StepKey, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, dict[StepKey, StepLoss]]:
        """A minibatch's forward pass (under ``algorithm.precision``) and losses in one function, what
        ``algorithm.compile`` compiles (without a ``clock``, which laps the forward pass)."""
        with self._precision():
            forward = {key: self._forward(key, batch) for key, batch in minibatch.items()}
        if clock is not None:
            clock.lap("forward")
        distributions = {key: self.policy.distribution(key) for key in minibatch}
        return impala_loss(
            minibatch,
            forward,
            distributions,
            self.config,
            train_policy,
            anchor,
            entropy_scale,
            shares,
            diagnostics=diagnostics,
            value_scales=value_scales,
        )

    @torch.no_grad()
    def _update_value_statistics(
        self,
        minibatches: list[dict[StepKey, StepBatch]],
        distributions: dict[StepKey, DictActionDistribution],
        anchors: list[BatchAnchor | None],
    ) -> list[Metric]:
        """Adds the batch's V-trace targets, as the critic and pi_0 before its first step give them (each anchor's
        forward pass), to each critic network's statistics (summed over data-parallel learners); with
        ``value_normalization=popart`` rescales the network's output layer so that its values stay as they were
        (``shift``: their distances from the mean).
        Returns each network's new mean and scale, as metrics."""
        critic = self.critic
        targets: dict[str, list[torch.Tensor]] = {}
        errors: dict[str, list[torch.Tensor]] = {}  # (with fit_value_mean only)
        keys: dict[str, StepKey] = {}
        for minibatch, anchor in zip(minibatches, anchors):
            assert anchor is not None and anchor.targets is not None  # (_update: the whole forward pass)
            for key, found in value_targets(minibatch, anchor.targets, distributions, self.config).items():
                batch = minibatch[key]
                own = critic.own_targets(key, found, batch.observations, 2, batch.ancestors)
                name = critic.critic_key(key)
                keys.setdefault(name, key)
                targets.setdefault(name, []).append(own if batch.dense else own[batch.mask])
                if self.config.fit_value_mean:
                    error = found - anchor.targets[key].values[:-1]  # the same in the network's own units
                    errors.setdefault(name, []).append(error if batch.dense else error[batch.mask])
        reduce = None if self.group is None else self.group.summed
        metrics = []
        for name, parts in targets.items():
            key = keys[name]
            found = torch.cat([p.reshape(-1) for p in parts])
            before, after = critic.normalizer(key).update(found, reduce, self.config.value_norm_decay)
            if self.config.value_normalization in ("popart", "shift"):
                preserve_outputs(critic.head(key), before, after, keep_mean=self.config.value_normalization == "popart")
            if self.config.fit_value_mean:  # (popart: the values, and so their errors, are as they were)
                fit_mean(critic.head(key), torch.cat([e.reshape(-1) for e in errors[name]]), after, reduce)
            metrics += [
                Metric(self.events.critic_value_scale, {"critic_key": name}, after.sigma),
                Metric(self.events.critic_value_shift, {"critic_key": name}, after.mu),
            ]
        return metrics

    def _update_kls(
        self,
        minibatch: dict[StepKey, StepBatch],
        losses: dict[StepKey, StepLoss],
        anchor: BatchAnchor | None,
        shares: dict[StepKey, float] | None,
    ) -> torch.Tensor:
        """KL(pi_0 || pi) on each step key's actions of ``minibatch`` (in the order of ``losses``), estimated as
        mean(r - 1 - log r) with r = pi/pi_0 (over the joint minibatch of data-parallel learners)."""
        assert anchor is not None and anchor.log_probs is not None
        kls = []
        for key, loss in losses.items():
            moved = loss.log_probs - anchor.log_probs[key]
            terms = kl_estimate(moved)
            batch = minibatch[key]
            kl = terms.mean() if batch.dense else terms[batch.mask].mean() if batch.mask.any() else terms.new_zeros(())
            kls.append(kl * (1.0 if shares is None else shares[key]))
        stacked = torch.stack(kls).float()
        return stacked if self.group is None else self.group.summed(stacked)

    def _apply(self, total: torch.Tensor, keys: list[StepKey], train_policy: bool) -> list[Metric]:
        """Backward, clip each network's gradient (measuring its norm first) and take an optimizer step."""
        ev = self.events
        self.optimizer.zero_grad()
        total.backward()
        if self.group is not None:  # the joint minibatch's gradient, before any norm is measured
            self.group.all_reduce_gradients(self._params)
        networks = [
            (ev.critic_grad_norm, {"critic_key": critic_key}, found)
            for critic_key, params in self._critic_params.items()
            if (found := _grads(params))
        ]
        if train_policy:
            networks += [
                (ev.policy_grad_norm, {"step_key": label}, _grads(params))
                for key in keys
                for label, params in self._policy_params[key]
            ]
        norms = clip_grad_norms([found for *_, found in networks], self.config.max_grad_norm or math.inf, self.device)
        self.optimizer.step()
        return [Metric(event, args, norm) for (event, args, _), norm in zip(networks, norms.unbind())]

    def _normalized(self, key: StepKey, batch: StepBatch) -> StepBatch:
        """The batch's observations as the networks' inputs; a normalising policy first adds the batch's decisions to
        its statistics (once per batch, before any forward pass over it)."""
        policy = self.policy
        if not policy.normalizes:
            return batch
        policy.update_normalizers(key, {k: v[:-1][batch.mask] for k, v in batch.observations.items()})
        normalized = {}
        for declared in fields(Trajectory):  # every field that holds observations: of this step key, or earlier ones
            value = getattr(batch, declared.name)
            if declared.metadata["holds"] == OBSERVED:
                normalized[declared.name] = policy.normalize(key, value)
            elif declared.metadata["holds"] == ANCESTRAL:
                normalized[declared.name] = {k: policy.normalize(k, obs) for k, obs in value.items()}
        return replace(batch, **normalized)

    @torch.no_grad()
    def _anchor(
        self, minibatch: dict[StepKey, StepBatch], distributions: dict[StepKey, DictActionDistribution], targets: bool
    ) -> BatchAnchor:
        """log pi(a_t|x_t) of the actions taken, per step key, under the current policy, and with ``targets`` the
        whole forward pass (the critic's values and the rewards it bootstraps truncated episodes with), the networks
        computing as in the passes (``algorithm.precision``)."""
        forward: dict[StepKey, StepForward] | None = None
        with self._precision():
            if targets:
                forward = {key: self._forward(key, batch) for key, batch in minibatch.items()}
                logits = {key: step.logits for key, step in forward.items()}
            else:
                logits = {key: self._unroll(key, batch).logits.float() for key, batch in minibatch.items()}
        log_probs = {key: distributions[key].log_prob(logits[key], batch.actions) for key, batch in minibatch.items()}
        return BatchAnchor(log_probs, forward)

    def _unroll(self, key: StepKey, batch: StepBatch) -> PolicyUnroll:
        """The target policy over the batch: logits on x_0..x_{T-1}, ``[T, N, L]``, and a recurrent policy's memory,
        re-unrolled from each column's recorded first state."""
        first = batch.first if self.policy.recurrent else None  # (made from the batch at every call: only if read)
        return self.policy.unroll(key, batch.observations, batch.initial_state, first, batch.agent_ids)

    def _forward(self, key: StepKey, batch: StepBatch) -> StepForward:
        """The target policy's logits on x_0..x_{T-1}, the critic's values on x_0..x_T, and the rewards with the
        value of the final observation of each truncated episode added (see :meth:`_rewards_with_truncation`)."""
        unroll = self._unroll(key, batch)
        memory = None if unroll.memory is None else unroll.memory.features.detach()
        values = self.critic.values(key, batch.observations, 2, batch.ancestors, memory)
        if memory is not None:  # padding rows hold their column's bootstrap value (their inputs carry on a state)
            lengths = batch.mask.sum(0)
            rows = torch.arange(values.shape[0], device=values.device).unsqueeze(1)
            values = values.gather(0, torch.minimum(rows, lengths.unsqueeze(0)))
        # float32 from here on, whatever the networks computed in (algorithm.precision): V-trace and the losses
        return StepForward(unroll.logits.float(), values.float(), self._rewards_with_truncation(key, batch, unroll))

    def _precision(self) -> contextlib.AbstractContextManager[Any]:
        """What the networks compute in: bfloat16 autocast with ``algorithm.precision=bf16``, else float32."""
        if self.config.precision == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _schedule(self, schedule: str) -> float:
        """The factor of this update (:attr:`version`, 0-based) under ``schedule`` (constant or linear to 0)."""
        if schedule == "linear":
            return max(0.0, 1.0 - self.version / self.config.total_updates)
        return 1.0

    def _rewards_with_truncation(
        self, key: StepKey, batch: StepBatch, unroll: PolicyUnroll | None = None
    ) -> torch.Tensor:
        """r_t (clipped to +-``reward_clip`` where set), plus gamma * V(final obs) where an episode was cut off by a
        time limit.

        Truncated steps get discount 0 (the next observation belongs to a new
        episode); adding the discounted value of the observation the episode really
        ended in keeps the target that of an unfinished episode. A critic of a recurrent
        policy reads the memory the final observation came with (``unroll``'s, made here if not given).
        """
        rewards = batch.rewards
        if self.config.reward_clip is not None:
            rewards = rewards.clamp(-self.config.reward_clip, self.config.reward_clip)
        if batch.truncated_index.numel() == 0:
            return rewards
        t, col = batch.truncated_index[:, 0], batch.truncated_index[:, 1]
        # The delta critic values the final observation on top of the earlier sub-steps of its decision.
        ancestors = {k: {n: v[t, col] for n, v in obs.items()} for k, obs in batch.ancestors.items()}
        with torch.no_grad():
            memory = None
            if self.policy.recurrent:  # the memory the final observation came with: the state after decision t
                unroll = unroll or self._unroll(key, batch)
                assert unroll.memory is not None
                ends, cells = unroll.memory.ends, list(zip(t.tolist(), col.tolist()))
                state = {name: torch.stack([ends[i][name][c] for i, c in cells]) for name in ends[cells[0][0]]}
                memory = self.policy.memory(key, batch.truncated_observations, state, batch.agent_ids[col])
            final_values = self.critic.values(key, batch.truncated_observations, 1, ancestors, memory)
        rewards = rewards.clone()
        rewards[t, col] += self.config.gamma * final_values
        return rewards

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer state and the policy version (which sets the schedule's
        learning rate)."""
        return {
            "policy": self.policy.state_dict(),
            "critic": self.critic.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])  # the schedule's learning rate follows from the version
        self.version = int(state["version"])


def _policy_groups(key: StepKey, policy: StructuredPolicy) -> list[tuple[StepKey | str, list[torch.nn.Parameter]]]:
    """The networks of step key ``key``'s policy whose gradient norms are measured and clipped apart, labelled."""
    network, heads = policy.network(key), list(policy.distribution(key).parameters())
    per_agent = getattr(network, "agents", None)  # a network per agent or group of agents (PerAgentNet)
    if per_agent is None:
        return [(key, [*network.parameters(), *heads])]
    groups: list[tuple[StepKey | str, list[torch.nn.Parameter]]] = [
        (f"{key}/network_{i}", list(part.parameters())) for i, part in enumerate(per_agent)
    ]
    return groups + ([(f"{key}/heads", heads)] if heads else [])
