"""The cluster backend: each actor a Ray actor, rollouts through Ray's object store, restarts on failure and node loss.

The same :class:`~maze_impala.actors.actor.RolloutActor` as the other backends runs
inside a Ray actor (:class:`ActorHost`). Each actor has at most one rollout request in
flight; the learner's side mirrors the subprocess backend's slot grants:

* requests go out while fewer rollouts than the in-flight limit are under way
  (:class:`~maze_impala.actors.flow.InFlightLimit`: as few as keep the learner busy, so
  that rollouts start with recent weights); a finished rollout (numpy arrays, read
  zero-copy from the object store) waits beyond the queue until it has room, so the queue
  holds at most ``queue_size_limit`` rollouts and the policy lag stays bounded as with
  subprocess actors;
* weights travel with the requests: :class:`RayWeights` puts each published version into
  the object store once (when the first request after it goes out) and an actor receives
  a version only if it has not got it yet;
* failures follow :mod:`maze_impala.actors.restarts`: an actor that died (killed, out of
  memory, its node lost), raised, or missed its deadline is killed and replaced, with a
  fresh env seed, on any node that has room; Ray's own actor restarts are not used, so a
  restart means the same on every backend.

Ray starts here only when it is not running yet: with ``address=None`` a local Ray that
:meth:`RayActors.close` shuts down again, with ``"auto"`` or ``"ray://..."`` a connection to
a running cluster that ``close`` only leaves (the cluster keeps running).
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from threadpoolctl import threadpool_limits

from maze_impala.actors.actor import ActorSpec, RolloutActor, seed_for
from maze_impala.actors.flow import FinishedRollouts, InFlightLimit
from maze_impala.actors.reaper import start_reaper, stop_reaper
from maze_impala.actors.restarts import ActorRecord, RestartBudget, RestartPolicy
from maze_impala.children import how_a_ray_call_ended, kill_ray_actors
from maze_impala.core import ActorPool, Rollout
from maze_impala.events.interfaces import ActorEvents
from maze_impala.nn.flat import flat_layout, flat_size, flatten
from maze_impala.play.pool import PoolPublisher, PoolSource, Snapshots
from maze_impala.startup import enter_process

if TYPE_CHECKING:
    from torch import nn

log = logging.getLogger("maze_impala")


class RayWeights(PoolPublisher):
    """The learner's side of the weights on Ray: the newest version, and the snapshot pool, each put into the object
    store when first needed."""

    def __init__(self, module: nn.Module, version: int = 0):
        self._size = flat_size(flat_layout(module))
        self._pool: Snapshots = {}
        self._pool_number, self._pool_ref = 0, None
        self.scores: dict[int, float] = {}
        """The learner's estimates of the trained policy's score against each snapshot (sent with every request)."""
        self.publish(module, version)

    def publish(self, module: nn.Module, version: int) -> None:
        flat = flatten(module).numpy()
        if flat.size != self._size:
            raise ValueError("publish: the module does not have the layout these weights were made for")
        self._flat, self._version, self._ref = flat, version, None

    def latest(self) -> tuple[int, ray.ObjectRef]:
        """The newest version and its object (one ``ray.put`` per published version)."""
        if self._ref is None:
            self._ref = ray.put(self._flat)
        return self._version, self._ref

    def publish_snapshots(self, snapshots: Snapshots) -> None:
        if any(flat.size != self._size for _, flat in snapshots.values()):
            raise ValueError("publish_snapshots: a snapshot does not have the layout these weights were made for")
        self._pool, self._pool_number, self._pool_ref = dict(snapshots), self._pool_number + 1, None

    def publish_pool_scores(self, scores: dict[int, float]) -> None:
        self.scores = dict(scores)

    def latest_pool(self) -> tuple[int, ray.ObjectRef | None]:
        """How many pools were published (0: none), and the newest one's object (one ``ray.put`` per pool)."""
        if self._pool_ref is None and self._pool_number:
            self._pool_ref = ray.put(self._pool)
        return self._pool_number, self._pool_ref


class ReceivedWeights(PoolSource):
    """The actor's side: the newest weights and snapshot pool its requests brought (older versions are ignored)."""

    def __init__(self) -> None:
        self._version, self._flat = -1, np.zeros(0, dtype=np.float32)
        self._pool: Snapshots = {}
        self._scores: dict[int, float] = {}

    def receive(self, version: int, flat: np.ndarray) -> None:
        if version > self._version:
            self._version, self._flat = version, flat

    def receive_pool(self, snapshots: Snapshots) -> None:
        self._pool = snapshots

    def receive_scores(self, scores: dict[int, float]) -> None:
        self._scores = scores

    def pool_scores(self) -> dict[int, float]:
        return dict(self._scores)

    def snapshots(self) -> dict[int, int]:
        return {number: version for number, (version, _) in sorted(self._pool.items())}

    def read_snapshot(self, number: int) -> np.ndarray:
        if number not in self._pool:
            raise KeyError(f"snapshot {number} is not in the pool")
        return np.array(self._pool[number][1])

    def version(self) -> int:
        return self._version

    def read(self) -> tuple[np.ndarray, int]:
        return np.array(self._flat), self._version  # a copy: the object store's array is read-only


