"""Job-shop scheduling as a structured env: one dispatch decision at a time (``env=jobshop``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.jobshop.instances import Instance, load_instances, random_instance
from maze_impala.envs.jobshop.schedule import MODES, Schedule
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventInterface, episode_stats, epoch_stats, last, mean
from maze_impala.events.episodes import EpisodeEventLog, KpiCalculator

FEATURES = (
    "open",
    "in_conflict_set",
    "next_duration",
    "start_after_now",
    "completion_after_now",
    "remaining_work",
    "remaining_ops",
    "machine_remaining_work",
    "machine_ready_after_now",
    "following_duration",
    "remaining_work_share",
    "progress",
)
"""The features of each job's row of the ``jobs`` observation: times in units of the instance's mean processing time,
relative to the decision's time ``t*`` where they are times; work remaining over the work of a whole job (or of a
whole machine); counts over the machines. A finished job's row is zeros but for ``progress``; padding rows are
zeros."""


class JobShopEvents(EventInterface):
    """What a finished schedule measures."""

    @episode_stats(last)
    @epoch_stats(mean)
    def schedule_done(self, makespan: int, lower_bound: int, upper_bound: float, idle_share: float):
        """A schedule ended: its makespan, the instance's simple lower bound and best known upper bound (NaN where
        unknown), and the machines' mean idle share of the makespan."""


class JobShopKpis(KpiCalculator):
    """makespan; gap (makespan / best known upper bound - 1, NaN where the instance has none); lb_ratio (makespan /
    the larger of the longest job and the most loaded machine); idle_share (the machines' mean idle time over the
    makespan)."""

    def compute(self, episode: EpisodeEventLog) -> dict[str, float]:
        done = episode.values(JobShopEvents.schedule_done, "makespan")
        if not done:
            return {}
        makespan = float(done[-1])
        bound = float(episode.values(JobShopEvents.schedule_done, "upper_bound")[-1])
        lower = float(episode.values(JobShopEvents.schedule_done, "lower_bound")[-1])
        return {
            "makespan": makespan,
            "gap": makespan / bound - 1.0 if np.isfinite(bound) else float("nan"),
            "lb_ratio": makespan / lower,
            "idle_share": float(episode.values(JobShopEvents.schedule_done, "idle_share")[-1]),
        }


