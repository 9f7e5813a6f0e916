"""Actors: what a rollout records, both backends, the queue bound, policy lag and failures."""

import copy
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from poolcheck import check_adaptive_batches

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.flow import WAIT_SECONDS, FinishedRollouts, InFlightLimit
from maze_impala.actors.sequential import SequentialActors
from maze_impala.actors.stepping import FlatStepping, SubStepping
from maze_impala.actors.subprocess import SubprocessActors
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ModelConfig
from maze_impala.core import ActorFailedError
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.nn.flat import flatten
from maze_impala.nn.models import StructuredPolicy
from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.torch_acting import TorchActing, make_acting, numpy_form_of
from maze_impala.play.lineup import Lineup
from maze_impala.testing import CounterEnv, CrashingEnv, DyingEnv, LivesEnv

MODEL = ModelConfig(hidden_units=[8])


def _weights(env_fn=CounterEnv):
    env = GymStructuredEnv(env_fn())
    policy = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, MODEL)
    return policy, SharedWeights(policy)


def test_rollouts_overlap_by_one_step_and_record_truncation():
    _, weights = _weights()
    actor = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=4, envs_per_actor=2, seed=0).build(0, weights)
    first, second = actor.rollout(), actor.rollout()
    a, b = first.trajectories[0], second.trajectories[0]
    assert a.observations["observation"].shape == (5, 2, 2) and a.rewards.shape == (4, 2)
    np.testing.assert_array_equal(a.observations["observation"][-1], b.observations["observation"][0])
    # CounterEnv: rewards are 1 + action, observations count steps, truncation after 5 steps.
    np.testing.assert_array_equal(a.rewards, 1.0 + a.actions["action"])
    np.testing.assert_array_equal(a.observations["observation"][:, 0, 0], [0, 1, 2, 3, 4])
    assert not a.truncated.any() and not a.terminated.any()
    assert b.truncated[0].all(), "the 5th step of every env is a truncation"
    np.testing.assert_array_equal(b.truncated_index, [[0, 0], [0, 1]])
    np.testing.assert_array_equal(b.truncated_observations["observation"], [[5, 0], [5, 0]])
    np.testing.assert_array_equal(b.observations["observation"][1, :, 0], [0, 0]), "reset after truncation"
    assert first.env_steps == 8 and first.policy_version == 0
    returns = [r.values["value"] for r in second.events if r.event == "episode_return"]
    assert len(returns) == 2 and all(5 <= x <= 10 for x in returns)
    actor.close()


@pytest.mark.parametrize("episodic_life", [True, False])
def test_a_lost_life_ends_the_learners_episode_and_not_the_games(episodic_life):
    _, weights = _weights(LivesEnv)
    spec = ActorSpec(
        {"_target_": "maze_impala.testing.lives_env", "episodic_life": episodic_life}, Lineup.of(MODEL), 12, 2, 0
    )
    actor = spec.build(0, weights)
    assert isinstance(actor.stepping, SubStepping if episodic_life else FlatStepping)
    rollout = actor.rollout()
    trajectory = rollout.trajectories[0]
    lost = [3, 7, 11] if episodic_life else [11]  # each life lasts 4 steps; the game ends with the third
    assert np.flatnonzero(trajectory.terminated[:, 0]).tolist() == lost
    assert trajectory.terminated.all(axis=1).sum() == len(lost)  # in both envs
    np.testing.assert_array_equal(trajectory.observations["observation"][4, 0], [4, 2])  # the game went on
    np.testing.assert_array_equal(trajectory.rewards, 1.0)
    returns = [r.values["value"] for r in rollout.events if r.event == "episode_return"]
    assert returns == [12.0, 12.0], "statistics count whole games"
    actor.close()


def test_episodic_life_without_lives_names_the_fix():
    with pytest.raises(ValueError, match=r"info\['lives'\].*env.episodic_life=false"):
        GymStructuredEnv(CounterEnv(), episodic_life=True).reset(seed=0)


def test_actor_pulls_new_weights_and_stamps_the_version():
    policy, weights = _weights()
    actor = ActorSpec(CounterEnv, Lineup.of(MODEL), 2, 1, seed=0).build(0, weights)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    weights.publish(policy, version=7)
    rollout = actor.rollout()
    assert rollout.policy_version == 7
    torch.testing.assert_close(flatten(actor.acting.policy), flatten(policy))


