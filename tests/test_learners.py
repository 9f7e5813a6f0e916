"""Several learners (``algorithm.num_learners``): exact against one learner on the joint batch, owned, and failing
cleanly.

The exactness tests run the learners as threads of this process, each with its own gloo group (the same code as
in learner processes, minus the transport); the others start learner processes as a run does.
"""

import copy
import functools
import os
import signal
import threading
import time

import pytest
import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.examples import CoordinationEnv
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.parallel import ProcessGroup, host_store
from maze_impala.impala.replica_processes import ReplicaProcesses
from maze_impala.impala.replicas import DataParallelLearner, LearnerFailedError, shards_of
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup
from maze_impala.testing import TwoStepEnv

TWO_KEYS = functools.partial(TwoStepEnv, n_steps=4, end_mid_step_at=2)


def _parts(env_fn, recurrent="none", normalize=True, seed=0):
    env = make_env(env_fn)
    model = ModelConfig(hidden_units=[16], recurrent=recurrent, recurrent_units=8, normalize_observations=normalize)
    torch.manual_seed(seed)
    return make_policy(env, model), make_critic(env.observation_spaces_dict, env.agent_counts_dict, model), model


def _recording_learner(policy, critic, config, group=None):
    hub, seen = EventHub(), []
    hub.listeners.append(lambda record: seen.append(record))
    learner = ImpalaLearner(
        copy.deepcopy(policy), copy.deepcopy(critic), config, hub.publisher(MultiStepIMPALAEvents), group=group
    )
    return learner, seen


def _in_threads(*calls):
    """Run the calls at once, each in a thread; re-raise the first failure."""
    errors = []

    def run(call):
        try:
            call()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]


def _groups(size):
    store = host_store(size, 60.0)
    groups = [None] * size

    def join(rank):
        groups[rank] = ProcessGroup(rank, size, 60.0, port=store.port, store=store if rank == 0 else None)

    _in_threads(*(functools.partial(join, r) for r in range(size)))
    return groups


def _metrics(seen):
    """The update's learner metrics in publication order: (event, step or critic key, value)."""
    return [
        (r.event, r.values.get("step_key", r.values.get("critic_key")), r.values["value"])
        for r in seen
        if r.interface == "MultiStepIMPALAEvents" and r.event != "policy_lag" and not r.event.startswith("time_")
    ]


@pytest.mark.parametrize(
    ("env_fn", "recurrent"),
    [(TWO_KEYS, "lstm"), (CoordinationEnv, "none")],
    ids=["two-step-keys-lstm", "three-agents-mlp"],
)
def test_two_learners_on_a_split_batch_make_the_update_of_one_on_the_whole(env_fn, recurrent):
    policy, critic, model = _parts(env_fn, recurrent)
    config = ImpalaAlgorithmConfig(
        n_sgd_passes=3, n_sgd_minibatches=2, lr=3e-3, envs_per_actor=8, max_grad_norm=0.05, normalize_advantages=False
    )  # a clip that bites: the norms must be joint; each learner normalises advantages over its own share
    actor = ActorSpec(env_fn, Lineup.of(model), n_rollout_steps=6, envs_per_actor=5, seed=1).build(
        0, SharedWeights(policy)
    )
    one, one_seen = _recording_learner(policy, critic, config)
    groups = _groups(2)
    pair = [_recording_learner(policy, critic, config, group) for group in groups]
    (first, first_seen), (second, _) = pair
    for _ in range(3):
        rollouts = [actor.rollout(), actor.rollout()]  # 10 columns a step key, 5 per minibatch
        one_seen.clear(), first_seen.clear()
        one.step(rollouts)
        shards = shards_of(first, rollouts, True, 2)
        assert all(mb[key].mask.shape[1] < 10 for shard in shards for mb in shard.minibatches for key in mb)
        _in_threads(functools.partial(first.update, shards[0]), functools.partial(second.update, shards[1]))
        for name, p in one.policy.state_dict().items():  # weights, and the normalisers' statistics
            torch.testing.assert_close(first.policy.state_dict()[name], p, rtol=1e-5, atol=1e-6, msg=name)
            assert torch.equal(first.policy.state_dict()[name], second.policy.state_dict()[name]), name
        for a, b in zip(one.critic.parameters(), first.critic.parameters()):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        for a, b in zip(first.optimizer.exp_avg_sqs, second.optimizer.exp_avg_sqs):
            assert torch.equal(a, b), "the learners' optimizer states stay identical"
        ours, theirs = _metrics(first_seen), _metrics(one_seen)
        assert [m[:2] for m in ours] == [m[:2] for m in theirs]
        assert any(m[0] == "policy_grad_norm" and m[2] > 0.05 for m in ours), "clipping bit"
        for (event, key, value), (_, _, expected) in zip(ours, theirs):
            assert value == pytest.approx(expected, rel=1e-4, abs=1e-6), (event, key)
    assert first.version == second.version == one.version == 3


def test_a_minibatch_with_fewer_trajectories_than_learners_is_refused_by_name():
    policy, critic, model = _parts("CartPole-v1", normalize=False)
    config = ImpalaAlgorithmConfig(envs_per_actor=2)
    actor = ActorSpec("CartPole-v1", Lineup.of(model), n_rollout_steps=4, envs_per_actor=2, seed=1).build(
        0, SharedWeights(policy)
    )
    learner, _ = _recording_learner(policy, critic, config)
    with pytest.raises(ValueError, match=r"num_learners=3 .* at least 3 trajectories of step key 0"):
        learner.prepare([actor.rollout()]).split(3)


