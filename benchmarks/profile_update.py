"""Where one learner update's time goes: microseconds per optimizer step, phase by phase, beside the arithmetic's floor.

    python benchmarks/profile_update.py                         # CartPole-v1, the shipped settings, 1 and 2 threads
    python benchmarks/profile_update.py --env LunarLander-v3 --threads 1 --set n_sgd_minibatches=4
    python benchmarks/profile_update.py --threads 1 --width 64                 # an MLP of 64 x 64
    python benchmarks/profile_update.py --threads 1 --set compile=default      # samples/s alone (no phases)
    python benchmarks/profile_update.py --threads 1 --cpu-time     # by CPU time: steadier on a busy machine

The learner's own functions are timed where they are called (wrapped for the measurement, nothing else changed):
per update, the batch's preparation (stacking, observation statistics), the anchor (pi_0's forward pass) and the
value normaliser's statistics; per optimizer step, the forward pass, the losses, the backward pass, the gradient
norms and clipping, the optimizer's step, and the metrics' bookkeeping; what is left of the update is the loop's own.
The floor is the step's multiply-adds (forward, and twice them backward) at the speed this machine multiplies
128 x 128 matrices on the same threads; the eager floor is a minimal PPO step of the same shapes in CleanRL's form
(:func:`minimal_step_us`), what any eager update of these networks pays.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from calibration import learner_and_batch

from maze_impala.config import ImpalaAlgorithmConfig

clock = time.perf_counter
"""What every figure is timed by: the wall clock, or with ``--cpu-time`` the process's CPU time (which other programs
on a busy machine disturb less)."""

PER_UPDATE = ("prepare", "anchor", "value statistics")
PER_STEP = ("forward", "loss", "backward and zero", "clip", "optimizer", "metrics")


class Timers:
    """Seconds per phase, summed over the calls while :attr:`on`; what a per-update phase calls (the value
    statistics' own forward pass and losses) counts to it alone."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.on = False
        self._inside = 0

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        whole = phase in PER_UPDATE

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._inside:
                return function(*args, **kwargs)
            started = clock()
            self._inside += whole
            try:
                return function(*args, **kwargs)
            finally:
                self._inside -= whole
                if self.on:
                    self.seconds[phase] += clock() - started

        return timed


def instrument(learner: Any, timers: Timers) -> None:
    """Wraps the learner's phases (its module's functions and its own methods) with ``timers``."""
    from maze_impala.impala import learner as module

    for name, phase in (
        ("impala_loss", "loss"),
        ("clip_grad_norms", "clip"),
        ("loss_metrics", "metrics"),
        ("last_pass_metrics", "metrics"),
        ("publish", "metrics"),
    ):
        setattr(module, name, timers.wrap(phase, getattr(module, name)))
    for name, phase in (
        ("prepare", "prepare"),
        ("_anchor", "anchor"),
        ("_update_value_statistics", "value statistics"),
        ("_forward", "forward"),
        ("_apply", "apply"),
    ):
        setattr(learner, name, timers.wrap(phase, getattr(learner, name)))
    learner.optimizer.step = timers.wrap("optimizer", learner.optimizer.step)


def matmul_gflops(threads: int, seconds: float = 1.0) -> float:
    """The speed of 128 x 128 float32 matrix products on ``threads`` threads, in GFLOP/s."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(128, 128), torch.randn(128, 128)
    for _ in range(50):
        a @ b
    count, started = 0, clock()
    while clock() - started < seconds:
        for _ in range(100):
            a @ b
        count += 100
    return 2 * 128**3 * count / (clock() - started) / 1e9


def multiply_adds(learner: Any) -> int:
    """Multiply-adds per sample of every linear layer of the policy and the critic (forward)."""
    from torch import nn

    modules = [*learner.policy.modules(), *learner.critic.modules()]
    return sum(m.in_features * m.out_features for m in modules if isinstance(m, nn.Linear))


def minimal_step_us(
    n_obs: int, n_actions: int, samples: int, threads: int, width: int = 128, steps: int = 300
) -> float:
    """Microseconds of one optimizer step of a minimal PPO update in CleanRL's form: two tanh MLPs (policy and
    critic, two hidden layers of ``width``), a categorical policy, the clipped surrogate over normalised advantages,
    the value loss, the entropy bonus, both networks' gradients clipped (foreach) and fused Adam, on ``samples``
    random samples: what eager torch costs for the same shapes with nothing of maze_impala's (no V-trace, no anchor,
    no metrics), the floor that a rewrite of the eager update could reach."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def mlp(n_out: int) -> nn.Sequential:
        layers = [nn.Linear(n_obs, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, n_out)]
        return nn.Sequential(*layers)

    policy, critic = mlp(n_actions), mlp(1)
    optimizer = torch.optim.Adam([*policy.parameters(), *critic.parameters()], 1e-4, fused=True)
    obs, actions = torch.randn(samples, n_obs), torch.randint(0, n_actions, (samples,))
    old_log_probs, advantages, returns = torch.randn(samples) - 1.0, torch.randn(samples), torch.randn(samples)

    def step() -> None:
        log_p = F.log_softmax(policy(obs), -1)
        ratio = (log_p.gather(-1, actions.unsqueeze(-1)).squeeze(-1) - old_log_probs).exp()
        scaled = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -torch.min(ratio * scaled, ratio.clamp(0.95, 1.05) * scaled).mean()
        value_loss = 0.5 * (returns - critic(obs).squeeze(-1)).pow(2).mean()
        entropy = -(log_p.exp() * log_p).sum(-1).mean()
        optimizer.zero_grad()
        (policy_loss + 0.5 * value_loss - 0.005 * entropy).backward()
        for network in (policy, critic):
            nn.utils.clip_grad_norm_(list(network.parameters()), 0.5, foreach=True)
        optimizer.step()

    for _ in range(30):
        step()
    started = clock()
    for _ in range(steps):
        step()
    return 1e6 * (clock() - started) / steps


