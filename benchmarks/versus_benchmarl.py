"""maze_impala beside BenchMARL's MAPPO and IPPO on PettingZoo's MPE and SISL multiwalker: the same tasks, episode
length, action kind and frame budget, on the same machine, runs alternating.

    python benchmarks/versus_benchmarl.py --check-envs                 # mpe2 (ours) against pettingzoo.mpe (theirs)
    python benchmarks/versus_benchmarl.py                              # both MPE tasks, 3 seeds, 600k frames
    python benchmarks/versus_benchmarl.py --tasks multiwalker --tools maze_impala mappo   # 300k frames
    python benchmarks/versus_benchmarl.py --tasks simple_spread --seeds 1 --tools maze_impala mappo
    python benchmarks/versus_benchmarl.py --json runs.json             # runs recorded there as they end; a rerun
                                                                       # with the same file skips the runs it holds
    python benchmarks/versus_benchmarl.py --table a.json b.json        # the table of runs recorded apart
    python benchmarks/versus_benchmarl.py --frames 0 --minutes 15      # equal wall-clock instead of equal frames
    python benchmarks/versus_benchmarl.py --load 1                     # beside a program busy on a core
    python benchmarks/versus_benchmarl.py --tools maze_impala --maze-set env.global_state=false \
        "model.critic_only_keys=[]"                 # each agent's critic on its own observation, as IPPO's

BenchMARL is never a dependency of maze_impala: this script installs ``benchmarl==1.5.2`` with
``pettingzoo[mpe]==1.24.3`` (it resolves torchrl 0.11.1 and tensordict 0.11.0) and SISL's packages into a virtual
environment of its own (``--venv``, default ``~/.cache/maze_impala/benchmarl-venv``), on this Python's torch version.

The protocol:

* **Tasks**: ``simple_spread`` (3 agents, one shared reward) and ``simple_speaker_listener`` (two roles with
  different spaces, so two policies), 25-step episodes (BenchMARL's ``task.max_cycles`` is 100 by default) and
  discrete actions (``experiment.prefer_continuous_actions=False``). Our MPE comes from ``mpe2``, BenchMARL's from
  ``pettingzoo.mpe``; ``--check-envs`` plays both with the same seeds and the same actions and compares every
  observation and reward. A third, ``multiwalker`` (``--tasks multiwalker``): three bipedal walkers carry a package
  with continuous actions, and a walker that falls leaves the episode while the others walk on
  (``terminate_on_fall=False, remove_on_fall=True``), each with its own reward, 500-step episodes, 300,000 frames,
  an evaluation every 30,000 (its episodes are 20 times MPE's). A held-out one, ``simple_reference`` (``--tasks
  simple_reference``): two agents, each moving and telling the other which landmark to reach (50 actions: 5 moves
  x 10 words), each rewarded half by its own distance to its goal and half by the team's; chosen before the
  multi-agent settings' last A/B and never tuned on.
* **A frame** is one step of every agent, for both: BenchMARL counts the steps of its batched env, maze_impala
  the steps of the Parallel env (``env_steps``).
* **BenchMARL** runs its own defaults for the algorithm (``algorithm=mappo`` or ``ippo``) except those above, with
  10 minibatch passes a 6,000-frame batch (``--benchmarl-set`` changes it; its default of 45 takes about 2.5 times
  as long a batch here), an evaluation of 10 greedy episodes every 6,000 frames, and the CSV logger. Its figure is
  ``eval/reward/episode_reward_mean``: each agent's episode return averaged over the agents (per agent); the team's
  return is that times the agents.
* **maze_impala** runs the shipped settings of ``env=pettingzoo`` (``env.api=parallel``), epochs of 6 updates
  (6,144 frames), each with a greedy evaluation, and the learning-rate schedule over the run's updates. Its final
  figure is its last model judged on 100 greedy episodes by the rollout CLI (``maze-run -cn conf_rollout``), in
  the team's convention (the agents' returns summed); per agent is that over the agents.
* **Threads**: ``--threads`` (default 1) sets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` of BenchMARL's process:
  with torch's default of a thread per core, one 6,000-frame batch took 6 s on the idle 2-core machine and 100-120
  s with other programs on it. maze_impala chooses its own threads.

Per run it records the evaluations (frames, seconds from the process start, per-agent return), the wall-clock,
the frames per second, and, per task, the frames and seconds at which each run first reaches MAPPO's median final
evaluation. Beside a run's best evaluation it gives its best stretch: the best mean of consecutive evaluations that
hold at least 50 episodes together (the best of a hundred 10-episode evaluations is mostly luck). A run's
``steadiness`` is its largest fall, in the second half of the run, below the best evaluation before it, as a share
of that best's magnitude.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from harness import Load, maze_run, round_order
from omegaconf import OmegaConf

from maze_impala.children import die_with_parent
from maze_impala.events.api import mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.run_files import CONFIG_YAML

BENCHMARL = ("benchmarl==1.5.2", "pettingzoo[mpe]==1.24.3", "box2d==2.3.10", "pymunk==7.3.1", "scipy==1.17.1")
"""BenchMARL and its envs: SISL's needs (Box2D from ``box2d``, whose wheels install where ``pettingzoo[sisl]``'s
``box2d-py`` must build)."""
DEFAULT_VENV = Path.home() / ".cache" / "maze_impala" / "benchmarl-venv"
BENCHMARL_BATCH = 6_000
"""BenchMARL's frames a batch (``on_policy_collected_frames_per_batch``), and its evaluation interval here."""
OUR_EPOCH = 6
"""maze_impala's updates an epoch (6 x 1,024 = 6,144 frames): an evaluation as often as BenchMARL's."""
JUDGE_EPISODES = 100
BENCHMARL_EVAL_EPISODES = 10
"""BenchMARL's greedy episodes an evaluation (its ``experiment.evaluation_episodes``, passed; its default)."""
STRETCH = 50
"""The episodes of a run's best stretch (:func:`best_stretch`)."""