class ActorHost:
    """What runs inside a Ray actor: one :class:`RolloutActor`, built on the first request (so that an env
    that raises while it is built fails that request, as an env that raises while stepping does)."""

    def __init__(self, spec: ActorSpec, index: int):
        self.spec, self.index = spec, index
        self.weights = ReceivedWeights()
        self.actor: RolloutActor | None = None
        self._blas: Any = None

    def where(self) -> tuple[str, int]:
        """The id of the Ray node this actor runs on, and its process id."""
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def rollout(
        self,
        version: int,
        flat: np.ndarray | None,
        pool: Snapshots | None = None,
        scores: dict[int, float] | None = None,
    ) -> Rollout:
        if flat is not None:
            self.weights.receive(version, flat)
        if pool is not None:
            self.weights.receive_pool(pool)
        if scores is not None:
            self.weights.receive_scores(scores)
        if self.actor is None:
            self._blas = threadpool_limits(limits=1, user_api="blas")
            self.actor = self.spec.build(self.index, self.weights)
            enter_process(1)  # a policy that acts through torch: one core per actor, as in actor processes
        return self.actor.rollout()


@dataclass
class _Host(ActorRecord):
    """The learner's view of one Ray actor."""

    handle: Any = None
    call: Any = None
    """The rollout request in flight (an object ref), None while the actor waits for one."""
    sent_version: int = -1
    """The newest weight version sent to this actor."""
    sent_pool: int = 0
    """The newest snapshot pool sent to this actor (counted as :meth:`RayWeights.latest_pool` counts them)."""
    where: Any = None
    """An object ref to ``(node id, pid)``."""


