"""Throughput against the machine's ceiling: raw env, actors only, learner only, full training.

    python benchmarks/throughput.py                          # CartPole-v1, shipped settings
    python benchmarks/throughput.py --num-actors 4 --envs-per-actor 32 --hidden 256 256
    python benchmarks/throughput.py --sweep                  # num_actors up to the cores, adaptive batches, ...
    python benchmarks/throughput.py --device cuda --learner-batches 1 4 16 64   # the learner alone on a GPU
    python benchmarks/throughput.py --actors-batch-size 4 --min-actors-batch-size 1   # adaptive batches
    python benchmarks/throughput.py --soak 300               # RSS over a 5-minute run of runner=local
    python benchmarks/throughput.py --model recurrent=lstm normalize_observations=true   # another model
    python benchmarks/throughput.py --env env=minatar --set n_sgd_minibatches=4          # another algorithm setting
    python benchmarks/throughput.py --compare-models recurrent=none recurrent=lstm normalize_observations=true
    python benchmarks/throughput.py --env env=atari --learner-batches 1 4 --epochs 2   # the shipped Atari config
    python benchmarks/throughput.py --env env=atari --device cuda --num-actors 14 --actors-batch-size 4 \
        --runners local                                                                # Pong on a GPU
    python benchmarks/throughput.py --env env=minatar --learner-only --learner-batches 1 2 4   # the learner alone
    python benchmarks/throughput.py --env env=butterfly:name=pettingzoo.butterfly.cooperative_pong_v6 ...

``--env env=NAME`` measures a shipped env family as ``maze-run -cn conf_train env=NAME`` trains it: its env with its
wrappers, and its algorithm, model and runner settings (``env=atari``: RMSProp, one pass, 2 actors of 16 envs,
unrolls of 20); a flag that is given overrides the family's setting, one that is not keeps it. The model's
``image_encoder=auto`` becomes what a run on ``--device`` makes of it (``env=atari``: the Nature CNN for a CPU
learner, the IMPALA CNN for a GPU learner), in every measurement alike.

All measurements use the same env and the same number of processes (``num_actors``):

* ceiling: raw ``env.step`` per second with random actions (drawn in advance) and no
  framework, in ``num_actors`` processes at once;
* actors only: env steps per second of the real actors (``runner=local`` processes,
  real policy), rollouts taken from the queue and discarded;
* learner only: updates and samples (env steps) per second on one fixed batch, on
  ``--device``, for every batch size of ``--learner-batches`` (rollouts per batch);
* full training: env steps and updates per second of the update loop with
  ``runner=local`` and with ``runner=dev``, the rollouts per update (adaptive batches:
  ``--min-actors-batch-size``), the share of the loop the learner waited for actors,
  and the actors' idle share (1 - training's env steps / actors-only env steps);
* the ratio of each to the ceiling, and the peak RSS of the whole process tree.

The ceiling and the actors-only figure are medians of ``--repeats`` alternating
rounds (3 by default): on a shared machine the ceiling alone moves by +-25% from one
5-second window to the next. The rounds are printed too.

It prints a table and writes the figures as JSON (``--json``, default
``throughput.json``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from calibration import learner_updates_per_second
from harness import QUIET

from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.impala.events import MultiStepIMPALAEvents

FLAGS = ("num_actors", "envs_per_actor", "n_rollout_steps", "actors_batch_size", "min_actors_batch_size", "device")
"""The algorithm settings that flags set; one not given is the family's (``env=NAME``) or the shipped default."""


def resolve(args: argparse.Namespace) -> None:
    """``args`` completed in place: ``--env env=NAME[:KEY=VALUE,...]`` becomes the family's env (with those keys
    changed), ``args.family`` its settings (:class:`Workload`), and every flag not given the family's setting."""
    from maze_impala.config.workloads import Workload, workload
    from maze_impala.envs.factory import make_env

    try:
        from maze_impala.train.resolve import image_shapes
    except ImportError:  # a release before train/resolve.py (benchmarks/compare_versions.py runs it too)
        from maze_impala.train.setup import image_shapes

    args.family = Workload(env={})
    if isinstance(args.env, str) and args.env.startswith("env="):  # env=atari: the shipped config, wrappers, settings
        name, _, changes = args.env.removeprefix("env=").partition(":")
        args.family = workload(name)
        args.env = {**args.family.env, **dict(change.split("=", 1) for change in changes.split(",") if change)}
    family = ImpalaAlgorithmConfig(**args.family.algorithm)  # the shipped defaults where the family sets nothing
    for name in FLAGS:
        if getattr(args, name) is None:
            setattr(args, name, getattr(family, name))
    if args.hidden is None:
        args.hidden = args.family.model.get("hidden_units", ModelConfig().hidden_units)
    args.image_shapes = image_shapes(make_env(args.env))


