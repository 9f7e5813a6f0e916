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


def _run(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from maze_impala.train.setup import build_trainer

    output_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        config = to_training_config(cfg)
        trainer = build_trainer(config, output_dir)
    except InstantiationException as error:  # the env's _target_ raised; show its own message
        cause = error.__cause__ or error
        print(f"maze-run: cannot build the env ({cfg.env.get('_target_')}): {cause}", file=sys.stderr)
        sys.exit(2)
    except (ConfigError, ValueError, TypeError, NotImplementedError, RuntimeError) as error:
        print(f"maze-run: invalid configuration: {error}", file=sys.stderr)
        sys.exit(2)
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
        f"maze-run: outputs in {output_dir} (config.yaml, stats.csv, tensorboard/, model_last.pt, model_best.pt)"
    )


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    import hydra

    register_configs()
    # SIGTERM (e.g. from a job scheduler) unwinds like Ctrl-C, so that actor processes are stopped.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    hydra.main(version_base=None, config_path=str(config_dir()), config_name=None)(_run)()


if __name__ == "__main__":
    main()
