"""The per-decision layout: one schema, derived from the spaces, for the recorder, the transport and the learner."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from maze_impala.core import Rollout, Trajectory
from maze_impala.envs.layout import DecisionLayout, leaves, padded, rows_of, select_columns
from maze_impala.impala.batch import StepBatch, stack_step

FRAME = gym.spaces.Box(0, 255, (6, 5, 3), np.uint8)
LAYOUT = DecisionLayout(
    gym.spaces.Dict({"frame": FRAME, "speed": gym.spaces.Box(-1, 1, (2,), np.float64)}),
    gym.spaces.Dict({"move": gym.spaces.Discrete(4)}),
    {"select": gym.spaces.Dict({"piece": gym.spaces.MultiBinary(3)})},
    {"h": (4,)},
)


def trajectory(T: int, N: int, seed: int, truncated: list[tuple[int, int]]) -> Trajectory:
    """Random data in the layout's storage: every recorded field from its allocation, the rest by hand."""
    rng = np.random.default_rng(seed)
    recorded = LAYOUT.allocate(T + 1, N)
    for array in leaves(recorded):
        array[...] = rng.integers(0, 2 if array.dtype == bool else 200, array.shape).astype(array.dtype)
    cut = {name: (T + 1 if name in ("observations", "ancestors") else T) for name in recorded}
    fields = {
        name: {k: v[: cut[name]] for k, v in value.items()} if isinstance(value, dict) else value[: cut[name]]
        for name, value in recorded.items()
        if name != "ancestors"
    }
    fields["ancestors"] = {key: {k: v[: T + 1] for k, v in obs.items()} for key, obs in recorded["ancestors"].items()}
    finals = {k: v[: len(truncated), 0] + 1 for k, v in recorded["observations"].items()}
    return Trajectory(
        **fields,
        truncated_observations=finals,
        truncated_index=np.array(truncated, dtype=np.int64).reshape(-1, 2),
        mask=np.ones((T, N), dtype=bool),
        agent_ids=np.arange(N, dtype=np.int64),
        initial_state={"h": rng.normal(size=(N, 4)).astype(np.float32)},
    )


def test_the_learner_batch_has_the_fields_and_rows_of_a_trajectory():
    assert rows_of(StepBatch) == rows_of(Trajectory)


def test_storage_takes_its_dtypes_from_the_spaces():
    storage = LAYOUT.allocate(3, 2)
    frames = storage["observations"]["frame"]
    assert frames.dtype == np.uint8 and frames.shape == (3, 2, 6, 5, 3)
    assert storage["observations"]["speed"].dtype == np.float32  # float64 Boxes are stored as float32
    assert storage["actions"]["move"].dtype == np.int64 and storage["ancestors"]["select"]["piece"].dtype == np.int8
    assert storage["behaviour_log_probs"].dtype == np.float32 and storage["terminated"].dtype == bool


def test_uint8_frames_round_trip_through_padding_column_selection_and_the_learner_batch():
    short, long = trajectory(3, 2, seed=1, truncated=[(1, 1)]), trajectory(5, 3, seed=2, truncated=[(0, 0), (4, 2)])
    grown = padded(short, 5)
    assert grown.observations["frame"].dtype == np.uint8 and grown.n_steps == 5
    assert np.array_equal(grown.observations["frame"][4:], np.repeat(short.observations["frame"][3:], 2, axis=0))
    assert not grown.mask[3:].any() and np.array_equal(
        grown.ancestors["select"]["piece"][:4], short.ancestors["select"]["piece"]
    )

    batch = stack_step([Rollout({0: short}, 0, 0, 0), Rollout({0: long}, 0, 1, 0)], 0, torch.device("cpu"))
    assert batch.observations["frame"].dtype == torch.uint8 and batch.observations["frame"].shape[:2] == (6, 5)
    assert batch.truncated_index.tolist() == [[1, 1], [0, 2], [4, 4]]  # the second rollout's columns follow
    assert torch.equal(batch.observations["frame"][:, 2:], torch.from_numpy(long.observations["frame"]))

    # the batch's columns 2-4 are the second trajectory again, with its truncated decisions renumbered
    second = batch.columns(2, 5)
    assert second.truncated_index.tolist() == long.truncated_index.tolist()
    assert torch.equal(second.truncated_observations["frame"], torch.from_numpy(long.truncated_observations["frame"]))
    assert torch.equal(second.initial_state["h"], torch.from_numpy(long.initial_state["h"]))
    picked = select_columns(long, np.array([2]))
    assert picked.truncated_index.tolist() == [[4, 0]] and picked.agent_ids.tolist() == [2]
    assert np.array_equal(picked.observations["frame"], long.observations["frame"][:, [2]])


def test_the_transport_bound_covers_a_full_trajectory_with_every_decision_truncated():
    T, N = 4, 3
    every = [(t, n) for t in range(T) for n in range(N)]
    full = trajectory(T, N, seed=3, truncated=every)
    full.truncated_observations = {k: np.repeat(v[:1, 0], len(every), axis=0) for k, v in full.observations.items()}
    size = sum(array.nbytes for name in rows_of(full) for array in leaves(getattr(full, name)))
    assert LAYOUT.rollout_bytes(T, N) == size, "every field counted, by its rows"
