"""Box actions: the Gaussian's initial spread in units of the Box, and squashing into its bounds (clip or squash)."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from maze_impala.checkpoints import run_record
from maze_impala.config import ConfigError, ModelConfig
from maze_impala.envs.factory import make_env
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.distributions import GaussianHead, make_action_head
from maze_impala.nn.models import make_policy


def test_the_initial_log_std_is_in_units_of_each_dimensions_half_width():
    space = gym.spaces.Box(np.array([-2.0, 0.0, -np.inf]), np.array([2.0, 0.5, np.inf]), dtype=np.float32)
    head = make_action_head(space, init_log_std=-0.5)
    expected = [-0.5 + np.log(2.0), -0.5 + np.log(0.25), -0.5]  # an unbounded dimension counts a half-width of 1
    np.testing.assert_allclose(head.log_std.detach().numpy(), expected, rtol=1e-6)


def test_a_squashed_actions_log_prob_is_the_change_of_variables_of_the_gaussian():
    low, high = np.array([-2.0, 0.0]), np.array([2.0, 3.0])
    head = make_action_head(gym.spaces.Box(low, high, dtype=np.float32), init_log_std=-0.3, bounds="squash")
    assert isinstance(head, GaussianHead)
    torch.manual_seed(0)
    mean = torch.randn(256, 2)
    actions = head.sample(mean, StreamNoise(3))
    assert (actions >= torch.as_tensor(low, dtype=torch.float32)).all()
    assert (actions <= torch.as_tensor(high, dtype=torch.float32)).all()
    center, half = torch.tensor((high + low) / 2).float(), torch.tensor((high - low) / 2).float()
    reference = TransformedDistribution(
        Normal(mean, head.log_std.exp()), [TanhTransform(), AffineTransform(center, half)]
    )
    inner = ((actions - center) / half).abs()
    keep = (inner < 0.999).all(-1)  # away from the bounds, where float32's tanh rounds onto them
    assert keep.sum() > 200
    ours = head.log_prob(mean, actions)
    np.testing.assert_allclose(ours[keep].detach(), reference.log_prob(actions).sum(-1)[keep].detach(), atol=2e-4)
    # the greedy action is the squashed mean
    np.testing.assert_allclose(head.sample(mean, None), center + half * torch.tanh(mean), rtol=1e-6)


def test_an_action_rounded_onto_its_bound_keeps_a_finite_log_prob_and_gradient():
    head = make_action_head(gym.spaces.Box(-1.0, 1.0, (1,)), bounds="squash")
    mean = torch.zeros(2, 1, requires_grad=True)
    log_prob = head.log_prob(mean, torch.tensor([[1.0], [-1.0]]))
    log_prob.sum().backward()
    assert torch.isfinite(log_prob).all() and torch.isfinite(mean.grad).all()


def test_squash_leaves_a_box_without_finite_bounds_unbounded():
    head = make_action_head(gym.spaces.Box(-np.inf, np.inf, (2,)), bounds="squash")
    assert isinstance(head, GaussianHead) and head.squash is None
    mean = torch.full((3, 2), 7.0)
    assert torch.equal(head.sample(mean, None), mean), "drawn unbounded: nothing to squash into"


def test_unknown_bounds_and_a_non_finite_log_std_are_refused_at_construction():
    with pytest.raises(ConfigError, match=r"model\.action_bounds"):
        ModelConfig(action_bounds="tanh")
    with pytest.raises(ConfigError, match=r"model\.init_log_std"):
        ModelConfig(init_log_std=float("nan"))


def test_a_squashed_policys_checkpoint_keys_are_a_clipped_ones():
    env = make_env("Pendulum-v1")
    clipped = make_policy(env, ModelConfig(hidden_units=[8]))
    squashed = make_policy(env, ModelConfig(hidden_units=[8], action_bounds="squash"))
    assert clipped.state_dict().keys() == squashed.state_dict().keys()
    squashed.load_state_dict(clipped.state_dict())


def test_a_checkpoint_recorded_before_the_bounds_were_a_setting_acts_clipped():
    before = {"config": {"env": "Pendulum-v1", "model": {"hidden_units": [8]}}}
    assert run_record(before, "old.pt")["model"]["action_bounds"] == "clip"
    now = {"config": {"env": "Pendulum-v1", "model": {"hidden_units": [8], "action_bounds": "squash"}}}
    assert run_record(now, "new.pt")["model"]["action_bounds"] == "squash"
