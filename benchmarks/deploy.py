"""How fast a deployed policy decides: one decision's latency (p50 and p99, batch 1) and the decisions per second at
batch 64, for each model kind and backend, beside ``Player`` (what ``load_policy`` users act with) on torch and, where
the policy has one, on its numpy form (``Player``'s default, the actors' own way to act).

    python benchmarks/deploy.py                       # every kind, every backend, one core
    python benchmarks/deploy.py --kinds cartpole-mlp --seconds 2

Each kind's policy is built untrained for its env (the timings do not depend on the weights) and exported to a
temporary folder; everything runs in this process on one thread (torch, numpy's BLAS and onnxruntime alike), the
backends of a kind one after another on the same observations.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from maze_impala import ModelConfig
from maze_impala.checkpoints import save_checkpoint
from maze_impala.deploy import DeployedPolicy
from maze_impala.deploy.export import ExportError, export_policy
from maze_impala.envs.factory import make_env
from maze_impala.nn.models import make_policy
from maze_impala.nn.torch_acting import Player
from maze_impala.play.spec import PolicySpec

KINDS = {
    "cartpole-mlp": ("CartPole-v1", {}),
    "stateless-cartpole-lstm": ({"_target_": "maze_impala.envs.examples.StatelessCartPole"}, {"recurrent": "lstm"}),
    "pixel-goal-impala-cnn": ({"_target_": "maze_impala.envs.examples.PixelGoalEnv"}, {"image_encoder": "impala"}),
}


def _checkpoint(folder: Path, env_spec: object, model: dict) -> Path:
    env = make_env(env_spec)
    policy = make_policy(env, ModelConfig(**model))
    env.close()
    path = folder / "model.pt"
    record = {"env": env_spec, "model": asdict(ModelConfig(**model))}
    save_checkpoint(path, {"policy": policy.state_dict(), "config": record})
    return path


def _time(call, seconds: float) -> list[float]:
    """Seconds of each call, for ``seconds`` after a warm-up."""
    for _ in range(20):
        call()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def measure(kind: str, seconds: float) -> list[dict]:
    env_spec, model = KINDS[kind]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint = _checkpoint(folder, env_spec, model)
        env = make_env(env_spec)
        obs, _ = env.reset(seed=0)
        key = env.actor_id().step_key
        actor = tuple(env.actor_id())
        space = env.observation_spaces_dict[key]
        batch = {k: np.stack([np.asarray(space.sample()[k]) for _ in range(64)]) for k in space.spaces}
        policy = PolicySpec.from_checkpoint(checkpoint).policy(env)
        for backend in ("torch", "auto"):  # auto: the numpy form, where the policy has one, as the actors act
            player = Player(policy, backend=backend)
            name = "torch" if type(player.acting).__name__ == "TorchActing" else "numpy form"
            if backend == "auto" and name == "torch":
                continue  # the same as the row above
            one = _time(lambda: player(obs, env.actor_id()), seconds)  # noqa: B023
            rows.append({"kind": kind, "backend": f"Player ({name})", "times": one, "batch64": None})
        for fmt in ("numpy", "onnx"):
            out = folder / fmt
            try:
                export_policy(checkpoint, out, fmt)
            except ExportError:
                continue
            deployed = DeployedPolicy.load(out)
            state = deployed.initial_state(key, 1)
            one = _time(lambda: deployed.act(obs, actor, state), seconds)  # noqa: B023
            big = _time(lambda: deployed.act_batch(batch, key), seconds)  # noqa: B023
            rows.append({"kind": kind, "backend": fmt, "times": one, "batch64": 64 / statistics.median(big)})
        env.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds of each case")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| model | backend | batch 1: p50 us | p99 us | vs Player on torch, p50 | batch 64: decisions/s |")
    print("|---|---|---|---|---|---|")
    with threadpool_limits(1):
        for kind in args.kinds:
            rows = measure(kind, args.seconds)
            base = np.percentile(rows[0]["times"], 50)
            for row in rows:
                p50, p99 = (np.percentile(row["times"], q) * 1e6 for q in (50, 99))
                rate = "-" if row["batch64"] is None else f"{row['batch64']:,.0f}"
                cells = [row["kind"], row["backend"], f"{p50:.1f}", f"{p99:.1f}", f"{base * 1e6 / p50:.1f}x", rate]
                print(f"| {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
