"""Gymnasium and PettingZoo wrappers listed in the env config (``env.wrappers``): applied in order, recorded with
the run and rebuilt by ``load_policy``; and the errors for what cannot be wrapped or encoded."""

import gymnasium as gym
import numpy as np
import pytest

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, Player, RunnerConfig, load_policy, train
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config import ConfigError
from maze_impala.envs.factory import make_env

PIXELS = {"_target_": "maze_impala.envs.examples.PixelGoalEnv", "dict_observation": True}
WRAPPERS = [
    {"_target_": "gymnasium.wrappers.FilterObservation", "filter_keys": ["map", "action_mask"]},
    {"_target_": "gymnasium.wrappers.TimeLimit", "max_episode_steps": 5},
]


def _episode_length(env, seed=0):
    env.reset(seed=seed)
    for step in range(1, 100):
        _, _, terminated, truncated, _ = env.step({"action": np.int64(0)})
        if terminated or truncated:
            return step
    return None


def test_wrappers_apply_in_order_inside_the_gymnasium_adapter():
    env = make_env({**PIXELS, "wrappers": WRAPPERS})
    assert set(env.observation_spaces_dict[0].spaces) == {"map", "action_mask"}
    assert _episode_length(env) <= 5
    by_path = make_env(
        {
            "_target_": "maze_impala.envs.gym_adapter.make_gym_env",
            "name": "CartPole-v1",
            "wrappers": ["gymnasium.wrappers.FlattenObservation"],
        }
    )
    assert isinstance(by_path.env, gym.wrappers.FlattenObservation)


def test_a_run_records_its_wrappers_and_load_policy_rebuilds_them(tmp_path):
    algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=1, envs_per_actor=2, num_actors=1)
    quiet = OutputConfig(tensorboard=False, console=False, progress=False, plot=False)
    train(
        {**PIXELS, "wrappers": WRAPPERS},
        algorithm,
        model=ModelConfig(image_features=8),
        output=quiet,
        runner=RunnerConfig(type="dev"),
        output_dir=tmp_path,
    )
    assert read_checkpoint(tmp_path / "model_last.pt")["config"]["env"]["wrappers"] == WRAPPERS
    assert "FilterObservation" in (tmp_path / "config.yaml").read_text()
    policy, env = load_policy(tmp_path / "model_last.pt")
    assert set(env.observation_spaces_dict[0].spaces) == {"map", "action_mask"} and _episode_length(env) <= 5
    obs, _ = env.reset(seed=1)
    assert Player(policy)(obs, env.actor_id())["action"] in range(4)


@pytest.mark.parametrize(
    ("wrappers", "message"),
    [
        ("gymnasium.wrappers.TimeLimit", "must be a list"),
        ([{"max_episode_steps": 5}], "neither a dotted path nor a config with _target_"),
    ],
)
def test_a_malformed_wrapper_list_is_refused(wrappers, message):
    with pytest.raises(ConfigError, match=message):
        make_env({**PIXELS, "wrappers": wrappers})


@pytest.mark.parametrize(
    ("name", "api", "wrapper"),
    [
        ("pettingzoo.classic.tictactoe_v3", "aec", "pettingzoo.utils.wrappers.TerminateIllegalWrapper"),
        ("mpe2.simple_spread_v3", "parallel", "pettingzoo.utils.wrappers.BaseParallelWrapper"),
    ],
)
def test_pettingzoo_wrappers_apply_inside_the_adapter_which_keeps_its_settings(name, api, wrapper):
    config = {
        "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
        "name": name,
        "api": api,
        "global_state": "observations",
    }
    arguments = {"illegal_reward": -1} if "Illegal" in wrapper else {}
    plain, wrapped = make_env(config), make_env({**config, "wrappers": [{"_target_": wrapper, **arguments}]})
    assert type(wrapped) is type(plain) and wrapped.global_state == "observations"
    assert type(wrapped.env).__name__ == wrapper.rsplit(".", 1)[1]
    assert wrapped.observation_spaces_dict == plain.observation_spaces_dict


def test_a_structured_env_cannot_take_gymnasium_wrappers():
    with pytest.raises(ConfigError, match="apply the wrappers inside its factory"):
        make_env({"_target_": "maze_impala.envs.examples.CuttingEnv", "wrappers": WRAPPERS[1:]})


class _WithMission(gym.Env):
    observation_space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (5, 5, 3), np.uint8), "mission": gym.spaces.Text(20)}
    )
    action_space = gym.spaces.Discrete(3)


def test_an_observation_key_that_cannot_be_encoded_is_named_with_the_wrapper_that_drops_it():
    with pytest.raises(ValueError, match=r"observation 'mission'.*Text.*ImgObsWrapper.*FilterObservation"):
        make_env(_WithMission())


def test_the_shipped_butterfly_config_reduces_every_pistons_frames_for_the_cnn():
    pytest.importorskip("supersuit")
    pytest.importorskip("pymunk")
    from hydra import compose, initialize_config_dir

    from maze_impala.cli import config_dir, register_schemas, to_training_config

    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        config = to_training_config(compose(config_name="conf_train", overrides=["env=butterfly"]))
    assert config.algorithm.envs_per_actor == 4 and config.env["wrappers"][1]["_target_"] == "supersuit.resize_v1"
    algorithm = config.algorithm  # env=atari's settings, the IMPALA paper's for frames
    settings = (algorithm.optimizer, algorithm.lr, algorithm.entropy_coef, algorithm.n_sgd_passes)
    assert settings == ("rmsprop", 6e-4, 0.01, 1)
    assert algorithm.env_steps_per_update == 2 * 4 * 20 and algorithm.optimizer_eps == 0.01 / 160
    env = make_env(config.env)
    assert env.agent_counts_dict == {"piston": 20}
    assert env.observation_spaces_dict["piston"]["observation"] == gym.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    obs, _ = env.reset(seed=0)
    assert obs["observation"].shape == (84, 84, 3) and obs["observation"].dtype == np.uint8


@pytest.mark.parametrize(
    ("name", "package", "shape", "settings"),
    [
        ("minigrid", "minigrid", (7, 7, 3), {"entropy_coef": 0.01, "gamma": 0.99}),
        ("minatar", "minatar", (10, 10, 4), {"entropy_coef": 0.01, "gamma": 0.99, "lr": 0.001}),
        (
            "atari",
            "ale_py",
            (4, 84, 84),
            {
                "reward_clip": 1.0,
                "gamma": 0.99,
                "optimizer": "rmsprop",
                "lr": 0.0006,
                "entropy_coef": 0.01,
                "n_rollout_steps": 20,
                "n_sgd_passes": 1,
            },
        ),
    ],
)
def test_the_shipped_image_configs_make_their_envs_and_set_their_settings(name, package, shape, settings):
    pytest.importorskip(package)
    from hydra import compose, initialize_config_dir

    from maze_impala.cli import config_dir, register_schemas, to_training_config

    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        config = to_training_config(compose(config_name="conf_train", overrides=[f"env={name}"]))
    assert {key: getattr(config.algorithm, key) for key in settings} == settings
    # MinAtar's 10x10 frames through its own small CNN (the MLP that auto would choose learnt Breakout far worse)
    assert config.model.image_encoder == ("small" if name == "minatar" else "auto")
    env = make_env(config.env)
    try:
        space = env.observation_spaces_dict[0]["observation"]
        assert space.shape == shape and space.dtype in (np.uint8, np.bool_)
        obs, _ = env.reset(seed=0)
        assert obs["observation"].shape == shape
    finally:
        env.close()