class JobShopEnv(StructuredEnv):
    """Schedule one job-shop instance, one dispatch at a time: which job's next operation goes next.

    An episode schedules one instance: a random one of ``n_jobs`` x ``n_machines`` drawn as Taillard drew his, or,
    with ``instances`` (a shipped set's name such as ``taillard15``, files or directories of the standard format),
    instance ``seed mod count`` where the reset gives a seed, else the next in turn. Each decision picks a job from the
    conflict set (``mode``, see :mod:`.schedule`), masked by ``job_mask``; forced decisions are taken without asking.

    The reward of a decision is minus the growth of a lower bound of the final makespan (:meth:`Schedule.estimate`,
    as Learning to Dispatch rewards), over the instance's own lower bound (the larger of the longest job and the
    most loaded machine), the first decision's less 1: the return is ``-makespan / lower_bound``, -1 being a
    schedule as short as the bound, and every decision learns at once what it cost. Instances of up to
    ``max_jobs`` jobs (None: the most jobs of its instances, or ``n_jobs``) fit its observation: one row of
    :data:`FEATURES` per job (``jobs``), so that a network with shared weights per row
    (:class:`~maze_impala.nn.sets.RowScoringNet`) scores any number of jobs and machines, and a policy trained at
    one ``max_jobs`` runs at another.
    """

    DISPATCH: StepKey = "dispatch"

    def __init__(
        self,
        n_jobs: int = 15,
        n_machines: int = 15,
        max_jobs: int | None = None,
        instances: str | list[str] | None = None,
        mode: str = "nondelay",
    ):
        if mode not in MODES:
            raise ValueError(f"env.mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.instances: list[Instance] = load_instances(instances) if instances else []
        largest = max(i.n_jobs for i in self.instances) if self.instances else n_jobs
        max_jobs = largest if max_jobs is None else max_jobs
        if not 2 <= n_jobs or n_machines < 1 or max_jobs < largest:
            raise ValueError(
                f"JobShopEnv needs n_jobs >= 2, n_machines >= 1 and max_jobs >= every instance's jobs ({largest}); "
                f"got n_jobs={n_jobs}, n_machines={n_machines}, max_jobs={max_jobs}: raise env.max_jobs"
            )
        self.n_jobs, self.n_machines, self.max_jobs, self.mode = n_jobs, n_machines, max_jobs, mode
        rows = gym.spaces.Box(-np.inf, np.inf, (max_jobs, len(FEATURES)), np.float32)
        self._observation_spaces = {
            self.DISPATCH: gym.spaces.Dict({"jobs": rows, "job_mask": gym.spaces.MultiBinary(max_jobs)})
        }
        self._action_spaces = {self.DISPATCH: gym.spaces.Dict({"job": gym.spaces.Discrete(max_jobs)})}
        self.rng = np.random.default_rng()
        self._turn = 0
        self.schedule = Schedule(random_instance(self.rng, n_jobs, n_machines), mode)
        self._scale, self._reported, self._decisions = 1.0, 0, 0
        self.events = self.publisher(JobShopEvents)

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._action_spaces

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._observation_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return {self.DISPATCH: 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.DISPATCH, 0)

    def get_env_time(self) -> int:
        return self._decisions

    @property
    def instance(self) -> Instance:
        return self.schedule.instance

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        if self.instances:
            index = seed % len(self.instances) if seed is not None else self._turn % len(self.instances)
            self._turn = index + 1
            instance = self.instances[index]
        else:
            instance = random_instance(self.rng, self.n_jobs, self.n_machines)
        self.schedule = Schedule(instance, self.mode)
        self._scale = float(instance.lower_bound())
        self._reported, self._decisions = 0, 0  # the makespan the rewards so far account for; decisions taken
        self.schedule.advance()
        return self._observation(), {"instance": instance.name}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        schedule = self.schedule
        if not schedule.done:  # (an instance without a choice at all is done at its reset: one step reports it)
            schedule.dispatch(int(action["job"]))
            schedule.advance()
        estimate = schedule.estimate()
        reward = -(estimate - self._reported) / self._scale
        self._reported = estimate
        self._decisions += 1
        if schedule.done:
            instance = schedule.instance
            self.events.schedule_done(
                makespan=schedule.makespan,
                lower_bound=instance.lower_bound(),
                upper_bound=float("nan") if instance.upper_bound is None else float(instance.upper_bound),
                idle_share=float(schedule.machine_idle().mean() / schedule.makespan),
            )
        return self._observation(), reward, schedule.done, False, {}

    def kpi_calculator(self) -> KpiCalculator:
        return JobShopKpis()

    def _observation(self) -> dict[str, np.ndarray]:
        s, instance = self.schedule, self.schedule.instance
        jobs, machines = instance.n_jobs, instance.n_machines
        unit = float(instance.durations.mean()) or 1.0
        open_jobs = s.open_jobs()
        starts = s.earliest_starts()
        durations = s.next_durations()
        following = np.minimum(s.next_op + 1, machines - 1)
        after = np.where(s.next_op + 1 < machines, instance.durations[np.arange(jobs), following], 0)
        job_work = instance.durations.sum(axis=1).mean()
        machine_work = s.machine_remaining[s.next_machines()]
        rows = np.zeros((self.max_jobs, len(FEATURES)), dtype=np.float32)
        columns = np.stack(
            [
                np.ones(jobs),
                s.conflict,
                durations / unit,
                (starts - s.time) / unit,
                (starts + durations - s.time) / unit,
                s.remaining_work / job_work,
                (machines - s.next_op) / machines,
                machine_work / job_work,
                (s.machine_ready[s.next_machines()] - s.time) / unit,
                after / unit,
                s.remaining_work / max(1, s.remaining_work.max()),
                np.full(jobs, s.dispatched / instance.machines.size),
            ],
            axis=1,
        )
        rows[:jobs] = np.where(open_jobs[:, None], columns, 0.0)
        rows[:jobs, -1] = s.dispatched / instance.machines.size
        mask = np.zeros(self.max_jobs, dtype=np.int8)
        mask[:jobs] = s.conflict
        if s.done:  # the final observation: any job, none is asked for
            mask[0] = 1
        return {"jobs": rows, "job_mask": mask}
