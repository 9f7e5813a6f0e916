"""The learner alone on a device: updates and samples per second, and what one update asks of the device.

    python benchmarks/gpu.py                                   # on cuda if torch sees one, else cpu
    python benchmarks/gpu.py --device cpu --tiny               # small batches: the tests' smoke run
    python benchmarks/gpu.py --models mlp impala --rollouts 1 4 16 64 --seconds 5
    python benchmarks/gpu.py --models mlp --rollouts 1 --compile off default --precision float32 bf16

Models (the shipped settings of each): ``mlp``, CartPole-v1's 128x128 MLP with 8 SGD passes a batch; ``impala`` and
``nature``, ``env=atari``'s 4x84x84 uint8 frames through the IMPALA or the Nature CNN, 1 pass. A batch is
``--rollouts`` rollouts of the shipped ``envs_per_actor x n_rollout_steps`` (``--tiny``: 2 x 4), collected once by
the policy; the learner then updates on it for ``--seconds`` (after 3 warm-up updates; ``first s``: the first
one's seconds, which with ``--compile`` include compiling). ``--compile`` and ``--precision`` measure each
combination of ``algorithm.compile`` and ``algorithm.precision``, in turns of ``--rounds`` (alternating, so that
a machine whose speed drifts treats each alike; the table gives each row's median over its rounds).

Per update, from one update under ``torch.profiler``: ``ops``, the aten operators called (nested ones included);
``host reads``, the values read back to the host (``aten::_local_scalar_dense``: ``.item()``, ``.tolist()``); on
CUDA also the kernel launches, the host-device copies and the time the GPU was busy. Pong training beside the raw
env's ceiling is ``python benchmarks/throughput.py --env env=atari --device cuda --num-actors N``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

MODELS = {
    "mlp": ("CartPole-v1", {}, {}),
    "impala": ("atari", {"image_encoder": "impala"}, {"n_sgd_passes": 1}),
    "nature": ("atari", {"image_encoder": "nature"}, {"n_sgd_passes": 1}),
}
"""Each model: its env (an id, or a shipped env config's name), model settings, algorithm settings."""


_COLLECTORS: dict[tuple[str, bool], Any] = {}
"""Each model's rollouts (with ``--tiny`` or not), shared by its batches: a smaller batch is the first rollouts of a
larger one, as the seeded policy collects them (an Atari batch of 64 rollouts is 20,480 env steps of a CNN acting on
the CPU, collected once)."""


def learner_and_batch(name: str, device: str, rollouts: int, tiny: bool, **update: str) -> tuple[Any, list[Any]]:
    """The learner of ``name`` on ``device`` with the ``update`` settings, and a batch of ``rollouts`` rollouts."""
    from calibration import Collector
    from calibration import learner_and_batch as build

    from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
    from maze_impala.config.workloads import workload

    env, model, algorithm = MODELS[name]
    settings: dict[str, Any] = {}
    if env != "CartPole-v1":  # a shipped family: its env and its own settings
        family = workload(env)
        env, settings, model = family.env, {**family.algorithm}, {**family.model, **model}
    settings = {**settings, **algorithm, **update, "device": device, "actors_batch_size": rollouts}
    if tiny:
        settings.update(envs_per_actor=2, n_rollout_steps=4)
    settings.pop("rollout_evaluator", None)
    algorithm_config, model_config = ImpalaAlgorithmConfig(**settings), ModelConfig(**model)
    if (name, tiny) not in _COLLECTORS:
        _COLLECTORS[(name, tiny)] = Collector(env, algorithm_config, model_config)
    return build(env, algorithm_config, model_config, batch_size=rollouts, collector=_COLLECTORS[(name, tiny)])


def update_profile(learner: Any, batch: list[Any], device: str) -> dict[str, float]:
    """What one update calls: aten ops, host reads, and on CUDA launches, copies and the GPU's busy milliseconds."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with profile(activities=activities) as trace:
        learner.step(batch)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    events = trace.events()
    found = {
        "ops": sum(1 for e in events if e.name.startswith("aten::")),
        "host reads": sum(1 for e in events if e.name == "aten::_local_scalar_dense"),
    }
    if device.startswith("cuda"):
        found["launches"] = sum(1 for e in events if e.name in ("cudaLaunchKernel", "cuLaunchKernel"))
        found["copies"] = sum(1 for e in events if e.name == "cudaMemcpyAsync")
        kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
        found["gpu busy ms"] = sum(e.device_time_total for e in kernels) / 1000.0
    return found


def measure(name: str, device: str, rollouts: int, seconds: float, tiny: bool, **update: str) -> dict[str, Any]:
    import torch

    learner, batch = learner_and_batch(name, device, rollouts, tiny, **update)
    samples = sum(r.env_steps for r in batch)
    started = time.perf_counter()
    for warm_up in range(3):  # allocations, the optimizer's state, cuDNN's choice of algorithms, compiling
        learner.step(batch)
        if warm_up == 0:
            first = time.perf_counter() - started
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    updates, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds or updates == 0:
        learner.step(batch)
        updates += 1
    sync()
    rate = updates / (time.perf_counter() - started)
    return {
        "model": name,
        **update,
        "rollouts": rollouts,
        "samples": samples,
        "updates/s": rate,
        "samples/s": rate * samples,
        "first s": first,
        **update_profile(learner, batch, device),
    }


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rollouts", nargs="+", type=int, default=[1, 4, 16, 64], help="rollouts per batch")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds of updates per measurement")
    parser.add_argument("--tiny", action="store_true", help="batches of 2 envs x 4 steps a rollout")
    parser.add_argument("--threads", type=int, default=None, help="torch's CPU threads (default: torch's)")
    parser.add_argument("--compile", nargs="+", default=["off"], help="algorithm.compile modes to measure")
    parser.add_argument("--precision", nargs="+", default=["float32"], help="algorithm.precision values to measure")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of every combination")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"{torch.get_num_threads()} threads"
    print(f"device {args.device} ({name}), torch {torch.__version__}", flush=True)
    combinations = [{"compile": c, "precision": p} for c in args.compile for p in args.precision]
    cases = [(m, r, update) for m in args.models for r in args.rollouts for update in combinations]
    rounds: list[list[dict[str, Any]]] = []
    for _ in range(args.rounds):  # each case's figures printed as it ends: a run cut short keeps what it measured
        rounds.append([])
        for m, r, update in cases:
            rounds[-1].append(measure(m, args.device, r, args.seconds, args.tiny, **update))
            print(json.dumps(rounds[-1][-1]), flush=True)
    rows = [_median([found[i] for found in rounds]) for i in range(len(cases))]
    keys = list(dict.fromkeys(k for row in rows for k in row))
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = [
            f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)
            for v in (row.get(k, "") for k in keys)
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of the rounds of one case: the median of each number (ops and reads are the same in each)."""
    import statistics

    return {k: statistics.median(r[k] for r in rows) if isinstance(v, float) else v for k, v in rows[0].items()}


if __name__ == "__main__":
    main()
