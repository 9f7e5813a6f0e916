"""Records one step key's decisions into preallocated ``[rows, columns]`` buffers.

A column belongs to one actor (env ``e``, agent ``a``) and holds that actor's own
decisions in order. A column's last row is *open* while its outcome is unknown:
either an observation waiting for its action (``AWAITING``) or a decision whose
reward and next observation are still to come (``DECIDED``). The open row is the
bootstrap row of the rollout and travels on as row 0 of the next one, so every
decision is learned from exactly once.

The recorder owns each column's life, its recurrent state included: the state the
column's next decision starts from (zeroed when the column's decision closes, i.e. its
episode ends or its agent leaves), and the state its rollout started from (the input
state of its row 0), which every trajectory carries for the learner to unroll from.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from maze_impala.core import DECISION_ROWS, OBSERVATION_ROWS, NestedArrays, NonFiniteError, StepKey, Trajectory
from maze_impala.envs.layout import DecisionLayout, allocate, leaves, rows_of, tree_map

CLOSED, AWAITING, DECIDED = 0, 1, 2


def store(storage: Mapping[str, np.ndarray], index: int | tuple, obs: Mapping) -> None:
    """Write one Dict observation (or action) into storage at ``index``; a wrong shape raises, never broadcasts."""
    depth = len(index) if isinstance(index, tuple) else 1
    for key, array in storage.items():
        value = obs[key]
        if np.shape(value) != array.shape[depth:]:
            raise ValueError(f"{key!r}: expected shape {array.shape[depth:]} (its space), found {np.shape(value)}")
        array[index] = value


def check_finite(trajectory: Trajectory, step_key: StepKey) -> None:
    """Rewards and float observations of a trajectory are finite; else :class:`NonFiniteError` naming them."""
    if not np.isfinite(trajectory.rewards).all():
        bad = trajectory.rewards[~np.isfinite(trajectory.rewards)][:3]
        raise NonFiniteError(f"step key {step_key!r}: the env returned a non-finite reward {bad.tolist()}")
    for name, array in trajectory.observations.items():
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise NonFiniteError(f"step key {step_key!r}: the env returned a non-finite observation {name!r}")


class StepRecorder:
    """The buffers of one step key, for columns created as actors appear."""

    def __init__(self, layout: DecisionLayout, rows: int, columns: int = 4, learned: tuple[str, ...] | None = None):
        self.layout = layout
        self.learned = learned
        """The state names a trajectory carries (:meth:`~maze_impala.nn.acting.Acting.learned_state`; None: all)."""
        self.capacity, self.n_columns = max(2, rows), 0
        self._columns: dict[tuple[int, int], int] = {}
        self.agent_ids = np.zeros(0, dtype=np.int64)
        self.env_ids = np.zeros(0, dtype=np.int64)
        self.rows = np.zeros(0, dtype=np.int64)
        """Rows used per column (the open row included)."""
        self.state = np.zeros(0, dtype=np.int8)
        self.recurrent: dict[str, np.ndarray] = {}
        """Per column, the recurrent state its next decision starts from (``[columns, ...]`` per name)."""
        self._open_state: dict[str, np.ndarray] = {}
        """Per column, the state its open row's decision starts from."""
        self._initial: dict[str, np.ndarray] = {}
        """Per column, the state its row 0 started from: where the learner unrolls the rollout from."""
        self._closing: dict[str, np.ndarray] = {}
        """Per column, the state its last closed decision led to (:meth:`take_closing_state`)."""
        self._allocate(self.capacity, columns)
        self._allocate_states(columns)

    def _learned_names(self) -> list[str]:
        return [name for name in self._initial if self.learned is None or name in self.learned]

    def _allocate(self, rows: int, cols: int) -> None:
        self.buffers = self.layout.allocate(rows, cols)
        """The recorded fields of a trajectory, ``[rows, cols, ...]`` each, by name."""
        self.obs, self.actions, self.ancestors = (self.buffers[k] for k in ("observations", "actions", "ancestors"))
        self.log_probs, self.rewards = self.buffers["behaviour_log_probs"], self.buffers["rewards"]
        self.terminated, self.truncated = self.buffers["terminated"], self.buffers["truncated"]
        self._truncated: list[tuple[int, int, Mapping]] = []

    def _arrays(self) -> list[np.ndarray]:
        return list(leaves(self.buffers))

    def _allocate_states(self, cols: int) -> None:
        for states in (self.recurrent, self._open_state, self._initial, self._closing):
            for name, shape in self.layout.state_shapes.items():
                old = states.get(name)
                states[name] = np.zeros((cols, *shape), dtype=np.float32)
                if old is not None:
                    states[name][: len(old)] = old

    def _grow(self, rows: int, cols: int) -> None:
        old, old_rows, truncated = self._arrays(), self.capacity, self._truncated
        self._allocate(rows, cols)
        for new, previous in zip(self._arrays(), old):
            new[:old_rows, : previous.shape[1]] = previous[:old_rows]
        self._truncated, self.capacity = truncated, rows
        self._allocate_states(cols)

    def add_truncated(self, row: int, col: int, final_obs: Mapping) -> None:
        """Mark the decision at ``(row, col)`` as cut off, to be bootstrapped from ``final_obs``."""
        self.truncated[row, col] = True
        self._truncated.append((row, col, final_obs))

    def column(self, env: int, agent: int) -> int:
        """The column of agent ``agent`` in env ``env``, created on first use."""
        col = self._columns.get((env, agent))
        if col is None:
            col = self.n_columns
            if col >= self._column_capacity():
                self._grow(self.capacity, max(4, 2 * col))  # agents that come and go
            self._columns[env, agent] = col
            self.n_columns += 1
            self.agent_ids = np.append(self.agent_ids, agent)
            self.env_ids = np.append(self.env_ids, env)
            self.rows = np.append(self.rows, 0)
            self.state = np.append(self.state, CLOSED)
        return col

    def _column_capacity(self) -> int:
        return self.log_probs.shape[1]

    def columns_of(self, env: int) -> np.ndarray:
        return np.flatnonzero(self.env_ids == env)

    def observe(self, col: int, obs: Mapping) -> None:
        """The actor of ``col`` is about to decide on ``obs``: its previous decision is complete."""
        if self.state[col] == AWAITING:
            raise RuntimeError("an actor observed twice without acting in between")
        row = int(self.rows[col])
        if row + 1 > self.capacity:
            self._grow(2 * self.capacity, self._column_capacity())
        store(self.obs, (row, col), obs)
        self.rows[col] = row + 1
        self.state[col] = AWAITING
        for name, now in self.recurrent.items():
            self._open_state[name][col] = now[col]
            if row == 0:
                self._initial[name][col] = now[col]

    def awaiting_rows(self, cols: np.ndarray) -> np.ndarray:
        return self.rows[cols] - 1

    def gather(self, rows: np.ndarray, cols: np.ndarray) -> NestedArrays:
        """The observations at ``(rows, cols)``, stacked (a copy)."""
        return {k: v[rows, cols] for k, v in self.obs.items()}

    def gather_state(self, cols: np.ndarray | slice) -> NestedArrays:
        """The recurrent state the next decisions of ``cols`` start from (a copy; empty: feed-forward)."""
        return {name: state[cols] for name, state in self.recurrent.items()}

    def take_closing_state(self, cols: np.ndarray) -> NestedArrays:
        """The state that the decisions of ``cols`` closed since the last take led to (zeros for a column that
        closed none): how its actor's episode ended, e.g. which snapshot played it, although :meth:`close` zeroed
        the state its next decision starts from."""
        taken = {name: state[cols] for name, state in self._closing.items()}
        for state in self._closing.values():
            state[cols] = 0.0
        return taken

    def decide(
        self,
        rows: np.ndarray,
        cols: np.ndarray,
        actions: Mapping[str, np.ndarray],
        log_probs: np.ndarray,
        state: Mapping[str, np.ndarray],
    ) -> None:
        """Record the decisions at ``(rows, cols)`` and the recurrent state they lead to."""
        for key, array in self.actions.items():
            array[rows, cols] = actions[key]
        self.log_probs[rows, cols] = log_probs
        self.state[cols] = DECIDED
        for name, now in self.recurrent.items():
            now[cols] = state[name]

    def advance(self, row: int, cols: slice) -> None:
        """The decisions at ``row`` of ``cols`` are followed by observations written at ``row + 1`` in place
        (the flat fast path's :meth:`observe` for a whole row)."""
        self.rows[cols] = row + 2
        self.state[cols] = AWAITING
        for name, now in self.recurrent.items():
            self._open_state[name][cols] = now[cols]

    def credit(self, col: int, reward: float) -> bool:
        """Add ``reward`` to the latest decision of ``col`` if it has an open one."""
        if self.state[col] != DECIDED:
            return False
        self.rewards[self.rows[col] - 1, col] += reward
        return True

    def close(self, col: int, truncated: bool, final_obs: Mapping | None) -> None:
        """End the open decision of ``col``: terminated, or truncated and bootstrapped from ``final_obs``; its
        actor's next decision starts from the initial (zero) state."""
        if self.state[col] != DECIDED:
            return
        row = int(self.rows[col]) - 1
        if truncated and final_obs is not None:
            self.add_truncated(row, col, final_obs)
        else:
            self.terminated[row, col] = True
        self.state[col] = CLOSED
        for name, now in self.recurrent.items():
            self._closing[name][col] = now[col]
            now[col] = 0.0

    def finish(self) -> Trajectory | None:
        """The trajectory of the completed decisions; open rows move to row 0 of fresh buffers."""
        n = self.n_columns
        is_open = self.state[:n] != CLOSED
        lengths = self.rows[:n] - is_open
        T = int(lengths.max()) if n else 0
        if T + 1 > self.capacity:
            self._grow(T + 1, self._column_capacity())
        trajectory = self._trajectory(lengths, is_open, T) if T > 0 else None
        self._carry_open_rows(is_open)
        return trajectory

    def discard(self) -> None:
        """Drop the completed decisions without making a trajectory (acting without learning: evaluation)."""
        self._carry_open_rows(self.state[: self.n_columns] != CLOSED)

    def _carry_open_rows(self, is_open: np.ndarray) -> None:
        """Open rows move to row 0 of fresh buffers, and with them the state they started from."""
        open_cols = np.flatnonzero(is_open)
        carried = [(col, int(self.rows[col]) - 1) for col in open_cols]
        old = self._arrays()
        self._allocate(self.capacity, self._column_capacity())  # the truncated-decision list starts empty too
        for new, previous in zip(self._arrays(), old):
            for col, row in carried:
                new[0, col] = previous[row, col]
        for name, initial in self._initial.items():
            initial[open_cols] = self._open_state[name][open_cols]
        self.rows[: len(is_open)] = is_open.astype(np.int64)

    def _trajectory(self, lengths: np.ndarray, is_open: np.ndarray, T: int) -> Trajectory:
        n = self.n_columns
        rows = rows_of(Trajectory)
        bootstraps = {name: buffer for name, buffer in self.buffers.items() if rows[name] == OBSERVATION_ROWS}
        for col in np.flatnonzero(lengths < T):  # a short column repeats its bootstrap observation to row T
            length = int(lengths[col])
            source = length if is_open[col] else max(length - 1, 0)
            for array in leaves(bootstraps):
                array[length : T + 1, col] = array[source, col]
        finals = allocate(self.layout.observation_space, (len(self._truncated),))
        for i, (_, _, obs) in enumerate(self._truncated):
            store(finals, i, obs)
        index = np.asarray([(row, col) for row, col, _ in self._truncated], dtype=np.int64).reshape(-1, 2)
        kept = {OBSERVATION_ROWS: T + 1, DECISION_ROWS: T}
        recorded = {
            name: tree_map(lambda a, t=kept[rows[name]]: a[:t, :n], buffer) for name, buffer in self.buffers.items()
        }
        return Trajectory(
            **recorded,
            truncated_observations=finals,
            truncated_index=index,
            mask=np.arange(T)[:, None] < lengths[None, :],
            agent_ids=self.agent_ids.copy(),
            initial_state={name: self._initial[name][:n].copy() for name in self._learned_names()},
        )
