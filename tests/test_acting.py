"""The one way to act: a policy's numpy form against the torch module it comes from, state and buffers included."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from playing import play_episodes
from torch import nn

from maze_impala.config import ModelConfig
from maze_impala.envs.examples import CoordinationEnv, CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.nn.acting import RowNoise, StreamNoise
from maze_impala.nn.flat import flatten
from maze_impala.nn.models import StructuredPolicy, make_policy, make_random_policy
from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.torch_acting import TorchActing, make_acting, numpy_form_of


def _sample_obs(space: gym.spaces.Dict, n: int, seed: int) -> dict[str, np.ndarray]:
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    return {k: np.stack([np.asarray(s[k]) for s in samples]) for k in space.spaces}


def _zeros(acting, key, n):
    return {name: np.zeros((n, *shape), np.float32) for name, shape in acting.state_shapes(key).items()}


def _train_like(policy: StructuredPolicy, env, seed: int) -> None:
    """Weights and buffers unlike a fresh policy's: large output weights (actions differ between rows) and
    normalisation statistics of shifted, scaled observations."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.3)
    if policy.normalizes:
        for key, space in env.observation_spaces_dict.items():
            obs = _sample_obs(space, 256, seed)
            policy.update_normalizers(key, {k: torch.as_tensor(v) * 3.0 + 2.0 for k, v in obs.items()})


MODELS = {
    "mlp": ModelConfig(hidden_units=[32, 16]),
    "relu-normalised": ModelConfig(hidden_units=[32], activation="relu", normalize_observations=True),
    "lstm-normalised": ModelConfig(hidden_units=[16], recurrent="lstm", recurrent_units=8, normalize_observations=True),
    "gru-elu": ModelConfig(hidden_units=[16], activation="elu", recurrent="gru", recurrent_units=8),
    "silu": ModelConfig(hidden_units=[16], activation="silu"),
    "squash": ModelConfig(hidden_units=[16], action_bounds="squash", init_log_std=-0.5),
}
ENVS = {
    "cartpole": lambda: make_env("CartPole-v1"),
    "cutting": CuttingEnv,
    "coordination": CoordinationEnv,
    "pendulum": lambda: make_env("Pendulum-v1"),
}


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
@pytest.mark.parametrize("env_fn", ENVS.values(), ids=ENVS.keys())
def test_numpy_and_torch_act_alike_with_loaded_weights_buffers_and_state(env_fn, model):
    env = env_fn()
    torch.manual_seed(0)
    policy = make_policy(env, model)
    numpy_acting = make_acting(policy)
    assert isinstance(numpy_acting, NumpyActing), "these policies export a numpy form"
    _train_like(policy, env, seed=1)  # after the form was made: the weights arrive by load(), as in the actors
    numpy_acting.load(flatten(policy).numpy())
    torch_acting = TorchActing(policy)
    for key, space in env.observation_spaces_dict.items():
        obs = _sample_obs(space, 64, seed=3)
        for name in obs:
            if name.endswith("_mask"):
                obs[name][:, 0] = 1  # at least one allowed action
        agents = np.zeros(64, dtype=np.int64)
        states = [_zeros(numpy_acting, key, 64), _zeros(torch_acting, key, 64)]
        for step in range(3):  # the state carried over three decisions
            for noise_seed in (None, 7 + step):
                results = [
                    acting.act(key, obs, state, agents, None if noise_seed is None else StreamNoise(noise_seed))
                    for acting, state in zip((numpy_acting, torch_acting), states)
                ]
                (np_actions, np_lp, np_state), (t_actions, t_lp, t_state) = results
                for name in np_actions:
                    np.testing.assert_allclose(np_actions[name], t_actions[name], rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(np_lp, t_lp, rtol=1e-4, atol=1e-4)
                for name in np_state:
                    np.testing.assert_allclose(np_state[name], t_state[name], rtol=1e-4, atol=1e-5)
            states = [np_state, t_state]
        if model.recurrent != "none":
            assert np.abs(states[0]["h"]).max() > 0.01, "the state moved"


def test_sampling_follows_the_softmax_and_never_draws_masked_actions():
    env = CuttingEnv()
    policy = make_policy(env, ModelConfig(hidden_units=[8]))
    acting = make_acting(policy)
    space = env.observation_spaces_dict["cut"]
    obs = {k: np.repeat(v, 40_000, axis=0) for k, v in _sample_obs(space, 1, seed=0).items()}
    actions, log_probs, _ = acting.act("cut", obs, {}, np.zeros(40_000, dtype=np.int64), StreamNoise(1))
    with torch.no_grad():
        logits = policy.logits("cut", {k: torch.as_tensor(v[:1]) for k, v in obs.items()})[0]
    probs = torch.softmax(logits, -1).numpy()
    np.testing.assert_allclose(np.bincount(actions["remainder"], minlength=len(probs)) / 40_000, probs, atol=0.01)
    np.testing.assert_allclose(log_probs, np.log(probs)[actions["remainder"]], rtol=1e-5)

    masked = StructuredPolicy(
        {0: gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,)), "a_mask": gym.spaces.MultiBinary(3)})},
        {0: gym.spaces.Dict({"a": gym.spaces.Discrete(3)})},
        ModelConfig(hidden_units=[4]),
    )
    for acting in (make_acting(masked), TorchActing(masked)):
        n = 20_000
        allowed = np.tile(np.array([[1, 0, 1]], dtype=np.int8), (n, 1))
        obs = {"x": np.zeros((n, 2), dtype=np.float32), "a_mask": allowed}
        actions, log_probs, _ = acting.act(0, obs, {}, np.zeros(n, dtype=np.int64), StreamNoise(2))
        assert set(np.unique(actions["a"])) == {0, 2}
        assert np.all(np.isfinite(log_probs)) and np.all(log_probs > -5)
        obs["a_mask"][7] = 0
        with pytest.raises(ValueError, match="masks every action of 'a'"):
            acting.act(0, obs, {}, np.zeros(n, dtype=np.int64), StreamNoise(2))


