"""The learner: V-trace targets with truncation, separate gradient norms, burn-in, checkpoints."""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest
import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.checkpoints import CheckpointMismatchError, read_checkpoint, restore_modules, save_checkpoint
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.factory import make_env
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.events.api import EventHub, last
from maze_impala.events.stats import StatKey, StatsAggregator, by_column
from maze_impala.impala import learner as learner_module
from maze_impala.impala.batch import split_columns, stack_step
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.losses import RHO_NOISE, LossSettings, impala_step_loss
from maze_impala.nn.critics import StepStateCritic
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.models import StructuredPolicy, make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.testing import CounterEnv

MODEL = ModelConfig(hidden_units=[16], normalize_observations=False)
PREFIX = "train/MultiStepIMPALAEvents/"


def _setup(model=MODEL, **overrides):
    env = GymStructuredEnv(CounterEnv())
    policy = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, model)
    critic = StepStateCritic(env.observation_spaces_dict, model)
    hub = EventHub()
    stats = StatsAggregator("train", [MultiStepIMPALAEvents])
    hub.listeners.append(stats)
    config = ImpalaAlgorithmConfig(**{"n_sgd_minibatches": 1, **overrides})  # the updates these tests count
    learner = ImpalaLearner(policy, critic, config, hub.publisher(MultiStepIMPALAEvents))
    actor = ActorSpec(CounterEnv, Lineup.of(model), n_rollout_steps=4, envs_per_actor=3, seed=0).build(
        0, SharedWeights(policy)
    )
    return learner, actor, stats


def test_truncated_steps_bootstrap_from_the_final_observation():
    learner, actor, _ = _setup(gamma=0.9)
    actor.rollout()
    rollout = actor.rollout()  # CounterEnv truncates at step 5: t=0 of the second rollout
    batch = stack_step([rollout], 0, learner.device)
    assert batch.truncated[0].all() and not batch.terminated.any()
    rewards = learner._rewards_with_truncation(0, batch)
    final_values = learner.critic.values(0, {"observation": torch.tensor([[5.0, 0.0]] * 3)}).detach()
    torch.testing.assert_close(rewards[0], batch.rewards[0] + 0.9 * final_values)
    torch.testing.assert_close(rewards[1:], batch.rewards[1:])


def test_step_loss_matches_a_hand_computation():
    dist = StructuredPolicy(*_spaces(), MODEL).distribution(0)
    logits = torch.zeros(2, 1, 2)  # uniform policy: log pi = log 0.5
    actions = {"action": torch.tensor([[1], [0]])}
    values = torch.tensor([[1.0], [2.0], [3.0]])
    loss = impala_step_loss(
        dist,
        logits,
        actions,
        torch.log(torch.full((2, 1), 0.5)),
        values,
        torch.tensor([[1.0], [1.0]]),
        torch.tensor([[0.5], [0.0]]),
    )
    # on-policy: v_1 = r_1 = 1 (episode ends), v_0 = r_0 + 0.5 * v_1 = 1.5
    vs = torch.tensor([1.5, 1.0])
    torch.testing.assert_close(loss.value_loss, 0.5 * ((vs - torch.tensor([1.0, 2.0])) ** 2).mean())
    advantages = vs - torch.tensor([1.0, 2.0])
    torch.testing.assert_close(loss.policy_loss, -(advantages * np.log(0.5)).mean())
    torch.testing.assert_close(loss.entropy, torch.tensor(np.log(2.0), dtype=torch.float32))


