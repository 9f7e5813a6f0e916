"""The per-decision layout: what a step key's rollouts hold for each decision, derived from its spaces.

One schema serves every stage a decision passes through. :class:`DecisionLayout` allocates the recorder's
buffers from the step key's spaces (dtypes from :func:`~maze_impala.envs.spaces.storage_dtype`: a uint8 frame
stays uint8 up to the model) and bounds a rollout's bytes for the transport from the same allocation. The
functions below pad, cut by column and stack any record whose fields are declared with
:func:`~maze_impala.core.laid_out`: :class:`~maze_impala.core.Trajectory` in numpy and the learner's
:class:`~maze_impala.impala.batch.StepBatch` in torch, by each field's rows alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np

from maze_impala.core import (
    ACTED,
    ANCESTRAL,
    COLUMN_ROWS,
    DECISION_ROWS,
    OBSERVATION_ROWS,
    OBSERVED,
    RECURRENT,
    TRUNCATED_ROWS,
    NestedArrays,
    StepKey,
    Trajectory,
)
from maze_impala.envs.spaces import storage_dtype

R = TypeVar("R")

TIME_ROWS = (OBSERVATION_ROWS, DECISION_ROWS)
"""The rows whose second axis is the column: ``[T + 1, N, ...]`` and ``[T, N, ...]``."""

FIELDS: tuple[dataclasses.Field, ...] = dataclasses.fields(Trajectory)
"""The fields of :class:`~maze_impala.core.Trajectory`, each with its rows and its dtype or what it holds."""


def tree_map(fn: Callable[..., Any], *trees: Any) -> Any:
    """``fn`` applied leaf by leaf to trees of the same dict structure (the first tree's keys)."""
    if isinstance(trees[0], Mapping):
        return {key: tree_map(fn, *(tree[key] for tree in trees)) for key in trees[0]}
    return fn(*trees)


def leaves(tree: Any) -> Iterator[Any]:
    """The arrays of a tree of dicts, in key order."""
    if isinstance(tree, Mapping):
        for value in tree.values():
            yield from leaves(value)
    else:
        yield tree


def rows_of(record: Any) -> dict[str, str]:
    """The rows of each laid-out field of a dataclass (or dataclass type); its other fields (a flag) are not arrays."""
    return {f.name: f.metadata["rows"] for f in dataclasses.fields(record) if "rows" in f.metadata}


def map_fields(fn: Callable[..., Any], *records: Any) -> dict[str, Any]:
    """Per field of the laid-out ``records`` (of one class), ``fn(rows, *arrays)`` applied leaf by leaf."""
    return {
        name: tree_map(lambda *arrays, rows=rows: fn(rows, *arrays), *(getattr(r, name) for r in records))
        for name, rows in rows_of(records[0]).items()
    }


def padded(trajectory: Trajectory, n_steps: int) -> Trajectory:
    """The same trajectory over ``n_steps >= T`` rows: observation rows repeat each column's last row (its
    bootstrap observation), decision rows are zero (masked out)."""
    extra = n_steps - trajectory.n_steps
    if extra == 0:
        return trajectory
    if extra < 0:
        raise ValueError(f"cannot pad a trajectory of {trajectory.n_steps} steps to {n_steps}")

    def pad(rows: str, array: np.ndarray) -> np.ndarray:
        if rows == OBSERVATION_ROWS:
            return np.concatenate([array, np.repeat(array[-1:], extra, axis=0)])
        if rows == DECISION_ROWS:
            return np.concatenate([array, np.zeros((extra, *array.shape[1:]), dtype=array.dtype)])
        return array

    return Trajectory(**map_fields(pad, trajectory))


def select_columns(record: R, columns: np.ndarray | slice, as_index: Callable[[np.ndarray], Any] = np.asarray) -> R:
    """The ``columns`` of a laid-out record (indices in order, or a slice: then views), its truncated decisions
    renumbered. ``as_index`` turns a numpy index into one of the record's arrays (a tensor on its device)."""
    n_columns = record.mask.shape[1]
    kept = np.zeros(n_columns, dtype=bool)
    kept[columns] = True
    renumbered = np.cumsum(kept) - 1
    shift = np.stack([np.zeros(n_columns, dtype=np.int64), np.arange(n_columns) - renumbered], axis=1)
    truncated_kept = as_index(kept)[record.truncated_index[:, 1]]

    def take(rows: str, array: Any) -> Any:
        if rows in TIME_ROWS:
            return array[:, columns]
        if rows == COLUMN_ROWS:
            return array[columns]
        return array[truncated_kept]

    selected = map_fields(take, record)
    index = selected["truncated_index"]
    selected["truncated_index"] = index - as_index(shift)[index[:, 1]]
    return type(record)(**selected)


def stack(trajectories: list[Trajectory], to_array: Callable[[np.ndarray], R]) -> dict[str, Any]:
    """The fields of ``trajectories`` (of one length) side by side along their column axes, each array made by
    ``to_array`` (a tensor on the learner's device): truncated decisions re-indexed to their new columns."""

    def cat(rows: str, *arrays: np.ndarray) -> R:
        array = arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=1 if rows in TIME_ROWS else 0)
        return to_array(array)

    offsets = np.cumsum([0, *(tr.n_columns for tr in trajectories[:-1])])
    shifted = [tr.truncated_index + np.array([0, offset]) for tr, offset in zip(trajectories, offsets)]
    fields = map_fields(cat, *trajectories)
    fields["truncated_index"] = to_array(np.concatenate(shifted).astype(np.int64))
    return fields


