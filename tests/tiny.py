"""What the tests share to train: the smallest algorithm settings and a run's quiet output."""

from maze_impala import ImpalaAlgorithmConfig, OutputConfig

QUIET = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
"""A run's outputs without the console, TensorBoard, the status line or the plots (the tables are written)."""
SMALLEST = dict(
    n_epochs=1, epoch_length=1, envs_per_actor=2, n_rollout_steps=8, num_actors=1, rollout_evaluator={"n_episodes": 1}
)
"""One epoch of one update of one actor's 2 envs x 8 steps, and one evaluation episode."""


def tiny_algorithm(**overrides) -> ImpalaAlgorithmConfig:
    """The algorithm of a run at the smallest budget (:data:`SMALLEST`), ``overrides`` changing any setting."""
    return ImpalaAlgorithmConfig(**{**SMALLEST, **overrides})
