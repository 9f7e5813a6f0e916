"""Job-shop scheduling (``env=jobshop``): the env, its instances, the dispatching rules it is judged against."""

from maze_impala.envs.jobshop.env import FEATURES, JobShopEnv, JobShopEvents, JobShopKpis
from maze_impala.envs.jobshop.instances import SETS, Instance, load_instances, parse_instance, random_instance
from maze_impala.envs.jobshop.schedule import MODES, RULES, Schedule, dispatch_by_rule

__all__ = [
    "FEATURES",
    "MODES",
    "RULES",
    "SETS",
    "Instance",
    "JobShopEnv",
    "JobShopEvents",
    "JobShopKpis",
    "Schedule",
    "dispatch_by_rule",
    "load_instances",
    "parse_instance",
    "random_instance",
]
