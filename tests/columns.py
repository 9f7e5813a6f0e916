"""The ``stats.csv`` columns that the learning tests read, named through :class:`StatKey` as the package names them."""

from maze_impala.events.api import mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey

RETURN = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
"""The mean training return of an epoch's episodes."""
EVAL = StatKey.of(EpisodeEvents.episode_return, mean, "eval").column()
"""The mean return of the epoch's greedy evaluation."""
STEPS = StatKey.of(RunEvents.env_steps, "last", "train").column()
"""The env steps trained on by the end of the epoch."""
ENV_STEPS_PER_SECOND = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()
"""The training env steps per second of the epoch's updates."""
