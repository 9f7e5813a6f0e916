"""The Ray backend: the same rollouts as the other backends, the queue bound, weights by version, and faults.

One Ray for the whole module (starting one costs seconds); the actors run the installed package.
"""

import copy
import functools
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from poolcheck import START, check_adaptive_batches

ray = pytest.importorskip("ray", reason='the Ray backend needs pip install "maze_impala[ray]"')

from maze_impala.actors.actor import ActorSpec  # noqa: E402
from maze_impala.actors.ray_actors import RayActors, RayWeights  # noqa: E402
from maze_impala.actors.restarts import RestartPolicy  # noqa: E402
from maze_impala.actors.sequential import SequentialActors  # noqa: E402
from maze_impala.actors.subprocess import SubprocessActors  # noqa: E402
from maze_impala.actors.weights import SharedWeights  # noqa: E402
from maze_impala.config import ModelConfig  # noqa: E402
from maze_impala.core import ActorFailedError  # noqa: E402
from maze_impala.envs.factory import make_env  # noqa: E402
from maze_impala.events.api import EventHub  # noqa: E402
from maze_impala.events.interfaces import ActorEvents  # noqa: E402
from maze_impala.events.stats import StatsAggregator, by_column  # noqa: E402
from maze_impala.nn.models import make_policy  # noqa: E402
from maze_impala.nn.torch_acting import numpy_form_of  # noqa: E402
from maze_impala.play.lineup import Lineup  # noqa: E402
from maze_impala.testing import BrokenEnv, CounterEnv, CrashingEnv  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")  # one Ray at a time: the Ray tests run in one worker, in turn

MODEL = ModelConfig(hidden_units=[8])


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _pool(env=CounterEnv, num_actors=2, limit=1, steps=4, **restarts):
    policy = make_policy(make_env(env if env is not BrokenEnv else CounterEnv), MODEL)
    weights = RayWeights(policy)
    spec = ActorSpec(env, Lineup.of(MODEL), n_rollout_steps=steps, envs_per_actor=2, seed=0)
    hub, stats = EventHub(), StatsAggregator("train")
    hub.listeners.append(stats)
    policy_ = RestartPolicy(**{"max_restarts": 20} | restarts)
    pool = RayActors(spec, weights, num_actors, limit, restarts=policy_, events=hub.publisher(ActorEvents))
    return pool, weights, policy, stats


def _same(a, b):
    for key in ("actions", "observations"):
        for name, array in getattr(a, key).items():
            np.testing.assert_array_equal(array, getattr(b, key)[name])
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_allclose(a.behaviour_log_probs, b.behaviour_log_probs, atol=1e-6)


def test_sequential_subprocess_and_ray_give_the_same_first_rollouts():
    policy = make_policy(make_env(CounterEnv), MODEL)
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=3, envs_per_actor=2, seed=5)
    with SequentialActors(spec, SharedWeights(policy), num_actors=2) as pool:
        expected = {r.actor_index: copy.deepcopy(r) for r in pool.collect(2)}
    for pool in (
        SubprocessActors(spec, SharedWeights(policy), 2, queue_size_limit=4),
        RayActors(spec, RayWeights(policy), 2, queue_size_limit=4),
    ):
        first = {}
        with pool:
            while len(first) < 2:
                rollout = pool.collect(1)[0]
                first.setdefault(rollout.actor_index, copy.deepcopy(rollout))
        for index, rollout in expected.items():
            _same(rollout.trajectories[0], first[index].trajectories[0])
            assert first[index].env_steps == rollout.env_steps == 6


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_the_queue_keeps_its_bound_actors_take_new_weights_and_lag_stays_bounded():
    limit, num_actors = 2, 3
    pool, weights, policy, _ = _pool(num_actors=num_actors, limit=limit, steps=2)
    with pool:
        deadline = time.monotonic() + START
        parked = lambda: len(pool.finished.parked)  # noqa: E731  finished beyond the queue's bound
        while (pool.queue_size() < limit or parked() < num_actors) and time.monotonic() < deadline:
            time.sleep(0.05)  # actors start (a Ray worker imports torch)
        sizes = []
        for _ in range(20):  # actors have finished rollouts, but the queue must not take more
            time.sleep(0.025)
            sizes.append(pool.queue_size())
        assert sizes == [limit] * 20
        assert parked() == num_actors, "the first rollouts of every actor wait beyond the queue"
        assert all(host.call is None for host in pool.hosts), "no actor is asked for more than the limit allows"
        lags = []
        for version in range(1, 40):
            for rollout in pool.collect(1):
                lags.append(version - 1 - rollout.policy_version)
            weights.publish(policy, version)
        assert min(lags) >= 0, "no rollout can come from a version the learner has not published"
        assert 1 <= np.mean(lags[5:]) <= limit + num_actors
        # A rollout of an actor that Ray runs late can be overtaken by any number of others, so the bound
        # holds for the freshest of the last few, not for each: an actor that kept version 0 would give 30+.
        assert min(lags[-5:]) <= limit + num_actors, "actors act with the versions the requests bring"


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_adaptive_batches_take_what_is_ready_and_lose_no_rollout():
    pool, weights, policy, _ = _pool(num_actors=3, limit=4, steps=2)
    with pool:
        check_adaptive_batches(pool, weights, policy, num_actors=3, limit=4, at_most=4)


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_a_killed_ray_actor_is_replaced_with_a_fresh_seed_and_collect_goes_on():
    pool, weights, policy, stats = _pool(num_actors=2)
    with pool:
        pool.collect(1)
        pids = [pid for _, pid in pool.placements()]
        os.kill(pids[1], signal.SIGKILL)
        started = time.monotonic()
        version = 0
        # the wait ends as soon as the new actor delivers; START bounds it: under load a Ray actor's start-up (its
        # process imports torch) has taken over a minute
        while not (pool.hosts[1].generation == 1 and pool.hosts[1].delivered) and time.monotonic() - started < START:
            pool.collect(1)  # the other actor carries on while the new one starts
            version += 1
            weights.publish(policy, version)
        recovered = time.monotonic() - started
        assert pool.hosts[1].generation == 1 and pool.hosts[1].delivered > 0
        assert pool.placements()[1][1] != pids[1]
    row = by_column(stats.reduce())
    assert row["train/ActorEvents/restarted/sum/cause=died"] == 1
    assert row["train/ActorEvents/recovery_seconds/max"] < recovered + 1 < START


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_a_stopped_ray_actor_is_caught_by_its_deadline_and_replaced():
    pool, weights, policy, stats = _pool(num_actors=2, actor_timeout_s=1.0)
    with pool:
        version, deadline = 0, time.monotonic() + START
        while version < 10 or not all(host.delivered for host in pool.hosts):  # both past start-up
            assert time.monotonic() < deadline, f"an actor did not deliver its first rollout within {START} s"
            pool.collect(1)
            version += 1
            weights.publish(policy, version)
        stopped = pool.placements()[0][1]
        os.kill(stopped, signal.SIGSTOP)
        started = time.monotonic()
        while pool.hosts[0].generation == 0 and time.monotonic() - started < 20:
            pool.collect(1)  # the other actor carries on meanwhile
        assert pool.hosts[0].generation == 1 and time.monotonic() - started < 5
        os.kill(stopped, signal.SIGCONT)  # Ray killed it; a stopped process ends when it continues
    assert by_column(stats.reduce())["train/ActorEvents/restarted/sum/cause=hung"] == 1


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_an_env_that_raises_is_restarted_until_the_restarts_run_out():
    pool, _, _, stats = _pool(functools.partial(CrashingEnv, 20), max_restarts=2)
    with pool, pytest.raises(ActorFailedError) as info:
        for _ in range(1000):
            pool.collect(1)
    first = str(info.value).splitlines()[0]
    assert "raised RuntimeError: CrashingEnv: simulated failure in env.step" in first
    assert "runner.max_restarts=2" in first
    assert by_column(stats.reduce())["train/ActorEvents/restarted/sum/cause=raised"] == 2