def test_normalised_advantages_by_hand():
    """On-policy, the advantages [0.5, -1] (as above) become [1, -1]: the loss weighs each log-probability by them,
    and the clipped surrogate's first step has the same gradient."""
    dist = StructuredPolicy(*_spaces(), MODEL).distribution(0)
    actions = {"action": torch.tensor([[1], [0]])}
    log_probs = torch.tensor([[1.0 - np.log(1.0 + np.e)], [np.log(0.5)]], dtype=torch.float32)
    gradients = []
    for clip_range in (None, 0.2):
        logits = torch.tensor([[[0.0, 1.0]], [[0.0, 0.0]]], requires_grad=True)
        loss = impala_step_loss(
            dist,
            logits,
            actions,
            log_probs,
            torch.tensor([[1.0], [2.0], [3.0]]),
            torch.tensor([[1.0], [1.0]]),
            torch.tensor([[0.5], [0.0]]),
            LossSettings(clip_range=clip_range, normalize_advantages=True),
        )
        if clip_range is None:
            expected = -(torch.tensor([1.0, -1.0]) * log_probs[:, 0]).mean()
            torch.testing.assert_close(loss.policy_loss, expected, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(loss.advantage_mean, torch.tensor(-0.25), msg="the diagnostics: as they were")
        (gradient,) = torch.autograd.grad(loss.policy_loss, logits)
        gradients.append(gradient)
    torch.testing.assert_close(gradients[0], gradients[1])


def _spaces():
    env = GymStructuredEnv(CounterEnv())
    return env.observation_spaces_dict, env.action_spaces_dict


def test_policy_and_critic_grad_norms_are_measured_on_their_own_losses():
    learner, actor, stats = _setup(max_grad_norm=0.0, value_loss_coef=0.0)
    learner.step([actor.rollout()])
    row = by_column(stats.reduce())
    assert row[PREFIX + "critic_grad_norm/mean/critic_key=0"] == 0.0, "no value loss: no critic gradient"
    assert row[PREFIX + "policy_grad_norm/mean/step_key=0"] > 0.0
    learner, actor, stats = _setup(max_grad_norm=0.0, policy_loss_coef=0.0, entropy_coef=0.0)
    learner.step([actor.rollout()])
    row = by_column(stats.reduce())
    assert row[PREFIX + "policy_grad_norm/mean/step_key=0"] == 0.0
    assert row[PREFIX + "critic_grad_norm/mean/critic_key=0"] > 0.0
    assert learner.version == 1
    for name in ("time_backprop", "time_learner_rollout", "policy_lag", "policy_entropy", "critic_value"):
        assert any(col.startswith(PREFIX + name) for col in row), name


def test_clipping_bounds_each_network_and_records_the_unclipped_norm():
    learner, actor, stats = _setup(max_grad_norm=1e-3, lr=1e-3)
    before = [p.clone() for p in learner.critic.parameters()]
    learner.step([actor.rollout()])
    row = by_column(stats.reduce())
    assert row[PREFIX + "critic_grad_norm/mean/critic_key=0"] > 1e-3, "recorded before clipping"
    clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in learner.critic.parameters()]))
    assert clipped <= 1e-3 * 1.001
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.critic.parameters()))


