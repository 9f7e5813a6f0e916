"""Recurrent and normalised policies end to end: trained by the CLI, rolled out by the rollout CLI, resumed, loaded."""

import pandas as pd
import pytest
import torch
from clitools import rollouts_on, train_tiny
from omegaconf import OmegaConf
from playing import play_episodes

from maze_impala import ModelConfig, Player, load_policy
from maze_impala.actors.actor import seed_for
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config import TrainingConfig
from maze_impala.envs.examples import MemoryEnv
from maze_impala.envs.factory import make_env

pytestmark = pytest.mark.slow
MODEL = ["env=memory", "model.recurrent=lstm", "model.recurrent_units=16", "model.normalize_observations=true"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("recurrent"), MODEL)


def test_the_checkpoint_holds_the_statistics_and_load_policy_plays_with_the_state(trained):
    state = read_checkpoint(trained / "model_last.pt")["policy"]
    count = state["normalizers.0.stats.observation.count"]
    assert count.dtype == torch.float64 and count.item() == 2 * 3 * 4 * 32, "every decision of the 6 updates"
    policy, env = load_policy(trained / "model_last.pt")
    assert policy.recurrent and torch.equal(policy.state_dict()["normalizers.0.stats.observation.count"], count)
    player = Player(policy, deterministic=True)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(player(obs, env.actor_id()))
    assert set(player.states) == {(0, 0)} and player.states[(0, 0)]["h"].shape == (1, 16)
    recorded = OmegaConf.load(trained / "config.yaml")
    assert recorded.runner.learner_cores == "all", "what learner_cores=auto became for the LSTM's learner"


def test_the_rollout_cli_plays_each_env_with_its_own_state_on_both_runners(trained, tmp_path):
    args = ["policy.checkpoint=model_last.pt", "runner.envs_per_process=3", "n_episodes=6", "deterministic=false"]
    runs = rollouts_on(("dev", "local"), trained, tmp_path, args)
    outputs = {runner: pd.read_csv(out / "kpis.csv") for runner, (out, _) in runs.items()}
    pd.testing.assert_frame_equal(outputs["dev"], outputs["local"])
    # the same episodes played from Python with the checkpoint's policy: the CLI restores weights and statistics
    policy, _ = load_policy(trained / "model_last.pt")
    episodes = [(i, seed_for(1234, i)) for i in range(6)]
    results = play_episodes([make_env(MemoryEnv) for _ in range(2)], policy, episodes, deterministic=False)
    assert [r.episode_return for r in results] == outputs["dev"]["return"].tolist()


def test_a_resumed_run_restores_the_statistics_exactly(trained, tmp_path, monkeypatch):
    from maze_impala.config import from_mapping
    from maze_impala.train.setup import build_trainer

    saved = read_checkpoint(trained / "model_last.pt")
    record = OmegaConf.to_container(OmegaConf.load(trained / "config.yaml"))
    record["algorithm"]["n_epochs"] = 3
    config = from_mapping(TrainingConfig, {**record, "runner": {"type": "dev"}, "resume": str(trained)})
    assert isinstance(config.model, ModelConfig) and config.model.normalize_observations
    trainer = build_trainer(config, trained)
    try:
        for name, value in saved["policy"].items():
            assert torch.equal(trainer.learner.policy.state_dict()[name], value), name
    finally:
        result = trainer.train()  # one more epoch, from the restored statistics
    assert result.epochs == 3
    after = read_checkpoint(trained / "model_last.pt")["policy"]["normalizers.0.stats.observation.count"]
    assert after.item() == saved["policy"]["normalizers.0.stats.observation.count"].item() + 3 * 4 * 32
