"""Value normalisation (``algorithm.value_normalization``) and step control (``algorithm.target_kl``): the statistics
by hand, PopArt's preserved outputs, the two bugs other libraries met, the checkpoint round trip, and the KL stop."""

import numpy as np
import pytest
import torch
from test_learner import PREFIX, _setup

from maze_impala.checkpoints import read_checkpoint, restore_modules, save_checkpoint
from maze_impala.events.stats import by_column
from maze_impala.impala.batch import stack_step
from maze_impala.impala.losses import value_targets
from maze_impala.impala.vtrace import vtrace
from maze_impala.nn.value_norm import DECAY, ValueNormalizer, fit_mean, preserve_outputs


@pytest.mark.parametrize("decay", [DECAY, 0.999, 0.5])
def test_statistics_are_a_debiased_moving_average_in_float64(decay):
    norm = ValueNormalizer()
    assert norm.mu.dtype == torch.float64 and float(norm.mu) == 0.0 and float(norm.sigma) == 1.0
    rng = np.random.default_rng(0)
    batches = [rng.normal(1e6 + 10 * i, 3.0 + i, size=50) for i in range(4)]
    for batch in batches:
        norm.update(torch.tensor(batch, dtype=torch.float32), decay=decay)
    weights = np.array([(1 - decay) * decay ** (len(batches) - 1 - i) for i in range(len(batches))])
    mean = sum(w * b.astype(np.float32).astype(np.float64).mean() for w, b in zip(weights, batches)) / weights.sum()
    mean_sq = sum(w * (b.astype(np.float32).astype(np.float64) ** 2).mean() for w, b in zip(weights, batches))
    std = np.sqrt(mean_sq / weights.sum() - mean**2)
    assert float(norm.mu) == pytest.approx(mean, rel=1e-12)
    assert float(norm.sigma) == pytest.approx(std, rel=1e-6)  # a variance of 1e12-sized squares: float64 keeps it


def test_before_any_update_the_output_is_the_value_bit_for_bit():
    output = torch.randn(7, 3)
    assert torch.equal(ValueNormalizer().denormalize(output), output)


