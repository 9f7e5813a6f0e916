"""The learner's Adam, RMSProp and clipping: torch's updates, their state formats, no torch._dynamo import."""

import copy
import math
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from maze_impala.config import ImpalaAlgorithmConfig
from maze_impala.impala.optim import Adam, RMSProp, clip_grad_norms, make_optimizer

SHAPES = [(8, 4), (8,), (3, 8), (3,)]
SETTINGS = {"lr": 3e-3, "betas": (0.9, 0.99), "eps": 1e-5}


def _params() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator, requires_grad=True) for shape in SHAPES]


def _set_grads(params: list[torch.Tensor], step: int, skip: int | None) -> None:
    generator = torch.Generator().manual_seed(100 + step)
    for index, p in enumerate(params):
        p.grad = None if index == skip else torch.randn(p.shape, generator=generator) * 10.0 ** (-step % 4)


def test_adam_is_torchs_fused_adam_bit_for_bit_and_leaves_parameters_without_gradients_alone():
    ours, theirs = _params(), _params()
    mine = Adam(ours, **SETTINGS)
    reference = torch.optim.Adam(theirs, **SETTINGS, fused=True)
    for step in range(12):
        skip = 1 if step < 5 else None  # a burn-in of sorts: parameter 1 has no gradient in the first 5 steps
        mine.lr = reference.param_groups[0]["lr"] = SETTINGS["lr"] * (1 - step / 12)  # a schedule
        _set_grads(ours, step, skip)
        _set_grads(theirs, step, skip)
        mine.step()
        reference.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    assert [int(s) for s in mine.steps] == [12, 7, 12, 12]
    mine.zero_grad()
    assert all(p.grad is None for p in ours)


def test_adam_state_loads_into_torch_adam_and_back_and_continues_identically():
    ours, theirs = _params(), _params()
    mine = Adam(ours, **SETTINGS)
    for step in range(3):
        _set_grads(ours, step, skip=3)
        mine.step()
    saved = copy.deepcopy(mine.state_dict())  # as a checkpoint holds it
    assert set(saved["state"]) == {0, 1, 2} and float(saved["state"][0]["step"]) == 3.0  # parameter 3: no step yet
    with torch.no_grad():
        for a, b in zip(theirs, ours):
            a.copy_(b)
    reference = torch.optim.Adam(theirs, **SETTINGS, fused=True)
    reference.load_state_dict(saved)  # our state, read by torch
    again = Adam(_params(), **SETTINGS)
    again.load_state_dict(reference.state_dict())  # torch's state, read by us
    assert [int(s) for s in again.steps] == [3, 3, 3, 0]
    assert torch.equal(again.exp_avg_sqs[0], saved["state"][0]["exp_avg_sq"])
    for step in range(3, 6):
        for params in (ours, theirs):
            _set_grads(params, step, skip=None)
        mine.step()
        reference.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_adam_refuses_the_state_of_another_model():
    state = Adam(_params(), **SETTINGS).state_dict()
    with pytest.raises(ValueError, match="another model"):
        Adam(_params()[:2], **SETTINGS).load_state_dict(state)
    other = [torch.zeros(2, 2, requires_grad=True), *_params()[1:]]
    _set_grads(other, 0, skip=None)
    mover = Adam(other, **SETTINGS)
    mover.step()
    with pytest.raises(ValueError, match=r"shape \(2, 2\).*another model"):
        Adam(_params(), **SETTINGS).load_state_dict(mover.state_dict())


def test_rmsprop_is_torchs_rmsprop_and_its_state_loads_both_ways():
    ours, theirs = _params(), _params()
    mine = RMSProp(ours, lr=1e-3, alpha=0.99, eps=0.01)
    reference = torch.optim.RMSprop(theirs, lr=1e-3, alpha=0.99, eps=0.01, foreach=True)
    for step in range(10):
        skip = 2 if step < 4 else None
        mine.lr = reference.param_groups[0]["lr"] = 1e-3 * (1 - step / 10)
        _set_grads(ours, step, skip)
        _set_grads(theirs, step, skip)
        mine.step()
        reference.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-7)
    assert mine.steps == [10, 10, 6, 10]
    again = RMSProp(_params(), lr=1e-3, alpha=0.99, eps=0.01)
    again.load_state_dict(reference.state_dict())  # torch's state, read by us
    assert again.steps == mine.steps and torch.equal(again.square_avgs[0], mine.square_avgs[0])
    reference.load_state_dict(copy.deepcopy(mine.state_dict()))  # ours, read by torch
    with pytest.raises(ValueError, match="not RMSProp's"):
        again.load_state_dict(Adam(_params(), **SETTINGS).state_dict())


