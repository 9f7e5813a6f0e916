"""Self-play against past selves (``algorithm.train_opponent=pool``): the snapshot pool's config."""

from __future__ import annotations

from dataclasses import dataclass

from maze_impala.config.base import check

POOL_DRAWS = ("uniform", "latest", "pfsp")
"""How a game against the snapshot pool picks its snapshot (``opponent_pool.draw``)."""


@dataclass
class OpponentPoolConfig:
    """Self-play against past selves (``train_opponent=pool``): the pool of snapshots of the trained policy."""

    snapshot_every: int = 25
    """Learner updates between two snapshots: the learner adds the weights to the pool at each multiple of this
    (the first weights at once); the pool goes to every actor and into every checkpoint."""
    size: int = 8
    """Snapshots kept (the newest); each game against the pool is played by one of them (see ``draw``)."""
    draw: str = "uniform"
    """Which snapshot plays a game: uniform (any of the pool, with equal chances), latest (the newest), or pfsp
    (prioritised fictitious self-play: the snapshots that the trained policy beats least play most; see
    :class:`~maze_impala.play.pool.PoolOpponent`)."""

    def __post_init__(self) -> None:
        for name in ("snapshot_every", "size"):
            value = getattr(self, name)
            check(isinstance(value, int) and value >= 1, f"algorithm.opponent_pool.{name}", value, "an int >= 1")
        check(self.draw in POOL_DRAWS, "algorithm.opponent_pool.draw", self.draw, f"one of {POOL_DRAWS}")