EVAL = StatKey.of(EpisodeEvents.episode_return, mean, "eval").column()
STEPS = StatKey.of(RunEvents.env_steps, "last", "train").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()


MPE = {"max_cycles": 25, "continuous_actions": False}
"""The MPE literature's episodes and actions (BenchMARL's defaults: 100 steps, continuous actions)."""
MULTIWALKER = {"shared_reward": False, "terminate_on_fall": False, "remove_on_fall": True}
"""SISL multiwalker with walkers that leave the episode when they fall (the others walk on), 500-step episodes and
each walker's own reward (BenchMARL's default; PettingZoo's is the team's mean)."""


@dataclass(frozen=True)
class Task:
    benchmarl: str
    """BenchMARL's task (``task=pettingzoo/<name>``)."""
    ours: str
    """maze_impala's env module (``env.name``): mpe2's MPE, PettingZoo's SISL."""
    theirs: str
    """BenchMARL's env module, played beside ours by ``--check-envs``."""
    agents: int
    kwargs: dict
    """The env's arguments, given to both tools: maze_impala's ``+env.<key>``, BenchMARL's ``task.<key>`` (and
    ``continuous_actions`` as its ``experiment.prefer_continuous_actions``)."""
    frames: int = 600_000
    """The frame budget of a run (``--frames`` overrides it)."""
    eval_every: int = 1
    """Batches of 6,000 frames between BenchMARL's evaluations (maze_impala's epochs: that many times 6 updates)."""

    @property
    def continuous(self) -> bool:
        """Whether the task's actions are continuous (an env without the argument has continuous ones only)."""
        return self.kwargs.get("continuous_actions", True)


TASKS = {
    "simple_spread": Task("pettingzoo/simple_spread", "mpe2.simple_spread_v3", "pettingzoo.mpe.simple_spread_v3",
                          3, MPE),
    "simple_speaker_listener": Task("pettingzoo/simple_speaker_listener", "mpe2.simple_speaker_listener_v4",
                                    "pettingzoo.mpe.simple_speaker_listener_v4", 2, MPE),
    "multiwalker": Task("pettingzoo/multiwalker", "pettingzoo.sisl.multiwalker_v9", "pettingzoo.sisl.multiwalker_v9",
                        3, MULTIWALKER, frames=300_000, eval_every=5),
    "simple_reference": Task("pettingzoo/simple_reference", "mpe2.simple_reference_v3",
                             "pettingzoo.mpe.simple_reference_v3", 2, MPE),
}  # fmt: skip
DEFAULT_TASKS = ("simple_spread", "simple_speaker_listener")
TOOLS = ("maze_impala", "mappo", "ippo")


