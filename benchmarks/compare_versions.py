"""Two installed versions of maze_impala, alternating in one run: actors-only and training env steps/s (CartPole, or
another env), and the bytes of a rollout.

    python -m venv --system-site-packages /tmp/old
    /tmp/old/bin/pip install --no-deps <a checkout of the other version>
    python benchmarks/compare_versions.py --old-python /tmp/old/bin/python --old-benchmarks <that checkout>/benchmarks
    python benchmarks/compare_versions.py ... --epochs 0 --no-actors --learner --same-model --model recurrent=lstm
    python benchmarks/compare_versions.py ... --epochs 0 --bytes --model image_encoder=flatten \
        --env '{"_target_": "ale_py.env.AtariEnv", "game": "pong", "repeat_action_probability": 0.25}'

Each round measures both versions one after the other, the order alternating from round to round, each in a
fresh process with its own ``benchmarks/throughput.py``: actors only (2 actors x the shipped 32 envs or
``--envs-per-actor``, real policy, rollouts discarded) for ``--seconds``, then training with ``runner=local``
(``--epochs`` epochs of 25 updates; the median over the epochs after the first), and with ``--learner`` the
learner alone: samples/s on one rollout (``--envs-per-actor`` x ``--rollout-steps``) with ``--learner-passes`` SGD
passes, on one thread, for ``--seconds`` after 3 updates of warm-up. This machine's speed moves
from minute to minute, so only the ratios of figures taken side by side mean much: the medians over the rounds
and their ratios are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from throughput import figure  # benchmarks/ is on sys.path: this script's folder

ROUND = """
import argparse, json, pickle, sys
sys.path.insert(0, sys.argv[1])
import throughput
settings = json.loads(sys.argv[2])

def rollout_bytes(args):
    # the bytes of one rollout as it travels (pickled, arrays included): as both versions build their actors
    from maze_impala.actors.actor import ActorSpec
    from maze_impala.actors.subprocess import SubprocessActors
    from maze_impala.actors.weights import SharedWeights
    from maze_impala.envs.factory import make_env
    from maze_impala.nn.models import make_policy
    from maze_impala.config import ModelConfig
    model = throughput.model_of(args) if hasattr(throughput, "model_of") else ModelConfig(hidden_units=args.hidden)
    try:  # a release whose ActorSpec takes a Lineup; earlier ones take the model
        from maze_impala.play.lineup import Lineup
        acts = Lineup.of(model)
    except (ImportError, AttributeError):
        acts = model
    spec = ActorSpec(args.env, acts, args.n_rollout_steps, args.envs_per_actor, seed=0)
    with SubprocessActors(spec, SharedWeights(make_policy(make_env(args.env), model)), 1, 1, batch_size=1) as pool:
        return len(pickle.dumps(pool.collect(1)[0], protocol=5))

if __name__ == "__main__":
    import torch  # imported before the timed parts, as the benchmarks do
    args = argparse.Namespace(env=settings["env"], hidden=[128, 128], num_actors=2,
                              envs_per_actor=settings["envs_per_actor"], n_rollout_steps=settings["rollout_steps"],
                              actors_batch_size=1, min_actors_batch_size=None, device="cpu", actor_device=None,
                              model=settings["model"])
    if hasattr(throughput, "resolve"):  # a throughput.py that completes its arguments (the family's settings)
        throughput.resolve(args)
    figures = {}
    if settings["actors"]:
        figures["actors_only"] = throughput.actors_only(args, settings["seconds"])
    if settings["learner"]:  # the learner alone on one rollout of the env, one thread, the shipped algorithm
        from calibration import learner_updates_per_second
        from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
        model = throughput.model_of(args) if hasattr(throughput, "model_of") else ModelConfig(hidden_units=args.hidden)
        algorithm = ImpalaAlgorithmConfig(n_sgd_passes=settings["learner_passes"], envs_per_actor=args.envs_per_actor,
                                          n_rollout_steps=args.n_rollout_steps)
        rate, samples = learner_updates_per_second(args.env, algorithm, model, seconds=settings["seconds"])
        figures["learner_samples"] = rate * samples
    if settings["epochs"]:
        figures["training"] = throughput.training(args, "local", settings["epochs"])["env_steps_per_s"]
    if settings["bytes"]:
        figures["rollout_bytes"] = rollout_bytes(args)
    print(json.dumps(figures))
"""


def measure(python: str, benchmarks: Path, settings: dict) -> dict[str, float]:
    # from a directory without a source tree: each python imports the maze_impala installed in its environment
    proc = subprocess.run(
        [python, "-c", ROUND, str(benchmarks), json.dumps(settings)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{python} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-python", required=True, help="the python of the environment holding the other version")
    parser.add_argument("--old-benchmarks", type=Path, required=True, help="that version's benchmarks/ folder")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of each actors-only measurement")
    parser.add_argument(
        "--epochs", type=int, default=4, help="epochs of 25 updates of each training measurement (0: none)"
    )
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        help="a Gymnasium id, or a JSON env config with _target_, that both versions can make",
    )
    parser.add_argument(
        "--model",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="model settings of the new version (the old one: its default MLP)",
    )
    parser.add_argument(
        "--same-model", action="store_true", help="--model is the model of both versions (else of the new only)"
    )
    parser.add_argument("--no-actors", action="store_true", help="no actors-only measurement")
    parser.add_argument("--learner", action="store_true", help="also the learner alone (samples/s, one thread)")
    parser.add_argument("--learner-passes", type=int, default=8, help="SGD passes of the learner's updates")
    parser.add_argument("--bytes", action="store_true", help="also the bytes of one rollout of each version")
    parser.add_argument("--envs-per-actor", type=int, default=32, help="envs in each of the 2 actors")
    parser.add_argument("--rollout-steps", type=int, default=32, help="steps of each rollout")
    args = parser.parse_args()
    sides = {"old": (args.old_python, args.old_benchmarks), "new": (sys.executable, Path(__file__).parent)}
    results: dict[str, dict[str, list[float]]] = {side: {} for side in sides}
    for index in range(args.rounds):
        for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
            python, benchmarks = sides[side]
            settings = {
                "env": json.loads(args.env) if args.env.startswith("{") else args.env,
                "seconds": args.seconds,
                "epochs": args.epochs,
                "bytes": args.bytes,
                "envs_per_actor": args.envs_per_actor,
                "rollout_steps": args.rollout_steps,
                "model": args.model if side == "new" or args.same_model else [],
                "actors": not args.no_actors,
                "learner": args.learner,
                "learner_passes": args.learner_passes,
            }
            figures = measure(python, benchmarks.resolve(), settings)
            for name, value in figures.items():
                results[side].setdefault(name, []).append(value)
            print(f"round {index} {side}: " + ", ".join(f"{k} {figure(v)}" for k, v in figures.items()), flush=True)
    print()
    whose = "model" if args.same_model else "new model"
    print(f"{args.env}; {whose}: {' '.join(args.model) or 'the default'}")
    print("| figure (median of rounds) | old | new | new / old |")
    print("|---|---|---|---|")
    for name in results["new"]:
        old, new = statistics.median(results["old"][name]), statistics.median(results["new"][name])
        print(f"| {name} | {figure(old)} | {figure(new)} | {new / old:.3f} |")


if __name__ == "__main__":
    main()