def algorithm_of(args: argparse.Namespace, **changes: object) -> ImpalaAlgorithmConfig:
    """The algorithm of the measurements: the family's settings, the flags', then ``changes``; one evaluation
    episode after each epoch of a training measurement (its time is not in the rates)."""
    settings = {key: value for key, value in args.family.algorithm.items() if key not in ("n_epochs", "epoch_length")}
    flags = {name: getattr(args, name) for name in FLAGS}
    given = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in getattr(args, "set", None) or [])}
    return ImpalaAlgorithmConfig(**{**settings, **flags, **given, "rollout_evaluator": {"n_episodes": 1}, **changes})


def model_of(args: argparse.Namespace) -> ModelConfig:
    """The model of the measurements: the family's, ``--hidden`` widths and the ``--model`` settings, its image
    encoder resolved for the learner's device as a run resolves it."""
    settings = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in getattr(args, "model", None) or [])}
    model = ModelConfig(**{**args.family.model, "hidden_units": list(args.hidden), **settings})
    return model.resolved(args.image_shapes, args.device)


def _tree_rss_bytes(root: int) -> int:
    """Resident memory of ``root`` and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total


class RssSampler:
    """Samples the RSS of this process tree in a thread; ``peak`` and the time series."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak, self.samples = interval, 0, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.perf_counter()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = _tree_rss_bytes(os.getpid())
            self.peak = max(self.peak, rss)
            self.samples.append((time.perf_counter() - self._started, rss))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _raw_env_worker(env_id: str | dict, seconds: float, seed: int, result: mp.Queue) -> None:
    import gymnasium as gym

    from maze_impala.envs.factory import make_env

    env = gym.make(env_id) if isinstance(env_id, str) else make_env(env_id).env  # a config: its wrappers included
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n = env.action_space.n if hasattr(env.action_space, "n") else None
    steps, deadline = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        actions = rng.integers(n, size=1000) if n else [env.action_space.sample() for _ in range(1000)]
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += len(actions)
    result.put(steps / (time.perf_counter() - started))


