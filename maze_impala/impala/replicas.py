"""Several learners (``algorithm.num_learners``): learner 0 in the training process, the others beside it.

:class:`DataParallelLearner` is one :class:`~maze_impala.core.Learner` to the training
loop. It prepares each batch once (stacked, normalised, cut into minibatches), gives
every learner its share of each minibatch's columns (:mod:`maze_impala.impala.parallel`)
and takes its own share's update, in which the learners' gradients are summed. Only
learner 0 publishes weights and is checkpointed: the others start from its state (a
resumed run's included) and stay equal to it by construction.

Where learners 1..N-1 run is a :class:`Replicas` backend: processes on this machine
(:class:`~maze_impala.impala.replica_processes.ReplicaProcesses`) or Ray actors in a placement group
(:class:`~maze_impala.impala.ray_replicas.RayReplicas`). A learner that raises, dies or
hangs fails the run with :class:`LearnerFailedError` (a hang after
``runner.learner_timeout_s``); nothing waits on it for longer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any

import torch

from maze_impala.config import ConfigError, ImpalaAlgorithmConfig
from maze_impala.core import LearnerWrapper, Rollout
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.parallel import ProcessGroup, Shard
from maze_impala.startup import fast_cuda_math

STARTUP_TIMEOUT_S = 120.0
"""Seconds a learner process may take to start (import torch, rebuild the networks) before the run fails."""


class LearnerFailedError(RuntimeError):
    """A learner raised, died or stopped answering: the update cannot complete without its share."""


LearnerParts = tuple[torch.nn.Module, torch.nn.Module, ImpalaAlgorithmConfig]
"""What another learner is built from: learner 0's policy and critic (copied) and the algorithm's config."""


def check_devices(
    device: str, num_learners: int, runner: str, start_method: str = "spawn", device_count: int | None = None
) -> None:
    """Refuse, before anything starts, several CUDA learners on this machine that would share a GPU: NCCL's gradient
    sum fails at the first update when two ranks hold one device (``device_count``: the GPUs torch sees); or that
    would start as forked processes, which cannot use CUDA once their parent has."""
    if num_learners == 1 or not device.startswith("cuda") or runner == "ray":  # Ray gives each learner a GPU
        return
    if start_method == "fork":
        raise ConfigError(
            f"algorithm.num_learners={num_learners} with algorithm.device={device} and "
            "runner.start_method=fork: a forked learner cannot use CUDA once its parent has; start "
            "them with spawn (the default) or forkserver"
        )
    count = torch.cuda.device_count() if device_count is None else device_count
    if num_learners > count:
        raise ConfigError(
            f"algorithm.num_learners={num_learners} with algorithm.device={device} needs a GPU for each learner, and "
            f"torch sees {count} here: two learners cannot share one (NCCL refuses it). One GPU learner fed by CPU "
            "actors is IMPALA's own setup (algorithm.num_learners=1); several learners need as many GPUs here, or "
            "runner=ray, which places each learner on a GPU of the cluster"
        )


def build_replica(
    parts: LearnerParts, rank: int, size: int, address: str, port: int, timeout_s: float
) -> ImpalaLearner:
    """Learner ``rank`` of ``size``, joined to the group whose store learner 0 hosts at ``address:port`` (a CUDA
    learner on the GPU of its rank, round robin); it records its events nowhere (learner 0 records the pooled
    ones)."""
    policy, critic, config = parts
    fast_cuda_math(config.device)  # this learner process's door (maze_impala.startup), as learner 0's set-up
    if config.device.startswith("cuda"):
        config = replace(config, device=f"cuda:{rank % max(torch.cuda.device_count(), 1)}")
    device = torch.device(config.device)
    group = ProcessGroup(rank, size, timeout_s, address, port, device=device)
    return ImpalaLearner(policy, critic, config, EventHub().publisher(MultiStepIMPALAEvents), group=group)


class Replicas(ABC):
    """Learners 1..``size - 1``: started beside learner 0, fed their shards, stopped."""

    size: int
    """All learners, learner 0 included."""

    @abstractmethod
    def start(self, parts: LearnerParts) -> ProcessGroup:
        """Start the other learners from ``parts`` and return learner 0's link to them."""

    @abstractmethod
    def load(self, state: dict[str, Any]) -> None:
        """Make every other learner's state ``state`` (learner 0's :meth:`ImpalaLearner.state_dict`)."""

    @abstractmethod
    def submit(self, shards: list[Shard]) -> None:
        """Start learner ``r``'s update on ``shards[r - 1]`` (it completes with learner 0's own)."""

    @abstractmethod
    def finish(self) -> None:
        """Wait until every learner is done with the update; raise :class:`LearnerFailedError` if one failed."""

    @abstractmethod
    def failure(self, error: BaseException) -> LearnerFailedError | None:
        """What failed when learner 0's update raised ``error``: another learner (it died, raised, or a collective
        timed out waiting for it), or None: learner 0 itself."""

    @abstractmethod
    def close(self) -> None:
        """Stop every other learner; safe to call twice."""


def timed_out(error: BaseException, timeout_s: float) -> LearnerFailedError | None:
    """The error of a collective that waited ``timeout_s`` for a learner (None: ``error`` is another one)."""
    if "timed out" not in str(error).lower():
        return None
    return LearnerFailedError(
        f"a learner did not answer within runner.learner_timeout_s={timeout_s:g} s (it hangs, "
        f"or runs far behind the others): {error}"
    )


def shards_of(learner: ImpalaLearner, rollouts: list[Rollout], train_policy: bool, parts: int) -> list[Shard]:
    """The batch ``learner`` (learner 0) prepares from ``rollouts``, cut into one shard per learner, with the
    observation statistics as the batch left them (the others normalise nothing themselves)."""
    whole = learner.prepare(rollouts, train_policy)
    whole.normalizers = learner.normalizer_statistics()
    return whole.split(parts)


class DataParallelLearner(LearnerWrapper):
    """``replicas.size`` learners as one: ``learner`` (learner 0, which the training loop publishes and saves)
    and the others, each updating on its share of every batch."""

    learner: ImpalaLearner

    def __init__(self, learner: ImpalaLearner, replicas: Replicas):
        super().__init__(learner)
        self.replicas = replicas
        try:
            learner.group = replicas.start((learner.policy, learner.critic, learner.config))
            replicas.load(learner.state_dict())
        except BaseException:
            replicas.close()
            raise

    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        self.learner.record_lag(rollouts)
        shards = shards_of(self.learner, rollouts, train_policy, self.replicas.size)
        self.replicas.submit(shards[1:])
        try:
            self.learner.update(shards[0])
        except Exception as error:  # a collective that lost a learner or timed out; or a failure of our own
            failure = self.replicas.failure(error)
            if failure is None:
                raise
            raise failure from error
        self.replicas.finish()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)
        self.replicas.load(self.learner.state_dict())

    def close(self) -> None:
        self.replicas.close()
