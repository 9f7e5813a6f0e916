"""Multi-step and multi-agent rollouts: reward crediting, episode ends mid-step, leaving agents, overlap."""

import functools

import numpy as np
import pytest

from maze_impala import Player
from maze_impala.actors.actor import ActorSpec, RolloutActor
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ModelConfig
from maze_impala.envs.factory import make_env
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.testing import TwoStepEnv, leaving_agents_aec, leaving_agents_parallel

MODEL = ModelConfig(hidden_units=[8])


def _actor(env_fn, n_steps: int, n_envs: int = 1, model: ModelConfig = MODEL) -> RolloutActor:
    weights = SharedWeights(make_policy(make_env(env_fn), model))
    return ActorSpec(env_fn, Lineup.of(model), n_steps, n_envs, seed=3).build(0, weights)


def _x(trajectory, t=slice(None), col=0):
    return trajectory.observations["x"][t, col]


def test_a_reward_returned_only_by_the_last_sub_step_is_credited_to_every_sub_step():
    rollout = _actor(TwoStepEnv, n_steps=3).rollout()
    a, b = rollout.trajectories["a"], rollout.trajectories["b"]
    assert rollout.env_steps == 3 and a.n_steps == b.n_steps == 3
    u_b = b.actions["u"][:, 0]
    # structured step reward = 0.5 (from "a") + 1 + u (from "b"), credited to both decisions
    np.testing.assert_allclose(a.rewards[:, 0], 1.5 + u_b)
    np.testing.assert_allclose(b.rewards[:, 0], 1.5 + u_b)
    np.testing.assert_array_equal(a.terminated[:, 0], [False, False, True])
    np.testing.assert_array_equal(b.terminated[:, 0], [False, False, True])
    assert a.mask.all() and b.mask.all()
    np.testing.assert_array_equal(_x(a)[:, 0], [0, 1, 2, 0])  # the bootstrap row: the next episode's first obs
    np.testing.assert_array_equal(_x(b)[:3, 2], [1, 1, 1])  # "b" observations are marked sub-step 1


def test_per_actor_rewards_from_the_env_are_used_as_given():
    rollout = _actor(lambda: TwoStepEnv(split_rewards=True), n_steps=3).rollout()
    a, b = rollout.trajectories["a"], rollout.trajectories["b"]
    np.testing.assert_allclose(a.rewards[:, 0], [2.0, 2.0, 2.0])
    np.testing.assert_allclose(b.rewards[:, 0], 10.0 + b.actions["u"][:, 0])


def test_an_episode_that_ends_mid_step_closes_every_actor_and_pads_the_skipped_sub_step():
    rollout = _actor(lambda: TwoStepEnv(n_steps=3, end_mid_step_at=1), n_steps=4).rollout()
    a, b = rollout.trajectories["a"], rollout.trajectories["b"]
    assert rollout.env_steps == 4  # two episodes of two structured steps (the second one cut short)
    # "a": steps 0 and 1 of two episodes; its mid-step decision earns only the 0.5 of its own sub-step
    np.testing.assert_array_equal(_x(a, slice(0, 4))[:, :2], [[0, 0], [1, 0], [0, 1], [1, 1]])
    u_b = b.actions["u"][:2, 0]
    np.testing.assert_allclose(a.rewards[:, 0], [1.5 + u_b[0], 0.5, 1.5 + u_b[1], 0.5])
    np.testing.assert_array_equal(a.terminated[:, 0], [False, True, False, True])
    # "b" acted once per episode; that decision is terminal for it
    assert b.n_steps == 2 and b.mask.all()
    np.testing.assert_array_equal(b.terminated[:, 0], [True, True])
    np.testing.assert_allclose(b.rewards[:, 0], 1.5 + u_b)


def test_consecutive_rollouts_overlap_by_one_decision_per_actor():
    actor = _actor(lambda: TwoStepEnv(n_steps=5), n_steps=2, n_envs=2)
    first, second = actor.rollout(), actor.rollout()
    for key in ("a", "b"):
        x1, x2 = first.trajectories[key].observations["x"], second.trajectories[key].observations["x"]
        np.testing.assert_array_equal(x1[-1], x2[0])
    # the pending "b" decision travels with its action and behaviour log-prob
    b1, b2 = first.trajectories["b"], second.trajectories["b"]
    assert b1.n_steps == 1 and b2.n_steps == 2  # "b" of step 2 only completes in the next rollout
    np.testing.assert_array_equal(_x(b2, 0), [1, 0, 1])