def test_an_env_that_raises_in_init_fails_the_run_at_once_with_its_error():
    pool, _, _, stats = _pool(BrokenEnv, max_restarts=10)
    started = time.monotonic()
    with pool, pytest.raises(ActorFailedError) as info:
        pool.collect(1)
    assert time.monotonic() - started < 30
    first = str(info.value).splitlines()[0]
    assert "raised RuntimeError: BrokenEnv: the simulator would not start" in first
    assert "before its first rollout, so a restart would fail alike" in first
    assert "train/ActorEvents/restarted/sum/cause=raised" not in by_column(stats.reduce())


def test_close_kills_every_actor_and_leaves_a_ray_it_did_not_start_running():
    pool, _, _, _ = _pool(num_actors=2)
    with pool:
        pool.collect(1)
        pids = [pid for _, pid in pool.placements()]
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    assert ray.is_initialized(), "the module's Ray was not the pool's to shut down"


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
def test_a_ray_actor_of_a_numpy_policy_never_imports_torch():
    policy = make_policy(make_env(CounterEnv), MODEL)
    plain = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=3, envs_per_actor=2, seed=5)
    mapped = {}
    for name, spec in (("numpy", plain.in_numpy(numpy_form_of(policy))), ("torch", plain)):
        with RayActors(spec, RayWeights(policy), 1, queue_size_limit=1) as pool:
            assert pool.collect(1)[0].env_steps == 6
            ((_, pid),) = pool.placements()
            mapped[name] = "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    assert mapped == {"numpy": False, "torch": True}


@pytest.mark.slow  # its subprocess twin (test_actors, test_faults, test_snapshot_pool) is in the fast loop
def test_ray_actors_play_the_learners_snapshot_pool_and_a_replacement_finds_it():
    from maze_impala.config import OpponentPoolConfig
    from maze_impala.play.pool import SnapshotPool

    tictactoe = {
        "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
        "name": "pettingzoo.classic.tictactoe_v3",
    }
    model = ModelConfig(image_encoder="flatten", hidden_units=[8])
    policy = make_policy(make_env(tictactoe), model)
    snapshots = SnapshotPool(OpponentPoolConfig(snapshot_every=1, size=2))
    weights = RayWeights(policy)
    for version in range(3):
        snapshots.offer(policy, version)
        weights.publish_snapshots(snapshots.snapshots)
    assert weights.latest_pool()[0] == 3  # one object per published pool, sent to an actor when it is new to it
    weights.publish_pool_scores({2: 0.25, 3: 0.75})  # the learner's estimates, sent with every request
    spec = ActorSpec(tictactoe, Lineup.of(model, "pool", 1), n_rollout_steps=8, envs_per_actor=2, seed=0)
    with RayActors(spec, weights, 1, 1, restarts=RestartPolicy(max_restarts=1)) as pool:
        pool.collect(1)  # an actor that found no pool would fail its first game, and the run with it
        os.kill(pool.placements()[0][1], signal.SIGKILL)
        deadline = time.monotonic() + START
        while not pool.hosts[0].delivered or pool.hosts[0].generation == 0:
            assert time.monotonic() < deadline, f"the replacement delivered no rollout within {START} s"
            pool.collect(1)
        assert pool.hosts[0].sent_pool == 3
