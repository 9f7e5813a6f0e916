"""Every path that needs a checkpoint reads its file once: the export, the searching player and the rollout that
searches with the policy and its critic."""

from collections import Counter
from pathlib import Path

import pytest
import torch

from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train
from maze_impala.config import RolloutConfig
from maze_impala.config.run import PolicyConfig, RolloutRunnerConfig

TICTACTOE = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "pettingzoo.classic.tictactoe_v3",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=1, envs_per_actor=2, n_rollout_steps=4, num_actors=1)
    output = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
    train(TICTACTOE, algorithm, runner=RunnerConfig("dev"), output=output, output_dir=out)
    return out / "model_last.pt"


@pytest.fixture
def reads(monkeypatch):
    """The files ``torch.load`` opened, counted by path."""
    counted: Counter[Path] = Counter()
    load = torch.load

    def counting(path, *args, **kwargs):
        counted[Path(path)] += 1
        return load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return counted


def test_the_export_reads_the_checkpoint_once(checkpoint, reads, tmp_path):
    from maze_impala.deploy.export import export_policy

    export_policy(checkpoint, tmp_path / "exported", "numpy")
    assert reads == {checkpoint: 1}


def test_the_searching_player_reads_the_checkpoint_once_for_its_policy_and_critic(checkpoint, reads):
    from maze_impala.play.guided import searching_player

    _player, env = searching_player(checkpoint, simulations=2)
    env.close()
    assert reads == {checkpoint: 1}


def test_a_searching_rollout_reads_the_checkpoint_once(checkpoint, reads, tmp_path):
    from maze_impala.evaluate.rollout import rollout

    config = RolloutConfig(
        input_dir=str(checkpoint.parent),
        policy=PolicyConfig(checkpoint=checkpoint.name),
        opponent="random",
        search=2,
        n_episodes=1,
        runner=RolloutRunnerConfig("dev"),
        progress=False,
    )
    rollout(config, tmp_path / "rollout")
    assert reads == {checkpoint: 1}