def test_critic_burn_in_leaves_the_policy_untouched():
    learner, actor, _ = _setup()
    policy_before = [p.clone() for p in learner.policy.parameters()]
    critic_before = [p.clone() for p in learner.critic.parameters()]
    learner.step([actor.rollout()], train_policy=False)
    assert all(torch.equal(a, b) for a, b in zip(policy_before, learner.policy.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(critic_before, learner.critic.parameters()))


def test_policy_lag_is_the_version_difference():
    learner, actor, stats = _setup()
    rollouts = [actor.rollout(), actor.rollout()]  # both made with version 0
    learner.step(rollouts[:1])
    learner.step(rollouts[1:])
    row = by_column(stats.reduce())
    assert row[PREFIX + "policy_lag/max"] == 1.0 and row[PREFIX + "policy_lag/min"] == 0.0


def test_checkpoint_round_trip_restores_weights_optimizer_and_version(tmp_path):
    learner, actor, _ = _setup()
    for _ in range(3):
        learner.step([actor.rollout()])
    save_checkpoint(tmp_path / "ckpt.pt", learner.state_dict())
    fresh, _, _ = _setup()
    state = read_checkpoint(tmp_path / "ckpt.pt")
    restore_modules(state, tmp_path / "ckpt.pt", policy=fresh.policy, critic=fresh.critic)
    fresh.load_state_dict(state)
    assert fresh.version == 3
    for a, b in zip(learner.policy.parameters(), fresh.policy.parameters()):
        torch.testing.assert_close(a, b)
    rollout = actor.rollout()
    learner.step([rollout])
    fresh.step([rollout])  # identical optimizer state: identical next update
    for a, b in zip(learner.critic.parameters(), fresh.critic.parameters()):
        torch.testing.assert_close(a, b)


def test_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    learner, _, _ = _setup()
    save_checkpoint(tmp_path / "ckpt.pt", learner.state_dict())
    other, _, _ = _setup(model=ModelConfig(hidden_units=[32]))
    with pytest.raises(CheckpointMismatchError, match="was made for another policy"):
        restore_modules(read_checkpoint(tmp_path / "ckpt.pt"), tmp_path / "ckpt.pt", policy=other.policy)
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        read_checkpoint(tmp_path / "missing.pt")


def test_an_update_moves_its_metrics_to_the_host_once(monkeypatch):
    learner, actor, stats = _setup()
    rollouts = [actor.rollout(), actor.rollout()]
    calls = {"tolist": 0, "float": 0}
    tolist, to_float = torch.Tensor.tolist, torch.Tensor.__float__

    def counted_tolist(self):
        calls["tolist"] += 1
        return tolist(self)

    def counted_float(self):
        calls["float"] += 1
        return to_float(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)
    monkeypatch.setattr(torch.Tensor, "__float__", counted_float)
    learner.step(rollouts)
    monkeypatch.undo()
    assert calls == {"tolist": 1, "float": 0}  # one transfer (a sync on a GPU), after the optimizer step
    row = by_column(stats.reduce())
    for name in ("policy_loss", "policy_entropy", "policy_grad_norm"):
        assert np.isfinite(row[f"{PREFIX}{name}/mean/step_key=0"]), name
    for name in ("critic_value", "critic_value_loss", "critic_grad_norm"):
        assert np.isfinite(row[f"{PREFIX}{name}/mean/critic_key=0"]), name


def _step_data(T=5, N=3, seed=0):
    from maze_impala.impala.batch import StepBatch
    from maze_impala.impala.losses import StepForward

    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(T, N, dtype=torch.bool)
    mask[3:, 0] = False  # column 0 holds 3 decisions: padding after them
    terminated = torch.zeros(T, N, dtype=torch.bool)
    terminated[1, 1] = True
    empty = torch.zeros(0)
    batch = StepBatch(
        observations={},
        actions={"action": torch.randint(0, 2, (T, N), generator=g)},
        behaviour_log_probs=-torch.rand(T, N, generator=g),
        rewards=empty,
        terminated=terminated,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        truncated_observations={},
        truncated_index=torch.zeros(0, 2, dtype=torch.int64),
        mask=mask,
        agent_ids=torch.zeros(N),
        ancestors={},
    )
    forward = StepForward(
        torch.randn(T, N, 2, generator=g), torch.randn(T + 1, N, generator=g), torch.randn(T, N, generator=g)
    )
    return batch, forward


def test_impala_loss_weights_each_step_keys_losses_by_hand():
    from maze_impala.impala.losses import impala_loss

    distribution = make_policy(make_env("CartPole-v1"), ModelConfig(hidden_units=[4])).distribution(0)
    config = ImpalaAlgorithmConfig(
        gamma=0.9,
        value_loss_coef=0.25,
        policy_loss_coef=2.0,
        entropy_coef=0.1,
        clip_range=0.2,
        vtrace_lambda=1.0,
        normalize_advantages=False,
    )
    batches, forward = {}, {}
    for key, seed in (("a", 0), ("b", 1)):
        batches[key], forward[key] = _step_data(seed=seed)
    total, losses = impala_loss(batches, forward, {"a": distribution, "b": distribution}, config)
    expected = 0.0
    for key in ("a", "b"):
        batch, step = batches[key], forward[key]
        discounts = torch.where(batch.mask, 0.9 * (~batch.terminated).float(), 1.0)
        loss = impala_step_loss(
            distribution,
            step.logits,
            batch.actions,
            batch.behaviour_log_probs,
            step.values,
            torch.where(batch.mask, step.rewards, 0.0),
            discounts,
            LossSettings(clip_range=0.2, trust_region=config.trust_region),
            batch.mask,
        )
        assert torch.allclose(losses[key].policy_loss, loss.policy_loss)
        expected += 0.25 * loss.value_loss + 2.0 * loss.policy_loss - 0.1 * loss.entropy
    assert torch.allclose(total, expected)
    critic_only, _ = impala_loss(batches, forward, {"a": distribution, "b": distribution}, config, train_policy=False)
    assert torch.allclose(critic_only, 0.25 * (losses["a"].value_loss + losses["b"].value_loss))
    # what lies in the padding (after a column's last decision) changes nothing
    padded = forward["a"]._replace(rewards=forward["a"].rewards.clone())
    padded.rewards[3:, 0] = 1e6
    again, _ = impala_loss({"a": batches["a"]}, {"a": padded}, {"a": distribution}, config)
    alone, _ = impala_loss({"a": batches["a"]}, {"a": forward["a"]}, {"a": distribution}, config)
    assert torch.allclose(again, alone)
    # the schedule's factor scales the bonus
    scheduled, _ = impala_loss(batches, forward, {"a": distribution, "b": distribution}, config, entropy_scale=0.4)
    assert torch.allclose(scheduled, expected + 0.06 * (losses["a"].entropy + losses["b"].entropy))


def test_a_step_key_with_continuous_actions_has_its_own_entropy_bonus():
    from maze_impala.impala.losses import impala_loss

    discrete = make_policy(make_env("CartPole-v1"), ModelConfig(hidden_units=[4])).distribution(0)
    gaussian = make_policy(make_env("MountainCarContinuous-v0"), ModelConfig(hidden_units=[4])).distribution(0)
    assert (discrete.continuous, gaussian.continuous) == (False, True)
    batches, forward = {}, {}
    for key, seed in (("a", 0), ("b", 1)):
        batches[key], forward[key] = _step_data(seed=seed)
    b = batches["b"]
    batches["b"] = dataclasses.replace(b, actions={"action": torch.randn(*b.mask.shape, 1)})
    forward["b"] = forward["b"]._replace(logits=forward["b"].logits[..., :1])
    distributions = {"a": discrete, "b": gaussian}

    def total(**settings):
        config = ImpalaAlgorithmConfig(vtrace_lambda=1.0, normalize_advantages=False, **settings)
        return impala_loss(batches, forward, distributions, config)

    base, losses = total(entropy_coef=0.0, continuous_entropy_coef=0.0)
    h_a, h_b = losses["a"].entropy, losses["b"].entropy
    assert torch.allclose(total(entropy_coef=0.01, continuous_entropy_coef=0.003)[0], base - 0.01 * h_a - 0.003 * h_b)
    assert torch.allclose(total(entropy_coef=0.01, continuous_entropy_coef=None)[0], base - 0.01 * (h_a + h_b))


@pytest.mark.parametrize("schedule, factors", [("constant", [1, 1, 1, 1]), ("linear", [1, 0.75, 0.5, 0.25])])
def test_entropy_schedule_anneals_the_bonus_on_the_learning_rates_clock(monkeypatch, schedule, factors):
    learner, actor, stats = _setup(entropy_coef=0.2, entropy_schedule=schedule, n_epochs=1, epoch_length=4)
    seen, real_loss = [], learner_module.impala_loss

    def recording_loss(batches, forward, distributions, config, train_policy, anchors, scale, shares, **kw):
        seen.append((config.entropy_coef * scale, learner.optimizer.lr / config.lr))
        return real_loss(batches, forward, distributions, config, train_policy, anchors, scale, shares, **kw)

    monkeypatch.setattr(learner_module, "impala_loss", recording_loss)
    for _ in range(4):
        learner.step([actor.rollout()])
    passes = learner.config.n_sgd_passes
    entropy_coef = by_column(stats.reduce())[StatKey.of(MultiStepIMPALAEvents.entropy_coef, last).column()]
    assert entropy_coef == pytest.approx(0.2 * factors[-1])  # the latest update's, in the statistics
    assert [coef for coef, _ in seen] == pytest.approx([0.2 * f for f in factors for _ in range(passes)])
    assert [lr for _, lr in seen] == pytest.approx([1 - u / 4 for u in range(4) for _ in range(passes)])


def test_the_collapse_diagnostics_by_hand():
    from maze_impala.impala.vtrace import vtrace

    batch, step = _step_data(seed=2)
    distribution = make_policy(make_env("CartPole-v1"), ModelConfig(hidden_units=[4])).distribution(0)
    mask = batch.mask
    discounts = torch.where(mask, 0.9 * (~batch.terminated).float(), 1.0)
    rewards = torch.where(mask, step.rewards, 0.0)
    loss = impala_step_loss(
        distribution, step.logits, batch.actions, batch.behaviour_log_probs, step.values, rewards, discounts, mask=mask
    )
    log_rhos = (distribution.log_prob(step.logits, batch.actions) - batch.behaviour_log_probs) * mask
    assert torch.isclose(loss.clipped_rho_fraction, (log_rhos.exp() > 1.0 + RHO_NOISE)[mask].float().mean())
    # on-policy data: the actors' log-probabilities equal the learner's up to float rounding, and none is clipped
    rounded = distribution.log_prob(step.logits, batch.actions) + 1e-6 * torch.randn(batch.mask.shape)
    on_policy = impala_step_loss(
        distribution, step.logits, batch.actions, rounded, step.values, rewards, discounts, mask=mask
    )
    assert on_policy.clipped_rho_fraction == 0.0
    assert torch.isclose(loss.max_abs_logit, step.logits.abs().max())
    returns = vtrace(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=step.values[:-1],
        bootstrap_value=step.values[-1],
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
    )
    assert torch.isclose(loss.advantage_std, returns.pg_advantages[mask].std(unbiased=False), atol=1e-6)


class _TwoSteps(NamedTuple):
    """Two steps of two envs under a uniform behaviour policy mu: small enough to compute the losses by hand."""

    dist: DictActionDistribution
    actions: dict[str, torch.Tensor]
    behaviour: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    discounts: torch.Tensor

    @staticmethod
    def make() -> "_TwoSteps":
        return _TwoSteps(
            dist=StructuredPolicy(*_spaces(), MODEL).distribution(0),
            actions={"action": torch.tensor([[1, 0], [0, 1]])},
            behaviour=torch.log(torch.full((2, 2), 0.5)),
            values=torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 2.0]]),
            rewards=torch.tensor([[1.0, -1.0], [1.0, 2.0]]),
            discounts=torch.tensor([[0.5, 0.5], [0.0, 0.5]]),
        )

    def loss(self, logits, trust_region, anchor=None, clip_range=0.2):
        return impala_step_loss(
            self.dist,
            logits,
            self.actions,
            self.behaviour,
            self.values,
            self.rewards,
            self.discounts,
            LossSettings(clip_range=clip_range, trust_region=trust_region),
            anchor_log_probs=anchor,
        )


