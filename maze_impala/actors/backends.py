"""The actors' backend of a run: the pool its actors run in (``runner.type``) and the publisher of their weights,
refused before anything starts where the machine cannot hold it."""

from __future__ import annotations

import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.restarts import RestartPolicy
from maze_impala.actors.sequential import SequentialActors
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ConfigError, TrainingConfig
from maze_impala.core import ActorPool, WeightPublisher
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import ActorEvents
from maze_impala.nn.models import StructuredPolicy
from maze_impala.nn.torch_acting import numpy_form_of
from maze_impala.play.pool import SnapshotPool, pooled


def check_device(key: str, device: str | None, device_count: int | None = None) -> None:
    """Refuse, before anything starts or is written, a GPU that torch does not see for ``key`` (``algorithm.device``,
    ``runner.actor_device``), named as given (``device_count``: the GPUs torch sees)."""
    if device is None or not device.startswith("cuda"):
        return
    device_count = torch.cuda.device_count() if device_count is None else device_count
    if (int(device[5:]) if device.startswith("cuda:") else 0) < device_count:
        return
    seen = "no GPU" if device_count == 0 else f"{device_count} GPU(s)"
    instead = (
        "learn on the CPU (algorithm.device=cpu)"
        if key == "algorithm.device"
        else "act on the CPU (drop runner.actor_device)"
    )
    raise ConfigError(f"{key}={device}, and torch sees {seen} here: {instead} or name a GPU that torch sees")


def check_actor_device(device: str | None, device_count: int | None = None) -> None:
    """:func:`check_device` of ``runner.actor_device``."""
    check_device("runner.actor_device", device, device_count)


def make_actors(
    spec: ActorSpec,
    policy: torch.nn.Module,
    version: int,
    config: TrainingConfig,
    hub: EventHub | None = None,
    snapshots: SnapshotPool | None = None,
) -> tuple[ActorPool, WeightPublisher]:
    """The actor backend ``config.runner.type`` names, running ``spec``'s actors as ``config.algorithm`` says, and
    the publisher of ``policy``'s weights (at ``version``) for it; restarts are published on ``hub`` (the
    learner's). With ``snapshots``, the learner's snapshot pool, the publisher keeps the pool after each update
    (:class:`~maze_impala.play.pool.PooledPublisher`) and the pool hears the games against it on ``hub``. A policy
    that acts in numpy goes to the actors as its numpy form (:meth:`ActorSpec.in_numpy`): an actor process then
    never imports torch."""
    if isinstance(policy, StructuredPolicy):
        spec = spec.in_numpy(numpy_form_of(policy))
    algorithm, runner = config.algorithm, config.runner
    if runner.type == "ray":
        from maze_impala.actors.ray_actors import RayActors, RayWeights  # Ray is an optional dependency

        weights = RayWeights(policy, version=version)
    else:
        weights = SharedWeights(policy, version=version, snapshot_slots=snapshots.size if snapshots is not None else 0)
    publisher: WeightPublisher = weights
    if snapshots is not None:
        if hub is None:
            raise ValueError("make_actors: a snapshot pool hears its games on the learner's hub; pass hub")
        publisher = pooled(snapshots, weights, hub)
    events = hub.publisher(ActorEvents) if hub is not None else None
    if runner.type == "dev":
        return SequentialActors(spec, weights, algorithm.num_actors), publisher
    restarts = RestartPolicy(
        max_restarts=runner.max_restarts,
        window_s=runner.restart_window_s,
        actor_timeout_s=runner.actor_timeout_s,
        startup_timeout_s=runner.failure_timeout,
    )
    if runner.type == "ray":
        return RayActors(
            spec,
            weights,
            algorithm.num_actors,
            algorithm.queue_size_limit,
            runner.address,
            runner.num_cpus_per_actor,
            restarts,
            events,
        ), publisher
    pool = SubprocessActors(
        spec,
        weights,
        algorithm.num_actors,
        algorithm.queue_size_limit,
        runner.start_method,
        batch_size=algorithm.actors_batch_size,
        restarts=restarts,
        events=events,
    )
    return pool, publisher
