"""Small environments shipped as examples: structured ones (sub-steps, cooperating agents, structured actions against
flat ones) memory tasks and an image task."""

from maze_impala.envs.examples.coordination import CoordinationEnv
from maze_impala.envs.examples.correlated import (
    CorrelatedPairsEnv,
    FlatCorrelatedPairsEnv,
    FlatParametrizedActionEnv,
    ParametrizedActionEnv,
)
from maze_impala.envs.examples.cutting import CuttingEnv
from maze_impala.envs.examples.memory import MemoryEnv, ScaledCartPole, StatelessCartPole
from maze_impala.envs.examples.pixels import PixelGoalEnv

__all__ = [
    "CoordinationEnv",
    "CorrelatedPairsEnv",
    "CuttingEnv",
    "FlatCorrelatedPairsEnv",
    "FlatParametrizedActionEnv",
    "MemoryEnv",
    "ParametrizedActionEnv",
    "PixelGoalEnv",
    "ScaledCartPole",
    "StatelessCartPole",
]