def test_clipped_surrogate_matches_a_hand_computation_and_on_policy_its_gradient_is_impalas():
    case = _TwoSteps.make()
    _, actions, behaviour, values, rewards, discounts = case

    def loss(logits, clip_range=0.2, anchor=None):
        return case.loss(logits, "behaviour", anchor, clip_range)

    # On-policy (pi = mu) the surrogate's gradient is IMPALA's.
    clipped, plain = torch.zeros(2, 2, 2, requires_grad=True), torch.zeros(2, 2, 2, requires_grad=True)
    loss(clipped).policy_loss.backward()
    loss(plain, clip_range=None).policy_loss.backward()
    torch.testing.assert_close(clipped.grad, plain.grad)

    # Off-policy, by hand: -mean(min(r A, clip(r, 0.8, 1.2) A)) with r = pi/mu and A from the V-trace targets,
    # whose importance weights come from the anchor (here uniform, as mu: on-policy n-step returns).
    logits = torch.tensor([[[0.0, 1.0], [0.5, 0.0]], [[0.0, -0.2], [0.0, 0.1]]])
    pi = torch.softmax(logits, -1).gather(-1, actions["action"].unsqueeze(-1)).squeeze(-1)
    ratios = pi / 0.5
    vs = torch.empty(2, 2)
    vs[1] = rewards[1] + discounts[1] * values[2]
    vs[0] = rewards[0] + discounts[0] * vs[1]
    advantages = rewards + discounts * torch.stack([vs[1], values[2]]) - values[:2]
    surrogate = torch.minimum(ratios * advantages, ratios.clamp(0.8, 1.2) * advantages)
    result = loss(logits, anchor=behaviour)
    torch.testing.assert_close(result.policy_loss, -surrogate.mean())
    torch.testing.assert_close(result.clipped_ratio_fraction, ((ratios - 1).abs() > 0.2).float().mean())
    torch.testing.assert_close(result.behaviour_kl, (ratios - 1 - ratios.log()).mean())
    torch.testing.assert_close(result.value_loss, 0.5 * ((vs - values[:2]) ** 2).mean())
    # Where the ratio left the clip in the advantage's direction, the sample passes no gradient.
    far = logits.clone()
    far[0, 0] = torch.tensor([0.0, 3.0])  # pi(a=1) = 0.95: r = 1.9 > 1.2, and A > 0 there
    far.requires_grad_(True)
    assert advantages[0, 0] > 0
    loss(far, anchor=behaviour).policy_loss.backward()
    assert far.grad[0, 0].abs().max() == 0.0 and far.grad[1].abs().max() > 0.0


