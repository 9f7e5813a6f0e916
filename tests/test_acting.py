"""The numpy acting path against the torch policy it mirrors."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_impala.config import ModelConfig
from maze_impala.envs.examples import CoordinationEnv, CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.nn.acting import NumpyActing, TorchActing, make_acting, numpy_spec, numpy_unsupported
from maze_impala.nn.models import StructuredPolicy, make_policy, make_random_policy
from maze_impala.train import episodes as episodes_module
from maze_impala.train.episodes import episode_slots, run_episodes


def _sample_obs(space: gym.spaces.Dict, n: int, seed: int) -> dict[str, np.ndarray]:
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    return {k: np.stack([np.asarray(s[k]) for s in samples]) for k in space.spaces}


def _torch_logits(policy: StructuredPolicy, key, obs: dict[str, np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return policy.logits(key, {k: torch.from_numpy(v) for k, v in obs.items()}).numpy()


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu"])
@pytest.mark.parametrize("env_fn", [lambda: make_env("CartPole-v1"), CuttingEnv, CoordinationEnv])
def test_numpy_logits_and_actions_match_the_torch_policy(env_fn, activation):
    env = env_fn()
    torch.manual_seed(0)
    policy = make_policy(env, ModelConfig(hidden_units=[32, 16], activation=activation))
    with torch.no_grad():  # larger output weights than the init's, so that the actions differ between rows
        for net in policy.networks.values():
            net._linears[-1].weight.mul_(300.0)
    acting = make_acting(policy, seed=0)
    assert isinstance(acting, NumpyActing)
    for key, space in env.observation_spaces_dict.items():
        obs = _sample_obs(space, 64, seed=3)
        expected = _torch_logits(policy, key, obs)
        np.testing.assert_allclose(acting.steps[key].logits(obs), expected, rtol=1e-4, atol=1e-4)
        agents = np.zeros(64, dtype=np.int64)
        greedy, greedy_lp = acting.act(key, obs, True, agents)
        torch_greedy, torch_lp = TorchActing(policy, 0).act(key, obs, True, agents)
        for name in greedy:
            np.testing.assert_array_equal(greedy[name], torch_greedy[name])
        np.testing.assert_allclose(greedy_lp, torch_lp, rtol=1e-4, atol=1e-4)
        sampled, sampled_lp = acting.act(key, obs, False, agents)
        dist = policy.distribution(key)
        expected_lp = dist.log_prob(torch.from_numpy(expected), {k: torch.from_numpy(a) for k, a in sampled.items()})
        np.testing.assert_allclose(sampled_lp, expected_lp.numpy(), rtol=1e-4, atol=1e-4)
        assert len({tuple(np.concatenate([a.reshape(64, -1) for a in sampled.values()], 1)[i]) for i in range(64)}) > 1


def test_sampling_follows_the_softmax_and_never_draws_masked_actions():
    env = CuttingEnv()
    policy = make_policy(env, ModelConfig(hidden_units=[8]))
    acting = make_acting(policy, seed=1)
    space = env.observation_spaces_dict["cut"]
    obs = {k: np.repeat(v, 40_000, axis=0) for k, v in _sample_obs(space, 1, seed=0).items()}
    actions, log_probs = acting.act("cut", obs, False, np.zeros(40_000, dtype=np.int64))
    logits = _torch_logits(policy, "cut", {k: v[:1] for k, v in obs.items()})[0]
    probs = torch.softmax(torch.from_numpy(logits), -1).numpy()
    np.testing.assert_allclose(np.bincount(actions["remainder"], minlength=len(probs)) / 40_000, probs, atol=0.01)
    np.testing.assert_allclose(log_probs, np.log(probs)[actions["remainder"]], rtol=1e-5)

    masked = StructuredPolicy(
        {0: gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,)), "a_mask": gym.spaces.MultiBinary(3)})},
        {0: gym.spaces.Dict({"a": gym.spaces.Discrete(3)})},
        ModelConfig(hidden_units=[4]),
    )
    acting = make_acting(masked, seed=2)
    n = 20_000
    allowed = np.tile(np.array([[1, 0, 1]], dtype=np.int8), (n, 1))
    obs = {"x": np.zeros((n, 2), dtype=np.float32), "a_mask": allowed}
    actions, log_probs = acting.act(0, obs, False, np.zeros(n, dtype=np.int64))
    assert set(np.unique(actions["a"])) == {0, 2}
    assert np.all(np.isfinite(log_probs)) and np.all(log_probs > -5)
    obs["a_mask"][7] = 0
    with pytest.raises(ValueError, match="masks every action of 'a'"):
        acting.act(0, obs, False, np.zeros(n, dtype=np.int64))


def test_numpy_acting_reads_the_weights_the_module_is_loaded_with():
    env = make_env("CartPole-v1")
    policy, other = make_policy(env, ModelConfig()), make_policy(env, ModelConfig())
    acting = make_acting(policy, seed=0)
    obs = _sample_obs(env.observation_spaces_dict[0], 8, seed=1)
    policy.load_state_dict(other.state_dict())
    np.testing.assert_allclose(acting.steps[0].logits(obs), _torch_logits(other, 0, obs), rtol=1e-5, atol=1e-6)


def test_policies_numpy_cannot_run_act_through_torch():
    env = CoordinationEnv()
    per_agent = make_policy(env, ModelConfig(hidden_units=[8], per_agent_networks=True))
    box = StructuredPolicy(
        {0: gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,))})},
        {0: gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,))})},
        ModelConfig(hidden_units=[4]),
    )
    for policy, reason in ((per_agent, "PerAgentNet"), (box, "GaussianHead"), (make_random_policy(env), "Random")):
        assert reason in numpy_unsupported(policy)
        assert isinstance(make_acting(policy, seed=0), TorchActing)
        with pytest.raises(ValueError, match="use TorchActing"):
            numpy_spec(policy)
    with pytest.raises(ValueError, match="auto, numpy or torch"):
        make_acting(box, seed=0, backend="jax")


@pytest.mark.parametrize("env_fn", [lambda: make_env("CartPole-v1"), CuttingEnv])
def test_greedy_episodes_act_through_numpy_as_they_would_through_torch(env_fn, monkeypatch):
    torch.manual_seed(0)
    policy = make_policy(env_fn(), ModelConfig(hidden_units=[32]))
    episodes = [(i, 10 + i) for i in range(5)]
    backends = []

    def acting(backend):
        def make(p, seed):
            backends.append(type(made := make_acting(p, seed, backend)).__name__)
            return made

        return make

    results = {}
    for backend in ("auto", "torch"):
        monkeypatch.setattr(episodes_module, "make_acting", acting(backend))
        played = run_episodes(episode_slots([env_fn() for _ in range(3)]), policy, episodes, deterministic=True)
        results[backend] = [(r.episode_id, r.steps, r.episode_return) for r in played]
    assert backends == ["NumpyActing", "TorchActing"]
    assert results["auto"] == results["torch"] and len(results["auto"]) == 5
