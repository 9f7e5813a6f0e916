"""The algorithm config is validated at construction, with messages that name the field."""

import pytest
from hydra import compose, initialize_config_dir

from maze_impala.cli import check_overrides, config_dir, register_schemas, to_rollout_config, to_training_config
from maze_impala.config import ConfigError, ImpalaAlgorithmConfig, RunnerConfig

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
        ("n_sgd_passes", 0),
        ("clip_range", 1.0),
        ("clip_range", 0.0),
        ("trust_region", "actors"),
        ("n_rollout_steps", 0),
        ("n_rollout_steps", 2.5),
        ("lr", 0.0),
        ("lr", float("nan")),
        ("gamma", 1.5),
        ("gamma", 0.0),
        ("entropy_coef", -0.1),
        ("continuous_entropy_coef", -0.1),
        ("continuous_entropy_coef", float("inf")),
        ("max_grad_norm", -1.0),
        ("device", "tpu"),
        ("queue_out_of_sync_factor", 0.0),
        ("actors_batch_size", 0),
        ("num_actors", 0),
        ("vtrace_clip_rho_threshold", -1.0),
        ("vtrace_lambda", 0.0),
        ("vtrace_lambda", 1.1),
        ("patience", -1),
        ("target_score", float("nan")),
        ("target_score", "high"),
        ("n_sgd_minibatches", 0),
    ],
)
def test_bad_value_names_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"algorithm\.{field} must be"):
        ImpalaAlgorithmConfig(**{field: value})


def test_minibatches_each_hold_whole_trajectories():
    """A batch of fewer trajectories than minibatches takes one per trajectory (a default that fits small runs)."""
    fewer = ImpalaAlgorithmConfig(envs_per_actor=4, actors_batch_size=2, min_actors_batch_size=1, n_sgd_minibatches=5)
    assert fewer.n_sgd_minibatches == 5 and fewer.sgd_minibatches == 4
    assert ImpalaAlgorithmConfig(envs_per_actor=4, actors_batch_size=2, n_sgd_minibatches=8).sgd_minibatches == 8
    assert ImpalaAlgorithmConfig(envs_per_actor=1).sgd_minibatches == 1


def test_fitting_the_value_mean_needs_popart():
    assert ImpalaAlgorithmConfig(fit_value_mean=True).value_normalization == "popart"
    with pytest.raises(ConfigError, match=r"algorithm\.fit_value_mean must be .*popart"):
        ImpalaAlgorithmConfig(fit_value_mean=True, value_normalization="returns")


def test_burn_in_must_leave_policy_epochs():
    with pytest.raises(ConfigError, match="critic_burn_in_epochs"):
        ImpalaAlgorithmConfig(n_epochs=3, critic_burn_in_epochs=3)


def test_none_disables_clipping_and_derived_values():
    cfg = ImpalaAlgorithmConfig(vtrace_clip_rho_threshold=None, actors_batch_size=4, queue_out_of_sync_factor=1.5)
    assert cfg.queue_size_limit == 6
    assert ImpalaAlgorithmConfig(actors_batch_size=1, queue_out_of_sync_factor=0.1).queue_size_limit == 1
    assert cfg.env_steps_per_update == 4 * cfg.envs_per_actor * cfg.n_rollout_steps
    assert cfg.total_env_steps == cfg.n_epochs * cfg.epoch_length * cfg.env_steps_per_update


def _compose(*overrides, name="conf_train"):
    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_shipped_config_composes_and_validates():
    config = to_training_config(_compose("algorithm=impala", "runner=dev", "env.name=Acrobot-v1"))
    assert isinstance(config.algorithm, ImpalaAlgorithmConfig)
    assert config.runner.type == "dev"
    assert config.env["name"] == "Acrobot-v1"
    assert to_training_config(_compose("runner=local")).runner.type == "local"
    cartpole = to_training_config(_compose("algorithm=impala_cartpole")).algorithm
    assert cartpole == ImpalaAlgorithmConfig(eps=1e-3)


def test_pettingzoo_ships_centralised_critics_on_standardised_targets_over_about_a_thousand_batches():
    config = to_training_config(_compose("env=pettingzoo", "env.name=mpe2.simple_spread_v3"))
    assert (config.algorithm.value_normalization, config.algorithm.value_norm_decay) == ("returns", 0.999)
    assert config.env["global_state"] == "observations" and config.model.critic_only_keys == ["global_state"]
    default = to_training_config(_compose())
    assert (default.algorithm.value_normalization, default.algorithm.value_norm_decay) == ("popart", 0.99)
    assert default.model.critic_only_keys == []


