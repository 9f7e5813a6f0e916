"""Experiment trackers as stats writers: the same rows that go to TensorBoard and ``stats.csv``.

``output.wandb=true`` logs every epoch's statistics to Weights & Biases (``pip install "maze_impala[wandb]"``;
``WANDB_MODE=offline`` keeps them in the run's ``wandb/``), ``output.mlflow=true`` to MLflow (``pip install
"maze_impala[mlflow]"``; into the run's ``mlruns/``, MLflow's local file store, unless ``MLFLOW_TRACKING_URI``
names another). Both get the run's config as parameters and its final results at the end; each tracker run is
named after the run's directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from maze_impala.config import ConfigError
from maze_impala.events.writers import StatsWriter
from maze_impala.startup import mlflow_file_store

WANDB_PROJECT = "maze_impala"
"""The W&B project of a run, unless ``WANDB_PROJECT`` names another."""


def _import(module: str, extra: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ConfigError(
            f'output.{extra}=true needs {module}, which is not installed: pip install "maze_impala[{extra}]"'
        ) from None


class WandbWriter(StatsWriter):
    """One W&B run per training run: every row, indexed by env steps."""

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        wandb = _import("wandb", "wandb")
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", WANDB_PROJECT),
            dir=str(run_dir),
            name=run_dir.name,
            config=config,
            reinit="finish_previous",
        )

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        self.run.log({**row, "epoch": epoch}, step=env_steps)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        self.run.summary.update(metrics)

    def close(self) -> None:
        self.run.finish()


MLFLOW_KEY = re.compile(r"[^\w\-. :/]")
"""Characters MLflow refuses in a metric or parameter name (``=`` of ``step_key=0`` among them)."""


def mlflow_key(name: str) -> str:
    """A column's name as MLflow takes it: ``step_key=0`` becomes ``step_key:0``."""
    return MLFLOW_KEY.sub(":", name)


class MlflowWriter(StatsWriter):
    """One MLflow run per training run, in the run's ``mlruns/`` unless ``MLFLOW_TRACKING_URI`` is set."""

    def __init__(self, run_dir: Path, config: dict[str, Any]):
        mlflow = _import("mlflow", "mlflow")
        if "MLFLOW_TRACKING_URI" not in os.environ:  # the run's own local file store
            mlflow_file_store()
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=run_dir.name)
        mlflow.log_params({mlflow_key(k): str(v)[:500] for k, v in config.items()})

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        self.mlflow.log_metrics({mlflow_key(k): v for k, v in row.items() if v == v}, step=env_steps)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics({mlflow_key(k): v for k, v in metrics.items()})

    def close(self) -> None:
        self.mlflow.end_run()