def test_each_optimizer_has_its_own_epsilon_unless_one_is_given():
    params = _params()
    assert ImpalaAlgorithmConfig().optimizer_eps == 1e-5
    # the IMPALA paper's 0.01 for a loss summed over an update's env steps, here a mean over them
    config = ImpalaAlgorithmConfig(optimizer="rmsprop", actors_batch_size=2, envs_per_actor=16, n_rollout_steps=20)
    rmsprop = make_optimizer(params, config)
    assert isinstance(rmsprop, RMSProp) and rmsprop.eps == pytest.approx(0.01 / 640) and rmsprop.alpha == 0.99
    assert make_optimizer(params, replace(config, eps=0.01)).eps == 0.01
    adam = make_optimizer(params, ImpalaAlgorithmConfig(eps=1e-3))
    assert isinstance(adam, Adam) and adam.eps == 1e-3 and adam.betas == (0.9, 0.99)


def test_rmsprops_own_epsilon_on_a_mean_loss_takes_the_papers_steps_on_a_summed_loss():
    """The IMPALA paper's RMSProp (epsilon 0.01) on a loss summed over an update's steps, and ours on their mean."""
    config = ImpalaAlgorithmConfig(optimizer="rmsprop", actors_batch_size=1, envs_per_actor=8, n_rollout_steps=4)
    n = config.env_steps_per_update
    x, y = torch.randn(n, 5, generator=torch.Generator().manual_seed(0)), torch.randn(n)
    summed, mean = torch.nn.Linear(5, 1), torch.nn.Linear(5, 1)
    mean.load_state_dict(summed.state_dict())
    paper = RMSProp(summed.parameters(), lr=6e-4, alpha=0.99, eps=0.01)
    ours = make_optimizer(mean.parameters(), replace(config, lr=6e-4))
    for _ in range(5):
        for net, optimizer, reduce in ((summed, paper, torch.sum), (mean, ours, torch.mean)):
            optimizer.zero_grad()
            reduce((net(x).squeeze(-1) - y) ** 2).backward()
            optimizer.step()
    for a, b in zip(summed.parameters(), mean.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_a_learner_update_does_not_import_torch_dynamo(optimizer):
    # torch.optim's first call imports torch._dynamo: about a second of every run's start-up, before the first update.
    code = """
import sys
from maze_impala.actors.actor import ActorSpec
from maze_impala.play.lineup import Lineup
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import StepStateCritic
from maze_impala.nn.models import StructuredPolicy
from maze_impala.testing import CounterEnv
env, model = GymStructuredEnv(CounterEnv()), ModelConfig(hidden_units=[8])
policy = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, model)
critic = StepStateCritic(env.observation_spaces_dict, model)
events = EventHub().publisher(MultiStepIMPALAEvents)
learner = ImpalaLearner(policy, critic, ImpalaAlgorithmConfig(n_sgd_passes=2, optimizer="OPTIMIZER"), events)
spec = ActorSpec(CounterEnv, Lineup.of(model), n_rollout_steps=4, envs_per_actor=2, seed=0)
actor = spec.build(0, SharedWeights(policy))
learner.step([actor.rollout()])
learner.load_state_dict(learner.state_dict())
print(learner.version, "torch._dynamo" in sys.modules)
"""
    code = code.replace("OPTIMIZER", optimizer)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "False"], f"torch._dynamo was imported: {proc.stdout}"


@pytest.mark.parametrize("max_norm", [0.5, 3.0, math.inf])
def test_clipping_groups_together_is_clip_grad_norm_on_each_group(max_norm):
    """The learner measures and clips every network's gradient in one call: each group's norm and gradients are
    those of ``clip_grad_norm_`` on that group alone (up to rounding), an empty group's norm is 0 and leaves the
    others alone, and a group of non-finite gradients reports a non-finite norm (the learner's stop)."""
    torch.manual_seed(0)
    groups = [[torch.randn(4, 3), torch.randn(3)], [], [torch.randn(5) * 10, torch.randn(2, 2), torch.randn(1)]]
    expected = [[g.clone() for g in group] for group in groups]
    norms = clip_grad_norms(groups, max_norm)
    for group, theirs, norm in zip(groups, expected, norms):
        want = torch.nn.utils.clip_grad_norm_([_with_grad(g) for g in theirs], max_norm) if theirs else 0.0
        torch.testing.assert_close(norm, torch.as_tensor(want, dtype=norm.dtype), rtol=1e-6, atol=0)
        for ours, grad in zip(group, theirs):
            torch.testing.assert_close(ours, grad, rtol=1e-6, atol=1e-7)
    assert norms[2] > 3.0 and (max_norm == math.inf or norms[0] > max_norm)  # the cases clip something
    broken = [[torch.tensor([1.0, math.nan])], [torch.ones(2)]]
    found = clip_grad_norms(broken, 1.0)
    assert not math.isfinite(found[0].item()) and found[1].item() == pytest.approx(math.sqrt(2))
    assert clip_grad_norms([[], []], 1.0).tolist() == [0.0, 0.0]  # no gradient anywhere: every norm 0


def _with_grad(grad: torch.Tensor) -> torch.Tensor:
    """A parameter whose gradient is ``grad`` (clip_grad_norm_ takes parameters and scales their gradients in place,
    so the check reads the clipped gradient back from ``grad`` itself)."""
    param = torch.zeros_like(grad, requires_grad=True)
    param.grad = grad
    return param