def test_sequential_and_subprocess_give_the_same_first_rollouts():
    _, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=3, envs_per_actor=2, seed=5)
    with SequentialActors(spec, weights, num_actors=2) as pool:
        seq = pool.collect(2)
    by_actor = {}  # the first rollout of each actor, in the order that actor made them
    with SubprocessActors(spec, weights, num_actors=2, queue_size_limit=4) as pool:
        while len(by_actor) < 2:
            rollout = pool.collect(1)[0]  # views a shared-memory slot until the next collect: keep a copy
            by_actor.setdefault(rollout.actor_index, copy.deepcopy(rollout))
    for r in seq:
        other = by_actor[r.actor_index].trajectories[0]
        np.testing.assert_array_equal(r.trajectories[0].actions["action"], other.actions["action"])
        np.testing.assert_allclose(r.trajectories[0].behaviour_log_probs, other.behaviour_log_probs, atol=1e-6)


def test_queue_never_exceeds_its_bound_and_lag_is_bounded():
    policy, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=2, envs_per_actor=1, seed=0)
    limit, num_actors = 3, 3
    with SubprocessActors(spec, weights, num_actors=num_actors, queue_size_limit=limit) as pool:
        deadline = time.monotonic() + 120
        while pool.queue_size() < limit and time.monotonic() < deadline:
            time.sleep(0.05)  # processes start (importing torch takes a while, longer on a loaded machine)
        sizes = []
        for _ in range(20):  # actors keep producing but must block on the full queue
            time.sleep(0.025)
            sizes.append(pool.queue_size())
        assert sizes == [limit] * 20
        lags = []
        for version in range(1, 30):
            for rollout in pool.collect(1):
                lags.append(version - 1 - rollout.policy_version)
            weights.publish(policy, version)
        assert min(lags) >= 0, "no rollout can come from a version the learner has not published"
        assert min(lags[1:limit]) >= 1, "the rollouts queued before the first update are as old as the queue is long"
        # In steady state a rollout waits behind the queued ones plus one finished per blocked actor;
        # actors race for free slots (semaphores are not FIFO), so this holds on average, not for each
        # (on a loaded machine the actors fall behind and rollouts are fresher, never staler).
        assert np.mean(lags[5:]) <= limit + num_actors


def test_in_flight_limit_follows_the_learner():
    flow = InFlightLimit(low=1, high=4)
    assert flow.limit == 4 and not flow.room(4) and flow.room(3)
    for _ in range(5):
        flow.update(waited=False, left=1)  # rollouts were left waiting: fewer will do
    assert flow.limit == 1
    flow.update(waited=False, left=0)
    assert flow.limit == 1, "a learner that finds exactly its batch keeps the limit"
    for _ in range(5):
        flow.update(waited=True, left=0)
    assert flow.limit == 4
    with pytest.raises(ValueError, match="low >= 1"):
        InFlightLimit(low=0, high=2)


def test_finished_rollouts_keep_the_queue_bound_and_batches_take_what_is_parked():
    finished = FinishedRollouts(bound=2, in_flight=InFlightLimit(low=2, high=4))
    for item in range(5):
        finished.add(item)
    assert list(finished.queue) == [0, 1] and list(finished.parked) == [2, 3, 4] and len(finished) == 5
    assert not finished.may_start(requested=0), "5 finished rollouts are beyond the limit of 4"
    assert finished.take(at_most=3, waited=False) == [0, 1, 2], "a batch may take parked rollouts, oldest first"
    assert list(finished.queue) == [3, 4] and not finished.parked
    assert finished.in_flight.limit == 3, "rollouts were left after the batch: the limit shrinks"
    assert finished.may_start(requested=0) and not finished.may_start(requested=1)
    assert finished.may_start(requested=1, at_least=4), "a learner waiting for a batch of 4 may ask for it"
    assert finished.take(at_most=3, waited=True) == [3, 4] and finished.in_flight.limit == 4
    polls = []

    def poll(timeout, at_least):  # a pool's poll: a rollout finishes whenever it waits
        polls.append((timeout, at_least))
        if timeout > 0:
            finished.add(len(polls))

    assert finished.collect(2, at_most=3, poll=poll) == [2, 3]
    assert polls == [(0.0, 0), (WAIT_SECONDS, 2), (WAIT_SECONDS, 2)], "one look first, then waits for the batch"


def test_a_slower_learner_gets_rollouts_made_with_the_weights_of_the_update_before():
    # Actors start a rollout only when the learner can take it soon: with a learner slower than
    # the actors, every rollout starts with the weights of the update before the one that uses it
    # (lag 1), instead of waiting behind a full queue and one finished rollout per actor (lag ~4).
    policy, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=2, envs_per_actor=1, seed=0)
    with SubprocessActors(spec, weights, num_actors=3, queue_size_limit=1) as pool:
        lags = []
        for version in range(1, 40):
            for rollout in pool.collect(1):
                lags.append(version - 1 - rollout.policy_version)
            time.sleep(0.05)  # the learner's update: far longer than a rollout, even on a loaded machine
            weights.publish(policy, version)
        assert pool.finished.in_flight.limit == 1
        assert lags[-10:] == [1] * 10, lags