# ------------------------------------------------------------------------------------------------ BenchMARL's venv
def benchmarl_python(venv_dir: Path, torch_index: str | None) -> Path:
    """The Python of a virtual environment of its own with BenchMARL (made and filled on first use): it does not see
    this Python's packages, whose PettingZoo is another release, but has this Python's torch version."""
    python = venv_dir / "bin" / "python"
    if not python.exists():  # a fresh machine: the venv is made here
        venv.EnvBuilder(system_site_packages=False, with_pip=True).create(venv_dir)
    check = subprocess.run([str(python), "-c", "import benchmarl, pettingzoo.mpe, Box2D"], capture_output=True)
    if check.returncode == 0:
        return python
    import torch

    pins = [f"torch=={torch.__version__.split('+')[0]}", *BENCHMARL]
    index = ["--extra-index-url", torch_index] if torch_index else []
    subprocess.run([str(python), "-m", "pip", "install", "-q", *index, *pins], check=True)
    return python


# -------------------------------------------------------------------------------------------- the envs, side by side
PLAY = """
import importlib, json, sys
import numpy as np
module, kwargs, seeds = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
env = importlib.import_module(module).parallel_env(**kwargs)
def draw(space, rng):
    if hasattr(space, "n"):
        return int(rng.integers(space.n))
    return rng.uniform(space.low, space.high).astype(space.dtype)
trace = []
for seed in seeds:
    rng = np.random.default_rng(seed)
    observations, _ = env.reset(seed=seed)
    trace.append([[observations[a].tolist() for a in sorted(observations)]])
    while env.agents:
        actions = {a: draw(env.action_space(a), rng) for a in sorted(env.agents)}
        observations, rewards, *_ = env.step(actions)
        trace[-1].append([[observations[a].tolist() for a in sorted(observations)],
                          [float(rewards[a]) for a in sorted(rewards)]])
print(json.dumps(trace))
"""


def play_trace(python: str, module: str, kwargs: dict, seeds: list[int]) -> list:
    """Every observation and reward of one episode per seed, with actions drawn from the seed."""
    args = [python, "-c", PLAY, module, json.dumps(kwargs), json.dumps(seeds)]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def flatten(nested: list | float) -> list[float]:
    """Every number of a nested list, in order."""
    return [v for item in nested for v in flatten(item)] if isinstance(nested, list) else [nested]


def check_envs(python: Path, names: list[str], seeds: list[int]) -> None:
    """Our env modules (mpe2's MPE, this Python's PettingZoo) and BenchMARL's (PettingZoo 1.24.3) played with the
    same seeds and actions."""
    for name in names:
        task = TASKS[name]
        ours = play_trace(sys.executable, task.ours, task.kwargs, seeds)
        theirs = play_trace(str(python), task.theirs, task.kwargs, seeds)
        a, b = np.array(flatten(ours)), np.array(flatten(theirs))
        same = a.shape == b.shape and bool(np.allclose(a, b, atol=1e-6))
        returns = [sum(sum(step[1]) for step in ep[1:]) for ep in ours]
        verdict = "identical" if same else "DIFFERENT"
        print(
            f"{name}: {len(seeds)} episodes, {a.size:,} numbers (observations and rewards): {verdict}; "
            f"random play's team return {statistics.mean(returns):.2f} ({task.ours})",
            flush=True,
        )


# ---------------------------------------------------------------------------------------------------------- the runs
GRACE = 120.0
"""Seconds a run has to end after its interrupt before its process group is killed (what it logged stays)."""