def test_row_noise_makes_each_rows_actions_independent_of_the_rows_beside_it():
    env = CuttingEnv()
    acting = make_acting(make_policy(env, ModelConfig(hidden_units=[8])))
    obs = _sample_obs(env.observation_spaces_dict["cut"], 6, seed=0)
    agents = np.zeros(6, dtype=np.int64)
    together, _, _ = acting.act("cut", obs, {}, agents, RowNoise([np.random.default_rng(i) for i in range(6)]))
    for i in range(6):
        alone, _, _ = acting.act(
            "cut", {k: v[i : i + 1] for k, v in obs.items()}, {}, agents[:1], RowNoise([np.random.default_rng(i)])
        )
        assert alone["remainder"][0] == together["remainder"][i]


class _NormalizedStepNetPolicy(StructuredPolicy):
    """A user's change the numpy form must not miss: a normaliser (buffers) inside a step network."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        net = self.network(0)
        net.register_buffer("scale", torch.full((4,), 10.0))
        original = net.encoder.forward
        net.encoder.forward = lambda obs, batch_dims: original(obs, batch_dims) / net.scale


class _ShiftedLogits(StructuredPolicy):
    """A subclass that changes how the module computes, without any state of its own."""

    def mask_logits(self, step_key, logits, inputs, check_masks=False):
        return super().mask_logits(step_key, logits + torch.arange(logits.shape[-1]) * 3.0, inputs, check_masks)


def test_policies_whose_numpy_form_would_differ_act_through_torch():
    env = make_env("CartPole-v1")
    spaces = (env.observation_spaces_dict, env.action_spaces_dict)
    coordination = CoordinationEnv()
    per_agent = make_policy(
        coordination, ModelConfig(hidden_units=[8], per_agent_networks=True, normalize_observations=False)
    )
    for policy in (
        per_agent,
        make_random_policy(coordination),
        _NormalizedStepNetPolicy(*spaces, ModelConfig(hidden_units=[8])),
        _ShiftedLogits(*spaces, ModelConfig(hidden_units=[8])),
    ):
        assert numpy_form_of(policy) is None, type(policy).__name__
        assert isinstance(make_acting(policy), TorchActing)
        with pytest.raises(ValueError, match="no numpy form"):
            make_acting(policy, backend="numpy")
    assert "normalizers" not in dict(per_agent.named_modules())
    with pytest.raises(ValueError, match="auto"):
        make_acting(per_agent, backend="jax")


def test_a_module_added_inside_the_policy_makes_its_state_unread_by_the_form():
    env = make_env("CartPole-v1")
    policy = make_policy(env, ModelConfig(hidden_units=[8]))
    assert policy.numpy_form() is not None
    policy.network(0).extra = nn.Linear(2, 2)
    assert policy.numpy_form() is None


@pytest.mark.parametrize("env_fn", [lambda: make_env("CartPole-v1"), CuttingEnv])
@pytest.mark.parametrize("model", [ModelConfig(hidden_units=[32]), MODELS["lstm-normalised"]], ids=["mlp", "lstm"])
def test_played_episodes_act_through_numpy_as_they_would_through_torch(env_fn, model, monkeypatch):
    from maze_impala.nn import torch_acting

    torch.manual_seed(0)
    env = env_fn()
    policy = make_policy(env, model)
    _train_like(policy, env, seed=2)
    episodes = [(i, 10 + i) for i in range(5)]
    results = {}
    original = torch_acting.make_acting
    for backend in ("auto", "torch"):
        monkeypatch.setattr(torch_acting, "make_acting", lambda p, b=backend: original(p, b))
        for deterministic in (True, False):
            played = play_episodes([env_fn() for _ in range(3)], policy, episodes, deterministic)
            results[backend, deterministic] = [(r.episode_id, r.steps, r.episode_return) for r in played]
    for deterministic in (True, False):
        assert results["auto", deterministic] == results["torch", deterministic]
        assert len(results["auto", deterministic]) == 5
