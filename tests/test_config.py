"""The algorithm config is validated at construction, with messages that name the field."""

import pytest
from hydra import compose, initialize_config_dir

from maze_impala.cli import config_dir, register_configs, to_training_config
from maze_impala.impala.config import ConfigError, ImpalaAlgorithmConfig

MAZE_FIELDS = """n_epochs epoch_length patience critic_burn_in_epochs n_rollout_steps lr gamma policy_loss_coef
value_loss_coef entropy_coef max_grad_norm device queue_out_of_sync_factor actors_batch_size num_actors
vtrace_clip_rho_threshold vtrace_clip_pg_rho_threshold rollout_evaluator""".split()


def test_has_every_maze_field_plus_vtrace_lambda():
    fields = set(ImpalaAlgorithmConfig.__dataclass_fields__)
    assert set(MAZE_FIELDS) <= fields
    assert "vtrace_lambda" in fields


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_epochs", 0),
        ("epoch_length", -1),
        ("n_rollout_steps", 0),
        ("n_rollout_steps", 2.5),
        ("lr", 0.0),
        ("lr", float("nan")),
        ("gamma", 1.5),
        ("gamma", 0.0),
        ("entropy_coef", -0.1),
        ("max_grad_norm", -1.0),
        ("device", "tpu"),
        ("queue_out_of_sync_factor", 0.0),
        ("actors_batch_size", 0),
        ("num_actors", 0),
        ("vtrace_clip_rho_threshold", -1.0),
        ("vtrace_lambda", 0.0),
        ("vtrace_lambda", 1.1),
        ("patience", -1),
    ],
)
def test_bad_value_names_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"algorithm\.{field} must be"):
        ImpalaAlgorithmConfig(**{field: value})


def test_burn_in_must_leave_policy_epochs():
    with pytest.raises(ConfigError, match="critic_burn_in_epochs"):
        ImpalaAlgorithmConfig(n_epochs=3, critic_burn_in_epochs=3)


def test_none_disables_clipping_and_derived_values():
    cfg = ImpalaAlgorithmConfig(vtrace_clip_rho_threshold=None, actors_batch_size=4, queue_out_of_sync_factor=1.5)
    assert cfg.queue_size_limit == 6
    assert ImpalaAlgorithmConfig(actors_batch_size=1, queue_out_of_sync_factor=0.1).queue_size_limit == 1
    assert cfg.env_steps_per_update == 4 * cfg.envs_per_actor * cfg.n_rollout_steps
    assert cfg.total_env_steps == cfg.n_epochs * cfg.epoch_length * cfg.env_steps_per_update


def _compose(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return compose(config_name="conf_train", overrides=list(overrides))


def test_shipped_config_composes_and_validates():
    config = to_training_config(_compose("algorithm=impala", "runner=dev", "env.name=Acrobot-v1"))
    assert isinstance(config.algorithm, ImpalaAlgorithmConfig)
    assert config.runner.type == "sequential"
    assert config.env["name"] == "Acrobot-v1"
    assert to_training_config(_compose("runner=local")).runner.type == "subprocess"
    cartpole = to_training_config(_compose("algorithm=impala_cartpole")).algorithm
    assert cartpole == ImpalaAlgorithmConfig(eps=1e-3)


def test_composed_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"algorithm\.gamma must be in \(0, 1\]"):
        to_training_config(_compose("algorithm.gamma=2.0"))