@pytest.mark.parametrize("make", [leaving_agents_parallel, leaving_agents_aec], ids=["parallel", "aec"])
def test_agents_that_leave_early_keep_their_own_rewards_and_ends(make):
    n_steps = 4 if make is leaving_agents_parallel else 9  # one episode (AEC: a structured step is one move)
    rollout = _actor(make, n_steps=n_steps).rollout()
    walker = rollout.trajectories["walker"]
    assert list(walker.agent_ids) == [0, 1, 2]
    for agent, (length, reward) in enumerate([(2, 1.0), (3, 2.0), (4, 3.0)]):
        valid = walker.mask[:, agent]
        assert valid.sum() == length
        np.testing.assert_array_equal(walker.observations["observation"][:length, agent, 0], np.arange(length))
        np.testing.assert_allclose(walker.rewards[valid, agent], reward)
        obs = walker.observations["observation"][:, agent]
        np.testing.assert_array_equal(obs[length:], np.repeat(obs[length : length + 1], 5 - length, axis=0))
        last = length - 1
        assert walker.terminated[last, agent] == (agent < 2)
        assert walker.truncated[last, agent] == (agent == 2)
    np.testing.assert_array_equal(walker.truncated_index, [[3, 2]])
    np.testing.assert_array_equal(walker.truncated_observations["observation"], [[4, 2]])


def test_tictactoe_masks_are_respected_and_rewards_go_to_each_player():
    env = {
        "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
        "name": "pettingzoo.classic.tictactoe_v3",
    }
    actor = _actor(env, n_steps=40, n_envs=4)
    finished = 0
    for _ in range(3):  # an illegal move would make PettingZoo's tictactoe raise
        rollout = actor.rollout()
        player = rollout.trajectories["player"]
        done = player.terminated & player.mask
        finished += int(done.sum())
        assert set(np.unique(player.rewards[done])) <= {-1.0, 0.0, 1.0}
        assert player.rewards[~done].sum() == 0.0  # rewards come at the end of a game only
        assert abs(player.rewards.sum()) <= 2 * 4  # zero-sum, up to games cut by the rollout boundary
    assert finished >= 2 * 4
    events = [r for r in rollout.events if r.event == "episode_length"]
    assert events and all(5 <= r.values["value"] <= 9 for r in events)


class _VaryingAgents(TwoStepEnv):
    """Step key 0 with a varying agent count: episode ``k`` has ``k % 3 + 1`` agents, each earning 1 + agent."""

    def __init__(self):
        super().__init__(n_steps=2)
        self._obs_spaces = {0: self._obs_spaces["a"]}
        self._act_spaces = {0: self._act_spaces["a"]}
        self.agent = 0

    @property
    def agent_counts_dict(self) -> dict:
        return {0: -1}

    def actor_id(self):
        return (0, self.agent)

    def get_actor_rewards(self):
        return {(0, self.acted): 1.0 + self.acted}

    def reset(self, *, seed=None, options=None):
        self.agent = 0
        return super().reset(seed=seed)

    def step(self, action):
        n_agents = self.episode % 3 + 1
        self.acted, self.agent = self.agent, (self.agent + 1) % n_agents
        if self.agent == 0:
            self.time += 1
        return self._obs(), 1.0, self.time >= self.n_steps, False, {}


def test_a_varying_agent_count_gets_a_column_per_agent_as_agents_appear():
    actor = _actor(_VaryingAgents, n_steps=6)  # three episodes of 2 structured steps: 1, 2, then 3 agents
    trajectory = actor.rollout().trajectories[0]
    np.testing.assert_array_equal(trajectory.agent_ids, [0, 1, 2])
    np.testing.assert_array_equal(trajectory.mask.sum(axis=0), [6, 4, 2])
    for agent in range(3):
        np.testing.assert_allclose(trajectory.rewards[trajectory.mask[:, agent], agent], 1.0 + agent)


@pytest.mark.parametrize("critic", ["step", "shared"])
def test_any_string_works_as_a_step_key_observation_key_or_action_key(tmp_path, critic):
    from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, load_policy, train
    from maze_impala.nn.torch_acting import numpy_form_of
    from maze_impala.testing import OddKeysEnv

    for keys in (("type", "a.b"), ("train", "k:keys")):
        factory = functools.partial(OddKeysEnv, keys)
        model = ModelConfig(hidden_units=[8], critic=critic, normalize_observations=True, recurrent="gru")
        out = tmp_path / "-".join(keys)
        algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=2, envs_per_actor=2, n_rollout_steps=6)
        quiet = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
        train(factory, algorithm, model, RunnerConfig("dev"), output=quiet, output_dir=out)
        policy, env = load_policy(out / "model_last.pt")
        assert numpy_form_of(policy) is not None, "the numpy form reads the escaped names too"
        player, (obs, _) = Player(policy), env.reset(seed=0)
        action = player(obs, env.actor_id())
        assert set(action) == {"type", "keys"}
