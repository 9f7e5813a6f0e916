"""Small environments shipped as examples: structured ones (sub-steps, cooperating agents, structured actions against
flat ones) and memory tasks."""

from maze_impala.envs.examples.coordination import CoordinationEnv
from maze_impala.envs.examples.correlated import (
    CorrelatedPairsEnv,
    FlatCorrelatedPairsEnv,
    FlatParametrizedActionEnv,
    ParametrizedActionEnv,
)
from maze_impala.envs.examples.cutting import CuttingEnv
from maze_impala.envs.examples.memory import MemoryEnv, ScaledCartPole, StatelessCartPole

__all__ = [
    "CoordinationEnv",
    "CorrelatedPairsEnv",
    "CuttingEnv",
    "FlatCorrelatedPairsEnv",
    "FlatParametrizedActionEnv",
    "MemoryEnv",
    "ParametrizedActionEnv",
    "ScaledCartPole",
    "StatelessCartPole",
]
