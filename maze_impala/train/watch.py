"""Episodes that do not end, said once: training episodes that stop ending, evaluation episodes cut at the cap, and an
evaluation that runs far longer than the epoch before it.

Rollouts are chunked, so training goes on whether episodes end or not; an evaluation plays whole episodes. An env
without a time limit of its own (MinAtar, a simulator, your own env) whose policy learnt to survive would otherwise
train without episode statistics, or sit in an evaluation, without a word.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from maze_impala.actors.actor import PlayProgress
from maze_impala.actors.results import EpisodeResult
from maze_impala.events.api import EventRecord, event_name
from maze_impala.events.interfaces import EpisodeEvents

CAP_KEY = "max_episode_steps"
"""The key that caps every episode of an env without a time limit of its own."""
QUIET_ROLLOUTS = 20
"""Training says so once when no episode has ended for this many rollouts of every env."""
SLOW_EVALUATION = 3.0
"""An evaluation is reported once it has run this many times the seconds of the epoch's training ..."""
SLOW_EVALUATION_SECONDS = 60.0
"""... and at least this many seconds."""
_EPISODE_END = event_name(EpisodeEvents.episode_length)

_log = logging.getLogger("maze_impala")


def _cap(cap: int | None) -> str:
    return f"{CAP_KEY}={cap:,}" if cap is not None else f"{CAP_KEY}=null (never)"


class EpisodeWatch:
    """Watches the training rollouts' episodes and the evaluations' for the trainer; each notice is logged once."""

    def __init__(
        self,
        n_envs: int,
        rollout_steps: int,
        cap: int | None,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        """``n_envs``: the envs that training's actors step (every actor's); ``rollout_steps``: the structured
        steps of one rollout; ``cap``: the run's ``max_episode_steps``; ``say``: where notices go (the log)."""
        self.n_envs, self.rollout_steps, self.cap, self.clock = n_envs, rollout_steps, cap, clock
        self.say = say or (lambda text: _log.warning("%s", text))
        self.quiet_steps = 0
        """Env steps of training since the last episode ended."""
        self.ended = False
        """An episode ended since the last :meth:`stepped`."""
        self.notices: set[str] = set()
        self.evaluation_started = 0.0
        self.training_seconds = 0.0

    def _once(self, kind: str, text: str) -> None:
        if kind not in self.notices:
            self.notices.add(kind)
            self.say(text)

    def __call__(self, record: EventRecord) -> None:
        """A listener of training's hub: an episode that ended."""
        if (record.interface, record.event) == _EPISODE_END:
            self.ended = True

    def stepped(self, env_steps: int) -> None:
        """Training took ``env_steps`` more (a batch of rollouts, whose events the hub has replayed)."""
        self.quiet_steps = 0 if self.ended else self.quiet_steps + env_steps
        self.ended = False
        per_env = self.quiet_steps // max(self.n_envs, 1)
        if per_env >= QUIET_ROLLOUTS * self.rollout_steps:
            self._once(
                "training",
                f"no training episode has ended in the last {self.quiet_steps:,} env steps ({per_env:,} steps of each "
                f"of {self.n_envs} envs, {per_env // self.rollout_steps} rollouts): training goes on, but there are "
                f"no episode statistics. Does the env end its episodes? One without a time limit of its own is cut "
                f"at {_cap(self.cap)}; set {CAP_KEY}=<steps> to end them sooner",
            )

    def evaluation_start(self, training_seconds: float) -> None:
        """An evaluation begins after an epoch's ``training_seconds`` of updates."""
        self.evaluation_started, self.training_seconds = self.clock(), training_seconds

    def evaluating(self, progress: PlayProgress) -> str:
        """The status line's part for an evaluation under way; reports, once, one that runs far too long."""
        seconds = self.clock() - self.evaluation_started
        if seconds > max(SLOW_EVALUATION * self.training_seconds, SLOW_EVALUATION_SECONDS):
            self._once(
                "slow evaluation",
                f"the evaluation has run {seconds:.0f} s, {seconds / max(self.training_seconds, 1e-9):.0f}x the "
                f"epoch's training: {progress.done}/{progress.total} episodes done, the longest {progress.longest:,} "
                f"steps so far. Episodes of an env without a time limit of its own end at {_cap(self.cap)}; set "
                f"{CAP_KEY}=<steps> to end them sooner, or algorithm.rollout_evaluator.n_episodes=<fewer>",
            )
        return f"evaluating: {progress.done}/{progress.total} episodes, the longest {progress.longest:,} steps"

    def evaluated(self, results: list[EpisodeResult]) -> None:
        """An evaluation's episodes: says once that some were cut at the cap."""
        capped = sum(r.capped for r in results)
        if capped:
            self._once(
                "capped",
                f"{capped} of {len(results)} evaluation episodes reached {_cap(self.cap)} without ending and were "
                f"cut off as truncated (kpis.csv marks them; the env has no time limit of its own): set "
                f"{CAP_KEY}=<steps> to change where",
            )
