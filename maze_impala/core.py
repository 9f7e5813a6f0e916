"""The core interfaces of maze_impala: who acts, what travels, and who learns.

Everything else is an implementation of these few contracts. The training loop,
whatever backend runs the actors, reads like this::

    source = make_weight_source(policy)           # versioned weights, learner side
    pool = SubprocessActors(spec, source, ...)    # or SequentialActors: same components
    pool.start()
    while training:
        rollouts = pool.collect(batch_size)        # each stamped with its policy version
        metrics = learner.step(rollouts)           # V-trace update
        source.publish(learner.policy)             # version += 1
    pool.close()

An :class:`Actor` knows nothing about the learner except a :class:`WeightSource`;
a :class:`Learner` knows nothing about processes. That keeps the actor side free
of backend details, so a Ray backend only needs another :class:`ActorPool`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import torch

StepKey = int | str
"""The key of a sub-step of a structured environment (``0`` for a flat Gymnasium env)."""

NestedArrays = dict[str, np.ndarray]
"""One array per key of a Dict space: observations or actions, batched on the leading axes."""


class ActorID(NamedTuple):
    """Who acts next in a structured environment: the sub-step and the agent within it."""

    step_key: StepKey
    agent_id: int


@dataclass
class Trajectory:
    """Time-major data of one step key, for ``E`` environments over ``T`` steps.

    ``observations`` holds ``T + 1`` entries: the last one is only used to bootstrap,
    and it is also the first observation of the actor's next rollout, so consecutive
    rollouts overlap by one step and every reward is learned from.

    Truncated episodes (time limits) must not be bootstrapped from the next
    episode's first observation: the observation the episode really ended in is
    kept in ``truncated_observations`` (one row per truncated step, located by
    ``truncated_index`` as ``(t, e)`` pairs) so that the learner can bootstrap
    from its value.
    """

    observations: NestedArrays  # [T + 1, E, ...]
    actions: NestedArrays  # [T, E, ...]
    behaviour_log_probs: np.ndarray  # [T, E] float32: log mu(a_t | x_t)
    rewards: np.ndarray  # [T, E] float32
    terminated: np.ndarray  # [T, E] bool: the episode ended after step t (no bootstrap)
    truncated: np.ndarray  # [T, E] bool: cut off after step t (bootstrap from the final obs)
    truncated_observations: NestedArrays  # [K, ...] final observations of truncated episodes
    truncated_index: np.ndarray  # [K, 2] int64: (t, e) of each truncated step

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_envs(self) -> int:
        return int(self.rewards.shape[1])


@dataclass
class Rollout:
    """What an actor hands to the learner: trajectories per step key plus bookkeeping."""

    trajectories: dict[StepKey, Trajectory]
    policy_version: int
    """Version of the weights that generated every action of this rollout."""
    actor_index: int
    env_steps: int
    """Environment steps this rollout consumed (not counting the overlap step)."""
    events: list[Any] = field(default_factory=list)
    """Events recorded on the actor side (episode returns, ...), replayed once by the learner."""


class WeightSource(ABC):
    """The only thing an actor knows about the learner: versioned policy weights."""

    @abstractmethod
    def version(self) -> int:
        """The newest published version (cheap; no copy)."""

    @abstractmethod
    def load_into(self, module: torch.nn.Module) -> int:
        """Copy the newest weights into ``module`` and return their version."""


class Actor(ABC):
    """Steps environments with the newest policy it has and returns rollouts."""

    @abstractmethod
    def rollout(self) -> Rollout:
        """Produce one rollout of ``n_rollout_steps``, pulling new weights first if any."""

    @abstractmethod
    def close(self) -> None:
        """Release the environments."""


class ActorPool(ABC):
    """A backend running actors and queueing their rollouts (sequential, subprocess, ...).

    The queue holds at most ``queue_size_limit`` rollouts: actors block when it is full,
    which bounds how far behind the learner's policy any rollout can be.
    """

    @abstractmethod
    def start(self) -> None:
        """Start the actors."""

    @abstractmethod
    def collect(self, n: int) -> list[Rollout]:
        """Take ``n`` rollouts from the queue; raises if an actor failed."""

    @abstractmethod
    def queue_size(self) -> int:
        """An estimate of how many rollouts wait in the queue."""

    @abstractmethod
    def close(self) -> None:
        """Stop every actor and release every resource; safe to call twice."""

    def __enter__(self) -> ActorPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ActorFailedError(RuntimeError):
    """An actor died or raised: training cannot go on without its rollouts."""