def test_adaptive_batches_take_what_is_ready_and_lose_no_rollout():
    policy, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=2, envs_per_actor=2, seed=0)
    with SubprocessActors(spec, weights, num_actors=3, queue_size_limit=4, batch_size=4) as pool:
        check_adaptive_batches(pool, weights, policy, num_actors=3, limit=4, at_most=4)
    with SequentialActors(spec, weights, num_actors=3) as pool:
        assert len(pool.collect(1, at_most=4)) == 1, "nothing is ever ready in advance in-process"


@pytest.mark.parametrize("env_fn", [CrashingEnv, DyingEnv], ids=["raises", "killed"])
def test_failing_actor_is_a_clear_error_within_seconds(env_fn):
    _, weights = _weights(env_fn)
    spec = ActorSpec(env_fn, Lineup.of(MODEL), n_rollout_steps=5, envs_per_actor=1, seed=0)
    pool = SubprocessActors(spec, weights, num_actors=2, queue_size_limit=2)
    pool.start()
    collected = 0
    with pytest.raises(ActorFailedError) as info:
        for _ in range(100):
            pool.collect(1)
            collected += 1
    # what the pool promises, on a quiet machine or a busy one: the failure itself is reported, by the rollout that
    # meets it (each actor crashes in its 11th rollout of 5 steps), not found later by a deadline
    assert collected <= 2 * 10, collected
    message = str(info.value)
    assert "hung" not in message and "deadline" not in message, message
    assert "simulated failure" in message if env_fn is CrashingEnv else "exit code -9" in message
    processes = list(pool.processes)
    pool.close()
    assert all(not p.is_alive() for p in processes)


def test_close_stops_every_process_even_with_a_full_queue():
    _, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=2, envs_per_actor=1, seed=0)
    pool = SubprocessActors(spec, weights, num_actors=3, queue_size_limit=1)
    pool.start()
    pool.collect(1)
    processes = list(pool.processes)
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 6
    assert all(p.exitcode is not None for p in processes)
    pool.close()  # idempotent


def _actor(n_envs, env_seeds, deterministic=True, seed=0, stepping="auto"):
    from maze_impala.actors.actor import RolloutActor
    from maze_impala.envs.factory import make_env

    envs = [make_env("CartPole-v1") for _ in range(n_envs)]
    torch.manual_seed(5)  # the same policy weights for every actor of a test
    policy = StructuredPolicy(envs[0].observation_spaces_dict, envs[0].action_spaces_dict, MODEL)
    return RolloutActor(
        envs,
        SharedWeights(policy),
        make_acting(policy),
        40,
        seed,
        deterministic=deterministic,
        env_seeds=env_seeds,
        stepping=stepping,
    )


def test_batched_and_unbatched_acting_record_the_same_steps():
    seeds = [11, 12, 13]
    batched = _actor(3, seeds).rollout().trajectories[0]
    for e, seed in enumerate(seeds):
        alone = _actor(1, [seed]).rollout().trajectories[0]
        np.testing.assert_allclose(batched.observations["observation"][:, e], alone.observations["observation"][:, 0])
        np.testing.assert_array_equal(batched.actions["action"][:, e], alone.actions["action"][:, 0])
        np.testing.assert_array_equal(batched.rewards[:, e], alone.rewards[:, 0])
        np.testing.assert_array_equal(batched.terminated[:, e], alone.terminated[:, 0])


def test_the_flat_fast_path_records_what_the_general_loop_records():
    fast, general = _actor(4, None, deterministic=False), _actor(4, None, deterministic=False, stepping="general")
    assert isinstance(fast.stepping, FlatStepping) and isinstance(general.stepping, SubStepping)
    for _ in range(3):  # CartPole episodes end (terminated) within these rollouts
        a, b = fast.rollout(), general.rollout()
        ta, tb = a.trajectories[0], b.trajectories[0]
        for name in ("behaviour_log_probs", "rewards", "terminated", "truncated", "mask", "truncated_index"):
            np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)
        np.testing.assert_array_equal(ta.observations["observation"], tb.observations["observation"])
        np.testing.assert_array_equal(ta.actions["action"], tb.actions["action"])
        assert [(r.event, r.values) for r in a.events] == [(r.event, r.values) for r in b.events]
    assert ta.terminated.any()


def test_in_process_actors_run_blas_on_one_thread_until_closed():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    _, weights = _weights()
    spec = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=2, envs_per_actor=1, seed=0)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        with SequentialActors(spec, weights, num_actors=1) as pool:
            assert all(n == 1 for n in blas_threads())
            pool.collect(1)
        assert blas_threads() == before


