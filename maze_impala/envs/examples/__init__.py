"""Small environments shipped as examples: structured ones (two sub-steps, cooperating agents) and memory tasks."""

from maze_impala.envs.examples.coordination import CoordinationEnv
from maze_impala.envs.examples.cutting import CuttingEnv
from maze_impala.envs.examples.memory import MemoryEnv, ScaledCartPole, StatelessCartPole

__all__ = ["CoordinationEnv", "CuttingEnv", "MemoryEnv", "ScaledCartPole", "StatelessCartPole"]