@dataclass(frozen=True)
class DecisionLayout:
    """What one step key's rollouts store per decision: its spaces, those of the sub-steps before it (for a delta
    critic), and the shapes of a recurrent policy's state (float32, per column)."""

    observation_space: gym.spaces.Dict
    action_space: gym.spaces.Dict
    ancestor_spaces: Mapping[StepKey, gym.spaces.Dict] = field(default_factory=dict)
    state_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def zeros(self, declared: dataclasses.Field, leading: tuple[int, ...]) -> Any:
        """Zeroed storage of a field of :class:`~maze_impala.core.Trajectory` with ``leading`` axes: shaped by the
        space (or state) it holds, or of its dtype."""
        holds = declared.metadata["holds"]
        if holds == OBSERVED:
            return allocate(self.observation_space, leading)
        if holds == ACTED:
            return allocate(self.action_space, leading)
        if holds == ANCESTRAL:
            return {key: allocate(space, leading) for key, space in self.ancestor_spaces.items()}
        dtype = declared.metadata["dtype"]
        if holds == RECURRENT:
            return {name: np.zeros(leading + tuple(shape), dtype) for name, shape in self.state_shapes.items()}
        width = declared.metadata["width"]
        return np.zeros(leading + ((width,) if width else ()), dtype)

    def allocate(self, rows: int, columns: int) -> dict[str, Any]:
        """Zeroed ``[rows, columns]`` storage of every field the recorder writes decision by decision, by name."""
        return {f.name: self.zeros(f, (rows, columns)) for f in FIELDS if f.metadata["recorded"]}

    @property
    def n_arrays(self) -> int:
        """How many arrays a trajectory of this layout holds, over all its fields."""
        return sum(len(list(leaves(self.zeros(f, (0,))))) for f in FIELDS)

    def rollout_bytes(self, rows: int, columns: int) -> int:
        """The bytes of a trajectory of ``rows`` decisions per column if every decision were truncated (its final
        observation kept): every field, by its rows."""
        entries = {
            OBSERVATION_ROWS: (rows + 1) * columns,
            DECISION_ROWS: rows * columns,
            TRUNCATED_ROWS: rows * columns,
            COLUMN_ROWS: columns,
        }
        return sum(entries[f.metadata["rows"]] * sum(a.nbytes for a in leaves(self.zeros(f, (1,)))) for f in FIELDS)


def decision_layouts(
    order: Sequence[StepKey],
    observation_spaces: Mapping[StepKey, gym.spaces.Dict],
    action_spaces: Mapping[StepKey, gym.spaces.Dict],
    state_shapes: Callable[[StepKey], Mapping[str, tuple[int, ...]]],
    record_ancestors: bool = False,
) -> dict[StepKey, DecisionLayout]:
    """The layout of each step key of ``order`` (the env's order of sub-steps): with the observation spaces of the
    step keys before it where ``record_ancestors`` (a delta critic), and the recurrent state that ``state_shapes``
    (an acting's) declares for it."""
    return {
        key: DecisionLayout(
            observation_spaces[key],
            action_spaces[key],
            {k: observation_spaces[k] for k in order[:position]} if record_ancestors else {},
            state_shapes(key),
        )
        for position, key in enumerate(order)
    }


def allocate(space: gym.spaces.Dict, leading: tuple[int, ...]) -> NestedArrays:
    """Zeroed storage for a Dict space with ``leading`` batch/time axes, in the dtypes rollouts store."""
    return {k: np.zeros(leading + tuple(s.shape), dtype=storage_dtype(s)) for k, s in space.spaces.items()}
