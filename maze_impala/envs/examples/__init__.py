"""Small structured environments shipped as examples: a two-sub-step one and a cooperative multi-agent one."""

from maze_impala.envs.examples.coordination import CoordinationEnv
from maze_impala.envs.examples.cutting import CuttingEnv

__all__ = ["CoordinationEnv", "CuttingEnv"]
