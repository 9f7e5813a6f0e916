"""Ray on several nodes, simulated on this machine: actors placed on every node, a node lost mid-run, and a
training run that joins the cluster by its address.

One ``ray.cluster_utils.Cluster`` for the module: a head without CPUs (the driver's node) and two worker nodes.
"""

import time

import pytest
from poolcheck import START
from tiny import QUIET

ray = pytest.importorskip("ray", reason='the Ray backend needs pip install "maze_impala[ray]"')
from ray.cluster_utils import Cluster  # noqa: E402

from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train  # noqa: E402
from maze_impala.actors.actor import ActorSpec  # noqa: E402
from maze_impala.actors.ray_actors import RayActors, RayWeights  # noqa: E402
from maze_impala.actors.restarts import RestartPolicy  # noqa: E402
from maze_impala.config import ModelConfig  # noqa: E402
from maze_impala.envs.factory import make_env  # noqa: E402
from maze_impala.nn.models import make_policy  # noqa: E402
from maze_impala.play.lineup import Lineup  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]  # one Ray at a time: in one worker, in turn
HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 4, "health_check_initial_delay_ms": 0}
"""A lost node is declared dead after about 2 s (Ray's default: about 15 s)."""


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": HEALTH_CHECKS},
    )
    nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
    cluster.wait_for_nodes()
    yield cluster, nodes
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def _free_cpus(timeout: float = 30) -> float:
    """The connected cluster's free CPUs once all 4 are free, or after ``timeout`` s: Ray releases a finished run's
    actors asynchronously."""
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    return ray.available_resources().get("CPU", 0)


def _train_on(cluster, tmp_path, **settings):
    """Two short epochs of CartPole on ``cluster`` (``settings``: more algorithm settings); they must train."""
    algorithm = ImpalaAlgorithmConfig(n_epochs=2, epoch_length=5, envs_per_actor=4, **settings)
    runner = RunnerConfig("ray", address=cluster.address)
    result = train("CartPole-v1", algorithm, runner=runner, output=QUIET, output_dir=tmp_path / "run", seed=3)
    assert result.env_steps >= algorithm.total_env_steps


def test_a_run_joins_a_cluster_by_its_address_and_leaves_it_running(cluster, tmp_path):
    cluster, nodes = cluster
    _train_on(cluster, tmp_path)
    assert not ray.is_initialized(), "the run disconnected from the cluster it joined"
    assert all(node.remaining_processes_alive() for node in nodes), "and left the cluster running"


def test_two_learners_train_with_the_second_in_a_placement_group_on_the_cluster(cluster, tmp_path):
    cluster, _ = cluster
    _train_on(cluster, tmp_path, num_learners=2)
    ray.init(address=cluster.address)
    try:
        groups = ray.util.placement_group_table().values()
        assert [g["bundles"] for g in groups] == [{0: {"CPU": 1.0}}], "one bundle: learner 1's"
        assert all(g["state"] == "REMOVED" for g in groups), "and the run removed it"
        assert _free_cpus() == 4, "no learner or actor holds a CPU of the cluster"
    finally:
        ray.shutdown()


def test_a_ray_learner_that_dies_fails_the_run_by_name_with_its_checkpoint_kept(cluster, tmp_path, monkeypatch):
    from maze_impala.checkpoints import read_checkpoint
    from maze_impala.impala.replicas import DataParallelLearner
    from maze_impala.train.trainer import TrainingError

    cluster, _ = cluster
    updates, killed_at, real_step = [], [], DataParallelLearner.step

    def step(self, rollouts, train_policy=True):
        updates.append(self.version)
        if len(updates) == 7:  # in epoch 2 of 5 updates each, after epoch 1's checkpoint
            ray.kill(self.replicas.actors[0])
            killed_at.append(time.monotonic())
        return real_step(self, rollouts, train_policy)

    monkeypatch.setattr(DataParallelLearner, "step", step)
    algorithm = ImpalaAlgorithmConfig(n_epochs=3, epoch_length=5, envs_per_actor=4, num_learners=2)
    quiet = OutputConfig(console=False, tensorboard=False, progress=False, plot=False)
    with pytest.raises(TrainingError, match=r"epoch 2: LearnerFailedError: learner 1 died \("):
        train(
            "CartPole-v1",
            algorithm,
            runner=RunnerConfig("ray", address=cluster.address),
            output=quiet,
            output_dir=tmp_path / "run",
            seed=3,
        )
    # the kill is noticed long before runner.learner_timeout_s (300 s) would end the wait
    assert time.monotonic() - killed_at[0] < 60, "no wait for the learner's timeout"
    assert read_checkpoint(tmp_path / "run" / "model_last.pt")["epoch"] == 1


def test_actors_spread_over_the_nodes_and_come_back_after_a_node_is_lost(cluster):
    cluster, nodes = cluster
    ray.init(address=cluster.address)
    try:  # an earlier test's actors may still hold a node's CPUs, and SPREAD places only on nodes with free ones
        assert _free_cpus() == 4, "the cluster's CPUs are free before the actors are placed"
    finally:
        ray.shutdown()
    model = ModelConfig(hidden_units=[16])
    policy = make_policy(make_env("CartPole-v1"), model)
    weights = RayWeights(policy)
    spec = ActorSpec("CartPole-v1", Lineup.of(model), n_rollout_steps=16, envs_per_actor=4, seed=0)
    pool = RayActors(
        spec, weights, num_actors=2, queue_size_limit=1, address=cluster.address, restarts=RestartPolicy(max_restarts=3)
    )
    with pool:
        pool.collect(1)
        placed = [node for node, _ in pool.placements()]
        assert sorted(placed) == sorted(node.node_id for node in nodes), "one actor on each worker node"
        lost = nodes[1]
        index = placed.index(lost.node_id)
        cluster.remove_node(lost)
        started, version = time.monotonic(), 0
        while not pool.hosts[index].delivered or pool.hosts[index].generation == 0:
            # ends as soon as it delivers; under load a fresh Ray actor's start-up has taken over a minute
            assert time.monotonic() - started < START, f"the lost node's actor did not come back within {START} s"
            pool.collect(1)  # the other node's actor carries on meanwhile
            version += 1
            weights.publish(policy, version)
        assert [node for node, _ in pool.placements()] == [nodes[0].node_id] * 2, "back on the remaining node"
        assert [host.generation for host in pool.hosts].count(1) == 1