def profile(
    env: str, algorithm: ImpalaAlgorithmConfig, threads: int, updates: int, width: int | None = None
) -> dict[str, float]:
    """Microseconds per optimizer step of each phase (per-update phases spread over the update's steps), with the
    shipped MLP or one of two layers of ``width`` units."""
    import torch

    from maze_impala.config import ModelConfig

    torch.set_num_threads(threads)
    model = ModelConfig() if width is None else ModelConfig(hidden_units=[width, width])
    learner, batch = learner_and_batch(env, algorithm, model)
    timers = Timers()
    if algorithm.compile == "off":  # timers inside a compiled function would break its graph: samples/s alone
        instrument(learner, timers)
    started = clock()
    for _ in range(3):
        learner.step(batch)
    warm_up = clock() - started
    timers.on = True
    started = clock()
    for _ in range(updates):
        learner.step(batch)
    whole = clock() - started
    steps = updates * algorithm.n_sgd_passes * algorithm.sgd_minibatches
    s = timers.seconds
    result = {phase: s[phase] for phase in PER_UPDATE}
    result |= {"forward": s["forward"], "loss": s["loss"], "clip": s["clip"]}
    result["optimizer"] = s["optimizer"]
    result["backward and zero"] = s["apply"] - s["clip"] - s["optimizer"]
    result["metrics"] = s["metrics"]
    result["the loop's own"] = whole - sum(result.values())
    per_step = {phase: 1e6 * value / steps for phase, value in result.items()}
    samples = sum(r.env_steps for r in batch) // algorithm.sgd_minibatches
    flops = 3 * 2 * multiply_adds(learner) * samples
    per_step["floor"] = 1e6 * flops / (matmul_gflops(threads) * 1e9)
    per_step["samples per second"] = sum(r.env_steps for r in batch) * updates / whole
    key = learner.policy.step_keys[0]
    n_actions, n_obs = sum(learner.policy.distribution(key).sizes), learner.policy.network(key).encoder.n_outputs
    per_step["a minimal PPO step of these shapes (eager floor)"] = minimal_step_us(
        n_obs, n_actions, samples, threads, width or 128
    )
    per_step["this update's step, all phases"] = 1e6 * whole / steps
    per_step["the first 3 updates, ms"] = 1e3 * warm_up
    return per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings to change")
    parser.add_argument("--width", type=int, help="the MLP's two layers this wide (default: the shipped model)")
    parser.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time, not the wall clock")
    args = parser.parse_args()
    global clock
    clock = time.process_time if args.cpu_time else time.perf_counter
    from learning import algorithm_for

    algorithm = algorithm_for(50, dict(item.split("=", 1) for item in args.set))
    results = {threads: profile(args.env, algorithm, threads, args.updates, args.width) for threads in args.threads}
    width = "the shipped MLP" if args.width is None else f"an MLP of {args.width} x {args.width}"
    print(f"{args.env}, {width}, {algorithm.n_sgd_passes} x {algorithm.sgd_minibatches} optimizer steps an update")
    print("| phase (us per optimizer step) | " + " | ".join(f"{t} thread(s)" for t in results) + " |")
    print("|---|" + "---|" * len(results))
    phases = [*PER_UPDATE, *PER_STEP, "the loop's own"] if algorithm.compile == "off" else []
    floors = ["floor", "a minimal PPO step of these shapes (eager floor)", "this update's step, all phases"]
    for phase in [*phases, *floors, "samples per second", "the first 3 updates, ms"]:
        cells = " | ".join(f"{r[phase]:,.0f}" for r in results.values())
        print(f"| {phase} | {cells} |")


if __name__ == "__main__":
    main()
