"""``maze-run``: the Hydra command line, e.g. ``maze-run -cn conf_train algorithm=impala runner=local``."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from maze_impala.impala.config import ConfigError, ImpalaAlgorithmConfig
from maze_impala.nn.models import ModelConfig
from maze_impala.train.setup import RunnerConfig, TrainingConfig

CONFIG_DIR_VARIABLE = "MAZE_IMPALA_CONFIG_DIR"


def config_dir() -> Path:
    """Where the shipped configs are: $MAZE_IMPALA_CONFIG_DIR, a source checkout, or the installed package."""
    candidates = []
    if os.environ.get(CONFIG_DIR_VARIABLE):
        candidates.append(Path(os.environ[CONFIG_DIR_VARIABLE]))
    candidates.append(Path(__file__).resolve().parents[1] / "configs")
    spec = importlib.util.find_spec("maze_impala.configs")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) for p in spec.submodule_search_locations)
    for candidate in candidates:
        if (candidate / "conf_train.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"maze-run cannot find its configs (conf_train.yaml) in {candidates}")


def register_configs() -> None:
    """Register the structured-config schemas that the shipped YAML files build on."""
    store = ConfigStore.instance()
    store.store(group="algorithm", name="impala_schema", node=ImpalaAlgorithmConfig)
    store.store(group="model", name="mlp_schema", node=ModelConfig)
    store.store(group="runner", name="runner_schema", node=RunnerConfig)
    from maze_impala.train.rollout import PolicyConfig

    store.store(group="policy", name="policy_schema", node=PolicyConfig)


def to_training_config(cfg: DictConfig) -> TrainingConfig:
    """Validate a composed config into typed dataclasses; raises ConfigError naming the bad value."""
    for group in ("algorithm", "model", "runner", "env"):
        if group not in cfg:
            raise ConfigError(f"the config has no '{group}' group; compose conf_train with {group}=<option>")
    try:
        algorithm = OmegaConf.to_object(cfg.algorithm)
        model = OmegaConf.to_object(cfg.model)
        runner = OmegaConf.to_object(cfg.runner)
    except OmegaConfBaseException as error:
        raise ConfigError(str(error)) from None
    env: Any = OmegaConf.to_container(cfg.env, resolve=True)
    return TrainingConfig(env=env, algorithm=algorithm, model=model, runner=runner, seed=int(cfg.seed))


def to_rollout_config(cfg: DictConfig) -> Any:
    """Validate a composed conf_rollout into a :class:`RolloutConfig`."""
    from maze_impala.train.rollout import RolloutConfig

    try:
        policy, runner = OmegaConf.to_object(cfg.policy), OmegaConf.to_object(cfg.runner)
    except OmegaConfBaseException as error:
        raise ConfigError(str(error)) from None
    env = OmegaConf.to_container(cfg.env, resolve=True) if cfg.get("env") is not None else None
    return RolloutConfig(
        policy=policy,
        runner=runner,
        env=env,
        input_dir=cfg.get("input_dir"),
        n_episodes=int(cfg.n_episodes),
        deterministic=bool(cfg.deterministic),
        seed=int(cfg.seed),
    )


def _fail(cfg: DictConfig, error: BaseException) -> None:
    """Print a configuration error the way users can act on, and exit with code 2."""
    if isinstance(error, InstantiationException):  # the env's _target_ raised; show its own message
        cause = error.__cause__ or error
        target = cfg.env.get("_target_") if cfg.get("env") is not None else None
        print(f"maze-run: cannot build the env ({target}): {cause}", file=sys.stderr)
    else:
        print(f"maze-run: invalid configuration: {error}", file=sys.stderr)
    sys.exit(2)


def _rollout(cfg: DictConfig, output_dir: Path) -> None:
    from maze_impala.train.rollout import rollout

    try:
        config = to_rollout_config(cfg)
    except (ConfigError, ValueError, TypeError) as error:
        _fail(cfg, error)
    OmegaConf.save(cfg, output_dir / "config.yaml", resolve=True)
    print(f"maze-run: rollout of {config.n_episodes} episodes; outputs go to {output_dir}", flush=True)
    try:
        rollout(config, output_dir)
    except KeyboardInterrupt:
        print("maze-run: interrupted", file=sys.stderr)
        sys.exit(130)
    except (InstantiationException, ConfigError, ValueError, TypeError, FileNotFoundError) as error:
        _fail(cfg, error)
    print(f"maze-run: outputs in {output_dir} (config.yaml, kpis.csv, kpis_summary.csv, stats.csv)")


def _run(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from maze_impala.train.setup import build_trainer

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    if "policy" in cfg:
        _rollout(cfg, output_dir)
        return
    try:
        config = to_training_config(cfg)
        trainer = build_trainer(config, output_dir)
    except (InstantiationException, ConfigError, ValueError, TypeError, NotImplementedError, RuntimeError) as error:
        _fail(cfg, error)
    OmegaConf.save(cfg, output_dir / "config.yaml", resolve=True)
    print(f"maze-run: training; outputs go to {output_dir}", flush=True)
    try:
        result = trainer.train()  # stops every actor process on success, error and interruption
    except KeyboardInterrupt:
        print(f"maze-run: interrupted; the last completed epoch's model is in {output_dir}", file=sys.stderr)
        sys.exit(130)
    print(
        f"maze-run: done after {result.epochs} epochs, {result.env_steps:,} env steps, "
        f"best evaluation return {result.best_eval_return:.2f}.\n"
        f"maze-run: outputs in {output_dir} (config.yaml, stats.csv, kpis.csv, training_curves.png, tensorboard/, "
        "model_last.pt, model_best.pt)"
    )


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    import hydra

    register_configs()
    # SIGTERM (e.g. from a job scheduler) unwinds like Ctrl-C, so that actor processes are stopped. SIGINT is
    # set explicitly too: a process started in the background by a non-interactive shell inherits SIGINT as
    # ignored, and Python then installs no KeyboardInterrupt handler of its own.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    hydra.main(version_base=None, config_path=str(config_dir()), config_name=None)(_run)()


if __name__ == "__main__":
    main()