def test_learner_anchored_surrogate_matches_a_hand_computation_and_first_pass_gradient_is_impalas():
    case = _TwoSteps.make()
    _, actions, _, values, rewards, discounts = case

    def loss(logits, anchor=None, clip_range=0.2):
        return case.loss(logits, "learner", anchor, clip_range)

    def probs(logits):
        return torch.softmax(logits, -1).gather(-1, actions["action"].unsqueeze(-1)).squeeze(-1)

    # At a batch's first pass (pi = pi_0, whatever mu) the surrogate's gradient is IMPALA's V-trace gradient.
    start = torch.tensor([[[0.0, 1.0], [0.5, 0.0]], [[0.0, -0.2], [0.0, 0.1]]])
    clipped, plain = start.clone().requires_grad_(True), start.clone().requires_grad_(True)
    loss(clipped).policy_loss.backward()
    loss(plain, clip_range=None).policy_loss.backward()
    torch.testing.assert_close(clipped.grad, plain.grad)

    # A later pass, by hand: r = pi/pi_0 over min(1, pi_0/mu) (r_t + gamma_t v_{t+1} - V(x_t)), the V-trace
    # targets v with weights rho = c = min(1, pi_0/mu) (lambda 1), unchanged by the passes.
    pi0 = probs(start)
    logits = start + torch.tensor([[[0.0, 0.6], [0.0, 0.0]], [[0.3, 0.0], [0.0, -0.1]]])
    rho = (pi0 / 0.5).clamp(max=1.0)
    vs = torch.empty(2, 2)
    vs[1] = values[1] + rho[1] * (rewards[1] + discounts[1] * values[2] - values[1])
    vs[0] = (
        values[0]
        + rho[0] * (rewards[0] + discounts[0] * values[1] - values[0])
        + discounts[0] * rho[0] * (vs[1] - values[1])
    )
    advantages = rho * (rewards + discounts * torch.stack([vs[1], values[2]]) - values[:2])
    ratios = probs(logits) / pi0
    surrogate = torch.minimum(ratios * advantages, ratios.clamp(0.8, 1.2) * advantages)
    result = loss(logits, anchor=pi0.log())
    torch.testing.assert_close(result.policy_loss, -surrogate.mean())
    torch.testing.assert_close(result.value_loss, 0.5 * ((vs - values[:2]) ** 2).mean())
    torch.testing.assert_close(result.clipped_ratio_fraction, ((ratios - 1).abs() > 0.2).float().mean())
    to_mu = probs(logits) / 0.5  # the behaviour KL stays that of the actors' policy
    torch.testing.assert_close(result.behaviour_kl, (to_mu - 1 - to_mu.log()).mean())
    torch.testing.assert_close(result.update_kl, (ratios - 1 - ratios.log()).mean())  # the steps' drift from pi_0
    assert loss(start, anchor=pi0.log()).update_kl.abs() < 1e-7  # nothing moved yet
    with pytest.raises(ValueError, match="trust_region"):
        case.loss(logits, "actors")