@pytest.mark.parametrize("keep_mean", [True, False])
def test_the_rescaling_keeps_the_values_or_with_shift_their_distances_from_the_mean(keep_mean):
    """PopArt (``keep_mean``) keeps each value; shift keeps ``V - mu`` and moves every value with the mean."""
    torch.manual_seed(0)
    head, norm = torch.nn.Linear(4, 1), ValueNormalizer()
    norm.update(torch.tensor([1.0, 2.0, 3.0]))
    x = torch.randn(10, 4)
    values = norm.denormalize(head(x)).detach()
    before, after = norm.update(torch.tensor([100.0, -50.0, 300.0]))
    assert float(after.sigma) > 10 * float(before.sigma)
    preserve_outputs(head, before, after, keep_mean=keep_mean)
    moved = norm.denormalize(head(x)).detach()
    if keep_mean:
        torch.testing.assert_close(moved, values, rtol=1e-5, atol=1e-4)
    else:
        deviations = (values - before.mu).float(), (moved - after.mu).float()
        torch.testing.assert_close(deviations[1], deviations[0], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(moved, values, atol=1.0)  # the mean moved by about 58: so did every value


def test_fit_mean_moves_every_value_by_the_batchs_mean_error():
    torch.manual_seed(0)
    head, norm = torch.nn.Linear(4, 1), ValueNormalizer()
    norm.update(torch.tensor([10.0, 20.0, 30.0]))
    x, targets = torch.randn(50, 4), 5 * torch.randn(50) + 40
    values = norm.denormalize(head(x).squeeze(-1)).detach()
    fit_mean(head, targets - values, norm.moments())
    fitted = norm.denormalize(head(x).squeeze(-1)).detach()
    assert float((targets - fitted).mean()) == pytest.approx(0.0, abs=1e-4)
    torch.testing.assert_close(fitted - values, torch.full_like(values, float((targets - values).mean())))


def test_the_learner_fits_the_critics_mean_to_the_batchs_targets_before_its_steps():
    learner, actor, _ = _setup(value_normalization="popart", fit_value_mean=True, n_sgd_passes=1, lr=1e-12)
    actor.rollout()
    rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    forward = learner._forward(0, batch)
    distributions = {0: learner.policy.distribution(0)}
    targets = value_targets({0: batch}, {0: forward}, distributions, learner.config)[0]
    error = float((targets - forward.values[:-1]).mean())
    assert abs(error) > 0.1  # an untrained critic: its level is off
    learner.step([rollout])  # PopArt keeps the values, the fit moves them all by the mean error
    moved = learner._forward(0, batch).values.detach() - forward.values.detach()
    torch.testing.assert_close(moved, torch.full_like(moved, error), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["returns", "popart"])
def test_vtrace_reads_values_in_the_envs_units_and_the_value_loss_compares_normalised_ones(mode):
    """marlbenchmark/on-policy #12 (advantages from normalised values) and instadeepai/Mava #811 (normalised
    predictions against denormalised targets): V-trace's targets come from the denormalised values, and the value
    loss is the squared error between the network's own output and the normalised target."""
    learner, actor, _ = _setup(value_normalization=mode, gamma=0.9, vtrace_lambda=1.0)
    norm = learner.critic.normalizer(0)
    norm.update(torch.tensor([40.0, 60.0, 80.0]))  # mu 60, sigma about 16: far from the network's raw outputs
    rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    forward = learner._forward(0, batch)
    raw = learner.critic.networks["0"](batch.observations, 2).squeeze(-1)
    torch.testing.assert_close(forward.values, raw * norm.sigma.float() + norm.mu.float())
    from maze_impala.impala.losses import impala_loss

    distributions = {0: learner.policy.distribution(0)}
    scales = {0: norm.scale()}
    _, losses = impala_loss({0: batch}, {0: forward}, distributions, learner.config, value_scales=scales)
    discounts = 0.9 * (~(batch.terminated | batch.truncated)).float()
    expected = vtrace(
        log_rhos=torch.zeros_like(batch.rewards),
        discounts=discounts,
        rewards=forward.rewards,
        values=forward.values[:-1].detach(),
        bootstrap_value=forward.values[-1].detach(),
        lambda_=1.0,
    )
    torch.testing.assert_close(losses[0].value_targets, expected.vs)
    from maze_impala.impala.losses import value_targets

    torch.testing.assert_close(value_targets({0: batch}, {0: forward}, distributions, learner.config)[0], expected.vs)
    normalised_targets = (expected.vs - norm.mu.float()) / norm.sigma.float()
    torch.testing.assert_close(losses[0].value_loss, 0.5 * (normalised_targets - raw[:-1]).pow(2).mean())


@pytest.mark.parametrize("mode", ["returns", "shift", "popart"])
def test_an_update_counts_the_batchs_targets_and_popart_keeps_the_critics_values(mode):
    learner, actor, stats = _setup(value_normalization=mode, n_sgd_passes=1, lr=1e-12)
    actor.rollout()
    rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    before = learner._forward(0, batch).values.detach()
    learner.step([rollout])
    norm = learner.critic.normalizer(0)
    assert float(norm.debias) == pytest.approx(1 - DECAY) and float(norm.sigma) != 1.0
    after = learner._forward(0, batch).values.detach()
    if mode == "popart":  # a negligible learning rate: only the rescaling could have moved them, and it keeps them
        torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    elif mode == "shift":  # their distances from the mean kept, the mean moved (from 0 before the first update)
        torch.testing.assert_close(after - norm.mu.float(), before, rtol=1e-4, atol=1e-4)
    else:  # the network's outputs are read in the new scale
        assert not torch.allclose(after, before, rtol=1e-2, atol=1e-2)
    row = by_column(stats.reduce())
    assert row[PREFIX + "critic_value_scale/last/critic_key=0"] == pytest.approx(float(norm.sigma))
    assert row[PREFIX + "critic_value_shift/last/critic_key=0"] == pytest.approx(float(norm.mu))


def test_the_learner_weighs_the_statistics_by_the_configured_decay():
    learner, actor, _ = _setup(value_normalization="returns", value_norm_decay=0.9)
    learner.step([actor.rollout()])
    learner.step([actor.rollout()])
    assert float(learner.critic.normalizer(0).debias) == pytest.approx(1 - 0.9**2)


def test_off_leaves_the_statistics_alone():
    learner, actor, _ = _setup(value_normalization="off")
    learner.step([actor.rollout()])
    norm = learner.critic.normalizer(0)
    assert float(norm.mu) == 0.0 and float(norm.sigma) == 1.0 and float(norm.debias) == 0.0


def test_the_statistics_are_saved_and_restored_with_the_critic(tmp_path):
    learner, actor, _ = _setup(value_normalization="popart")
    for _ in range(3):
        learner.step([actor.rollout()])
    save_checkpoint(tmp_path / "ckpt.pt", learner.state_dict())
    fresh, _, _ = _setup(value_normalization="popart")
    state = read_checkpoint(tmp_path / "ckpt.pt")
    restore_modules(state, tmp_path / "ckpt.pt", policy=fresh.policy, critic=fresh.critic)
    fresh.load_state_dict(state)
    for name in ("mu", "sigma", "running_mean", "running_mean_sq", "debias"):
        a, b = getattr(learner.critic.normalizer(0), name), getattr(fresh.critic.normalizer(0), name)
        assert a.dtype == torch.float64 and torch.equal(a, b)
    rollout = actor.rollout()
    learner.step([rollout])
    fresh.step([rollout])  # the same statistics: the same next update
    for a, b in zip(learner.critic.parameters(), fresh.critic.parameters()):
        torch.testing.assert_close(a, b)


def test_a_checkpoint_from_before_the_statistics_loads_with_identity_ones(tmp_path):
    learner, _, _ = _setup()
    state = learner.state_dict()
    state["critic"] = {k: v for k, v in state["critic"].items() if not k.startswith("value_norms.")}
    save_checkpoint(tmp_path / "old.pt", state)
    fresh, _, _ = _setup()
    restore_modules(read_checkpoint(tmp_path / "old.pt"), tmp_path / "old.pt", critic=fresh.critic)
    assert float(fresh.critic.normalizer(0).sigma) == 1.0


def test_target_kl_stops_a_batchs_steps_once_the_policy_moved_past_it():
    learner, actor, stats = _setup(n_sgd_passes=4, n_sgd_minibatches=3, lr=0.05, clip_range=None, target_kl=1e-6)
    learner.step([actor.rollout()])
    taken = learner.optimizer.state_dict()["state"][0]["step"]
    assert 1 <= taken < 12  # the first step always; then the KL of 1e-6 is passed at once
    row = by_column(stats.reduce())
    assert row[PREFIX + "policy_sgd_steps/mean"] == taken
    assert row[PREFIX + "policy_update_kl/max/step_key=0"] > 1.5e-6
    unbounded, actor, stats = _setup(n_sgd_passes=4, n_sgd_minibatches=3, lr=0.05, clip_range=None)
    unbounded.step([actor.rollout()])
    assert by_column(stats.reduce())[PREFIX + "policy_sgd_steps/mean"] == 12


def test_a_batch_without_targets_leaves_the_statistics_as_they_were():
    norm = ValueNormalizer()
    norm.update(torch.empty(0))
    assert float(norm.debias) == 0.0 and float(norm.sigma) == 1.0
    norm.update(torch.tensor([1.0, 3.0]))
    before = norm.moments()
    norm.update(torch.empty(0))
    assert norm.moments() == before