def test_composed_bad_value_is_a_config_error():
    with pytest.raises(ConfigError, match=r"algorithm\.gamma must be in \(0, 1\]"):
        to_training_config(_compose("algorithm.gamma=2.0"))


@pytest.mark.parametrize(
    "override",
    [
        "+model.dropout=0.1",
        "+algorithm.obs_normalization=true",
        "+resume_from=x",
        "+runner.n_processes=2",
        "+output.nothing=1",
        "+algorithm.rollout_evaluator.x=1",
    ],
)
def test_an_unknown_key_is_refused_naming_it_and_the_valid_ones(override):
    key = override.lstrip("+").split("=")[0]
    with pytest.raises(ConfigError, match=rf"unknown key '{key}'.*Valid keys"):
        to_training_config(_compose(override))
    with pytest.raises(ConfigError, match=rf"unknown key '{key}'.*Valid keys"):  # before Hydra, without the +
        check_overrides("conf_train", [override.lstrip("+")])


@pytest.mark.parametrize(("override", "meant"), [("algorithm.lrr=0.1", "algorithm.lr"), ("seeed=2", "seed")])
def test_a_mistyped_key_is_answered_with_the_key_it_resembles(override, meant):
    with pytest.raises(ConfigError, match=rf"Did you mean '{meant}'\?"):
        check_overrides("conf_train", [override])


def test_every_unknown_key_of_a_command_line_is_named_at_once():
    with pytest.raises(
        ConfigError, match=r"2 unknown keys: unknown key 'algorithm.lrr'.* unknown key 'seeed'"
    ) as error:
        check_overrides("conf_train", ["algorithm.lrr=0.1", "seed=3", "seeed=2"])
    assert "Did you mean 'algorithm.lr'?" in str(error.value) and "Did you mean 'seed'?" in str(error.value)


def test_every_value_of_a_wrong_type_is_named_at_once_before_hydra():
    with pytest.raises(ConfigError, match=r"3 problems: unknown key 'algorithm.lrr'.*") as error:
        check_overrides("conf_train", ["algorithm.lrr=0.1", "algorithm.gamma=x", "seed=y", "algorithm.lr=1e-3"])
    said = str(error.value)
    assert "algorithm.gamma=x: Value 'x' of type 'str' could not be converted to Float" in said
    assert "seed=y:" in said and "algorithm.lr=" not in said and "\n" not in said
    with pytest.raises(ConfigError, match=r"^output.video.episodes=2.5: .*Integer$"):
        check_overrides("conf_train", ["output.video.episodes=2.5"])


@pytest.mark.parametrize(
    "override",
    [
        "seed=1,2",
        "env=minatar",
        "runner=dev",
        "env.name=x",
        "algorithm.lr=1e-3",
        "resume=/a/b",
        "algorithm.eps=null",
        "algorithm.n_epochs=range(1,3)",
        "output.csv=false",
        "~output.video",
    ],
)
def test_values_hydra_parses_further_are_left_to_it(override):
    check_overrides("conf_train", [override])


def test_every_bad_value_of_a_composed_config_is_named_at_once():
    overrides = ["algorithm.lr=-1", "algorithm.gamma=2", "runner.max_restarts=-1", "output.checkpoint_every=0"]
    with pytest.raises(
        ConfigError,
        match=r"^4 invalid values: algorithm.lr must be a finite float > 0, got -1.0; "
        r"algorithm.gamma must be in \(0, 1\], got 2.0; runner.max_restarts must be an int >= 0, "
        r"got -1; output.checkpoint_every must be an int >= 1, got 0$",
    ):
        to_training_config(_compose(*overrides))
    with pytest.raises(ConfigError, match=r"^algorithm.lr must be a finite float > 0, got -1.0$"):  # one: as before
        to_training_config(_compose("algorithm.lr=-1"))
    # a check across fields says nothing where a field it reads is bad already: no "at most 0 minibatches"
    with pytest.raises(ConfigError, match=r"^algorithm.envs_per_actor must be an int >= 1, got 0$"):
        to_training_config(_compose("algorithm.envs_per_actor=0"))
    with pytest.raises(ConfigError, match=r"^algorithm.n_sgd_minibatches must be an int >= 1, got 0$"):
        to_training_config(_compose("algorithm.n_sgd_minibatches=0"))  # and not num_learners after it


def test_a_shipped_familys_settings_are_read_without_the_cli():
    from maze_impala.config.workloads import workload

    minatar = workload("minatar")
    assert minatar.env["name"] == "MinAtar/Breakout-v1" and minatar.model == {"image_encoder": "small"}
    assert minatar.algorithm == {"n_sgd_minibatches": 4, "entropy_coef": 0.01} and minatar.runner == {}
    assert workload("minigrid").algorithm["entropy_coef"] == 0.01
    assert workload("pixel_goal").algorithm == {}  # a config of the env alone
    with pytest.raises(ValueError, match=r"no shipped env config 'nope'; the shipped ones: atari, butterfly"):
        workload("nope")


