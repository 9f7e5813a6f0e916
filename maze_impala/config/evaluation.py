"""The evaluation after every epoch (``algorithm.rollout_evaluator``), validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from maze_impala.config.base import check


@dataclass
class RolloutEvaluatorConfig:
    """The evaluation run after every epoch, which selects the best model."""

    n_episodes: int = 32
    """Episodes per evaluation (run side by side in one batched loop), on the same seeds every epoch, so that epochs
    compare on the same instances; ``model_best.pt`` is the epoch whose mean over them was best. With 8, the chosen
    epoch's evaluation overstated its return on fresh episodes by 30 on LunarLander, with 32 by 19, at 0.12x an
    epoch's training time (docs/benchmarks.md, "how many episodes model_best.pt rests on")."""
    deterministic: bool = True
    """Take the most likely action instead of sampling."""
    opponent: str | None = None
    """Multi-agent games: after each evaluation, play ``n_episodes`` games in every seat against this fixed
    opponent: ``random``, a checkpoint, or a training output dir (its model_best.pt); win, draw and loss rates
    per seat go into the statistics (``eval/GameEvents/...``). None: no games."""

    def __post_init__(self) -> None:
        check(
            self.opponent is None or (isinstance(self.opponent, str) and bool(self.opponent)),
            "algorithm.rollout_evaluator.opponent",
            self.opponent,
            "null, random, or the path of a checkpoint or training output dir",
        )
        check(
            isinstance(self.n_episodes, int) and self.n_episodes >= 1,
            "algorithm.rollout_evaluator.n_episodes",
            self.n_episodes,
            "an int >= 1",
        )
