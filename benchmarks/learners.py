"""Several learners against one, at the same batch: learner samples/s, alternating rounds on one machine.

    python benchmarks/learners.py                                   # CartPole MLP, 1 and 2 learners
    python benchmarks/learners.py --learners 1 2 4 --threads 16      # a many-core machine
    python benchmarks/learners.py --model image_encoder=nature --env env=minatar --batch 4
    python benchmarks/learners.py --device cuda                      # learner 0 (and the others) on the GPU

Each configuration updates on one fixed batch (``--batch`` rollouts of the env's actors,
``algorithm.n_rollout_steps`` x ``envs_per_actor`` each) with the shipped algorithm settings
(or ``--set``), and splits ``--threads`` torch threads evenly over its learners (learner 0 in
this process, the others in processes of their own, as ``algorithm.num_learners`` runs them).
With ``--per-learner``, each learner gets ``--threads`` (a second learner adds cores: how it scales).
Rounds alternate the configurations; the medians and their ratio to one learner are printed.
It also prints what learner 0 sends each other learner per update (its share of the batch,
pickled) and how long preparing and sending it takes: the serial part of every update.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.config.workloads import shipped_env, shipped_model
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.replica_processes import ReplicaProcesses
from maze_impala.impala.replicas import DataParallelLearner, shards_of
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup


def _settings(args: argparse.Namespace) -> tuple[object, ImpalaAlgorithmConfig, ModelConfig]:
    """The env, algorithm and model: a shipped env family's (``env=minatar``) or an env id with the defaults;
    ``--set`` and ``--model`` on top."""
    env: object = args.env
    algorithm: dict = {}
    model: dict = {}
    if args.env.startswith("env="):
        env, algorithm = shipped_env(args.env.removeprefix("env="))
        model = shipped_model(args.env.removeprefix("env="))
    algorithm |= {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    model |= {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.model)}
    return env, ImpalaAlgorithmConfig(**algorithm, device=args.device), ModelConfig(**model)


def build(env: object, algorithm: ImpalaAlgorithmConfig, model: ModelConfig, batch: int):
    probe = make_env(env)
    torch.manual_seed(0)
    policy = make_policy(probe, model)
    critic = make_critic(probe.observation_spaces_dict, probe.agent_counts_dict, model)
    spec = ActorSpec(env, Lineup.of(model), algorithm.n_rollout_steps, algorithm.envs_per_actor, seed=0)
    actor = spec.build(0, SharedWeights(policy))
    rollouts = [actor.rollout() for _ in range(batch)]
    actor.close()
    probe.close()
    return policy, critic, rollouts


def samples_per_second(parts, algorithm, rollouts, learners: int, each: int, seconds: float) -> float:
    """Learner samples (env steps of the batch) per second over ``seconds`` after 3 updates of warm-up, ``each``
    torch threads per learner."""
    policy, critic = parts
    torch.set_num_threads(each)
    events = EventHub().publisher(MultiStepIMPALAEvents)
    learner = ImpalaLearner(policy, critic, algorithm, events)
    if learners > 1:
        learner = DataParallelLearner(learner, ReplicaProcesses(learners, 120.0, threads=each))
    try:
        for _ in range(3):
            learner.step(rollouts)
        updates, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            learner.step(rollouts)
            updates += 1
        return updates * sum(r.env_steps for r in rollouts) / (time.perf_counter() - started)
    finally:
        learner.close()


def serial_part(parts, algorithm, rollouts, learners: int) -> dict[str, float]:
    """What learner 0 does alone each update with ``learners`` learners: prepare the batch and pickle the others'
    shares (seconds), and the bytes it sends each other learner."""
    policy, critic = parts
    learner = ImpalaLearner(policy, critic, algorithm, EventHub().publisher(MultiStepIMPALAEvents))
    started = time.perf_counter()
    shards = shards_of(learner, rollouts, True, learners)
    sent = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in shards[1:]]
    return {"serial_seconds": time.perf_counter() - started, "bytes_per_learner": len(sent[0]) if sent else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", help="an env id, or env=<family> for a shipped config")
    parser.add_argument("--learners", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads, all learners")
    parser.add_argument("--per-learner", action="store_true", help="--threads per learner (more learners: more cores)")
    parser.add_argument("--batch", type=int, default=None, help="rollouts per update (default actors_batch_size)")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings")
    parser.add_argument("--model", nargs="*", default=[], metavar="FIELD=VALUE", help="model settings")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    env, algorithm, model = _settings(args)
    policy, critic, rollouts = build(env, algorithm, model, args.batch or algorithm.actors_batch_size)
    samples = sum(r.env_steps for r in rollouts)
    print(
        f"env {args.env}, {samples} samples per update, {algorithm.n_sgd_passes} passes x "
        f"{algorithm.n_sgd_minibatches} minibatches, {args.threads} threads{' each' if args.per_learner else ''}, "
        f"device {args.device}"
    )
    rates: dict[int, list[float]] = {n: [] for n in args.learners}
    for index in range(args.rounds):
        order = args.learners if index % 2 == 0 else list(reversed(args.learners))
        for n in order:
            each = args.threads if args.per_learner else max(1, args.threads // n)
            rates[n].append(samples_per_second((policy, critic), algorithm, rollouts, n, each, args.seconds))
        print(
            f"round {index + 1}: " + ", ".join(f"{n} learner(s) {rates[n][-1]:,.0f}/s" for n in args.learners),
            flush=True,
        )
    base = statistics.median(rates[args.learners[0]])
    rows = []
    for n in args.learners:
        median = statistics.median(rates[n])
        row = {"learners": n, "samples_per_s": median, "ratio": median / base}
        if n > 1:
            row |= serial_part((policy, critic), algorithm, rollouts, n)
        rows.append(row)
        extra = (
            (
                f", learner 0 alone {row['serial_seconds'] * 1e3:.1f} ms per update, "
                f"{row['bytes_per_learner'] / 1e6:.2f} MB to each other learner"
            )
            if n > 1
            else ""
        )
        print(f"{n} learner(s): {median:,.0f} samples/s (median of {args.rounds}), {median / base:.2f}x{extra}")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "env": args.env,
                    "samples": samples,
                    "threads": args.threads,
                    "device": args.device,
                    "rows": rows,
                    "rounds": rates,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