def test_every_shipped_option_of_every_group_validates():
    groups = {p.name: sorted(f.stem for f in p.glob("*.yaml")) for p in config_dir().iterdir() if p.is_dir()}
    assert {"algorithm", "env", "model", "runner", "policy"} <= set(groups)
    for group in ("algorithm", "env", "model", "runner"):
        for option in groups[group]:
            to_training_config(_compose(f"{group}={option}"))
    for option in groups["policy"]:
        to_rollout_config(_compose(f"policy={option}", "env=cutting", "input_dir=x", name="conf_rollout"))
    for option in set(groups["runner"]) - {"ray"}:
        to_rollout_config(_compose(f"runner={option}", "input_dir=x", name="conf_rollout"))
    with pytest.raises(ConfigError, match="runner=ray runs training's actors only; a rollout runs with runner=dev"):
        check_overrides("conf_rollout", ["runner=ray"])


def test_runner_aliases_name_the_two_backends():
    types = {
        alias: to_training_config(_compose(f"runner={alias}")).runner.type
        for alias in ("dev", "sequential", "local", "parallel")
    }
    assert types == {"dev": "dev", "sequential": "dev", "local": "local", "parallel": "local"}
    with pytest.raises(ConfigError, match=r"runner\.type must be one of"):
        RunnerConfig(type="cluster")


def test_runner_ray_without_ray_fails_at_construction_with_the_install_command(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(ConfigError, match=r'runner=ray needs Ray, which is not installed: pip install "maze_impala\['):
        RunnerConfig(type="ray")
    with pytest.raises(ConfigError, match=r"runner\.address='auto' applies to runner=ray only, not runner=local"):
        RunnerConfig(type="local", address="auto")


def test_an_env_target_replaces_the_default_env_config():
    overrides = ["env._target_=my_env.MyEnv", "+env.size=3"]
    config = to_training_config(_compose(*overrides), overrides)
    assert config.env == {"_target_": "my_env.MyEnv", "size": 3}  # no `name` from the default gym env config
    chosen = ["env=cutting", "env.n_orders=3"]
    assert to_training_config(_compose(*chosen), chosen).env["max_size"] == 6  # a chosen env config merges


def test_a_value_of_the_wrong_type_names_its_key():
    from hydra.errors import ConfigCompositionException

    from maze_impala.config import TrainingConfig, from_mapping

    with pytest.raises(ConfigCompositionException, match=r"algorithm\.n_epochs=many"):  # Hydra knows the schema
        _compose("algorithm.n_epochs=many")
    with pytest.raises(ConfigError, match=r"algorithm\.n_epochs: Value 'many' of type 'str' could not be converted"):
        from_mapping(TrainingConfig, {"algorithm": {"n_epochs": "many"}})


def test_learner_cores_accept_a_number_of_threads_and_refuse_anything_else():
    assert RunnerConfig(learner_cores=3).learner_cores == "3"  # a pin, as the command line's learner_cores=3
    with pytest.raises(ConfigError, match=r"runner\.learner_cores must be auto, leftover, all or a number"):
        RunnerConfig(learner_cores="some")
    with pytest.raises(ConfigError, match=r"runner\.learner_cores"):
        RunnerConfig(learner_cores="0")


def test_learner_cores_auto_give_every_core_to_a_learner_that_sets_the_pace():
    from maze_impala.envs.factory import make_env
    from maze_impala.train.resolve import with_image_encoder, with_learner_cores

    register_schemas()
    cases = (
        ("minatar", [], "all"),  # MinAtar's small CNN
        ("pixel_goal", [], "leftover"),  # a 6x6 image, flattened into the MLP
        ("pixel_goal", ["model.image_encoder=small"], "all"),
        ("gym_env", [], "leftover"),
        ("gym_env", ["model.image_encoder=impala"], "leftover"),  # no images to encode
        ("gym_env", ["model.recurrent=lstm"], "all"),
        ("minatar", ["runner.learner_cores=leftover"], "leftover"),
    )
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        for env, overrides, cores in cases:
            config = to_training_config(compose(config_name="conf_train", overrides=[f"env={env}", *overrides]))
            chosen = "leftover" if "runner.learner_cores=leftover" in overrides else "auto"
            assert config.runner.learner_cores == chosen
            probe = make_env(config.env)
            try:
                assert with_learner_cores(with_image_encoder(config, probe), probe).runner.learner_cores == cores
            finally:
                probe.close()
