"""check_env, the checks on every actor's first steps, and what stops a run later: never a silent broadcast or NaN."""

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from tiny import QUIET

from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, check_env, train
from maze_impala.core import ActorID, NonFiniteError
from maze_impala.envs import examples
from maze_impala.envs.checker import EnvCheckError
from maze_impala.envs.examples import CoordinationEnv, CuttingEnv
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.testing import FaultyEnv, TwoStepEnv
from maze_impala.train.trainer import TrainingError

TINY = dict(n_epochs=1, epoch_length=3, envs_per_actor=2, n_rollout_steps=8, num_actors=1)


def faulty(fault, after=0):
    return functools.partial(FaultyEnv, fault, after)


SHIPPED = [
    "CartPole-v1",
    CuttingEnv,
    CoordinationEnv,
    "pettingzoo.classic.tictactoe_v3",
    "claims_parallel",
    *(getattr(examples, name) for name in examples.__all__ if name not in ("CuttingEnv", "CoordinationEnv")),
]


@pytest.mark.parametrize("env", SHIPPED, ids=lambda env: getattr(env, "__name__", str(env)))
def test_the_shipped_and_test_envs_pass(env):
    if env == "pettingzoo.classic.tictactoe_v3":
        env = {"_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env", "name": env}
    elif env == "claims_parallel":  # the shipped PettingZoo ParallelEnv example, also PettingZoo's own API test
        from pettingzoo.test import parallel_api_test

        from maze_impala.envs.examples.claims_parallel import parallel_env

        parallel_api_test(parallel_env(), num_cycles=20)
        env = {
            "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
            "name": "maze_impala.envs.examples.claims_parallel",
            "api": "parallel",
        }
    check_env(env, n_steps=200)


def test_check_env_says_what_it_checked(capsys):
    report = check_env(CuttingEnv, n_steps=50)
    assert report.sub_steps == 50 and report.step_keys == ("select", "cut") and report.episodes >= 1
    said = capsys.readouterr().out.strip()
    assert said.startswith("check_env: passed 50 sub-steps over") and "step keys select, cut" in said, said
    check_env(CuttingEnv, n_steps=5, verbose=False)
    assert capsys.readouterr().out == ""


def test_check_env_takes_gymnasium_and_pettingzoo_env_instances():
    from pettingzoo.classic import tictactoe_v3

    from maze_impala.envs.examples.claims_parallel import parallel_env

    check_env(gym.make("CartPole-v1"))  # a TimeLimit-wrapped instance, the first thing users pass
    check_env(tictactoe_v3.env())  # AEC
    check_env(parallel_env())  # Parallel
    with pytest.raises(TypeError, match="cannot make an env from 42"):
        check_env(42)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("shape", r"step key 0, observation 'observation': expected shape \(2,\) .*found \(1,\)"),
        ("nan_reward", "step key 0: the reward must be finite, found nan"),
        ("nan_obs", r"step key 0, observation 'observation': expected finite values"),
        ("old_api", "step key 0: step\\(\\) returned 4 values, Gym's old API"),
    ],
)
def test_check_env_names_the_step_key_the_key_and_what_it_found(fault, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(faulty(fault, after=3))


class _Broken(TwoStepEnv):
    def __init__(self, fault):
        super().__init__()
        self.fault = fault

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        if self.fault == "missing_key":
            obs = {k: v for k, v in obs.items() if k != next(iter(obs))}
        return obs, info

    def actor_id(self):
        return ActorID("nope", 0) if self.fault == "step_key" else super().actor_id()


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("missing_key", r"step key 'a': the observation's keys differ from its space: missing \["),
        ("step_key", r"actor_id\(\) returned step key 'nope', expected one of the spaces' step keys \['a', 'b'\]"),
    ],
)
def test_check_env_finds_structured_faults(fault, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env(_Broken(fault))


def test_a_mask_that_allows_nothing_is_named():
    class Masked(gym.Env):
        observation_space = gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (1,)), "action_mask": gym.spaces.MultiBinary(2)})
        action_space = gym.spaces.Dict({"action": gym.spaces.Discrete(2)})

        def reset(self, *, seed=None, options=None):
            return {"x": np.zeros(1, np.float32), "action_mask": np.zeros(2, np.int8)}, {}

    with pytest.raises(EnvCheckError, match=r"step key 0: mask 'action_mask' allows no action"):
        check_env(GymStructuredEnv(Masked()))


