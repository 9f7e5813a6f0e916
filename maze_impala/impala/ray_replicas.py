"""Learners 1..N-1 as Ray actors in a placement group, for ``runner=ray`` (see :mod:`maze_impala.impala.replicas`).

Plain Ray actors that join learner 0's ``torch.distributed`` group, not Ray Train:
learner 0 stays in the training process beside the actor pool (it publishes weights
and writes checkpoints), and only its share of each batch and the gradient sums
travel. Ray Train would move the training loop into its own workers and own their
lifecycle; here Ray only places and owns the other learners. One bundle per learner
(its CPUs, and a GPU for ``algorithm.device=cuda``), packed onto as few nodes as fit.
"""

from __future__ import annotations

import contextlib
from typing import Any

import ray
import torch
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from maze_impala.children import how_a_ray_call_ended, kill_ray_actors
from maze_impala.impala.parallel import ProcessGroup, Shard, host_store
from maze_impala.impala.replicas import (
    STARTUP_TIMEOUT_S,
    LearnerFailedError,
    LearnerParts,
    Replicas,
    build_replica,
    timed_out,
)
from maze_impala.startup import enter_process


class _Replica:
    """One learner in a Ray actor: joined to learner 0's group, then updates in the order they are submitted."""

    def __init__(self, threads: int):
        enter_process(threads)
        self.learner: Any = None

    def join(self, parts: LearnerParts, rank: int, size: int, address: str, port: int, timeout_s: float) -> str:
        self.learner = build_replica(parts, rank, size, address, port, timeout_s)
        return ray.util.get_node_ip_address()

    def load(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def update(self, shard: Shard) -> None:
        self.learner.update(shard)


class RayReplicas(Replicas):
    """``num_learners - 1`` learners on the Ray cluster this process is connected to (the actor pool's)."""

    def __init__(self, num_learners: int, timeout_s: float, threads: int = 1, device: str = "cpu"):
        self.size, self.timeout_s, self.threads, self.device = num_learners, timeout_s, threads, device
        self.actors: list[Any] = []
        self.pending: list[tuple[int, Any]] = []
        """(rank, result) of every call not yet waited for."""
        self.nodes: list[str] = []
        """The node address of each other learner."""
        self.group: Any = None

    def start(self, parts: LearnerParts) -> ProcessGroup:
        gpus = 1 if self.device.startswith("cuda") else 0
        bundle = {"CPU": float(self.threads), **({"GPU": float(gpus)} if gpus else {})}
        self.group = placement_group([bundle] * (self.size - 1), strategy="PACK")
        ready, _ = ray.wait([self.group.ready()], timeout=STARTUP_TIMEOUT_S)
        if not ready:
            raise LearnerFailedError(
                f"the Ray cluster has no room for {self.size - 1} more learner(s) of {bundle} "
                f"within {STARTUP_TIMEOUT_S:.0f} s (ray status shows what is free): lower "
                "algorithm.num_learners or add nodes"
            )
        address = ray.util.get_node_ip_address()
        store = host_store(self.size, self.timeout_s, address)
        remote = ray.remote(_Replica)
        for index in range(self.size - 1):
            strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)
            options = {"num_cpus": self.threads, "num_gpus": gpus, "scheduling_strategy": strategy, "max_restarts": 0}
            self.actors.append(remote.options(**options).remote(self.threads))
        shared = ray.put(parts)
        joins = [
            (rank, a.join.remote(shared, rank, self.size, address, store.port, self.timeout_s))
            for rank, a in enumerate(self.actors, start=1)
        ]
        own = ProcessGroup(0, self.size, self.timeout_s, store=store, device=torch.device(parts[2].device))
        self.nodes = self._get(joins, STARTUP_TIMEOUT_S)
        return own

    def load(self, state: dict[str, Any]) -> None:
        shared = ray.put(state)
        self.pending += [(rank, a.load.remote(shared)) for rank, a in enumerate(self.actors, start=1)]

    def submit(self, shards: list[Shard]) -> None:
        self.pending += [(rank, a.update.remote(s)) for rank, (a, s) in enumerate(zip(self.actors, shards), start=1)]

    def finish(self) -> None:
        pending, self.pending = self.pending, []
        self._get(pending, self.timeout_s)

    def _get(self, calls: list[tuple[int, Any]], timeout_s: float) -> list[Any]:
        try:
            return ray.get([ref for _, ref in calls], timeout=timeout_s)
        except ray.exceptions.GetTimeoutError as error:
            raise LearnerFailedError(
                f"a learner did not answer within runner.learner_timeout_s={timeout_s:g} s"
            ) from error
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
            raise self._failed(calls) or LearnerFailedError(f"a learner failed: {error}") from error

    @staticmethod
    def _failed(calls: list[tuple[int, Any]], wait_s: float = 0.0) -> LearnerFailedError | None:
        """The first of ``calls`` that failed (within ``wait_s``), as the error of its learner."""
        done, _ = ray.wait([ref for _, ref in calls], num_returns=len(calls), timeout=wait_s)
        for rank, ref in calls:
            if ref not in done:
                continue
            try:
                ray.get(ref)
            except ray.exceptions.RayError as error:
                return LearnerFailedError(f"learner {rank} {how_a_ray_call_ended(error)[0]}")
        return None

    def failure(self, error: BaseException) -> LearnerFailedError | None:
        pending, self.pending = self.pending, []
        failed = self._failed(pending, wait_s=5.0) if pending else None  # Ray takes a moment to see an actor die
        return failed or timed_out(error, self.timeout_s)

    def close(self) -> None:
        kill_ray_actors(self.actors)
        if ray.is_initialized() and self.group is not None:
            with contextlib.suppress(Exception):
                remove_placement_group(self.group)
        self.actors, self.pending, self.group = [], [], None
