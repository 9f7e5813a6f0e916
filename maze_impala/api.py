"""The functions a script calls: :func:`train` and :func:`load_policy`.

Importing them imports no torch: a script's top-level ``from maze_impala import train`` runs again in every actor
process it starts (spawned processes re-import the main script), and an actor whose policy acts in numpy never
needs torch. What the functions need is imported when they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from maze_impala.config import (
    ImpalaAlgorithmConfig,
    ModelConfig,
    OutputConfig,
    RunnerConfig,
    TrainingConfig,
)

if TYPE_CHECKING:
    from maze_impala.envs.factory import EnvSpec
    from maze_impala.envs.structured import StructuredEnv
    from maze_impala.nn.models import StructuredPolicy
    from maze_impala.train.trainer import TrainingResult


def train(
    env: EnvSpec = "CartPole-v1",
    algorithm: ImpalaAlgorithmConfig | None = None,
    model: ModelConfig | None = None,
    runner: RunnerConfig | None = None,
    seed: int = 1234,
    output_dir: str | Path | None = None,
    output: OutputConfig | None = None,
    overwrite: bool = False,
    resume_from: str | Path | None = None,
) -> TrainingResult:
    """Train IMPALA from Python with the same components and defaults as ``maze-run -cn conf_train``.

    Writes ``config.yaml``, ``stats.csv``, ``kpis.csv``, TensorBoard events and the last and best
    model into ``output_dir`` (default: ``outputs/train/<time>``); ``resume_from`` (a run
    directory) continues that run from its last checkpoint instead. Call it under
    ``if __name__ == "__main__":`` in a script: the default ``runner=local`` starts actor processes.
    """
    from maze_impala.train.rundir import new_run_dir
    from maze_impala.train.setup import build_trainer

    config = TrainingConfig(
        env,
        algorithm or ImpalaAlgorithmConfig(),
        model or ModelConfig(),
        runner or RunnerConfig(),
        output or OutputConfig(),
        seed,
        overwrite,
        str(resume_from) if resume_from is not None else None,
    )
    out = Path(output_dir) if output_dir else new_run_dir("train")
    return build_trainer(config, out).train()


def load_policy(checkpoint: str | Path) -> tuple[StructuredPolicy, StructuredEnv]:
    """The policy of a checkpoint written by training, and a fresh env of the run's config.

    The env and model are rebuilt from the config stored in the checkpoint, so this
    works for any run whose env is given by an id or a ``_target_`` config
    (:class:`~maze_impala.play.spec.PolicySpec` does the work).
    """
    from maze_impala.play.spec import load_policy as load

    return load(checkpoint)