def ceiling(env_id: str | dict, processes: int, seconds: float) -> float:
    """Raw env steps per second in ``processes`` processes at once, random actions, no framework."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_raw_env_worker, args=(env_id, seconds, i, queue)) for i in range(processes)]
    for w in workers:
        w.start()
    rates = [queue.get(timeout=seconds + 120) for _ in workers]
    for w in workers:
        w.join()
    return float(sum(rates))


def actors_only(args: argparse.Namespace, seconds: float) -> float:
    """Env steps per second of ``num_actors`` actor processes with the real policy; rollouts discarded."""
    from maze_impala.actors.actor import ActorSpec
    from maze_impala.actors.subprocess import SubprocessActors
    from maze_impala.actors.weights import SharedWeights
    from maze_impala.envs.factory import make_env
    from maze_impala.nn.models import make_policy
    from maze_impala.nn.torch_acting import numpy_form_of
    from maze_impala.play.lineup import Lineup

    model = model_of(args)
    policy = make_policy(make_env(args.env), model)
    # as training makes them: acting in numpy where the policy exports a numpy form, or through torch on a device
    form = numpy_form_of(policy) if args.actor_device is None else None
    spec = ActorSpec(
        args.env,
        Lineup.of(model, numpy_form=form, device=args.actor_device),
        args.n_rollout_steps,
        args.envs_per_actor,
        seed=0,
    )
    queue_size = max(1, args.actors_batch_size)
    pool = SubprocessActors(spec, SharedWeights(policy), args.num_actors, queue_size, batch_size=args.num_actors)
    with pool:
        pool.collect(args.num_actors)  # start-up
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            steps += sum(r.env_steps for r in pool.collect(1))
        return steps / (time.perf_counter() - started)


def learner_only(args: argparse.Namespace, seconds: float, batch_size: int) -> tuple[float, float]:
    """Updates and samples per second on one fixed batch of ``batch_size`` rollouts, on ``args.device``."""
    rate, samples = learner_updates_per_second(
        args.env,
        algorithm_of(args),
        model_of(args),
        batch_size=batch_size,
        seconds=seconds,
        threads=max(1, os.cpu_count() or 1),
    )
    return rate, rate * samples


def training(args: argparse.Namespace, runner: str, epochs: int) -> dict[str, float]:
    """Env steps and updates per second of the update loop, rollouts per update and the share of the loop spent
    waiting for actors (medians over the epochs after the first)."""
    from maze_impala import RunnerConfig, train

    algorithm = algorithm_of(args, n_epochs=epochs, epoch_length=25)
    runner_config = RunnerConfig(**{**args.family.runner, "type": runner, "actor_device": args.actor_device})
    with tempfile.TemporaryDirectory() as out:
        result = train(args.env, algorithm, model_of(args), runner_config, 1, out, output=QUIET)

    def median(name: str) -> float:
        return statistics.median(result.column(name)[1:])

    steps = median(StatKey.of(RunEvents.env_steps_per_second, "last").column())
    updates = median(StatKey.of(RunEvents.updates_per_second, "last").column())
    waiting = median(StatKey.of(MultiStepIMPALAEvents.time_dequeuing_actors, field="percent").column()) / 100
    per_update = steps / updates / (args.envs_per_actor * args.n_rollout_steps)
    return {
        "env_steps_per_s": steps,
        "updates_per_s": updates,
        "rollouts_per_update": per_update,
        "learner_waiting": waiting,
    }


def measure(args: argparse.Namespace) -> dict:
    with RssSampler() as rss:
        # The ceiling and the actors alternate, and each figure is the median of its rounds: on a shared
        # machine the ceiling alone moves by +-25% from one 5-second window to the next.
        ceilings, actors = [], []
        for _ in range(args.repeats):
            ceilings.append(ceiling(args.env, args.num_actors, args.seconds))
            actors.append(actors_only(args, args.seconds))
        row: dict = {"ceiling_runs": ceilings, "actors_only_runs": actors}
        row["ceiling_env_steps_per_s"] = statistics.median(ceilings)
        row["actors_only_env_steps_per_s"] = statistics.median(actors)
        row["learner"] = [
            dict(zip(("updates_per_s", "samples_per_s"), learner_only(args, args.seconds, size)), rollouts=size)
            for size in args.learner_batches
        ]
        for runner in args.runners:
            for name, value in training(args, runner, args.epochs).items():
                row[f"train_{runner}_{name}"] = value
            row[f"train_{runner}_actors_idle"] = 1 - row[f"train_{runner}_env_steps_per_s"] / statistics.median(actors)
    top = row["ceiling_env_steps_per_s"]
    for name in ("actors_only_env_steps_per_s", *(f"train_{runner}_env_steps_per_s" for runner in args.runners)):
        row[name.replace("_env_steps_per_s", "_ratio_to_ceiling")] = row[name] / top
    row["peak_rss_mib"] = rss.peak / 2**20
    return row


def soak(args: argparse.Namespace, updates_per_second: float) -> dict:
    """RSS of a ``runner=local`` run lasting about ``--soak`` seconds: after one minute and at the end."""
    with RssSampler(interval=1.0) as rss:
        epochs = max(2, int(args.soak * updates_per_second / 25))  # 25 updates per epoch
        training(args, "local", epochs)
    after_minute = [r for t, r in rss.samples if t >= 60] or [rss.samples[-1][1]]
    first, last = after_minute[0], rss.samples[-1][1]
    return {
        "seconds": rss.samples[-1][0],
        "rss_mib_at_1_min": first / 2**20,
        "rss_mib_max_after_1_min": max(after_minute) / 2**20,
        "rss_mib_at_end": last / 2**20,
        "growth_after_1_min_percent": 100.0 * (max(after_minute) - first) / first,
    }


def compare_models(args: argparse.Namespace) -> None:
    """Actors only, the learner alone (batches of one rollout) and training with runner=local (unless ``--epochs
    0``), for each model of ``--compare-models``, in ``--repeats`` rounds that alternate the models; medians, and
    ratios to the first."""
    variants = [item.split(",") for item in args.compare_models]
    figures: dict[int, dict[str, list[float]]] = {i: {} for i in range(len(variants))}
    for round_ in range(args.repeats):
        for i in range(len(variants)) if round_ % 2 == 0 else reversed(range(len(variants))):
            varied = argparse.Namespace(**{**vars(args), "model": variants[i]})
            measured = {
                "actors_only": actors_only(varied, args.seconds),
                "learner_samples": learner_only(varied, args.seconds, 1)[1],
            }
            if args.epochs:  # --epochs 0: no training (a CNN's epochs take minutes on a CPU)
                measured["train_local"] = training(varied, "local", args.epochs)["env_steps_per_s"]
            for name, value in measured.items():
                figures[i].setdefault(name, []).append(value)
            shown = ", ".join(f"{k} {figure(v)}" for k, v in measured.items())
            print(f"round {round_}, {','.join(variants[i])}: {shown}", flush=True)
    names = list(figures[0])
    print("\n| model | " + " | ".join(f"{n} (per s)" for n in names) + " |")
    print("|---" * (len(names) + 1) + "|")
    first = {n: statistics.median(figures[0][n]) for n in names}
    for i, variant in enumerate(variants):
        cells = []
        for n in names:
            value = statistics.median(figures[i][n])
            cells.append(figure(value) + ("" if i == 0 else f" ({value / first[n]:.2f}x)"))
        print(f"| {', '.join(variant)} | " + " | ".join(cells) + " |")


def figure(value: float) -> str:
    """A rate with 3 significant digits below 100 (a pixel game's learner takes a few env steps per second)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _batches(args: argparse.Namespace) -> str:
    if args.min_actors_batch_size is None:
        return str(args.actors_batch_size)
    return f"{args.min_actors_batch_size}-{args.actors_batch_size} (adaptive)"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:>14.0%}" if value < 10 else f"{value:>14,.0f}"
    return f"{value!s:>14}"


