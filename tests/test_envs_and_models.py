"""The Gymnasium adapter, action distributions, and per-step-key policies and critics."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_impala import Player
from maze_impala.config import ModelConfig
from maze_impala.core import ActorID
from maze_impala.envs.factory import make_env
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.critics import StepStateCritic
from maze_impala.nn.distributions import DictActionDistribution
from maze_impala.nn.models import StructuredPolicy


def test_gym_adapter_wraps_spaces_and_unwraps_actions():
    env = GymStructuredEnv("CartPole-v1")
    assert env.actor_id() == ActorID(0, 0)
    assert env.agent_counts_dict == {0: 1}
    assert isinstance(env.observation_spaces_dict[0], gym.spaces.Dict)
    assert env.action_spaces_dict[0]["action"] == gym.spaces.Discrete(2)
    obs, _ = env.reset(seed=3)
    raw, _ = gym.make("CartPole-v1").reset(seed=3)
    np.testing.assert_array_equal(obs["observation"], raw)
    obs, reward, terminated, truncated, _ = env.step({"action": 1})
    assert reward == 1.0 and not terminated and not truncated


def test_gym_adapter_keeps_dict_spaces_as_they_are():
    inner = gym.make("CartPole-v1")
    inner = gym.wrappers.TransformObservation(
        inner,
        lambda o: {"pos": o[:2], "vel": o[2:]},
        gym.spaces.Dict({"pos": gym.spaces.Box(-10, 10, (2,)), "vel": gym.spaces.Box(-10, 10, (2,))}),
    )
    env = GymStructuredEnv(inner)
    assert set(env.observation_spaces_dict[0].spaces) == {"pos", "vel"}
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"pos", "vel"}


class _Recorder(gym.Env):
    """Records the actions it is stepped with."""

    observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    action_space = gym.spaces.Dict({"force": gym.spaces.Box(-1, 1, (2,), np.float32), "pick": gym.spaces.Discrete(3)})

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.received.append(action)
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_the_adapters_pass_box_actions_within_their_bounds_and_keep_the_policys_own():
    env = GymStructuredEnv(_Recorder())
    env.reset(seed=0)
    action = {"force": np.array([5.0, -0.5], np.float32), "pick": np.int64(2)}
    env.step(action)
    (received,) = env.env.unwrapped.received
    np.testing.assert_array_equal(received["force"], [1.0, -0.5])
    assert received["pick"] == 2 and action["force"][0] == 5.0  # the rollout's copy is untouched
    spread = make_env(
        {
            "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
            "name": "mpe2.simple_spread_v3",
            "api": "parallel",
            "continuous_actions": True,
        }
    )
    seen, step = [], spread.env.step
    spread.env.step = lambda actions: seen.append(actions) or step(actions)
    spread.reset(seed=0)
    while not seen:
        spread.step({"action": np.full(5, 3.0, np.float32)})  # Box(0, 1): above every bound
    assert all(np.array_equal(a, np.ones(5, np.float32)) for a in seen[0].values())


def test_make_env_errors_are_clear():
    with pytest.raises(ValueError, match="cannot make Gymnasium env 'Nope-v0'"):
        make_env("Nope-v0")
    with pytest.raises(ValueError, match="needs a _target_"):
        make_env({"name": "CartPole-v1"})
    with pytest.raises(TypeError, match="expected a StructuredEnv"):
        make_env(lambda: object())


SPACES = {
    "discrete": gym.spaces.Discrete(4),
    "multi_discrete": gym.spaces.MultiDiscrete([3, 2]),
    "box": gym.spaces.Box(-1, 1, (2,)),
    "multi_binary": gym.spaces.MultiBinary(3),
}


def test_a_dict_of_heads_sums_their_log_probs_and_entropies():
    space = gym.spaces.Dict({"a": SPACES["discrete"], "b": SPACES["multi_discrete"], "c": SPACES["box"]})
    dist = DictActionDistribution(space)
    logits = torch.randn(6, dist.n_inputs)
    actions, joint = dist.sample_with_log_prob(logits, StreamNoise(1))
    parts = dict(zip(dist.keys, logits.split(dist.sizes, -1)))
    heads = dict(dist.items())
    expected_lp = sum(heads[k].log_prob(parts[k], actions[k]) for k in dist.keys)
    expected_h = sum(heads[k].entropy(parts[k]) for k in dist.keys)
    torch.testing.assert_close(dist.log_prob(logits, actions), expected_lp)
    torch.testing.assert_close(joint, expected_lp)
    torch.testing.assert_close(dist.entropy(logits), expected_h)
    torch.testing.assert_close(dist.log_prob_and_entropy(logits, actions), (expected_lp, expected_h))


def _reference(name, logits):
    if name == "discrete":
        return torch.distributions.Categorical(logits=logits)
    if name == "multi_discrete":
        return [torch.distributions.Categorical(logits=part) for part in logits.split([3, 2], -1)]
    if name == "multi_binary":
        return torch.distributions.Bernoulli(logits=logits)
    return None


@pytest.mark.parametrize("name", list(SPACES))
def test_log_prob_and_entropy_match_torch_distributions(name):
    dist = DictActionDistribution(gym.spaces.Dict({"a": SPACES[name]}))
    logits = torch.randn(5, dist.n_inputs)
    actions, joint = dist.sample_with_log_prob(logits, StreamNoise(0))
    assert actions["a"].shape == (5, *SPACES[name].shape)
    if name != "box":  # a Gaussian is unbounded; envs clip to their Box
        assert all(SPACES[name].contains(np.asarray(a, dtype=SPACES[name].dtype)) for a in actions["a"].numpy())
    log_prob, entropy = dist.log_prob(logits, actions), dist.entropy(logits)
    ref = _reference(name, logits)
    if name == "discrete":
        expected_lp, expected_h = ref.log_prob(actions["a"]), ref.entropy()
    elif name == "multi_discrete":
        expected_lp = sum(r.log_prob(actions["a"][:, i]) for i, r in enumerate(ref))
        expected_h = sum(r.entropy() for r in ref)
    elif name == "multi_binary":
        expected_lp = ref.log_prob(actions["a"].float()).sum(-1)
        expected_h = ref.entropy().sum(-1)
    else:
        std = dist.heads["a"].log_std.exp()
        normal = torch.distributions.Normal(logits, std)
        expected_lp = normal.log_prob(actions["a"]).sum(-1)
        expected_h = normal.entropy().sum(-1)
    torch.testing.assert_close(log_prob, expected_lp)
    torch.testing.assert_close(joint, expected_lp)
    torch.testing.assert_close(entropy, expected_h)
    both = dist.log_prob_and_entropy(logits, actions)  # the loss's form, one pass over the heads
    torch.testing.assert_close(both[0], expected_lp)
    torch.testing.assert_close(both[1], expected_h)


def test_dict_action_space_sums_heads_and_deterministic_takes_the_mode():
    space = gym.spaces.Dict({"piece": gym.spaces.Discrete(3), "cut": gym.spaces.Box(-1, 1, (1,))})
    dist = DictActionDistribution(space)
    logits = torch.tensor([[0.25, 0.0, 5.0, 0.0]])  # gym sorts Dict keys: "cut" comes first
    mode, _ = dist.sample_with_log_prob(logits, None)
    assert int(mode["piece"]) == 1 and float(mode["cut"]) == pytest.approx(0.25)
    total = dist.log_prob(logits, mode)
    parts = dist._split(logits)
    expected = dist.heads["piece"].log_prob(parts["piece"], mode["piece"]) + dist.heads["cut"].log_prob(
        parts["cut"], mode["cut"]
    )
    torch.testing.assert_close(total, expected)


def test_sampling_follows_the_probabilities():
    dist = DictActionDistribution(gym.spaces.Dict({"a": gym.spaces.Discrete(3)}))
    logits = torch.log(torch.tensor([[0.2, 0.5, 0.3]])).expand(20000, 3)
    freq = torch.bincount(dist.sample_with_log_prob(logits, StreamNoise(1))[0]["a"], minlength=3).float() / 20000
    torch.testing.assert_close(freq, torch.tensor([0.2, 0.5, 0.3]), atol=0.015, rtol=0)


def test_a_player_of_the_policy_and_the_state_dict_round_trip(tmp_path):
    env = GymStructuredEnv("CartPole-v1")
    config = ModelConfig(hidden_units=[16], activation="relu")
    policy = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, config)
    critic = StepStateCritic(env.observation_spaces_dict, config)
    obs, _ = env.reset(seed=0)
    action = Player(policy)(obs, env.actor_id())
    assert env.action_spaces_dict[0].contains(action)
    torch.save({"policy": policy.state_dict(), "critic": critic.state_dict()}, tmp_path / "m.pt")
    other = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, config)
    other.load_state_dict(torch.load(tmp_path / "m.pt")["policy"])
    for _ in range(5):
        assert Player(other)(obs, env.actor_id()) == action
    assert critic.values(0, {"observation": torch.as_tensor(obs["observation"])[None]}).shape == (1,)


def test_a_namespaced_gymnasium_id_imports_its_package_or_names_what_to_install(monkeypatch):
    from maze_impala.envs import gym_adapter

    monkeypatch.setitem(gym_adapter.NAMESPACES, "Nowhere/", ("maze_impala_no_such_module", "no-such-package", None))
    with pytest.raises(ValueError, match=r"registered by maze_impala_no_such_module.*pip install no-such-package"):
        make_env("Nowhere/Thing-v0")
    # a package that registers ids when imported: the id works without the module: prefix
    monkeypatch.setitem(gym_adapter.NAMESPACES, "MazeTest-", ("maze_impala.testing", "maze_impala", None))
    import gymnasium as gym

    monkeypatch.setitem(
        gym.envs.registry,
        "MazeTest-Counter-v0",
        gym.envs.registration.EnvSpec("MazeTest-Counter-v0", entry_point="maze_impala.testing:CounterEnv"),
    )
    assert make_env("MazeTest-Counter-v0").observation_spaces_dict[0]["observation"].shape == (2,)
    # MinAtar registers its ids by a function of its own, called once
    minatar = pytest.importorskip("minatar")
    assert make_env("MinAtar/Breakout-v1").observation_spaces_dict[0]["observation"].shape == (10, 10, 4)
    assert minatar is not None