def supervised(
    command: list[str], cwd: Path, minutes: float, first: str, env: dict | None = None, grace: float = GRACE
) -> tuple[float, float]:
    """Run ``command`` in a process group of its own, interrupted (SIGINT, as Ctrl-C) after ``minutes`` if it runs
    that long, killed with its group if it has not ended ``grace`` seconds later (a busy machine's BenchMARL can
    take longer to stop) or if this script ends first. Returns the wall-clock seconds and the second at which a
    file matching the glob ``first`` (the run's first record) appeared under ``cwd``."""
    started, seen = time.time(), math.nan
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(  # its own group, killed with this script however it ends (die_with_parent)
            command,
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            while process.poll() is None:
                time.sleep(0.5)
                if math.isnan(seen) and next(cwd.rglob(first), None) is not None:
                    seen = time.time() - started
                if minutes and time.time() - started > minutes * 60:
                    os.killpg(process.pid, signal.SIGINT)
                    with contextlib.suppress(subprocess.TimeoutExpired):  # killed below
                        process.wait(timeout=grace)
                    break
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        errors.seek(0)
        if process.returncode != 0 and not minutes:
            raise RuntimeError(f"{' '.join(command)} failed:\n{errors.read()[-3000:]}")
    return time.time() - started, seen


def budget(task: Task, args: argparse.Namespace) -> int:
    """A run's frames: ``--frames``, else the task's; with ``--minutes`` and no frames, more than any run reaches."""
    frames = task.frames if args.frames is None else args.frames
    return frames or (100_000_000 if args.minutes else task.frames)


def benchmarl_command(python: Path, tool: str, task: Task, seed: int, args: argparse.Namespace, out: str) -> list[str]:
    """BenchMARL's command line for one run, its outputs under ``out``."""
    return [
        str(python), "-m", "benchmarl.run", f"algorithm={tool}", f"task={task.benchmarl}", f"seed={seed}",
        *(f"task.{key}={json.dumps(v)}" for key, v in task.kwargs.items() if key != "continuous_actions"),
        f"experiment.prefer_continuous_actions={task.continuous}",
        f"experiment.evaluation_interval={BENCHMARL_BATCH * task.eval_every}",
        f"experiment.evaluation_episodes={BENCHMARL_EVAL_EPISODES}",
        "experiment.loggers=[csv]", "experiment.render=False", "experiment.create_json=False",
        f"experiment.max_n_frames={budget(task, args)}", f"hydra.run.dir={out}",
        *args.benchmarl_set,
    ]  # fmt: skip


def within_limit(
    evals: pd.Series, frames: pd.Series, seconds: pd.Series, minutes: float
) -> tuple[pd.Series, pd.Series]:
    """A run's evaluations and frame counts (indexed by its iteration) up to the last iteration that ended within
    ``minutes`` (``seconds``: each iteration's end from the process start): what it logged while it was stopping,
    after the limit, is not the run's."""
    frames = frames[seconds.reindex(frames.index) <= minutes * 60]
    if frames.empty:
        raise ValueError(f"no iteration of the run ended within {minutes} minutes: give --minutes a longer limit")
    return evals[evals.index <= frames.index[-1]], frames


def benchmarl_run(python: Path, tool: str, task: Task, seed: int, args: argparse.Namespace) -> dict:
    """One BenchMARL run in a fresh process: its evaluations, per agent, with their frames and seconds."""
    threads = {k: str(args.threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    with tempfile.TemporaryDirectory() as out:
        command = benchmarl_command(python, tool, task, seed, args, out)
        wall, seen = supervised(command, Path(out), args.minutes, "timers_total_time.csv", {**os.environ, **threads})
        scalars = next(Path(out).rglob("scalars"))
        read = lambda name: pd.read_csv(scalars / f"{name}.csv", header=None, index_col=0)[1]  # noqa: E731
        evals, total_frames, total_time = (read(n) for n in ("eval_reward_episode_reward_mean", "counters_total_frames",
                                                              "timers_total_time"))  # fmt: skip
    start_up = seen - float(total_time.iloc[0])  # before its first batch: imports, env and collector set-up
    if args.minutes:
        evals, total_frames = within_limit(evals, total_frames, start_up + total_time, args.minutes)
    return {
        "frames": [int(total_frames[i]) for i in evals.index],
        "seconds": [round(start_up + float(total_time[i]), 2) for i in evals.index],
        "per_agent": [float(v) for v in evals],
        "eval_episodes": BENCHMARL_EVAL_EPISODES,
        "wall": round(wall, 1),
        "total_frames": int(total_frames.iloc[-1]),
    }


def maze_command(task: Task, seed: int, args: argparse.Namespace, run: Path) -> list[str]:
    """maze_impala's command line for one run (``maze-run -cn conf_train``), its outputs in ``run``."""
    updates, epoch = math.ceil(budget(task, args) / 1024), OUR_EPOCH * task.eval_every
    return [
        sys.executable, "-m", "maze_impala", "-cn", "conf_train", "env=pettingzoo", f"env.name={task.ours}",
        "env.api=parallel", *(f"+env.{key}={json.dumps(value)}" for key, value in task.kwargs.items()),
        f"seed={seed}", f"algorithm.epoch_length={epoch}",
        f"algorithm.n_epochs={math.ceil(updates / epoch)}", "output.progress=false", "output.console=false",
        "output.tensorboard=false", "output.plot=false", f"hydra.run.dir={run}", *args.maze_set,
    ]  # fmt: skip


def maze_impala_run(task: Task, seed: int, args: argparse.Namespace, work: Path) -> dict:
    """One maze_impala run (``maze-run -cn conf_train``) and its last model judged on 100 greedy episodes."""
    name = task.ours.rsplit(".", 1)[-1]
    run = work / f"{name}_{seed}"
    command = maze_command(task, seed, args, run)
    wall, seen = supervised(command, work, args.minutes, f"{run.name}/stats.csv")
    stats = pd.read_csv(run / "stats.csv")
    rollout = work / f"rollout_{name}_{seed}"
    maze_run(
        ["-cn", "conf_rollout", f"input_dir={run}", "policy.checkpoint=model_last.pt", f"n_episodes={JUDGE_EPISODES}",
         "deterministic=true", "progress=false", f"hydra.run.dir={rollout}"],
        work,
    )  # fmt: skip
    judged = float(pd.read_csv(rollout / "kpis_summary.csv").set_index("kpi").loc["return", "mean"])
    start_up = seen - float(stats[ELAPSED].iloc[0])  # imports and set-up before the run's clock starts
    return {
        "frames": [int(v) for v in stats[STEPS]],
        "seconds": [round(start_up + float(v), 2) for v in stats[ELAPSED]],
        "per_agent": [float(v) / task.agents for v in stats[EVAL]],
        "judged_per_agent": judged / task.agents,
        "eval_episodes": int(OmegaConf.load(run / CONFIG_YAML).algorithm.rollout_evaluator.n_episodes),  # as run
        "wall": round(wall, 1),
        "total_frames": int(stats[STEPS].iloc[-1]),
    }


# ------------------------------------------------------------------------------------------------------- the table
def final(run: dict) -> float:
    """A run's final figure, per agent: our judged last model; BenchMARL's last evaluation."""
    return run.get("judged_per_agent", run["per_agent"][-1])


def best_stretch(run: dict) -> float:
    """The best mean, per agent, of consecutive evaluations that hold at least ``STRETCH`` episodes together: the
    run's best without the luck of one small evaluation (the best of 100 evaluations of 10 episodes each is mostly
    that luck)."""
    values = np.asarray(run["per_agent"], dtype=float)
    width = min(len(values), math.ceil(STRETCH / run["eval_episodes"]))
    return float(np.convolve(values, np.ones(width) / width, "valid").max())


def steadiness(run: dict) -> float:
    """The largest fall in the run's second half below the best evaluation before it, as a share of its magnitude."""
    values, half = run["per_agent"], len(run["per_agent"]) // 2
    falls = [(max(values[: i + 1]) - values[i]) / abs(max(values[: i + 1])) for i in range(half, len(values))]
    return max(falls, default=0.0)


def reach(run: dict, threshold: float) -> tuple[int | None, float | None]:
    """The frames and seconds of the run's first evaluation at or above ``threshold``."""
    for frames, seconds, value in zip(run["frames"], run["seconds"], run["per_agent"]):
        if value >= threshold:
            return frames, seconds
    return None, None


def machine(run: dict) -> str:
    """What else the machine ran beside a run: ``idle``, or the busy programs of ``--load``."""
    load = run.get("load", 0)
    return "idle" if not load else f"beside {load} busy program{'s' if load > 1 else ''}"


def print_table(runs: list[dict]) -> None:
    """One row per task, machine and tool; each row's threshold is MAPPO's median final on the same machine."""
    print(
        "\n| task | machine | tool | seeds | final per agent (team) | best eval per agent | best 50-episode stretch "
        "| frames to MAPPO's final | seconds to it | wall s | frames/s | largest late fall |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    med = lambda xs: f"{statistics.median(xs):,.0f}" if xs else "-"  # noqa: E731
    for name, task in TASKS.items():
        for where in sorted({machine(r) for r in runs if r["task"] == name}, key=lambda m: (m != "idle", m)):
            here = [r for r in runs if r["task"] == name and machine(r) == where]
            mappo = [final(r) for r in here if r["tool"] == "mappo"]
            threshold = statistics.median(mappo) if mappo else None
            for tool in TOOLS:
                mine = sorted((r for r in here if r["tool"] == tool), key=lambda r: r["seed"])
                if not mine:
                    continue
                finals = [final(r) for r in mine]
                bests = ", ".join(f"{max(r['per_agent']):.1f}" for r in mine)
                hits = [reach(r, threshold) for r in mine] if threshold is not None else []
                frames = [f for f, _ in hits if f is not None]
                seconds = [s for _, s in hits if s is not None]
                print(
                    f"| {name} | {where} | {tool} | {len(mine)} | {', '.join(f'{v:.1f}' for v in finals)} "
                    f"({', '.join(f'{v * task.agents:.1f}' for v in finals)}) "
                    f"| {bests} | {', '.join(f'{best_stretch(r):.1f}' for r in mine)} "
                    f"| {med(frames)} ({len(frames)}/{len(mine)}) | {med(seconds)} "
                    f"| {med([r['wall'] for r in mine])} | {med([r['total_frames'] / r['wall'] for r in mine])} "
                    f"| {max(steadiness(r) for r in mine):.0%} |"
                )
    if any(r["tool"] == "mappo" for r in runs):
        print("\nfinal: maze_impala's last model judged on 100 greedy episodes; BenchMARL's last evaluation (10).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), choices=list(TASKS))
    parser.add_argument("--tools", nargs="+", default=list(TOOLS), choices=list(TOOLS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--frames", type=int, help="frames a run (default: the task's; 0: --minutes only)")
    parser.add_argument("--minutes", type=float, default=0.0, help="wall-clock a run (0: --frames only)")
    parser.add_argument("--threads", type=int, default=1, help="BenchMARL's OMP_NUM_THREADS")
    parser.add_argument("--benchmarl-set", nargs="*", default=["experiment.on_policy_n_minibatch_iters=10"])
    parser.add_argument("--maze-set", nargs="*", default=[], help="overrides of maze_impala's shipped settings")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--torch-index", help="a pip index for torch (e.g. https://download.pytorch.org/whl/cpu)")
    parser.add_argument("--check-envs", action="store_true", help="compare the two MPE releases, then stop")
    parser.add_argument("--load", type=int, default=0, help="programs busy on a core beside every run")
    parser.add_argument("--json", type=Path, help="record every run there as it ends; runs it holds are skipped")
    parser.add_argument("--table", nargs="+", type=Path, help="print the table of the runs these files hold, and stop")
    args = parser.parse_args()
    if args.table:
        print_table([run for path in args.table for run in json.loads(path.read_text())])
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill's SIGTERM unwinds: each run's group is stopped
    needs_benchmarl = args.check_envs or any(tool != "maze_impala" for tool in args.tools)
    python = benchmarl_python(args.venv, args.torch_index) if needs_benchmarl else None
    if args.check_envs:
        assert python is not None
        check_envs(python, args.tasks, list(range(20)))
        return
    runs = json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    done = {(r["task"], r["tool"], r["seed"]) for r in runs}
    with Load(args.load), tempfile.TemporaryDirectory() as tmp:
        for index, seed in enumerate(args.seeds):
            for name in args.tasks:
                for tool in round_order(list(args.tools), index):
                    if (name, tool, seed) in done:
                        continue
                    task = TASKS[name]
                    if tool == "maze_impala":
                        run = maze_impala_run(task, seed, args, Path(tmp))
                    else:
                        assert python is not None
                        run = benchmarl_run(python, tool, task, seed, args)
                    setting = {"frames_budget": budget(task, args), "minutes": args.minutes, "load": args.load}
                    setting["set"] = args.maze_set if tool == "maze_impala" else args.benchmarl_set
                    runs.append({"task": name, "tool": tool, "seed": seed, **setting, **run})
                    print(f"{name} {tool} seed {seed}: final {final(run):.2f} per agent, {run['wall']} s", flush=True)
                    if args.json:
                        part = args.json.with_suffix(".part")
                        part.write_text(json.dumps(runs, indent=1))
                        part.replace(args.json)
    print_table(runs)


if __name__ == "__main__":
    main()
