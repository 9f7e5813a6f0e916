"""Fault injection: killed, stopped and raising actors are restarted, nothing blocks, nothing is left behind."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from clitools import alive, children, start_long_run, wait_until

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.subprocess import RestartPolicy, SubprocessActors
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ModelConfig
from maze_impala.core import ActorFailedError
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.events.interfaces import ActorEvents
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.nn.flat import load_flat
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.testing import CounterEnv, CrashingEnv, FaultyEnv

MODEL = ModelConfig(hidden_units=[8])


def _pool(env=CounterEnv, num_actors=3, **policy):
    policy_net = make_policy(make_env(env), MODEL)
    weights = SharedWeights(policy_net)
    spec = ActorSpec(env, Lineup.of(MODEL), n_rollout_steps=4, envs_per_actor=2, seed=0)
    hub, stats = EventHub(), StatsAggregator("train")
    hub.listeners.append(stats)
    restarts = RestartPolicy(**{"max_restarts": 20, "window_s": 600.0} | policy)
    pool = SubprocessActors(
        spec, weights, num_actors, queue_size_limit=1, restarts=restarts, events=hub.publisher(ActorEvents)
    )
    return pool, weights, policy_net, stats


def _slots_accounted(pool):
    granted = [a.granted for a in pool.actors if a.granted is not None]
    ready = [slot for slot, _ in [*pool.finished.queue, *pool.finished.parked] if slot >= 0]
    owned = [*pool._free, *pool._held, *granted, *ready]
    return sorted(owned) == list(range(pool.slots.n_slots))


def test_killed_actors_are_restarted_their_slots_reclaimed_and_collect_goes_on():
    pool, weights, policy, stats = _pool()
    rng = random.Random(3)
    kills = 0
    with pool:
        for update in range(1, 240):
            pool.collect(1)
            weights.publish(policy, update)
            if update % 40 == 0:  # a random actor, at a random point of its work
                os.kill(rng.choice(pool.actors).process.pid, signal.SIGKILL)
                kills += 1
            assert _slots_accounted(pool)
        assert all(a.process.is_alive() for a in pool.actors)
        generations = sum(a.generation for a in pool.actors)
    row = by_column(stats.reduce())
    assert generations == kills == row["train/ActorEvents/restarted/sum/cause=died"] == 5
    assert row["train/ActorEvents/recovery_seconds/max"] < 30


def test_a_stopped_actor_is_detected_by_its_deadline_killed_and_restarted():
    pool, weights, policy, stats = _pool(actor_timeout_s=1.0)
    with pool:
        update, started = 0, time.monotonic()
        while update < 20 or any(a.delivered == 0 for a in pool.actors):  # the deadline counts from a first rollout
            update += 1
            pool.collect(1)
            weights.publish(policy, update)
            assert time.monotonic() - started < 60, "an actor never delivered its first rollout"
        stopped = pool.actors[1].process
        os.kill(stopped.pid, signal.SIGSTOP)
        started = time.monotonic()
        while pool.actors[1].process is stopped and time.monotonic() - started < 20:
            pool.collect(1)  # the other actors carry on meanwhile
        detected = time.monotonic() - started
        assert pool.actors[1].process is not stopped and detected < 5
        assert stopped.exitcode == -signal.SIGKILL
    assert by_column(stats.reduce())["train/ActorEvents/restarted/sum/cause=hung"] == 1


def test_an_env_that_raises_is_restarted_until_the_restarts_run_out():
    pool, _, _, stats = _pool(CrashingEnv, num_actors=2, max_restarts=3)
    with pool, pytest.raises(ActorFailedError) as info:
        for _ in range(1000):
            pool.collect(1)
    message = str(info.value)
    assert "raised RuntimeError: CrashingEnv: simulated failure in env.step" in message.splitlines()[0]
    assert "runner.max_restarts=3" in message.splitlines()[0] and "Traceback" in message
    assert by_column(stats.reduce())["train/ActorEvents/restarted/sum/cause=raised"] == 3


def test_an_actor_that_fails_before_its_first_rollout_ends_the_run_at_once():
    import functools

    pool, _, _, _ = _pool(functools.partial(FaultyEnv, "shape", 0), max_restarts=10)
    started = time.monotonic()
    with pool, pytest.raises(ActorFailedError, match="before its first rollout, so a restart would fail alike"):
        pool.collect(1)
    assert time.monotonic() - started < 30


def test_a_reader_killed_inside_the_weights_blocks_nobody():
    """Actors read the shared weights without a lock: kill readers at random points of a read, publish on."""
    import multiprocessing as mp

    from maze_impala.testing import read_weights_forever

    model = ModelConfig(hidden_units=[256, 256])
    policy = make_policy(make_env("CartPole-v1"), model)
    weights = SharedWeights(policy)
    ctx, rng = mp.get_context("spawn"), random.Random(0)
    for version in range(1, 6):
        ready = ctx.Event()
        reader = ctx.Process(target=read_weights_forever, args=(weights, model, ready), daemon=True)
        reader.start()
        assert ready.wait(60)
        time.sleep(rng.uniform(0.0, 0.02))  # reads take about a millisecond: the kill lands inside one or not
        reader.kill()
        reader.join()
        started = time.monotonic()
        for _ in range(50):
            weights.publish(policy, version)
        assert time.monotonic() - started < 2
    check = make_policy(make_env("CartPole-v1"), model)
    flat, version = weights.read()
    load_flat(check, flat)
    assert version == 5
    assert all(torch.equal(a, b) for a, b in zip(check.state_dict().values(), policy.state_dict().values()))


def _shm():
    return {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()


@pytest.mark.slow
@pytest.mark.serial  # it reads the whole machine's /dev/shm
@pytest.mark.parametrize("whole_group", [False, True], ids=["main process", "process group"])
def test_sigkill_of_the_main_process_leaves_no_actor_no_learner_and_no_shared_memory_behind(tmp_path, whole_group):
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc")
    before = _shm()
    out = tmp_path / "run"
    proc = start_long_run(
        out,
        ["runner=local", "algorithm.num_actors=3", "algorithm.num_learners=2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until((out / "model_last.pt").exists)
        actors = [
            pid
            for pid in children(proc.pid)
            if "maze-actor" in Path(f"/proc/{pid}/cmdline").read_text()
            or "spawn_main" in Path(f"/proc/{pid}/cmdline").read_text()
        ]
        assert len(actors) >= 4, "3 actors and a second learner"
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=10)
        wait_until(lambda: not alive(actors), seconds=5, pause=0.05)
        assert alive(actors) == [], "actors and learners die with their parent"
    finally:
        proc.kill()
    assert _shm() - before == set(), "nothing of the run is left in /dev/shm"


def test_a_build_that_fails_after_the_actors_started_stops_them_and_releases_the_run_directory(tmp_path, monkeypatch):
    from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig
    from maze_impala.config import TrainingConfig
    from maze_impala.files import RunDirLock
    from maze_impala.train.setup import build_trainer

    started = []
    real_start = SubprocessActors.start

    def start(pool):
        real_start(pool)
        started.extend(process.pid for process in pool.processes)

    def no_learner(*args, **kwargs):
        raise RuntimeError("the learner could not be built")

    monkeypatch.setattr(SubprocessActors, "start", start)
    monkeypatch.setattr(sys.modules[build_trainer.__module__], "make_learner", no_learner)
    config = TrainingConfig(
        "CartPole-v1",
        ImpalaAlgorithmConfig(num_actors=2, envs_per_actor=2),
        runner=RunnerConfig("local"),
        output=OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
    )
    with pytest.raises(RuntimeError, match="the learner could not be built"):
        build_trainer(config, tmp_path)
    assert len(started) == 2 and not alive(started)
    RunDirLock(tmp_path).acquire().release()  # free for the next run