def _process_learner(env_fn="CartPole-v1", timeout_s=60.0, num_learners=2):
    policy, critic, model = _parts(env_fn, normalize=True)
    config = ImpalaAlgorithmConfig(
        n_sgd_passes=2, n_sgd_minibatches=1, envs_per_actor=4, num_learners=num_learners, normalize_advantages=False
    )  # each learner would normalise its own share
    actor = ActorSpec(env_fn, Lineup.of(model), n_rollout_steps=8, envs_per_actor=4, seed=2).build(
        0, SharedWeights(policy)
    )
    learner, seen = _recording_learner(policy, critic, config)
    return DataParallelLearner(learner, ReplicaProcesses(num_learners, timeout_s, threads=1)), actor, seen


def test_learner_processes_start_from_learner_zeros_state_follow_it_and_stop_with_it():
    parallel, actor, _ = _process_learner()
    alone, _ = _recording_learner(parallel.learner.policy, parallel.learner.critic, parallel.learner.config)
    processes = list(parallel.replicas.processes)
    try:
        alone.step([actor.rollout()])
        parallel.load_state_dict(alone.state_dict())  # as a resume does: learner 1 must get it too
        for _ in range(2):
            rollouts = [actor.rollout()]
            alone.step(rollouts)
            parallel.step(rollouts)
        for name, p in alone.policy.state_dict().items():
            torch.testing.assert_close(parallel.policy.state_dict()[name], p, rtol=1e-5, atol=1e-6, msg=name)
        assert parallel.version == 3
    finally:
        parallel.close()
        actor.close()
    assert not any(p.is_alive() for p in processes)
    parallel.close()  # twice is harmless


def test_a_killed_learner_fails_the_update_at_once_by_name():
    parallel, actor, _ = _process_learner()
    try:
        parallel.step([actor.rollout()])
        victim = parallel.replicas.processes[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        started = time.monotonic()
        with pytest.raises(LearnerFailedError, match=r"learner 1 \(pid \d+\) (was killed by signal SIGKILL|could not)"):
            parallel.step([actor.rollout()])
        assert time.monotonic() - started < 10
    finally:
        parallel.close()
        actor.close()


def test_a_hung_learner_fails_the_update_after_the_timeout():
    parallel, actor, _ = _process_learner(timeout_s=3.0)
    victim = parallel.replicas.processes[0]
    try:
        parallel.step([actor.rollout()])
        os.kill(victim.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(LearnerFailedError, match=r"learner_timeout_s=3 s"):
            parallel.step([actor.rollout()])
        assert time.monotonic() - started < 30
    finally:
        os.kill(victim.pid, signal.SIGCONT)
        parallel.close()
        actor.close()
    assert not victim.is_alive()


@pytest.mark.slow
def test_a_run_whose_learner_dies_stops_with_its_checkpoint_intact_and_resumes_with_two_learners(tmp_path, monkeypatch):
    from maze_impala import OutputConfig, RunnerConfig, train
    from maze_impala.checkpoints import read_checkpoint
    from maze_impala.train.trainer import TrainingError

    updates, real_step = [], DataParallelLearner.step

    def step(self, rollouts, train_policy=True):
        updates.append(self.version)
        if len(updates) == 12:  # in epoch 3 of 5 updates each, after epoch 2's checkpoint
            os.kill(self.replicas.processes[0].pid, signal.SIGKILL)
        return real_step(self, rollouts, train_policy)

    monkeypatch.setattr(DataParallelLearner, "step", step)
    quiet = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
    algorithm = ImpalaAlgorithmConfig(n_epochs=4, epoch_length=5, envs_per_actor=4, num_learners=2, n_sgd_minibatches=1)
    run = tmp_path / "run"
    with pytest.raises(TrainingError, match=r"epoch 3: LearnerFailedError: learner 1 \(pid \d+\) was killed"):
        train("CartPole-v1", algorithm, runner=RunnerConfig("local"), output=quiet, output_dir=run, seed=2)
    assert read_checkpoint(run / "model_last.pt")["epoch"] == 2
    monkeypatch.setattr(DataParallelLearner, "step", real_step)
    result = train("CartPole-v1", algorithm, runner=RunnerConfig("local"), output=quiet, resume_from=run, seed=2)
    assert result.epochs == 4 and read_checkpoint(run / "model_last.pt")["version"] == 20


def test_cuda_learners_that_would_share_a_gpu_are_refused_before_anything_starts(tmp_path, monkeypatch):
    """Two CUDA learners on a machine with one GPU: NCCL fails at the first gradient sum, so the run is refused when
    it is built, naming what to do (torch's GPU count faked: the refusal comes before any CUDA call)."""
    from maze_impala import OutputConfig, RunnerConfig, train
    from maze_impala.config import ConfigError
    from maze_impala.impala.replicas import check_devices

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    quiet = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
    with pytest.raises(ConfigError, match=r"num_learners=2 with algorithm.device=cuda needs a GPU for each learner"):
        train(
            "CartPole-v1",
            ImpalaAlgorithmConfig(device="cuda", num_learners=2),
            runner=RunnerConfig("dev"),
            output=quiet,
            output_dir=tmp_path / "run",
        )
    assert not (tmp_path / "run" / "model_last.pt").exists()
    check_devices("cuda", 2, "local", device_count=2)  # a GPU each: fine
    with pytest.raises(ConfigError, match="start_method=fork: a forked learner cannot use CUDA once its parent has"):
        check_devices("cuda", 2, "local", "fork", device_count=2)
    check_devices("cpu", 2, "local", "fork", device_count=0)
    check_devices("cuda", 2, "ray", device_count=1)  # Ray places each on a GPU of the cluster
    check_devices("cpu", 4, "local", device_count=0)