def test_each_batch_takes_passes_x_minibatches_steps_but_one_policy_version():
    learner, actor, stats = _setup(n_sgd_passes=3, n_sgd_minibatches=2, lr=1e-2)
    rollout = actor.rollout()
    learner.step([rollout])
    assert learner.version == 1 and learner.optimizer.lr == 1e-2  # the schedule: lr at update 0
    assert learner.optimizer.state_dict()["state"][0]["step"] == 3 * 2
    row = by_column(stats.reduce())
    assert 0.0 <= row[PREFIX + "policy_clipped_ratio_fraction/mean/step_key=0"] <= 1.0
    assert row[PREFIX + "policy_update_kl/max/step_key=0"] > 0.0  # two steps before the last pass moved the policy


def test_split_columns_partitions_each_step_keys_columns_and_reindexes_time_limit_cut_offs():
    learner, actor, _ = _setup()
    actor.rollout()
    batch = stack_step([actor.rollout()], 0, learner.device)  # 3 columns, all cut off by the time limit at t=0
    halves = split_columns({0: batch}, 2)
    first, second = halves[0][0], halves[1][0]
    assert [first.mask.shape[1], second.mask.shape[1]] == [2, 1]  # linspace(0, 3, 3) rounded: 0, 2, 3
    torch.testing.assert_close(torch.cat([first.rewards, second.rewards], dim=1), batch.rewards)
    torch.testing.assert_close(
        torch.cat([first.observations["observation"], second.observations["observation"]], dim=1),
        batch.observations["observation"],
    )
    assert second.truncated_index.tolist() == [[0, 0]] and first.truncated_index.tolist() == [[0, 0], [0, 1]]
    torch.testing.assert_close(
        second.truncated_observations["observation"], batch.truncated_observations["observation"][2:]
    )
    whole = learner._rewards_with_truncation(0, batch)
    torch.testing.assert_close(learner._rewards_with_truncation(0, second), whole[:, 2:])
    assert len(split_columns({0: batch}, 5)) == 3  # minibatches without columns are left out
    assert split_columns({0: batch}, 1)[0][0] is batch


