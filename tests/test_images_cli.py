"""An image env end to end from the installed package: trained by the CLI with the IMPALA CNN, its checkpoint rolled
out by the rollout CLI on both runners and loaded by ``load_policy``."""

import gymnasium
import pandas as pd
import pytest
from clitools import maze_run, rollouts_on, train_tiny

from maze_impala import Player, load_policy
from maze_impala.nn.encoders import ImpalaCNN
from maze_impala.nn.torch_acting import TorchActing

pytestmark = pytest.mark.slow
ENV = [
    "env=pixel_goal",
    "+env.dict_observation=true",
    "+env.channels_first=true",
    "+env.wrappers=[{_target_:gymnasium.wrappers.TimeLimit,max_episode_steps:10}]",  # recorded and rebuilt
    "model.image_encoder=impala",
    "model.image_features=32",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("pixels"), ENV)


def test_the_checkpoint_rebuilds_the_cnn_and_plays(trained):
    policy, env = load_policy(trained / "model_last.pt")
    assert isinstance(policy.network(0).encoder.images["map"].cnn, ImpalaCNN)
    assert isinstance(Player(policy).acting, TorchActing)
    assert isinstance(env.env, gymnasium.wrappers.TimeLimit) and env.env._max_episode_steps == 10
    player = Player(policy, deterministic=False)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        action = player(obs, env.actor_id())
        assert obs["action_mask"][action["action"]] == 1
        obs, *_ = env.step(action)


def test_the_rollout_cli_plays_the_image_policy_alike_on_both_runners(trained, tmp_path):
    args = ["policy.checkpoint=model_last.pt", "n_episodes=4", "deterministic=false"]
    runs = rollouts_on(("dev", "local"), trained, tmp_path, args)
    outputs = {runner: pd.read_csv(out / "kpis.csv") for runner, (out, _) in runs.items()}
    assert len(outputs["dev"]) == 4 and outputs["dev"]["steps"].max() <= 10, "the rollout lost the TimeLimit wrapper"
    pd.testing.assert_frame_equal(outputs["dev"], outputs["local"])


def test_pong_trains_on_the_cpu_and_its_checkpoint_plays_a_whole_game(tmp_path):
    """The shipped env=atari (ale-py, the standard preprocessing, the Nature CNN on a CPU): a few updates through the
    CLI, then one full game of Pong from the checkpoint (a game ends at 21 points)."""
    budget = [
        "algorithm.n_epochs=1",
        "algorithm.epoch_length=2",
        "algorithm.envs_per_actor=2",
        "algorithm.n_rollout_steps=8",
        "algorithm.rollout_evaluator.n_episodes=1",
    ]
    out = tmp_path / "pong"
    proc = maze_run(tmp_path, "-cn conf_train env=atari", *budget, "runner=dev", out=out)
    assert proc.returncode == 0, proc.stderr
    played = tmp_path / "played"
    proc = maze_run(
        tmp_path, "-cn conf_rollout", f"input_dir={out}", "n_episodes=1", "progress=false", out=played, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    (game,) = pd.read_csv(played / "kpis.csv").to_dict("records")
    assert -21 <= game["return"] <= 21 and game["steps"] >= 200  # the raw score: rewards are clipped in the loss only