def _libraries(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/<pid>/maps")
def test_an_actor_process_of_a_numpy_policy_never_imports_torch():
    # torch is about 1.2 s of an actor process' start and 200 MB of its memory; a numpy policy needs none of it.
    policy, weights = _weights()
    plain = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=3, envs_per_actor=2, seed=5)
    mapped = {}
    for name, spec in (("numpy", plain.in_numpy(numpy_form_of(policy))), ("torch", plain)):
        with SubprocessActors(spec, weights, num_actors=1, queue_size_limit=1) as pool:
            rollout = pool.collect(1)[0]
            assert rollout.env_steps == 6
            mapped[name] = "libtorch" in _libraries(pool.processes[0].pid)
    assert mapped == {"numpy": False, "torch": True}


def test_an_actor_acting_from_a_numpy_form_makes_the_rollouts_of_one_with_the_torch_policy():
    policy, weights = _weights()
    with torch.no_grad():  # weights of their own, so that new weights are seen to arrive
        for p in policy.parameters():
            p.mul_(5.0)
    weights.publish(policy, version=3)
    plain = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=4, envs_per_actor=3, seed=2)
    actors = [plain.build(0, weights), plain.in_numpy(numpy_form_of(policy)).build(0, weights)]
    assert isinstance(actors[0].acting, TorchActing) and isinstance(actors[1].acting, NumpyActing)
    for _ in range(3):
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(0.5)
        weights.publish(policy, version=weights.version() + 1)
        first, second = (actor.rollout() for actor in actors)
        assert first.policy_version == second.policy_version == weights.version()
        a, b = first.trajectories[0], second.trajectories[0]
        np.testing.assert_array_equal(a.actions["action"], b.actions["action"])
        np.testing.assert_allclose(a.behaviour_log_probs, b.behaviour_log_probs, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(a.observations["observation"], b.observations["observation"])


def test_actors_on_a_torch_device_act_through_torch_there_and_make_the_numpy_actors_rollouts():
    """``runner.actor_device``: the path that acts on a GPU, run on the CPU: the spec keeps no numpy form, every
    actor (in process or in a process of its own) acts through torch on the device, with the same actions."""
    from maze_impala.actors.backends import make_actors
    from maze_impala.config import ImpalaAlgorithmConfig, RunnerConfig, TrainingConfig

    policy, weights = _weights()
    plain = ActorSpec(CounterEnv, Lineup.of(MODEL), n_rollout_steps=4, envs_per_actor=3, seed=2)
    on_device = ActorSpec(CounterEnv, Lineup.of(MODEL, device="cpu"), n_rollout_steps=4, envs_per_actor=3, seed=2)
    actors = [
        plain.in_numpy(numpy_form_of(policy)).build(0, weights),
        on_device.in_numpy(numpy_form_of(policy)).build(0, weights),
    ]  # a form the device's actor does not use
    assert isinstance(actors[0].acting, NumpyActing) and isinstance(actors[1].acting, TorchActing)
    assert actors[1].acting.device == torch.device("cpu")
    first, second = (actor.rollout() for actor in actors)
    np.testing.assert_array_equal(first.trajectories[0].actions["action"], second.trajectories[0].actions["action"])
    algorithm = ImpalaAlgorithmConfig(num_actors=1, envs_per_actor=3, n_rollout_steps=4)
    config = TrainingConfig(algorithm=algorithm, runner=RunnerConfig("local", actor_device="cpu"))
    pool, _ = make_actors(on_device, policy, 0, config)
    assert pool.spec.lineup.learned.numpy_form is None  # acting on a device: through torch, whatever it exports
    with pool:
        assert pool.collect(1)[0].env_steps == 12


def test_actors_on_a_gpu_that_torch_does_not_see_are_refused_before_anything_starts():
    from maze_impala.actors.backends import check_actor_device
    from maze_impala.config import ConfigError, RunnerConfig

    with pytest.raises(ConfigError, match=r"runner.actor_device=cuda:1, and torch sees 1 GPU\(s\) here: act on"):
        check_actor_device("cuda:1", device_count=1)
    check_actor_device("cuda:0", device_count=1)
    check_actor_device(None, device_count=0)
    with pytest.raises(ConfigError, match=r"runner.actor_device must be null .*got 'gpu'"):
        RunnerConfig(actor_device="gpu")
    with pytest.raises(ConfigError, match="runner=ray: a Ray actor sees a GPU only where it reserves one"):
        RunnerConfig("ray", actor_device="cuda")
    with pytest.raises(ConfigError, match="start_method=fork: a forked process cannot use CUDA once its parent has"):
        RunnerConfig("local", start_method="fork", actor_device="cuda:0")
    RunnerConfig("local", start_method="fork", actor_device="cpu")  # no CUDA in the children: fork is fine
