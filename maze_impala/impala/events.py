"""The events of the IMPALA learner (names as in Maze-RL's ``MultiStepIMPALAEvents``)."""

from __future__ import annotations

from maze_impala.core import StepKey
from maze_impala.events.api import EventInterface, epoch_stats, last, max_, mean, min_


class MultiStepIMPALAEvents(EventInterface):
    """What the learner measures in every update."""

    @epoch_stats(mean)
    def time_dequeuing_actors(self, time: float, percent: float):
        """Seconds the trainer spent taking rollouts from the queue, and their share (%) of that plus the update."""

    @epoch_stats(mean)
    def time_stacking(self, time: float, percent: float):
        """Seconds spent stacking the batch's rollouts onto the device (and normalising its observations), and their
        share (%) of the learner's step."""

    @epoch_stats(mean)
    def time_learner_rollout(self, time: float, percent: float):
        """Seconds spent recomputing logits and values on the batch (all passes), and their share (%) of the step."""

    @epoch_stats(mean)
    def time_loss_computation(self, time: float, percent: float):
        """Seconds spent on V-trace and the losses (all passes), and their share (%) of the learner's step."""

    @epoch_stats(mean)
    def time_backprop(self, time: float, percent: float):
        """Seconds spent on backward passes, clipping and optimizer steps, and their share (%) of the step."""

    @epoch_stats(mean, max_)
    def estimated_queue_sizes(self, before: int, after: int):
        """Rollouts waiting in the queue before and after taking a batch."""

    @epoch_stats(last)
    def learning_rate(self, value: float):
        """The learning rate the latest update used (it follows algorithm.lr_schedule)."""

    @epoch_stats(last)
    def entropy_coef(self, value: float):
        """The entropy bonus's weight the latest update used (it follows algorithm.entropy_schedule; with continuous
        actions, algorithm.continuous_entropy_coef's)."""

    @epoch_stats(mean, min_, max_)
    def policy_lag(self, value: float):
        """Learner version minus the version that generated a rollout (one event per rollout)."""

    @epoch_stats(mean, group_by="step_key")
    def policy_loss(self, step_key: StepKey, value: float):
        """The policy-gradient loss of one step key."""

    @epoch_stats(mean, group_by="step_key")
    def policy_entropy(self, step_key: StepKey, value: float):
        """The mean entropy of one step key's action distribution."""

    @epoch_stats(mean, max_, group_by="step_key")
    def policy_grad_norm(self, step_key: StepKey, value: float):
        """The gradient norm of one step key's policy network, before clipping."""

    @epoch_stats(mean, max_, group_by="step_key")
    def policy_clipped_rho_fraction(self, step_key: StepKey, value: float):
        """Share of one step key's importance weights clipped at rho-bar (vtrace_clip_rho_threshold), beyond float
        rounding: on-policy data gives 0."""

    @epoch_stats(max_, group_by="step_key")
    def policy_max_abs_logit(self, step_key: StepKey, value: float):
        """The largest |logit| of an allowed action: large values mean a saturated, nearly deterministic policy."""

    @epoch_stats(mean, group_by="step_key")
    def policy_advantage_std(self, step_key: StepKey, value: float):
        """The standard deviation of one step key's V-trace policy-gradient advantages."""

    @epoch_stats(mean, max_, group_by="step_key")
    def policy_clipped_ratio_fraction(self, step_key: StepKey, value: float):
        """Share of the surrogate's ratios (pi/pi_0 or pi/mu, see trust_region) outside 1 +- clip_range in a
        batch's last pass (held back by the trust region)."""

    @epoch_stats(mean, max_, group_by="step_key")
    def policy_behaviour_kl(self, step_key: StepKey, value: float):
        """KL(actors' policy || learner's policy) on a batch's actions as it arrives: the policy lag's divergence."""

    @epoch_stats(mean, max_, group_by="step_key")
    def policy_update_kl(self, step_key: StepKey, value: float):
        """KL(pi_0 || pi) on a batch's actions in its last pass: how far the batch's steps before the last moved the
        policy from pi_0, where it was before the batch (0 with one step per batch). A solved task's drift."""

    @epoch_stats(mean, min_, max_)
    def policy_sgd_steps(self, value: float):
        """Optimizer steps an update took: n_sgd_passes x its minibatches, or fewer where algorithm.target_kl stopped
        the batch early."""

    @epoch_stats(last, group_by="critic_key")
    def critic_value_scale(self, critic_key: StepKey, value: float):
        """The running standard deviation of one critic network's value targets: the scale it learns in
        (algorithm.value_normalization; not recorded when off)."""

    @epoch_stats(last, group_by="critic_key")
    def critic_value_shift(self, critic_key: StepKey, value: float):
        """The running mean of one critic network's value targets (algorithm.value_normalization)."""

    @epoch_stats(mean, group_by="critic_key")
    def critic_value(self, critic_key: StepKey, value: float):
        """The mean value estimate of one critic."""

    @epoch_stats(mean, group_by="critic_key")
    def critic_value_loss(self, critic_key: StepKey, value: float):
        """The value loss of one critic."""

    @epoch_stats(mean, max_, group_by="critic_key")
    def critic_grad_norm(self, critic_key: StepKey, value: float):
        """The gradient norm of one critic network, before clipping."""
