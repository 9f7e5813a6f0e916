"""The core interfaces of maze_impala: who acts, what travels, and who learns.

Everything else is an implementation of these few contracts. With an
:class:`~maze_impala.actors.actor.ActorSpec` ``spec`` (the env, the lineup of policies, the rollout length) and a
:class:`Learner` ``learner``, the training loop reads like this, whatever backend runs
the actors (``tests/test_core.py`` runs this very code)::

    from maze_impala.actors.subprocess import SubprocessActors
    from maze_impala.actors.weights import SharedWeights

    weights = SharedWeights(learner.policy)  # a WeightPublisher here, a WeightSource in the actors
    with SubprocessActors(spec, weights, num_actors=2, queue_size_limit=1) as pool:  # or SequentialActors
        for _ in range(4):
            rollouts = pool.collect(1)  # each rollout stamped with the policy version that made it
            learner.step(rollouts)  # one V-trace update: learner.version += 1
            weights.publish(learner.policy, learner.version)

An :class:`Actor` knows nothing about the learner except a :class:`WeightSource`; a
:class:`Learner` knows nothing about processes; the training loop knows pools, learners
and publishers only through these interfaces. The Ray backend is another
:class:`ActorPool` with another :class:`WeightPublisher`
(:class:`~maze_impala.actors.ray_actors.RayActors` with
:class:`~maze_impala.actors.ray_actors.RayWeights`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

StepKey = int | str
"""The key of a sub-step of a structured environment (``0`` for a flat Gymnasium env)."""

OBSERVATION_ROWS, DECISION_ROWS, COLUMN_ROWS, TRUNCATED_ROWS = "observations", "decisions", "columns", "truncated"
"""How a field of :class:`Trajectory` (and of the learner's batch) is laid out: ``[T + 1, N, ...]``,
``[T, N, ...]``, ``[N, ...]`` or ``[K, ...]`` (one row per truncated decision). :mod:`maze_impala.envs.layout`
pads, cuts and stacks every field by its rows, so a field added here is carried everywhere."""


OBSERVED, ACTED, ANCESTRAL, RECURRENT = "observations", "actions", "ancestors", "state"
"""What the arrays of a field whose shapes a space gives hold (its ``holds``): the step key's observations, its
actions, the observations of the sub-steps before it (per step key), or a recurrent policy's state."""


def laid_out(
    rows: str,
    dtype: Any = None,
    *,
    holds: str | None = None,
    recorded: bool = False,
    width: int | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field of arrays (or of dicts of them) laid out in ``rows``: of ``dtype`` (one value, or
    ``width`` values, per entry), or shaped by what it ``holds`` (a space, or the recurrent state, float32);
    ``recorded``: written decision by decision by the actors' recorder (the others are made when a trajectory is
    cut)."""
    metadata = {"rows": rows, "dtype": dtype, "holds": holds, "recorded": recorded, "width": width}
    return field(metadata=metadata, **kwargs)


NestedArrays = dict[str, np.ndarray]
"""One array per key of a Dict space: observations or actions, batched on the leading axes."""


class ActorID(NamedTuple):
    """Who acts next in a structured environment: the sub-step and the agent within it."""

    step_key: StepKey
    agent_id: int


A = TypeVar("A")
"""The array type of a trajectory's fields: ``np.ndarray`` in the actors, ``torch.Tensor`` in the learner."""


@dataclass
class Trajectory(Generic[A]):
    """Time-major data of one step key: ``N`` columns (one per env and agent) over ``T`` decisions, each field laid
    out in the rows its metadata names (see :data:`OBSERVATION_ROWS`).

    Each column is one actor's own sequence of decisions (one per structured step in
    which it acted). Columns may hold fewer than ``T`` decisions (an agent that left,
    a sub-step skipped when an episode ended mid-step): ``mask`` marks the valid
    entries, and a column's rows after its last decision repeat its bootstrap
    observation, so that V-trace over the padded ``[T, N]`` block is exact.

    ``observations`` holds ``T + 1`` rows: row ``L`` of a column with ``L`` decisions
    bootstraps its last one. That decision of the actor's is also the first of its
    next rollout, so consecutive rollouts overlap by one decision per column and
    every reward is learned from.

    Truncated episodes (time limits) must not be bootstrapped from the next
    episode's first observation: the observation the episode really ended in is
    kept in ``truncated_observations`` (one row per truncated decision, located by
    ``truncated_index`` as ``(t, column)`` pairs) so that the learner can bootstrap
    from its value.

    Each field is declared here once: its rows, and its dtype or what it holds (:func:`laid_out`). The actors'
    recorder and the transport's byte count (:class:`~maze_impala.envs.layout.DecisionLayout`), the learner's
    batch (:class:`~maze_impala.impala.batch.StepBatch`, the same fields as tensors) and its normalisation of
    observations read these declarations.
    """

    observations: dict[str, A] = laid_out(OBSERVATION_ROWS, holds=OBSERVED, recorded=True)
    actions: dict[str, A] = laid_out(DECISION_ROWS, holds=ACTED, recorded=True)
    behaviour_log_probs: A = laid_out(DECISION_ROWS, np.float32, recorded=True)
    """log mu(a_t | x_t)."""
    rewards: A = laid_out(DECISION_ROWS, np.float32, recorded=True)
    """The reward credited to the decision."""
    terminated: A = laid_out(DECISION_ROWS, np.bool_, recorded=True)
    """The actor's episode ended after decision t (no bootstrap)."""
    truncated: A = laid_out(DECISION_ROWS, np.bool_, recorded=True)
    """Cut off after decision t (bootstrap from the final observation)."""
    truncated_observations: dict[str, A] = laid_out(TRUNCATED_ROWS, holds=OBSERVED)
    """The final observations of the truncated decisions."""
    truncated_index: A = laid_out(TRUNCATED_ROWS, np.int64, width=2)
    """``[K, 2]``: ``(t, column)`` of each truncated decision."""
    mask: A = laid_out(DECISION_ROWS, np.bool_)
    """The entries holding a decision."""
    agent_ids: A = laid_out(COLUMN_ROWS, np.int64)
    """The agent of each column."""
    ancestors: dict[StepKey, dict[str, A]] = laid_out(
        OBSERVATION_ROWS, holds=ANCESTRAL, recorded=True, default_factory=dict
    )
    """For the delta critic: per earlier sub-step key, its observation in the same structured step."""
    initial_state: dict[str, A] = laid_out(COLUMN_ROWS, np.float32, holds=RECURRENT, default_factory=dict)
    """A recurrent policy's state at each column's first decision (per name; empty: feed-forward): where the
    learner unrolls the column from, zeroing it again after every decision that ended an episode."""

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_columns(self) -> int:
        return int(self.rewards.shape[1])


@dataclass
class Rollout:
    """What an actor hands to the learner: trajectories per step key plus bookkeeping."""

    trajectories: dict[StepKey, Trajectory]
    policy_version: int
    """Version of the weights that generated every action of this rollout."""
    actor_index: int
    env_steps: int
    """Structured steps this rollout's environments completed."""
    events: list[Any] = field(default_factory=list)
    """Events recorded on the actor side (episode returns, ...), replayed once by the learner."""


class WeightSource(ABC):
    """The only thing an actor knows about the learner: versioned policy weights."""

    @abstractmethod
    def version(self) -> int:
        """The newest published version (cheap; no copy)."""

    @abstractmethod
    def read(self) -> tuple[np.ndarray, int]:
        """A consistent copy of the newest weights, one flat float32 vector (the policy's state dict in order, as
        :func:`~maze_impala.nn.flat.flatten` makes it: parameters and buffers), and their version."""


class WeightPublisher(ABC):
    """The learner's side of the weights: makes a module's weights the newest, for every actor."""

    @abstractmethod
    def publish(self, module: torch.nn.Module, version: int) -> None:
        """Make ``module``'s weights the newest, stamped with ``version`` (actors skip versions they missed)."""


class Learner(ABC):
    """Turns batches of rollouts into updates of :attr:`policy`; everything a resume needs is in its state dict."""

    policy: torch.nn.Module
    """The policy the actors act with (what the :class:`WeightPublisher` publishes)."""
    version: int
    """The number of updates made so far: the version of :attr:`policy`."""

    @abstractmethod
    def step(self, rollouts: list[Rollout], train_policy: bool = True) -> None:
        """One update on ``rollouts``; ``train_policy=False`` trains the critics only (burn-in)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Weights, optimizer state and the version (and with it the schedule): tensors and plain data only."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def close(self) -> None:  # noqa: B027 (most learners hold nothing to release)
        """Release what the learner started (other learners' processes); safe to call twice."""


class LearnerWrapper(Learner):
    """A learner around ``learner`` (as Gymnasium's ``Wrapper`` is an env around one): it acts and saves as that
    learner does, and a subclass changes how it steps (on several replicas, on tuned threads)."""

    def __init__(self, learner: Learner):
        self.learner, self.policy = learner, learner.policy

    @property
    def version(self) -> int:  # type: ignore[override]
        return self.learner.version

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)

    def close(self) -> None:
        self.learner.close()


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
    def collect(self, n: int, at_most: int | None = None) -> list[Rollout]:
        """Take ``n`` rollouts from the queue, and with ``at_most`` also every other one that is ready, up to
        ``at_most`` in all (so that the learner takes what the actors made meanwhile); raises if an actor failed.

        The rollouts may view the backend's transport buffers: they are valid until the
        next ``collect`` or ``close``; copy what must live longer.
        """

    @abstractmethod
    def queue_size(self) -> int:
        """An estimate of how many rollouts wait in the queue."""

    @abstractmethod
    def close(self) -> None:
        """Stop every actor and release every resource; safe to call twice."""

    def actor_cores(self) -> float:
        """The cores these actors keep busy on the learner's machine (0: none; they take turns with the learner, or
        run elsewhere): the learner's threads are counted from the cores they leave
        (:mod:`maze_impala.impala.threads`)."""
        return 0.0

    def __enter__(self) -> ActorPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ActorFailedError(RuntimeError):
    """An actor died or raised: training cannot go on without its rollouts."""


class TrainingError(RuntimeError):
    """Training stopped on a failure of an env, an actor or the learner; the message names the epoch and the cause."""


class NonFiniteError(ValueError):
    """A non-finite reward or observation, or loss or gradient: training stops rather than learn from it."""