def test_minibatches_take_passes_times_minibatches_steps_anchored_at_the_policy_before_the_batch(monkeypatch):
    learner, actor, _ = _setup(n_sgd_passes=2, n_sgd_minibatches=3, lr=1e-2)
    rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    distribution = learner.policy.distribution(0)
    before = distribution.log_prob(learner._forward(0, batch).logits, batch.actions).detach()
    seen = []
    real_loss = learner_module.impala_loss

    def recording_loss(batches, forward, distributions, config, train_policy, anchors, entropy_coef, shares, **kw):
        seen.append((batches[0].mask.shape[1], anchors.log_probs[0].clone()))
        assert anchors.targets is None  # value_targets=step: V-trace bootstraps from the current critic
        return real_loss(batches, forward, distributions, config, train_policy, anchors, entropy_coef, shares, **kw)

    monkeypatch.setattr(learner_module, "impala_loss", recording_loss)
    learner.step([rollout])
    assert learner.version == 1 and learner.optimizer.state_dict()["state"][0]["step"] == 6
    assert [columns for columns, _ in seen] == [1, 1, 1] * 2
    for index, (_, anchor) in enumerate(seen):  # every minibatch, in every pass: pi_0 of its own columns
        column = index % 3
        torch.testing.assert_close(anchor, before[:, column : column + 1])


def test_value_targets_of_a_batch_bootstrap_from_the_critic_before_its_first_step(monkeypatch):
    learner, actor, _ = _setup(n_sgd_passes=2, n_sgd_minibatches=3, lr=1e-2, value_targets="batch", gamma=0.9)
    actor.rollout()
    rollout = actor.rollout()  # truncated at t=0: the final observation's value is in the rewards
    batch = stack_step([rollout], 0, learner.device)
    before = learner._forward(0, batch)
    seen = []
    real_loss = learner_module.impala_loss

    def recording_loss(batches, forward, distributions, config, train_policy, anchors, entropy_coef, shares, **kw):
        seen.append((anchors.targets[0], forward[0].values.detach().clone()))
        return real_loss(batches, forward, distributions, config, train_policy, anchors, entropy_coef, shares, **kw)

    monkeypatch.setattr(learner_module, "impala_loss", recording_loss)
    learner.step([rollout])
    assert len(seen) == 6
    for index, (targets, _) in enumerate(seen):  # every step: the values and rewards of before the batch
        column = slice(index % 3, index % 3 + 1)
        torch.testing.assert_close(targets.values, before.values[:, column].detach())
        torch.testing.assert_close(targets.rewards, before.rewards[:, column].detach())
    # ... while the critic the value loss trains has moved since (the test would not tell the two apart otherwise)
    assert not torch.allclose(seen[-1][1], seen[-1][0].values)


