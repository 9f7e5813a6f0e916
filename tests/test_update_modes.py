"""How the update computes: ``algorithm.compile`` (the compiled update is the eager update, up to float rounding) and
``algorithm.precision`` (bfloat16 networks, float32 V-trace, losses and weights); bad values are refused."""

import copy

import pytest
import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ConfigError, ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.examples import CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup

MODEL = ModelConfig(hidden_units=[16])


def _learners(*variants: dict, **settings):
    """Learners of the same weights, one per variant of settings (default: eager and compiled), their stats, and
    one batch of two step keys (orders that end the episode at different sub-steps: padded columns)."""
    env = make_env(CuttingEnv)
    torch.manual_seed(0)
    policy = make_policy(env, MODEL)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, MODEL)
    actor = ActorSpec(CuttingEnv, Lineup.of(MODEL), 12, 4, seed=1).build(0, SharedWeights(policy))
    batch = [actor.rollout(), actor.rollout()]
    actor.close()
    made = []
    for variant in variants or ({"compile": "off"}, {"compile": "default"}):
        hub, stats = EventHub(), StatsAggregator("train", [MultiStepIMPALAEvents])
        hub.listeners.append(stats)
        config = ImpalaAlgorithmConfig(envs_per_actor=4, n_rollout_steps=12, **variant, **settings)
        learner = ImpalaLearner(
            copy.deepcopy(policy), copy.deepcopy(critic), config, hub.publisher(MultiStepIMPALAEvents)
        )
        made.append((learner, stats))
    return made, batch


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.mark.slow  # compiling the forward pass and the losses takes tens of seconds on 2 cores
@pytest.mark.parametrize(("device", "mode"), [("cpu", "default"), pytest.param("cuda", "reduce-overhead", marks=CUDA)])
def test_a_compiled_update_is_the_eager_update_up_to_rounding(device, mode, monkeypatch):
    variants = ({"compile": "off"}, {"compile": mode})
    for flags in (torch.backends.cuda.matmul, torch.backends.cudnn):  # the process's settings back after the test
        monkeypatch.setattr(flags, "allow_tf32", flags.allow_tf32)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    learners, batch = _learners(*variants, n_sgd_passes=2, entropy_coef=0.01, entropy_schedule="linear", device=device)
    (eager, eager_stats), (compiled, compiled_stats) = learners
    assert eager._compiled is None and compiled._compiled is not None
    if device == "cuda":  # a CUDA learner turns TF32 on (10 bits of mantissa): compared here in float32
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    for _ in range(3):  # the entropy coefficient anneals: a number that changes between updates
        eager.step(batch)
        compiled.step(batch)
    for (name, a), b in zip(eager.policy.state_dict().items(), compiled.policy.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=f"policy parameter {name}")
    for (name, a), b in zip(eager.critic.state_dict().items(), compiled.critic.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=f"critic parameter {name}")
    expected, found = eager_stats.reduce(), compiled_stats.reduce()
    assert set(found) == set(expected)
    for key, value in expected.items():
        if not key.event.startswith("time_"):
            assert found[key] == pytest.approx(value, rel=1e-3, abs=1e-5), key


def test_a_bf16_update_computes_its_losses_in_float32_from_bf16_networks():
    learners, batch = _learners({"precision": "float32"}, {"precision": "bf16"})
    (single, single_stats), (half, half_stats) = learners
    single.step(batch)
    half.step(batch)
    assert all(p.dtype == torch.float32 for p in half.policy.parameters())  # the weights stay float32
    assert all(p.dtype == torch.float32 for p in half.critic.parameters())
    expected, found = single_stats.reduce(), half_stats.reduce()
    losses = [key for key in expected if key.event in ("policy_loss", "critic_value_loss", "policy_entropy")]
    assert losses
    for key in losses:  # bfloat16 keeps 8 bits of mantissa: about 2-3 significant digits
        assert found[key] == pytest.approx(expected[key], rel=0.05, abs=0.02), key
    moved = [not torch.equal(a, b) for a, b in zip(single.policy.parameters(), half.policy.parameters())]
    assert any(moved)  # the networks did compute in bfloat16


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [("compile", "fast", "off, default, reduce-overhead"), ("precision", "fp16", "float32, bf16")],
)
def test_an_unknown_update_mode_is_refused_with_the_choices(name, value, allowed):
    with pytest.raises(ConfigError, match=rf"algorithm.{name}.*{allowed}"):
        ImpalaAlgorithmConfig(**{name: value})
