"""Event interfaces shared by every algorithm: episodes and training progress."""

from __future__ import annotations

from maze_impala.core import StepKey
from maze_impala.events.api import EventInterface, count, epoch_stats, last, max_, mean, min_, std, sum_


class EpisodeEvents(EventInterface):
    """Published by whoever runs episodes (actors, evaluators) when an episode ends."""

    @epoch_stats(mean, std, min_, max_, count)
    def episode_return(self, value: float):
        """The undiscounted sum of the rewards of one episode."""

    @epoch_stats(mean, min_, max_)
    def episode_length(self, value: int):
        """The number of environment steps of one episode."""

    @epoch_stats(sum_)
    def episode_truncated(self, value: int):
        """1 for an episode cut off by a time limit (the env's own, or the run's ``max_episode_steps`` for an env
        without one), 0 for one that terminated: the sum counts the truncated episodes."""

    @epoch_stats(mean, group_by="step_key")
    def step_key_return(self, step_key: StepKey, value: float):
        """The reward one episode credited to the actors of one step key."""

    @epoch_stats(mean, group_by="agent")
    def agent_return(self, agent: str, value: float):
        """The reward one episode credited to one agent of a multi-agent env (its name: a PettingZoo agent name,
        or ``<step key>_<agent id>``); next to ``episode_return``, the team's."""


class GameEvents(EventInterface):
    """Published by the games against a fixed opponent (``rollout_evaluator.opponent``): one call per game, seen
    from the seat the trained policy played. A game is won when that seat's return is higher than every other
    seat's, drawn when it ties the highest, lost otherwise."""

    @epoch_stats(mean, group_by="seat")
    def win(self, seat: str, value: float):
        """1 for a won game, else 0: the mean is the win rate in that seat."""

    @epoch_stats(mean, group_by="seat")
    def draw(self, seat: str, value: float):
        """1 for a drawn game, else 0."""

    @epoch_stats(mean, group_by="seat")
    def loss(self, seat: str, value: float):
        """1 for a lost game, else 0."""

    @epoch_stats(mean, group_by="seat")
    def seat_return(self, seat: str, value: float):
        """The return of the trained policy's seat in one game."""


class RunEvents(EventInterface):
    """Progress of a training run."""

    @epoch_stats(last)
    def env_steps(self, value: int):
        """Environment steps consumed since the start of training."""

    @epoch_stats(last)
    def env_steps_per_second(self, value: float):
        """Environment steps consumed per second of wall-clock time in this epoch."""

    @epoch_stats(last)
    def updates_per_second(self, value: float):
        """Learner updates per second of wall-clock time in this epoch."""

    @epoch_stats(last)
    def elapsed_seconds(self, value: float):
        """Wall-clock seconds from the start of this process's run (its set-up, the actors' start-up included) to the
        end of this epoch; a resumed run counts again from its resumption."""

    @epoch_stats(last)
    def epoch_seconds(self, value: float):
        """Wall-clock seconds of this epoch, evaluation included."""

    @epoch_stats(last)
    def learner_waiting_percent(self, value: float):
        """The share (%) of this epoch's update loop the learner spent waiting for rollouts: high, the actors set the
        pace; near 0, the learner does (more actors would wait for it)."""

    @epoch_stats(mean)
    def learner_threads(self, value: int):
        """The torch threads a CPU learner computed an update with (its tuner's choice, or a probe's)."""


class ActorEvents(EventInterface):
    """What happens to the actor processes."""

    @epoch_stats(sum_, group_by="cause")
    def restarted(self, cause: str, value: int):
        """An actor was restarted; cause: died (a signal or a crash), raised (its env or policy), hung (no rollout
        within its deadline)."""

    @epoch_stats(mean, max_)
    def recovery_seconds(self, value: float):
        """Seconds from a restart to the restarted actor's first rollout."""

    @epoch_stats(sum_)
    def dropped_stale_rollout(self, value: int):
        """A rollout older than algorithm.max_policy_lag updates was dropped, not learned from."""
