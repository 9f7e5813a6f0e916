"""Observation normalisation in the model: statistics as buffers, updated by the learner, shipped with the weights."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tiny import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, load_policy, train
from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.checkpoints import read_checkpoint
from maze_impala.envs.factory import make_env
from maze_impala.envs.spaces import normalizable_keys
from maze_impala.evaluate.evaluator import RolloutEvaluator
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.critics import make_critic
from maze_impala.nn.flat import flatten
from maze_impala.nn.models import make_policy
from maze_impala.nn.normalize import CLIP, RunningMeanStd
from maze_impala.nn.torch_acting import TorchActing, numpy_form_of
from maze_impala.play.lineup import Lineup

NORMALIZED = ModelConfig(hidden_units=[16], normalize_observations=True)


def test_running_statistics_equal_those_of_all_the_data_seen():
    rng = np.random.default_rng(0)
    data = rng.normal([3.0, -100.0], [0.1, 50.0], size=(1000, 2))
    stats = RunningMeanStd((2,))
    for chunk in np.array_split(data, [3, 10, 400, 401]):
        stats.update(torch.as_tensor(chunk))
    np.testing.assert_allclose(stats.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.var.numpy(), data.var(0), rtol=1e-10)
    assert stats.count.item() == 1000 and stats.mean.dtype == torch.float64


def test_only_box_keys_that_are_not_masks_or_images_are_normalised():
    space = gym.spaces.Dict(
        {
            "x": gym.spaces.Box(-1, 1, (3,)),
            "action_mask": gym.spaces.Box(0, 1, (4,)),
            "frame": gym.spaces.Box(0, 255, (8, 8, 3), dtype=np.uint8),
            "d": gym.spaces.Discrete(3),
            "b": gym.spaces.MultiBinary(2),
        }
    )
    assert normalizable_keys(space) == ["x"]


def _learner(env_fn):
    env = make_env(env_fn)
    policy = make_policy(env, NORMALIZED)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, NORMALIZED)
    learner = ImpalaLearner(policy, critic, ImpalaAlgorithmConfig(), EventHub().publisher(MultiStepIMPALAEvents))
    return learner, SharedWeights(policy)


def test_the_learner_updates_the_statistics_from_valid_decisions_and_the_actors_receive_them():
    from maze_impala.testing import leaving_agents_parallel

    learner, weights = _learner(leaving_agents_parallel)  # agents leave: columns hold padding
    spec = ActorSpec(
        leaving_agents_parallel, Lineup.of(NORMALIZED, numpy_form=numpy_form_of(learner.policy)), 6, 2, seed=0
    )
    actor = spec.build(0, weights)
    rollout = actor.rollout()
    trajectory = next(iter(rollout.trajectories.values()))
    key = next(iter(rollout.trajectories))
    decisions = trajectory.observations["observation"][:-1][trajectory.mask]
    assert not trajectory.mask.all(), "padding entries, which must not count"
    learner.step([rollout])
    stats = learner.policy.normalizers["walker"].stats["observation"]
    assert stats.count.item() == len(decisions)
    np.testing.assert_allclose(stats.mean.numpy(), decisions.mean(0), rtol=1e-6)
    weights.publish(learner.policy, learner.version)
    actor.rollout()  # loads the published weights, statistics included
    obs = {"observation": decisions[:5]}
    agents = np.zeros(5, dtype=np.int64)
    ours = actor.acting.act(key, obs, {}, agents, StreamNoise(1))
    theirs = TorchActing(learner.policy).act(key, obs, {}, agents, StreamNoise(1))
    np.testing.assert_array_equal(ours[0]["action"], theirs[0]["action"])
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # the inputs both see: clipped standardised observations
        inputs = learner.policy.normalize(key, {"observation": torch.as_tensor(decisions)})["observation"]
    scale = np.sqrt(stats.var.numpy().astype(np.float32) + 1e-8)
    expected = np.clip((decisions - stats.mean.numpy().astype(np.float32)) / scale, -CLIP, CLIP)
    np.testing.assert_allclose(inputs.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_statistics_travel_into_checkpoints_and_a_checkpoint_replays_the_training_evaluation(tmp_path):
    from maze_impala.envs.examples import ScaledCartPole

    algorithm = ImpalaAlgorithmConfig(n_epochs=2, epoch_length=4, envs_per_actor=8)
    result = train(
        ScaledCartPole,
        algorithm,
        model=NORMALIZED,
        runner=RunnerConfig(type="dev"),
        output=QUIET,
        output_dir=tmp_path,
        seed=3,
    )
    state = read_checkpoint(tmp_path / "model_last.pt")
    mean = state["policy"]["normalizers.0.stats.observation.mean"]
    assert mean.dtype == torch.float64 and mean.abs().max() > 1.0, "statistics of the scaled observations"
    policy, _ = load_policy(tmp_path / "model_last.pt")
    for name, value in state["policy"].items():
        assert torch.equal(policy.state_dict()[name], value), name
    evaluator = RolloutEvaluator(ScaledCartPole, algorithm.rollout_evaluator.n_episodes, True, 3, EventHub())
    replayed = [r.episode_return for r in evaluator.evaluate(policy)]
    import pandas as pd

    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert replayed == kpis[kpis["epoch"] == result.epochs]["return"].tolist()
    with torch.no_grad():  # without its statistics the same weights play differently: the check can fail
        for module in policy.modules():
            if isinstance(module, RunningMeanStd):
                module.mean.zero_(), module.var.fill_(1.0)
    assert [r.episode_return for r in evaluator.evaluate(policy)] != replayed
    assert flatten(policy).numel() == sum(v.numel() for v in state["policy"].values())
