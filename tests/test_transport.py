"""Rollouts through shared-memory slots: exact round trips, slot reuse, the pickled fallback."""

import dataclasses
import time

import numpy as np
import pytest

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.transport import RolloutSlots, estimate_rollout_bytes
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ModelConfig
from maze_impala.core import Rollout
from maze_impala.envs.examples import CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.testing import CounterEnv

MODEL = ModelConfig(hidden_units=[8])


def _assert_same(a: object, b: object, path: str = "rollout") -> None:
    if dataclasses.is_dataclass(a):
        assert type(a) is type(b), path
        for f in dataclasses.fields(a):
            _assert_same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            _assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b, err_msg=path)
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, path


def _cutting_rollouts(n: int, critic: str = "delta") -> list[Rollout]:
    model = ModelConfig(hidden_units=[8], critic=critic)
    actor = ActorSpec(CuttingEnv, Lineup.of(model), 12, 3, seed=1).build(
        0, SharedWeights(make_policy(CuttingEnv(), model))
    )
    return [actor.rollout() for _ in range(n)]


def test_a_structured_rollout_reads_back_exactly_as_views_of_its_slot():
    model = ModelConfig(hidden_units=[8], critic="delta")
    size = estimate_rollout_bytes(CuttingEnv(), ActorSpec(CuttingEnv, Lineup.of(model), 12, 3, seed=1))
    slots = RolloutSlots(2, size)
    rollouts = _cutting_rollouts(4)
    assert any(r.events for r in rollouts) and any(tr.ancestors for tr in rollouts[0].trajectories.values())
    for i, rollout in enumerate(rollouts):
        assert slots.write(i % 2, rollout)
        back = slots.read(i % 2)
        _assert_same(rollout, back)
        observations = back.trajectories["cut"].observations["piece"]
        assert np.shares_memory(observations, slots.array), "arrays are read in place, not copied"


def test_a_rollout_larger_than_its_slot_is_refused_whole():
    slots = RolloutSlots(1, 512)
    assert not slots.write(0, _cutting_rollouts(1)[0])


def _pool(**kwargs) -> SubprocessActors:
    policy = make_policy(make_env(CounterEnv), MODEL)
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=4, envs_per_actor=2, seed=0)
    return SubprocessActors(spec, SharedWeights(policy), num_actors=2, queue_size_limit=1, **kwargs)


def test_slots_are_reused_batch_after_batch():
    # 1 queued + 2 being written + 2 held = 5 slots; 60 batches of 2 only work if every slot comes back
    with _pool(batch_size=2, failure_timeout=20) as pool:
        assert pool.slots.n_slots == 5
        seen, last_row, batches, started = set(), {}, 0, time.monotonic()
        # 60 batches, and on until every slot has been held by a batch (one actor may still be starting while
        # another delivers dozens: an actor's slot comes back only with its rollout, held once a batch takes it)
        while batches < 60 or seen != set(range(5)):
            assert time.monotonic() - started < 60, f"slots {set(range(5)) - seen} never came back"
            batches += 1
            batch = pool.collect(2)
            seen.update(pool._held)
            for rollout in batch:
                trajectory = rollout.trajectories[0]
                t = trajectory.observations["observation"][:, :, 0]  # CounterEnv: the step count
                assert t.shape == (5, 2)
                ended = trajectory.terminated | trajectory.truncated
                np.testing.assert_array_equal(t[1:], np.where(ended, 0, t[:-1] + 1))
                previous = last_row.get(rollout.actor_index)
                if previous is not None:  # consecutive rollouts of an actor overlap by one row
                    np.testing.assert_array_equal(trajectory.observations["observation"][0], previous)
                last_row[rollout.actor_index] = trajectory.observations["observation"][-1].copy()
        assert seen == set(range(5))
        with pytest.raises(ValueError, match="batches of at most 2"):
            pool.collect(3)


def test_rollouts_too_large_for_a_slot_travel_pickled_with_a_warning(capfd):
    with _pool(slot_bytes=128, failure_timeout=20) as pool:
        for _ in range(5):
            (rollout,) = pool.collect(1)
            assert rollout.trajectories[0].observations["observation"].shape == (5, 2, 2)
        assert not pool._held
    assert "exceeds the shared-memory slot size" in capfd.readouterr().err


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_a_recurrent_policys_rollout_fits_the_slot_that_its_state_shapes_sized(core):
    """The slot's size reads the recurrent state's shapes from the policy's acting, not from a table of cores."""
    env, model = make_env(CounterEnv), ModelConfig(hidden_units=[8], recurrent=core, recurrent_units=64)
    spec = ActorSpec(CounterEnv, Lineup.of(model), n_rollout_steps=5, envs_per_actor=3, seed=0)
    actor = spec.build(0, SharedWeights(make_policy(env, model)))
    try:
        rollout = actor.rollout()
    finally:
        actor.close()
    state = rollout.trajectories[0].initial_state
    assert sum(array.shape[-1] for array in state.values()) == {"lstm": 128, "gru": 64}[core]
    plain = estimate_rollout_bytes(env, dataclasses.replace(spec, lineup=Lineup.of(ModelConfig(hidden_units=[8]))))
    sized = estimate_rollout_bytes(env, spec)
    assert sized - plain >= 4 * 3 * {"lstm": 128, "gru": 64}[core]  # float32 per column: 3 envs
    slots = RolloutSlots(1, sized)
    assert slots.write(0, rollout)
    _assert_same(rollout, slots.read(0))
