"""Ray's overhead and recovery times on a simulated cluster (``ray.cluster_utils.Cluster``: several nodes, one machine).

python benchmarks/ray_cluster.py                      # 2 actors, 3 epochs of 50 updates, 2 repeats
python benchmarks/ray_cluster.py --actors 4 --epochs 4 --repeats 3

Throughput: CartPole-v1 training with the shipped settings, ``runner=local`` and ``runner=ray``
on a cluster of a head (no CPUs) and two worker nodes (the actors spread over both;
where they ran is printed), with the same number of actors, alternating in one run so
that the machine's load is shared alike; env steps per second over the epochs after the
first (start-up excluded), and their ratio. Recovery: on the same cluster, a pool's actor
is SIGKILLed (seconds until its replacement's first rollout), then a worker node is
removed (seconds until its actor is back on the other node).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time

import pandas as pd
import ray
from harness import QUIET
from ray.cluster_utils import Cluster

from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, train
from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.ray_actors import RayActors, RayWeights
from maze_impala.actors.restarts import RestartPolicy
from maze_impala.config import ModelConfig
from maze_impala.envs.factory import make_env
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup

RATE = StatKey.of(RunEvents.env_steps_per_second, "last").column()
HEALTH_CHECKS = {"health_check_period_ms": 500, "health_check_failure_threshold": 4, "health_check_initial_delay_ms": 0}


def steps_per_second(runner: RunnerConfig, algorithm: ImpalaAlgorithmConfig) -> float:
    with tempfile.TemporaryDirectory() as out:
        train("CartPole-v1", algorithm, runner=runner, output=QUIET, output_dir=out, seed=1)
        rates = pd.read_csv(os.path.join(out, "stats.csv"))[RATE].to_numpy()
    return float(statistics.mean(rates[1:]))


def recovery(cluster: Cluster, nodes: list, num_actors: int) -> tuple[list[str], float, float]:
    """Where the actors run; seconds from a SIGKILL of an actor to its replacement's first rollout, and from a
    node's loss to the same."""
    model = ModelConfig()
    policy = make_policy(make_env("CartPole-v1"), model)
    weights = RayWeights(policy)
    spec = ActorSpec("CartPole-v1", Lineup.of(model), n_rollout_steps=32, envs_per_actor=32, seed=0)
    pool = RayActors(spec, weights, num_actors, 1, address=cluster.address, restarts=RestartPolicy(max_restarts=5))
    times = []
    with pool:
        pool.collect(1)
        where = [node[:8] for node, _ in pool.placements()]
        for fault in ("kill", "node"):
            placed = pool.placements()
            if fault == "kill":
                index = 0
                os.kill(placed[index][1], signal.SIGKILL)
            else:
                index = [node for node, _ in placed].index(nodes[1].node_id)
                cluster.remove_node(nodes[1])
            started, generation = time.monotonic(), pool.hosts[index].generation
            while pool.hosts[index].generation == generation or not pool.hosts[index].delivered:
                pool.collect(1)
            times.append(time.monotonic() - started)
    return where, times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    algorithm = ImpalaAlgorithmConfig(num_actors=args.actors, n_epochs=args.epochs)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": HEALTH_CHECKS},
    )
    per_node = -(-args.actors // 2)
    nodes = [cluster.add_node(num_cpus=per_node + 1) for _ in range(2)]
    cluster.wait_for_nodes()
    try:
        rates: dict[str, list[float]] = {"local": [], "ray (2 nodes)": []}
        for _ in range(args.repeats):
            rates["local"].append(steps_per_second(RunnerConfig("local"), algorithm))
            rates["ray (2 nodes)"].append(steps_per_second(RunnerConfig("ray", address=cluster.address), algorithm))
        ray.init(address=cluster.address)
        where, kill_s, node_s = recovery(cluster, nodes, args.actors)
        ray.shutdown()
    finally:
        cluster.shutdown()
    local = statistics.median(rates["local"])
    print(
        f"CartPole-v1, {args.actors} actors, {args.epochs} epochs of 50 updates, {args.repeats} runs each, "
        f"{os.cpu_count()} cores; actors on nodes {where}"
    )
    print("| runner | env steps/s (median) | runs | vs local |")
    print("|---|---|---|---|")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} | {', '.join(f'{v:,.0f}' for v in values)} | {median / local:.2f} |")
    print(f"kill -9 of a Ray actor -> its replacement's first rollout: {kill_s:.1f} s")
    print(
        f"a node removed -> its actor's first rollout on the other node: {node_s:.1f} s "
        f"(Ray's health checks at {HEALTH_CHECKS['health_check_period_ms']} ms)"
    )


if __name__ == "__main__":
    main()