def test_target_values_replace_the_critics_in_vtrace_but_not_in_the_value_loss():
    case = _TwoSteps.make()
    targets = torch.tensor([[0.5, 1.0], [1.5, -1.0], [2.0, 0.0]])
    logits = torch.zeros(2, 2, 2)
    settings = LossSettings(clip_range=0.2, trust_region="learner")
    args = (case.dist, logits, case.actions, case.behaviour)
    fixed = impala_step_loss(*args, case.values, case.rewards, case.discounts, settings, target_values=targets)
    # On-policy with lambda 1 the targets are n-step returns bootstrapped from ``targets``: by hand.
    vs = torch.empty(2, 2)
    vs[1] = case.rewards[1] + case.discounts[1] * targets[2]
    vs[0] = case.rewards[0] + case.discounts[0] * vs[1]
    torch.testing.assert_close(fixed.value_loss, 0.5 * (vs - case.values[:-1]).pow(2).mean())
    moving = impala_step_loss(*args, case.values, case.rewards, case.discounts, settings)
    assert not torch.allclose(moving.value_loss, fixed.value_loss)


def test_a_batch_without_padding_takes_plain_means_with_the_masked_means_values():
    from dataclasses import replace

    from maze_impala.impala.losses import impala_loss

    learner, actor, _ = _setup(clip_range=0.2)
    rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    assert batch.dense and batch.columns(0, 2).dense  # every entry a decision, known from the host's arrays
    forward = {0: learner._forward(0, batch)}
    distributions = {0: learner.policy.distribution(0)}
    plain, plain_parts = impala_loss({0: batch}, forward, distributions, learner.config)
    masked, masked_parts = impala_loss({0: replace(batch, dense=False)}, forward, distributions, learner.config)
    torch.testing.assert_close(plain, masked)
    for field in ("policy_loss", "value_loss", "entropy", "advantage_std", "behaviour_kl", "clipped_rho_fraction"):
        torch.testing.assert_close(getattr(plain_parts[0], field), getattr(masked_parts[0], field))
    shorter = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=3, envs_per_actor=3, seed=1).build(
        1, SharedWeights(learner.policy)
    )
    assert not stack_step([rollout, shorter.rollout()], 0, learner.device).dense  # padded: masked means


def test_the_passes_that_publish_nothing_compute_the_loss_without_diagnostics():
    from maze_impala.impala.losses import impala_loss

    learner, actor, _ = _setup()
    batch = stack_step([actor.rollout()], 0, learner.device)
    forward, distributions = {0: learner._forward(0, batch)}, {0: learner.policy.distribution(0)}
    full, with_all = impala_loss({0: batch}, forward, distributions, learner.config)
    terms, bare = impala_loss({0: batch}, forward, distributions, learner.config, diagnostics=False)
    torch.testing.assert_close(full, terms)  # the same loss
    assert bare[0].update_kl is None and bare[0].max_abs_logit is None and with_all[0].max_abs_logit is not None


def test_an_action_the_anchor_found_nearly_impossible_keeps_every_loss_and_kl_finite():
    """A saturated softmax gives a taken action a log-probability of about -100 under pi_0 (and mu); once the policy
    moves to it, pi/pi_0 is e^100, beyond float32: the ratios and KL estimates are cut (LOG_RATIO_LIMIT)."""
    case = _TwoSteps.make()
    logits = torch.zeros(2, 2, 2, requires_grad=True)
    anchor = torch.full((2, 2), -100.0)
    for region in ("learner", "behaviour"):
        behaviour = torch.full((2, 2), -100.0)
        loss = impala_step_loss(
            case.dist,
            logits,
            case.actions,
            behaviour,
            case.values,
            case.rewards,
            case.discounts,
            LossSettings(clip_range=0.2, trust_region=region),
            anchor_log_probs=anchor,
        )
        for name in ("policy_loss", "value_loss", "update_kl", "behaviour_kl"):
            assert torch.isfinite(getattr(loss, name)), (region, name, getattr(loss, name))
        loss.policy_loss.backward()
        assert torch.isfinite(logits.grad).all()