def _print(rows: list[dict], keys: list[str]) -> None:
    print(" | ".join(f"{k:>14}" for k in keys))
    for row in rows:
        print(" | ".join(_cell(row[k]) for k in keys))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--env",
        default="CartPole-v1",
        help="a Gymnasium id, env=NAME (a shipped env config) or env=NAME:KEY=VALUE,... (one with keys changed)",
    )
    # Not given (None): the env family's setting, else the shipped default (resolve)
    parser.add_argument("--hidden", type=int, nargs="+", help="MLP widths")
    parser.add_argument("--num-actors", type=int)
    parser.add_argument("--envs-per-actor", type=int)
    parser.add_argument("--n-rollout-steps", type=int)
    parser.add_argument("--actors-batch-size", type=int)
    parser.add_argument(
        "--min-actors-batch-size",
        type=int,
        help="adaptive batches: an update takes this many rollouts or more, up to actors_batch_size",
    )
    parser.add_argument("--device", help="the learner's device: cpu or cuda")
    parser.add_argument("--actor-device", default=None, help="runner.actor_device: the actors act through torch there")
    parser.add_argument(
        "--learner-batches",
        type=int,
        nargs="+",
        default=[1, 4, 16],
        help="batch sizes (rollouts) of the learner-only measurement",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each timed measurement")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of ceiling and actors only")
    parser.add_argument("--epochs", type=int, default=5, help="epochs (of 25 updates) per training measurement")
    parser.add_argument(
        "--runners",
        nargs="+",
        default=["local", "dev"],
        choices=["local", "dev"],
        help="the runners whose training is measured (dev: one process, slow for a CNN)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also vary num_actors (up to the cores), adaptive batches, envs per actor, model width",
    )
    parser.add_argument("--soak", type=float, default=0.0, help="seconds of a runner=local run to watch RSS over")
    parser.add_argument("--model", nargs="*", default=[], metavar="FIELD=VALUE", help="model settings (ModelConfig)")
    parser.add_argument(
        "--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings (ImpalaAlgorithmConfig)"
    )
    parser.add_argument(
        "--compare-models",
        nargs="+",
        metavar="FIELD=VALUE[,FIELD=VALUE]",
        help="only compare these models (each a comma-separated list of settings), in alternating rounds",
    )
    parser.add_argument(
        "--learner-only",
        action="store_true",
        help="only the learner, for each batch size of --learner-batches (a CNN's training takes hours on a CPU)",
    )
    parser.add_argument("--json", type=Path, default=Path("throughput.json"))
    args = parser.parse_args()
    label = args.env
    resolve(args)
    if args.compare_models:
        compare_models(args)
        return
    if args.learner_only:
        print(
            f"{label}, {model_of(args)}, learner on {args.device}: one batch of rollouts of {args.envs_per_actor} "
            f"envs x {args.n_rollout_steps} steps, {algorithm_of(args).n_sgd_passes} SGD passes per update"
        )
        print("| rollouts per batch | samples per batch | updates/s | samples/s |\n|---|---|---|---|")
        for size in args.learner_batches:
            updates, samples = learner_only(args, args.seconds, size)
            print(
                f"| {size} | {size * args.envs_per_actor * args.n_rollout_steps:,} | {figure(updates)} | "
                f"{figure(samples)} |",
                flush=True,
            )
        return
    if args.epochs < 2:
        parser.error(f"--epochs {args.epochs}: the rates are medians over the epochs after the first; give 2 or more")
    if args.soak and "local" not in args.runners:
        parser.error("--soak watches a runner=local run: keep local in --runners")

    base = measure(args)
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "family", "image_shapes")}
    report: dict = {"settings": settings, "base": base}
    print(
        f"{label}, {args.num_actors} actors x {args.envs_per_actor} envs, rollouts of {args.n_rollout_steps} "
        f"steps, batches of {_batches(args)}, {model_of(args)}, learner on {args.device}, {os.cpu_count()} CPU "
        "cores"
    )
    print(f"{'measurement':<34}{'per second':>14}{'ratio to ceiling':>18}")
    lines = [
        ("ceiling: raw env steps", base["ceiling_env_steps_per_s"], 1.0),
        ("actors only: env steps", base["actors_only_env_steps_per_s"], base["actors_only_ratio_to_ceiling"]),
        *[(f"learner only, {r['rollouts']} rollouts: samples", r["samples_per_s"], None) for r in base["learner"]],
        *[(f"learner only, {r['rollouts']} rollouts: updates", r["updates_per_s"], None) for r in base["learner"]],
    ]
    for runner in args.runners:
        lines += [
            (
                f"train runner={runner}: env steps",
                base[f"train_{runner}_env_steps_per_s"],
                base[f"train_{runner}_ratio_to_ceiling"],
            ),
            (f"train runner={runner}: updates", base[f"train_{runner}_updates_per_s"], None),
            (f"train runner={runner}: rollouts/update", base[f"train_{runner}_rollouts_per_update"], None),
        ]
    for name, value, ratio in lines:
        shown = f"{value:>14.2f}" if name.endswith("rollouts/update") else f"{value:>14,.0f}"
        print(f"{name:<34}{shown}{'' if ratio is None else f'{ratio:>17.0%}':>18}")
    for runner in args.runners:
        print(
            f"train runner={runner}: the learner waited for actors {base[f'train_{runner}_learner_waiting']:.0%} "
            f"of the loop; the actors idled about {base[f'train_{runner}_actors_idle']:.0%}"
        )
    print(f"{'peak RSS of the process tree':<34}{base['peak_rss_mib']:>11,.0f} MiB")
    rounds = zip(base["ceiling_runs"], base["actors_only_runs"])
    print("rounds (ceiling, actors only): " + ", ".join(f"({c:,.0f}, {a:,.0f}: {a / c:.0%})" for c, a in rounds))

    if args.sweep:
        sweep = []
        cores = os.cpu_count() or 1
        actor_counts = sorted({1, 2, *range(4, cores + 1, 4), max(1, cores - 2), cores})
        for name, values in (
            ("num_actors", tuple(actor_counts)),
            ("batches", ((1, 1), (1, 4), (1, 16))),
            ("envs_per_actor", (1, 8, 32)),
            ("hidden", ((64, 64), (256, 256))),
        ):
            for value in values:
                varied = argparse.Namespace(**vars(args))
                if name == "batches":
                    varied.min_actors_batch_size, varied.actors_batch_size = value
                else:
                    setattr(varied, name, list(value) if name == "hidden" else value)
                top = ceiling(args.env, varied.num_actors, args.seconds)
                actors = actors_only(varied, args.seconds)
                local = training(varied, "local", 3)
                sweep.append(
                    {
                        "varied": name,
                        "value": str(value),
                        "ceiling": top,
                        "actors_only": actors,
                        "train_local": local["env_steps_per_s"],
                        "ratio": local["env_steps_per_s"] / top,
                        "per_update": f"{local['rollouts_per_update']:.2f}",
                        "learner_waits": local["learner_waiting"],
                        "actors_idle": 1 - local["env_steps_per_s"] / actors,
                    }
                )
        print("\nsweep (env steps per second; training: runner=local; batches: (fewest, most) rollouts per update)")
        _print(
            sweep,
            [
                "varied",
                "value",
                "ceiling",
                "actors_only",
                "train_local",
                "ratio",
                "per_update",
                "learner_waits",
                "actors_idle",
            ],
        )
        report["sweep"] = sweep
    if args.soak:
        report["soak"] = soak(args, base["train_local_updates_per_s"])
        print(f"\nsoak: {json.dumps(report['soak'])}")
    args.json.write_text(json.dumps(report, indent=2))
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
