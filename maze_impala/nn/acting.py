"""The one way to act: batched, numpy in and numpy out, with the recurrent state as an explicit input and output.

Actors, the evaluator and the rollout CLI act through an :class:`Acting`, one call per group of envs whose next
actor shares a step key::

    actions, log_probs, state = acting.act(step_key, obs, state, agent_ids, noise)

``state`` holds, per name, one row per acting env (``[B, ...]``; empty for a feed-forward policy); the caller keeps
it between calls (the actors' recorder keeps one per env and agent, zeroed when that agent's episode ends: the
initial state is zeros). ``noise`` draws the random numbers of sampled actions, ``None`` takes the most likely
actions. How a policy acts is the policy's choice: a module that can act in numpy exports its own numpy form
(:meth:`~maze_impala.nn.models.StructuredPolicy.numpy_form`, buffers included), which
:class:`~maze_impala.nn.numpy_acting.NumpyActing` runs without torch; anything else acts through torch
(:class:`~maze_impala.nn.torch_acting.TorchActing`). Both draw the same random numbers from the same noise, so
they take the same actions.

Nothing in this module imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from maze_impala.core import NestedArrays, StepKey

State = dict[str, np.ndarray]
"""A recurrent state: per name, one row per acting env or column, ``[B, ...]`` float32 (empty: feed-forward)."""
Actions = tuple[dict[str, np.ndarray], np.ndarray, State]
"""Actions per action key ``[B, ...]``, their joint log-probabilities ``[B]`` float32, and the next state."""


class Noise(ABC):
    """The random numbers of sampled actions, drawn row by row in the order the action heads need them."""

    @abstractmethod
    def uniform(self, rows: int, width: int) -> np.ndarray:
        """``[rows, width]`` float64 uniforms in [0, 1)."""

    @abstractmethod
    def normal(self, rows: int, width: int) -> np.ndarray:
        """``[rows, width]`` float64 standard normals."""

    def for_rows(self, envs: Sequence[int] | slice) -> Noise:
        """The noise of a batch of the given envs' rows (a shared stream: itself)."""
        return self


class StreamNoise(Noise):
    """One random stream for every row (training: an actor's own stream)."""

    def __init__(self, seed: int | np.random.Generator):
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def uniform(self, rows: int, width: int) -> np.ndarray:
        return self.rng.random((rows, width))

    def normal(self, rows: int, width: int) -> np.ndarray:
        return self.rng.standard_normal((rows, width))


class RowNoise(Noise):
    """One random stream per row: each row's numbers depend on its own stream only, not on which other rows act
    with it (evaluation: an episode's actions depend on its seed, however episodes are spread over envs)."""

    def __init__(self, streams: Sequence[np.random.Generator]):
        self.streams = streams

    def for_rows(self, envs: Sequence[int] | slice) -> Noise:
        """The streams of ``envs`` (indices into :attr:`streams`), one per row in that order."""
        return RowNoise(self.streams[envs] if isinstance(envs, slice) else [self.streams[e] for e in envs])

    def uniform(self, rows: int, width: int) -> np.ndarray:
        return np.stack([stream.random(width) for stream in self.streams[:rows]])

    def normal(self, rows: int, width: int) -> np.ndarray:
        return np.stack([stream.standard_normal(width) for stream in self.streams[:rows]])


class Acting(ABC):
    """Batched acting with a recurrent state; loads flat weight vectors (see :mod:`maze_impala.nn.flat`)."""

    @abstractmethod
    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        """The shape of one row of ``step_key``'s recurrent state, per name (empty: feed-forward)."""

    def learned_state(self, step_key: StepKey) -> tuple[str, ...]:
        """The names of the state that the learner re-unrolls from: the learned policy's own. They go to the learner
        with each trajectory; any other state (an opponent's, which snapshot plays) stays with the actor."""
        return tuple(self.state_shapes(step_key))

    @abstractmethod
    def act(
        self,
        step_key: StepKey,
        obs: NestedArrays,
        state: State,
        agent_ids: np.ndarray,
        noise: Noise | None,
    ) -> Actions:
        """Actions for a ``[B, ...]`` batch of ``step_key`` observations of agents ``agent_ids``, taken with the
        recurrent ``state`` (``[B, ...]`` per name); sampled with ``noise``, the most likely ones without."""

    @abstractmethod
    def load(self, flat: np.ndarray) -> None:
        """Act with these weights from now on: a flat vector of the policy's state (kept, not copied)."""


def act_in_parts(
    step_key: StepKey,
    obs: NestedArrays,
    state: State,
    agent_ids: np.ndarray,
    noise: Noise | None,
    parts: Sequence[tuple[Acting, np.ndarray, Callable[[str], str | None]]],
) -> Actions:
    """Each ``(acting, rows, own)`` of ``parts`` acts for its ``rows`` of the batch, on the state names that
    ``own`` maps to a name of its own (None: not its state); actions, log-probabilities and states in row order."""
    state = {k: v.copy() for k, v in state.items()}
    actions: dict[str, np.ndarray] = {}
    log_probs = np.zeros(len(agent_ids), dtype=np.float32)
    for acting, rows, own in parts:
        if len(rows) == 0:
            continue
        names = {name: mine for name in state if (mine := own(name)) is not None}
        part, part_log_probs, part_state = acting.act(
            step_key,
            {k: v[rows] for k, v in obs.items()},
            {mine: state[name][rows] for name, mine in names.items()},
            agent_ids[rows],
            noise.for_rows(rows.tolist()) if noise is not None else None,
        )
        for name, value in part.items():
            if name not in actions:
                actions[name] = np.zeros((len(agent_ids), *value.shape[1:]), dtype=value.dtype)
            actions[name][rows] = value
        log_probs[rows] = part_log_probs
        for name, mine in names.items():
            state[name][rows] = part_state[mine]
    return actions, log_probs, state
