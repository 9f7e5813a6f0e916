"""Refusals that are refusals: each bad command below is one ``maze-run:`` line with exit 2, before anything is
written, and leaves nothing behind."""

import shutil

import pytest
from clitools import maze_run, run_cli

from maze_impala.actors.backends import check_device
from maze_impala.config import ConfigError, RolloutConfig
from maze_impala.config.run import PolicyConfig


def _refused(args, cwd):
    proc = run_cli(args, cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("maze-run: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "override, said",
    [
        ("env=cartpole", "env=cartpole is no env config (did you mean env=scaled_cartpole?); the env configs: atari"),
        ("runner=locl", "runner=locl is no runner config (did you mean runner=local?)"),
    ],
)
def test_a_typo_in_a_config_group_is_refused_naming_the_options(tmp_path, override, said):
    line = _refused(["-cn", "conf_train", override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert said in line, line
    assert not (tmp_path / "run").exists()


def test_a_sweep_over_a_group_names_the_option_that_does_not_exist(tmp_path):
    line = _refused(["-cn", "conf_train", "-m", "env=cutting,cuting"], tmp_path)
    assert "env=cuting is no env config (did you mean env=cutting?)" in line
    assert not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_output_directory_that_cannot_be_written_is_refused(tmp_path, where):
    if where == "file":
        (tmp_path / "a_file").write_text("")
        target, said = tmp_path / "a_file" / "run", f"{tmp_path / 'a_file'} is a file, not a folder"
    else:
        target, said = "/proc/maze_impala_run", "cannot be written"
    line = _refused(["-cn", "conf_train", f"hydra.run.dir={target}"], tmp_path)
    assert f"hydra.run.dir={target}" in line and said in line and "choose another directory" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a_file"] if where == "file" else [])


def test_a_learner_or_actors_on_a_gpu_torch_does_not_see_are_refused_as_named():
    with pytest.raises(ConfigError, match=r"algorithm.device=cuda:1, and torch sees 1 GPU\(s\) here: learn on the CPU"):
        check_device("algorithm.device", "cuda:1", device_count=1)
    with pytest.raises(ConfigError, match=r"algorithm.device=cuda, and torch sees no GPU here"):
        check_device("algorithm.device", "cuda", device_count=0)
    check_device("algorithm.device", "cuda:0", device_count=1)
    check_device("algorithm.device", "cpu", device_count=0)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a machine with a GPU may have CUDA")
def test_a_cuda_learner_without_cuda_is_a_refusal_that_leaves_no_directory(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    line = _refused(["-cn", "conf_train", "algorithm.device=cuda", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert "algorithm.device=cuda, and torch sees no GPU here" in line, line
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_of_another_run_beside_input_dir_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"policy.checkpoint=/elsewhere/model_best.pt is not a file of input_dir="):
        RolloutConfig(input_dir=str(tmp_path), policy=PolicyConfig(checkpoint="/elsewhere/model_best.pt"))
    RolloutConfig(input_dir=str(tmp_path), policy=PolicyConfig(checkpoint="model_last.pt"))
    RolloutConfig(input_dir=str(tmp_path), policy=PolicyConfig(checkpoint=str(tmp_path / "model_last.pt")))


@pytest.mark.slow
def test_a_truncated_checkpoint_is_named_in_the_rollout_on_resume_and_as_an_opponent(tmp_path):
    run = tmp_path / "run"
    proc = maze_run(
        tmp_path,
        ("-cn conf_train runner=dev algorithm.n_epochs=1 algorithm.epoch_length=2 algorithm.envs_per_actor=4"),
        out=run,
    )
    assert proc.returncode == 0, proc.stderr
    for name in ("model_best.pt", "model_last.pt"):
        with open(run / name, "r+b") as file:
            file.truncate(20_000)
    said = "is truncated or corrupt"
    line = _refused(["-cn", "conf_rollout", f"input_dir={run}", f"hydra.run.dir={tmp_path / 'r'}"], tmp_path)
    assert f"cannot read the checkpoint {run / 'model_best.pt'} (20,000 bytes): it {said}" in line, line
    assert not (tmp_path / "r").exists()
    line = _refused(["-cn", "conf_train", "runner=dev", "algorithm.n_epochs=2", f"resume={run}"], tmp_path)
    assert f"{run / 'model_last.pt'} (20,000 bytes): it {said}" in line, line
    line = _refused(
        [
            "-cn",
            "conf_train",
            "env=tictactoe",
            f"algorithm.train_opponent={run / 'model_best.pt'}",
            f"hydra.run.dir={tmp_path / 't'}",
        ],
        tmp_path,
    )
    assert f"{run / 'model_best.pt'} (20,000 bytes): it {said}" in line, line


@pytest.mark.slow
def test_a_random_baseline_of_your_own_env_takes_the_env_keys_training_takes(tmp_path):
    proc = maze_run(
        tmp_path,
        ("-cn conf_rollout policy=random_policy env._target_=maze_impala.envs.examples.CuttingEnv n_episodes=2"),
        out=tmp_path / "r",
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 episodes (random actions)" in proc.stdout


@pytest.mark.parametrize("extra", [[], ["~env.name"]])
def test_cfg_job_shows_your_own_env_as_the_run_builds_it(tmp_path, extra):
    """No ``name: CartPole-v1`` of the default env under ``env``; a printed command that deletes it already too."""
    import yaml

    proc = maze_run(
        tmp_path,
        "-cn conf_train env._target_=maze_impala.envs.examples.CuttingEnv +env.max_size=5",
        *extra,
        "--cfg",
        "job",
    )
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["env"] == {"_target_": "maze_impala.envs.examples.CuttingEnv", "max_size": 5}


def test_a_checkpoint_of_another_model_names_the_first_differing_layer_and_each_side():
    import torch

    from maze_impala.checkpoints import CheckpointMismatchError, restore_modules

    state = {"policy": torch.nn.Linear(3, 2).state_dict(), "config": {"env": "CartPole-v1"}}
    with pytest.raises(CheckpointMismatchError) as info:
        restore_modules(state, "run/model_best.pt", policy=torch.nn.Linear(4, 2))
    message = str(info.value)
    assert (
        "run/model_best.pt was made for another policy: the first differing layer is weight: [2, 3] in the "
        "checkpoint, [2, 4] in this model" in message
    ), message
    assert "(its env: CartPole-v1)" in message
    with pytest.raises(CheckpointMismatchError, match=r"this model has a parameter 1\.weight"):
        restore_modules(
            state | {"policy": torch.nn.Sequential(torch.nn.Linear(3, 2)).state_dict()},
            "m.pt",
            policy=torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2)),
        )


def test_cuda_graphs_on_a_cpu_learner_are_refused_naming_what_to_use_instead():
    from maze_impala import ImpalaAlgorithmConfig

    with pytest.raises(
        ConfigError,
        match=r"reduce-overhead replays the compiled update as CUDA graphs, and a "
        r"learner on cpu has none: use algorithm.compile=default",
    ):
        ImpalaAlgorithmConfig(compile="reduce-overhead")
    ImpalaAlgorithmConfig(compile="reduce-overhead", device="cuda")
    ImpalaAlgorithmConfig(compile="default")


def test_check_env_names_an_out_of_bounds_index_as_plain_numbers():
    import gymnasium as gym
    import numpy as np

    from maze_impala import EnvCheckError
    from maze_impala.envs.checks import check_value

    with pytest.raises(EnvCheckError, match=r"found 5\.0 at index \(1,\)$"):
        check_value(np.array([0.0, 5.0], np.float32), gym.spaces.Box(-1, 1, (2,)), "step key 0: observation 'x'")


@pytest.mark.slow
def test_per_agent_networks_report_a_gradient_norm_per_network(tmp_path):
    import pandas as pd
    from tiny import tiny_algorithm

    from maze_impala import ModelConfig, OutputConfig, RunnerConfig, train

    env = {"_target_": "maze_impala.envs.examples.CoordinationEnv", "n_agents": 2, "n_steps": 4}
    algorithm = tiny_algorithm(epoch_length=2)
    train(
        env,
        algorithm,
        ModelConfig(per_agent_networks=True),
        RunnerConfig("dev"),
        output_dir=tmp_path / "run",
        output=OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
    )
    columns = [c for c in pd.read_csv(tmp_path / "run" / "stats.csv").columns if "policy_grad_norm/mean" in c]
    assert sorted(columns) == [
        f"train/MultiStepIMPALAEvents/policy_grad_norm/mean/step_key=0/network_{i}" for i in (0, 1)
    ], columns