def test_a_mask_of_the_wrong_size_names_the_sizes_as_plain_numbers():
    class Masked(gym.Env):
        observation_space = gym.spaces.Dict({"x": gym.spaces.Box(0, 1, (1,)), "action_mask": gym.spaces.MultiBinary(3)})
        action_space = gym.spaces.Dict({"action": gym.spaces.Discrete(np.int64(2))})

        def reset(self, *, seed=None, options=None):
            return {"x": np.zeros(1, np.float32), "action_mask": np.ones(3, np.int8)}, {}

    with pytest.raises(EnvCheckError, match=r"must have shape \(2,\) \(one entry") as error:
        check_env(GymStructuredEnv(Masked()))
    assert "np.int64" not in str(error.value)


def test_reset_with_a_seed_must_repeat_the_first_observation():
    class Unseeded(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return np.random.rand(1).astype(np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), 0.0, True, False, {}

    with pytest.raises(EnvCheckError, match=r"reset\(seed=0\) twice gave different first observations"):
        check_env(GymStructuredEnv(Unseeded()))


@pytest.mark.parametrize("runner", ["dev", "local"])
def test_a_broken_env_fails_at_the_start_of_training_with_the_same_message(tmp_path, runner):
    with pytest.raises(TrainingError) as info:
        train(
            faulty("shape", after=2),
            ImpalaAlgorithmConfig(**TINY),
            runner=RunnerConfig(runner),
            output=QUIET,
            output_dir=tmp_path,
        )
    message = str(info.value)
    assert message.startswith("epoch 1: ")
    assert "step key 0, observation 'observation': expected shape (2,)" in message and "found (1,)" in message


@pytest.mark.parametrize("fault", ["shape", "nan_reward", "nan_obs"])
def test_faults_after_the_checked_steps_stop_the_run_and_never_broadcast(tmp_path, fault):
    """After the first (checked) steps, the buffers refuse a wrong shape and each rollout is checked for NaN."""
    with pytest.raises(TrainingError) as info:
        train(
            faulty(fault, after=200),
            ImpalaAlgorithmConfig(**TINY | {"epoch_length": 50}),
            runner=RunnerConfig("dev"),
            output=QUIET,
            output_dir=tmp_path,
        )
    expected = {
        "shape": "expected shape (2,) (its space), found (1,)",
        "nan_reward": "step key 0: the env returned a non-finite reward",
        "nan_obs": "step key 0: the env returned a non-finite observation 'observation'",
    }[fault]
    assert str(info.value).startswith("epoch 1: ") and expected in str(info.value)


def test_a_non_finite_loss_stops_the_learner_naming_the_quantity():
    from maze_impala.actors.actor import ActorSpec
    from maze_impala.actors.weights import SharedWeights
    from maze_impala.config import ModelConfig
    from maze_impala.envs.factory import make_env
    from maze_impala.events.api import EventHub
    from maze_impala.impala.events import MultiStepIMPALAEvents
    from maze_impala.impala.learner import ImpalaLearner
    from maze_impala.nn.critics import make_critic
    from maze_impala.nn.models import make_policy
    from maze_impala.play.lineup import Lineup

    env = make_env("CartPole-v1")
    model = ModelConfig(hidden_units=[8])
    policy, critic = make_policy(env, model), make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    learner = ImpalaLearner(policy, critic, ImpalaAlgorithmConfig(), EventHub().publisher(MultiStepIMPALAEvents))
    actor = ActorSpec("CartPole-v1", Lineup.of(model), 4, 2, 0).build(0, SharedWeights(policy))
    rollout = actor.rollout()
    with torch.no_grad():
        next(critic.parameters()).fill_(float("nan"))
    with pytest.raises(NonFiniteError, match=r"update 1: \w+ is nan \((step|critic)_key '?0'?\)"):
        learner.step([rollout])