class RayActors(ActorPool):
    """``num_actors`` Ray actors; at most ``queue_size_limit`` rollouts wait for the learner.

    ``address``: None starts a local Ray (unless one runs in this process already), ``"auto"`` or
    ``"ray://host:port"`` joins a cluster; ``num_cpus_per_actor``: the CPUs Ray reserves for each actor;
    ``ray_init``: further arguments of ``ray.init`` (e.g. ``runtime_env``).
    """

    def __init__(
        self,
        spec: ActorSpec,
        weights: RayWeights,
        num_actors: int,
        queue_size_limit: int,
        address: str | None = None,
        num_cpus_per_actor: float = 1.0,
        restarts: RestartPolicy | None = None,
        events: ActorEvents | None = None,
        ray_init: dict[str, Any] | None = None,
    ):
        self.spec, self.weights = spec, weights
        self.num_actors, self.queue_size_limit = num_actors, queue_size_limit
        self.address, self.num_cpus_per_actor = address, num_cpus_per_actor
        self.policy = restarts or RestartPolicy(max_restarts=0)
        self.budget = RestartBudget(self.policy, events)
        self.ray_init = ray_init or {}
        self.hosts: list[_Host] = []
        self.finished: FinishedRollouts[Rollout] = FinishedRollouts(
            queue_size_limit, InFlightLimit(low=queue_size_limit, high=queue_size_limit + num_actors)
        )
        """Finished rollouts: the queue and those parked beyond it."""
        self._owns_ray = False
        self._reaper: subprocess.Popen | None = None

    def start(self) -> None:
        if self.hosts:
            return
        if not ray.is_initialized():
            cpus = self.num_actors * self.num_cpus_per_actor
            # None starts a Ray of the run's own ("local"), also where another program's Ray runs on this machine
            # (ray.init would join that one); RAY_ADDRESS in the environment names a cluster to join instead.
            joins = self.address is not None or bool(os.environ.get("RAY_ADDRESS"))
            local = {} if joins else {"num_cpus": max(os.cpu_count() or 1, math.ceil(cpus))}
            ray.init(
                address=self.address if joins else "local",
                include_dashboard=False,
                logging_level=logging.WARNING,
                **local | self.ray_init,
            )
            self._owns_ray = True
            if not joins:
                self._reaper = _reaper_of_local_ray()
        self._check_resources()
        self._remote = ray.remote(ActorHost).options(
            num_cpus=self.num_cpus_per_actor, max_restarts=0, scheduling_strategy="SPREAD"
        )
        try:
            self.hosts = [self._create(index, generation=0) for index in range(self.num_actors)]
            self._request_more()
        except BaseException:
            self.close()
            raise

    def _check_resources(self) -> None:
        have = ray.cluster_resources().get("CPU", 0.0)
        need = self.num_actors * self.num_cpus_per_actor
        if need > have:
            log.warning(
                "runner=ray: %d actors x %g CPUs need %g CPUs, the cluster has %g now; actors wait for more "
                "nodes (or lower runner.num_cpus_per_actor)",
                self.num_actors,
                self.num_cpus_per_actor,
                need,
                have,
            )

    def _create(self, index: int, generation: int) -> _Host:
        spec = self.spec if generation == 0 else replace(self.spec, seed=seed_for(self.spec.seed, index, generation))
        host = _Host(generation, handle=self._remote.remote(spec, index))
        host.where = host.handle.where.remote()
        return host

    def _request(self, host: _Host) -> None:
        version, ref = self.weights.latest()
        pool, pool_ref = self.weights.latest_pool()
        host.call = host.handle.rollout.remote(
            version,
            ref if version != host.sent_version else None,
            pool_ref if pool != host.sent_pool else None,
            self.weights.scores if pool else None,
        )
        host.sent_version, host.sent_pool, host.requested_at = version, pool, time.monotonic()

    def collect(self, n: int, at_most: int | None = None) -> list[Rollout]:
        if not self.hosts:
            raise RuntimeError("collect() before start(): use the pool as a context manager or call start()")
        at_most = max(n, at_most or n)
        batch = self.finished.collect(n, at_most, self._poll)
        self._request_more()  # start the next rollouts with the weights of this update
        return batch

    def queue_size(self) -> int:
        if self.hosts:
            self._poll(0.0)
        return len(self.finished.queue)

    def actor_cores(self) -> float:
        """With a local Ray, the CPUs Ray reserves for the actors; on a cluster, none of this machine's (known)."""
        return self.num_actors * self.num_cpus_per_actor if self.address is None else 0.0

    def placements(self) -> list[tuple[str, int]]:
        """``(node id, pid)`` of every actor, in actor order."""
        return ray.get([host.where for host in self.hosts])

    def _poll(self, timeout: float, at_least: int = 0) -> None:
        """Take finished rollouts, handle failed and hung actors, and send requests while the in-flight limit
        (at least ``at_least``: a whole batch while the learner waits for one) allows."""
        calls = {host.call: host for host in self.hosts if host.call is not None}
        if calls:
            ray.wait(list(calls), num_returns=1, timeout=timeout, fetch_local=False)
            done, _ = ray.wait(list(calls), num_returns=len(calls), timeout=0, fetch_local=False)
            for ref in done:
                self._finish(calls[ref])
        now = time.monotonic()
        for host in list(self.hosts):
            if host.call is not None and host.overdue(self.policy, now):
                self._failed(
                    host,
                    f"hung: no rollout for {now - host.requested_at:.1f} s (deadline "
                    f"{host.deadline(self.policy):.1f} s)",
                    hung=True,
                )
        self._request_more(at_least)

    def _request_more(self, at_least: int = 0) -> None:
        """Requests to idle actors, longest idle first, while the rollouts under way stay within the limit."""
        for host in sorted((h for h in self.hosts if h.call is None), key=lambda h: h.requested_at):
            if not self.finished.may_start(sum(h.call is not None for h in self.hosts), at_least):
                return
            self._request(host)

    def _finish(self, host: _Host) -> None:
        try:
            rollout = ray.get(host.call)
        except ray.exceptions.RayError as error:  # it died, raised, or its result was lost with its node
            cause, raised = how_a_ray_call_ended(error)
            self._failed(host, f"{cause}\n{error}" if raised else cause, raised=raised)
            return
        host.call = None
        self.finished.add(rollout)
        back = host.delivered_one(time.monotonic())
        if back is not None:
            self.budget.recovered(self._who(host), back)

    def _who(self, host: _Host) -> str:
        return f"actor {self.hosts.index(host)} (Ray actor {host.handle._actor_id.hex()[:8]})"

    def _failed(self, host: _Host, cause: str, raised: bool = False, hung: bool = False) -> None:
        self.budget.failed(self._who(host), host, cause, raised=raised, hung=hung)
        index = self.hosts.index(host)
        kill_ray_actors([host.handle])
        self.hosts[index] = self._create(index, host.generation + 1)

    def close(self) -> None:
        kill_ray_actors(host.handle for host in self.hosts)
        self.hosts = []
        self.finished.clear()
        if self._owns_ray:
            ray.shutdown()  # stops the Ray this pool started; from a cluster it joined, it only disconnects
            self._owns_ray = False
        if self._reaper is not None:
            stop_reaper(self._reaper)
            self._reaper = None


def _reaper_of_local_ray() -> subprocess.Popen | None:
    """A reaper (see :mod:`.reaper`) of the Ray just started on this machine, where Ray says which processes it has."""
    try:
        node = ray._private.worker._global_node  # no public API lists a local Ray's processes
        processes = {kind: [info.process.pid for info in infos] for kind, infos in node.all_processes.items()}
        raylet = processes["raylet"][0]
    except (AttributeError, KeyError, IndexError):
        log.debug("no reaper for this Ray: its processes could not be listed")
        return None
    return start_reaper(raylet, [pid for pids in processes.values() for pid in pids])
