"""The learner of a run, built whole: restored from its checkpoint, with its other learners, on its threads."""

from __future__ import annotations

import logging
from typing import Any

import torch

from maze_impala.config import ImpalaAlgorithmConfig, RunnerConfig, TrainingConfig
from maze_impala.core import Learner
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import RunEvents
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.replica_processes import ReplicaProcesses
from maze_impala.impala.replicas import DataParallelLearner, Replicas
from maze_impala.impala.threads import ThreadPlan, TunedLearner, plan_threads
from maze_impala.machine import LoadMeter


def make_learner(
    policy: torch.nn.Module,
    critic: torch.nn.Module,
    config: TrainingConfig,
    checkpoint: dict[str, Any] | None,
    hub: EventHub,
    actor_cores: float,
    load: float | None = None,
) -> Learner:
    """The learner of ``policy`` and ``critic`` for ``config``: restored from ``checkpoint`` (a resumed run's),
    with learners 1..``num_learners - 1`` beside it (which start from its state), and on a CPU on the threads the
    actors leave it (``actor_cores``: those they take on this machine), tuned as the load changes, starting from
    ``load`` (the machine's before the run's actors started, :meth:`~maze_impala.machine.LoadMeter.load`). Its events
    go to ``hub``."""
    algorithm = config.algorithm
    if algorithm.compile != "off":  # the compiler's work falls in the first updates: say so, not 70 silent s
        logging.getLogger("maze_impala").warning(
            "algorithm.compile=%s: the update compiles with torch.compile in its first updates (about half a "
            "minute to two minutes on 2 CPU cores, again for each new batch shape) before training runs at its "
            "pace",
            algorithm.compile,
        )
    learner: Learner = ImpalaLearner(policy, critic, algorithm, hub.publisher(MultiStepIMPALAEvents))
    if checkpoint is not None:
        learner.load_state_dict(checkpoint)
    plan = learner_threads(algorithm, config.runner, actor_cores, load)
    if algorithm.num_learners > 1:
        learner = DataParallelLearner(learner, make_replicas(algorithm, config.runner, plan))
    return TunedLearner(learner, plan, hub.publisher(RunEvents)) if plan is not None else learner


def learner_threads(
    algorithm: ImpalaAlgorithmConfig, runner: RunnerConfig, actor_cores: float, load: float | None = None
) -> ThreadPlan | None:
    """The thread counts a CPU learner may compute with beside actors that take ``actor_cores`` of this machine,
    on a machine of ``load`` (default: its load average now); None: a GPU learner's, which leaves torch's threads
    as they are."""
    if algorithm.device != "cpu":
        return None
    return plan_threads(
        runner.learner_cores,
        actor_cores,
        algorithm.num_learners,
        deterministic=runner.type == "dev",
        load=load if load is not None else LoadMeter().load(),
    )


def make_replicas(algorithm: ImpalaAlgorithmConfig, runner: RunnerConfig, plan: ThreadPlan | None) -> Replicas:
    """Learners 1..``num_learners - 1`` for ``runner.type``: Ray actors with runner=ray, else processes here; a CPU
    learner's threads are its share of those the actors leave (``plan``, :func:`learner_threads`; None: a GPU
    learner)."""
    threads = plan.start if plan is not None else None
    if runner.type == "ray":
        from maze_impala.impala.ray_replicas import RayReplicas  # Ray is an optional dependency

        return RayReplicas(algorithm.num_learners, runner.learner_timeout_s, threads or 1, algorithm.device)
    return ReplicaProcesses(algorithm.num_learners, runner.learner_timeout_s, threads, runner.start_method)
