"""How reliably and how fast the shipped defaults learn: a suite of envs over several seeds, one table.

    python benchmarks/learning.py                                   # the whole suite, 3 seeds, runner=local
    python benchmarks/learning.py --envs CartPole-v1 --seeds 1 2 3 4 5 6 7 8 9 10 --runners local dev
    python benchmarks/learning.py --envs CartPole-v1 --seeds 1 2 3 4 5 6 7 8 9 10 --stop --window 100000
    python benchmarks/learning.py --envs Pendulum-v1 --set n_sgd_passes=1   # change a setting of every run
    python benchmarks/learning.py --envs Acrobot-v1 --model init=default      # change a model setting
    python benchmarks/learning.py --envs CartPole-v1 --model hidden_units=64,64   # a list: comma-separated
    python benchmarks/learning.py --envs memory-lstm memory-mlp stateless-cartpole-lstm scaled-cartpole-normalized
    python benchmarks/learning.py --envs Acrobot-v1 --reward-scale 100   # every reward x100, judged unscaled

Every run trains with the shipped algorithm settings (``maze-run -cn conf_train algorithm=impala``, the same
for every env but those whose shipped env config sets its own, as ``env=minigrid`` does), except that an epoch is
shorter
(``epoch_length`` updates, with ``n_epochs`` scaled so that the number of updates, and with it the
learning-rate schedule and the env-step budget, is the shipped one), so that the return is seen at a
finer grain. Per env and runner the table gives: the seeds whose mean training return (per epoch)
reached the threshold; the median env steps and seconds (``elapsed_seconds``: from the start of the run's
set-up, start-up and evaluations included; torch is imported before the first run) to the first epoch at the
threshold; the mean final return (last 10% of each run's epochs); and collapses: seeds whose return fell below
the env's floor after first reaching the threshold, within ``--window`` env steps of reaching it (``--window 0``:
until the end of the run). Each run's ``drift`` is the median ``policy_update_kl`` over those epochs (the table:
the median over the seeds): how far one update moves a policy that has learnt: in every run, a view of the drift
that ends in the rare falls; its ``sgd_steps_share`` (in ``--json``) is the share of the planned optimizer steps
its updates took, below 1 where a KL stop (``algorithm.target_kl``) ended batches early. ``final eval`` is the
mean greedy evaluation return of each run's last epoch (the table: the mean over the seeds); ``--final-episodes
N`` also judges each run's final policy on N greedy episodes of seeds no evaluation used (``judged``: the median
over the seeds), as a user's rollout of the model would; a task that names an evaluation threshold counts a seed
as reached only if its final evaluation reaches it too.

Some tasks train another model (``model=...``: a recurrent core, normalised observations) or have a budget of
their own (``budget``: env steps; the learning-rate schedule anneals over it); their names say what they show.

``--stop`` ends each run at its first epoch ``--window`` env steps or more after it first reached the threshold
(or at the end of its budget): the same reach, seconds and falls in a fraction of the time; its final return is
then the mean over the epochs after reaching.

Seconds depend on the moment on a shared machine: the table is followed by a calibration, the learner's ms per
update on one fixed batch (``benchmarks/calibration.py``) before and after the runs; seconds of tables taken at
different moments compare in proportion to it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from calibration import calibration_ms, describe
from harness import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, TrainingConfig
from maze_impala.config.evaluation import RolloutEvaluatorConfig
from maze_impala.events.api import mean
from maze_impala.events.interfaces import EpisodeEvents, RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.events.writers import StatsWriter
from maze_impala.impala.events import MultiStepIMPALAEvents

RETURN = StatKey.of(EpisodeEvents.episode_return, mean, "train").column()
EVAL = StatKey.of(EpisodeEvents.episode_return, mean, "eval").column()
STEPS = StatKey.of(RunEvents.env_steps, "last", "train").column()
ELAPSED = StatKey.of(RunEvents.elapsed_seconds, "last", "train").column()
EVAL_EPISODES = 8
"""Greedy episodes of each epoch's evaluation (the table's ``final eval``)."""
UPDATE_KL = StatKey.of(MultiStepIMPALAEvents.policy_update_kl, mean, "train").column()  # + "/step_key=..."
VALUE_LOSS = StatKey.of(MultiStepIMPALAEvents.critic_value_loss, mean, "train").column()  # + "/critic_key=..."
VALUE_SCALE = StatKey.of(MultiStepIMPALAEvents.critic_value_scale, "last", "train").column()  # + "/critic_key=..."
SGD_STEPS = StatKey.of(MultiStepIMPALAEvents.policy_sgd_steps, mean, "train").column()


@dataclass(frozen=True)
class Task:
    """One env of the suite: what it trains with, and what counts as learnt and as a collapse."""

    env: str | dict[str, Any]
    threshold: float
    floor: float
    model: dict[str, Any] = field(default_factory=dict)
    """ModelConfig fields of the task (default: the shipped model)."""
    budget: int | None = None
    """Env steps of each run (None: the shipped algorithm's, 1,200 updates)."""
    eval_threshold: float | None = None
    """The greedy evaluation of the final policy must reach this too."""
    algorithm: dict[str, Any] = field(default_factory=dict)
    """Algorithm settings of the task: those its shipped env config sets (``env=minigrid``), nothing else."""
    runner: dict[str, Any] = field(default_factory=dict)
    """Runner settings its shipped env config sets (``env=minatar``: the learner's cores), nothing else."""
    peer: str = ""
    """What other libraries publish for the env, with the budget and the source (the table prints it beside ours)."""
    agents: int = 1
    """The agents whose rewards a return sums (the team return of a multi-agent env); with more than one, the table
    also gives the return per agent, the other convention of the literature."""


def _example(name: str) -> dict[str, str]:
    return {"_target_": f"maze_impala.envs.examples.{name}"}


def _shipped(name: str, budget: int, threshold: float, floor: float, **changes: Any) -> Task:
    """The task of the shipped ``env=<name>`` config: its env and the algorithm settings it sets, if any."""
    from maze_impala.config.workloads import shipped_env, shipped_model, shipped_runner

    env, algorithm = shipped_env(name)
    return Task(
        env,
        threshold,
        floor,
        budget=budget,
        algorithm=algorithm,
        model=shipped_model(name),
        runner=shipped_runner(name),
        **changes,
    )


def _mpe(name: str, agents: int, threshold: float, floor: float, peer: str) -> Task:
    """A PettingZoo MPE env through the Parallel API (``env=pettingzoo env.name=mpe2.<name> env.api=parallel``; pip
    install mpe2): 25 moves of every agent an episode, the team return (the agents' rewards summed) judged."""
    task = _shipped("pettingzoo", 512_000, threshold, floor, agents=agents, peer=peer)  # env=pettingzoo's config
    return replace(task, env={**task.env, "name": f"mpe2.{name}", "api": "parallel"})


def _minatar(game: str, threshold: float, floor: float, **changes: Any) -> Task:
    """The shipped ``env=minatar`` config on another of its games, at 1M env steps."""
    task = _shipped("minatar", 1_000_000, threshold, floor, **changes)
    return replace(task, env={**task.env, "name": f"MinAtar/{game}-v1"})


SUITE: dict[str, Task] = {
    "CartPole-v1": Task("CartPole-v1", threshold=475.0, floor=400.0),
    "Acrobot-v1": Task("Acrobot-v1", threshold=-100.0, floor=-150.0),
    "Pendulum-v1": Task("Pendulum-v1", threshold=-400.0, floor=-600.0),
    # The envs users try first, at the budgets other libraries publish figures for (``peer``)
    "CartPole-v1-100k": Task("CartPole-v1", 475.0, 400.0, budget=100_000, peer="rl-zoo PPO 500 at 100k"),
    "Acrobot-v1-500k": Task(
        "Acrobot-v1",
        -85.0,
        -150.0,
        budget=500_000,
        peer="rl-zoo PPO -73.5 at 1M (normalised obs); CleanRL PPO -86.4 at 500k",
    ),
    "Pendulum-v1-300k": Task(
        "Pendulum-v1",
        -200.0,
        -400.0,
        budget=300_000,
        peer="rl-zoo PPO -172 at 100k (gSDE, gamma 0.9); SLM-Lab PPO -175 at 300k",
    ),
    # Box2D (pip install "maze_impala[box2d]"): Gymnasium counts 200 as solved
    "LunarLander-v3": Task(
        "LunarLander-v3",
        threshold=200.0,
        floor=100.0,
        budget=1_000_000,
        peer="rl-zoo PPO 242 at 1M; SLM-Lab PPO 183 at 300k",
    ),
    # MuJoCo (pip install "maze_impala[mujoco]") and Box2D locomotion: continuous actions at the budgets the zoo uses
    "Walker2d-v5": Task(
        "Walker2d-v5",
        threshold=2000.0,
        floor=1000.0,
        budget=1_000_000,
        peer="rl-zoo PPO 3,479 at 1M (Walker2d-v3, tuned, normalised); CleanRL PPO 2,288 at 1M",
    ),
    "BipedalWalker-v3": Task(
        "BipedalWalker-v3", threshold=250.0, floor=150.0, budget=5_000_000, peer="rl-zoo PPO 288 at 5M (tuned)"
    ),
    # Held out (chosen before any A/B of the learner of 2026-12-06, never tuned on): run once with the chosen settings
    "held-out-Hopper-v5": Task(
        "Hopper-v5", threshold=2000.0, floor=1000.0, budget=1_000_000, peer="rl-zoo PPO 2,410 at 1M (Hopper-v3)"
    ),
    "held-out-Swimmer-v5": Task(
        "Swimmer-v5",
        threshold=100.0,
        floor=50.0,
        budget=1_000_000,
        peer="rl-zoo PPO 282 at 1M (Swimmer-v3, gamma 0.9999)",
    ),
    "held-out-MountainCarContinuous-v0": Task(
        "MountainCarContinuous-v0", threshold=90.0, floor=50.0, budget=300_000, peer="rl-zoo PPO 88.3 at 20k (gSDE)"
    ),
    "held-out-minatar-asterix-1m": _minatar("Asterix", 10.0, 5.0),
    # the flag at -110 or better; a policy that never finds it stays at -200
    "MountainCar-v0": Task(
        "MountainCar-v0",
        threshold=-120.0,
        floor=-180.0,
        budget=1_000_000,
        peer="rl-zoo PPO -110 at 1M (normalised obs); CleanRL PPO -200 (unsolved)",
    ),
    "cutting": Task({"_target_": "maze_impala.envs.examples.CuttingEnv"}, threshold=6.5, floor=5.0),
    "coordination": Task({"_target_": "maze_impala.envs.examples.CoordinationEnv"}, threshold=9.5, floor=8.0),
    # memory: a cue named 9 steps after it was shown (optimum 1, chance 0.25); an MLP cannot
    "memory-lstm": Task(_example("MemoryEnv"), 0.9, 0.6, model={"recurrent": "lstm"}, budget=500_000),
    "memory-mlp": Task(_example("MemoryEnv"), 0.9, 0.6, budget=500_000),
    # CartPole without its velocities (RLlib's StatelessCartPole): 400 in training and 475 greedy within 1M steps
    "stateless-cartpole-lstm": Task(
        _example("StatelessCartPole"), 400.0, 300.0, model={"recurrent": "lstm"}, budget=1_000_000, eval_threshold=475
    ),
    "stateless-cartpole-mlp": Task(_example("StatelessCartPole"), 400.0, 300.0, budget=1_000_000, eval_threshold=475),
    # CartPole's observations scaled by 1e-3 to 1e3 plus offsets, with and without normalisation
    "scaled-cartpole-normalized": Task(
        _example("ScaledCartPole"), 475.0, 400.0, model={"normalize_observations": True}
    ),
    "scaled-cartpole": Task(_example("ScaledCartPole"), 475.0, 400.0, model={"normalize_observations": False}),
    # structured actions against flat ones: two step keys, the second seeing the first's choice, against one flat
    # step with independent heads (optimum 10 in both; the flat pairs cannot beat 8.5: 1 - slip + slip / n per step)
    "correlated-pairs": Task(_example("CorrelatedPairsEnv"), 9.0, 8.0, budget=200_000),
    "correlated-pairs-flat": Task(_example("FlatCorrelatedPairsEnv"), 9.0, 8.0, budget=200_000),
    "parametrized": Task(_example("ParametrizedActionEnv"), 6.0, 5.0, budget=200_000, eval_threshold=9.0),
    "parametrized-flat": Task(_example("FlatParametrizedActionEnv"), 6.0, 5.0, budget=200_000, eval_threshold=9.0),
    "claims-parallel": Task(  # a PettingZoo ParallelEnv through the adapter; returns sum 3 agents' rewards
        {
            "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
            "name": "maze_impala.envs.examples.claims_parallel",
            "api": "parallel",
        },
        threshold=28.5,
        floor=24.0,
    ),
    # images: a goal seen only as pixels (optimum 0.90, random 0.35), with the shipped model (image_encoder=auto:
    # a 6x6 image goes into the MLP) and through the IMPALA CNN; the same task drawn larger, 4 and 7 pixels a cell
    # (24x24 and 42x42 images), for the rule of image_encoder=auto (run each with --model image_encoder=...)
    "pixel-goal": Task(_example("PixelGoalEnv"), 0.85, 0.7, budget=200_000),
    "pixel-goal-impala": Task(_example("PixelGoalEnv"), 0.85, 0.7, model={"image_encoder": "impala"}, budget=200_000),
    "pixel-goal-24": Task(_example("PixelGoalEnv") | {"cell_pixels": 4}, 0.85, 0.7, budget=200_000),
    "pixel-goal-42": Task(_example("PixelGoalEnv") | {"cell_pixels": 7}, 0.85, 0.7, budget=200_000),
    # MiniGrid's DoorKey through its 7x7 image (env=minigrid; pip install minigrid): 0.9 within 500,000 steps
    "minigrid-doorkey": _shipped("minigrid", 500_000, 0.9, 0.7),
    # MinAtar Breakout (env=minatar; pip install minatar): 10x10 frames, 2M steps
    "minatar-breakout": _shipped("minatar", 2_000_000, 10.0, 5.0),
    # MinAtar at 1M env steps against the MinAtar paper's reference agents at 1M (DQN and AC(0.8), read off its curves)
    "minatar-breakout-1m": _shipped("minatar", 1_000_000, 10.0, 5.0, peer="MinAtar paper DQN, AC(0.8) <= 10 at 1M"),
    "minatar-freeway-1m": _minatar("Freeway", 48.0, 30.0, peer="MinAtar paper DQN, AC(0.8) <= 48 at 1M; gymnax PPO 29"),
    "minatar-spaceinvaders-1m": _minatar("SpaceInvaders", 45.0, 25.0, peer="MinAtar paper DQN, AC(0.8) <= 45 at 1M"),
    # MPE (pip install mpe2), thresholds as team returns; random play, 200 episodes of `maze-run -cn conf_rollout
    # policy=random_policy env=pettingzoo env.name=mpe2.<name> env.api=parallel n_episodes=200`
    "mpe-simple-spread": _mpe("simple_spread_v3", 3, -60.0, -70.0, peer="random play -80.5 team, -26.9 per agent"),
    "mpe-speaker-listener": _mpe(
        "simple_speaker_listener_v4", 2, -30.0, -45.0, peer="random play -75.3 team, -37.7 per agent"
    ),
}


def _value(text: str, default: Any) -> Any:
    if text == "None":
        return None
    if isinstance(default, bool):
        return text.lower() in ("1", "true", "yes")
    if isinstance(default, list):  # widths: "64,64" or "[64,64]"
        return [int(part) for part in text.strip("[]").split(",") if part.strip()]
    if default is None:  # an optional field: an int where the text is one (min_actors_batch_size), else a float
        return int(text) if text.lstrip("-").isdigit() else float(text)
    return type(default)(text)


def algorithm_for(
    epoch_length: int, changes: dict[str, str], budget: int | None = None, task: dict[str, Any] | None = None
) -> ImpalaAlgorithmConfig:
    """The shipped settings (with the ``task``'s own, if any), epochs of ``epoch_length`` updates, the same updates
    (or those of ``budget`` env steps, unless ``changes`` set ``n_epochs``)."""
    defaults = ImpalaAlgorithmConfig()
    settings = {**(task or {}), **{k: _value(v, getattr(defaults, k)) for k, v in changes.items()}}
    # epochs of 10 updates evaluate 5x as often as the shipped 50: 8 episodes each (the shipped count until
    # 2026-12-03), so that the seconds compare with the earlier tables; --final-episodes judges the final policy
    settings.setdefault("rollout_evaluator", RolloutEvaluatorConfig(n_episodes=EVAL_EPISODES))
    shipped = ImpalaAlgorithmConfig(**settings)
    updates = shipped.total_updates
    if budget is not None and "n_epochs" not in changes:
        updates = budget // shipped.env_steps_per_update
    return ImpalaAlgorithmConfig(
        **{**settings, "epoch_length": epoch_length, "n_epochs": max(1, updates // epoch_length)}
    )


class _Stopped(Exception):
    """Raised by :class:`Watch` to end a run once its window has passed."""


class Watch(StatsWriter):
    """Keeps every epoch's row of a run; with ``stop_after``, ends the run that many env steps after its return first
    reached ``threshold`` (a stopped run: what the table needs, in a fraction of the full run's time)."""

    def __init__(self, threshold: float, stop_after: int | None = None):
        self.threshold, self.stop_after = threshold, stop_after
        self.rows: list[dict[str, float]] = []
        self.reached_at: float | None = None

    def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
        self.rows.append(row)
        if self.reached_at is None and row.get(RETURN, -math.inf) >= self.threshold:
            self.reached_at = env_steps
        if (
            self.stop_after is not None
            and self.reached_at is not None
            and env_steps >= self.reached_at + self.stop_after
        ):
            raise _Stopped

    def column(self, name: str) -> np.ndarray:
        return np.array([row.get(name, math.nan) for row in self.rows], dtype=float)


def with_reward_scale(task: Task, scale: float) -> Task:
    """The ``task`` with every reward multiplied by ``scale`` (``env.wrappers``), its threshold and floor too, so that
    reaching and falling mean what they mean unscaled; :func:`unscaled` takes a run's returns back to the env's
    units."""
    if scale == 1.0:
        return task
    env = (
        task.env
        if isinstance(task.env, dict)
        else {"_target_": "maze_impala.envs.gym_adapter.make_gym_env", "name": task.env}
    )
    parallel = env.get("api") == "parallel"
    wrapper = "maze_impala.envs.wrappers." + ("scaled_parallel_reward" if parallel else "ScaledReward")
    wrappers = [*env.get("wrappers", []), {"_target_": wrapper, "scale": scale}]
    return replace(task, env={**env, "wrappers": wrappers}, threshold=task.threshold * scale, floor=task.floor * scale)


def unscaled(row: dict, scale: float) -> dict:
    """A run's summary (:func:`run_once`) with its returns (and its critics' losses) in the env's own units."""
    returns = ("final", "final_eval", "judged", "lowest_after")
    row = {k: (v / scale if k in returns and v is not None else v) for k, v in row.items()}
    row["evals"] = [x / scale for x in row.get("evals", [])]
    row["critic_losses"] = {k: [x / scale**2 for x in v] for k, v in row.get("critic_losses", {}).items()}
    return row


def with_model(task: Task, changes: dict[str, str]) -> Task:
    """The ``task`` with its model's settings changed (``changes`` as text, parsed by the fields' defaults)."""
    defaults = ModelConfig()
    return replace(task, model={**task.model, **{k: _value(v, getattr(defaults, k)) for k, v in changes.items()}})


def episode_returns(task: Task, policy: Any, seeds: list[int]) -> np.ndarray:
    """The greedy returns of one episode of ``task`` per seed, in the seeds' order (as the rollout CLI plays them)."""
    from maze_impala.envs.factory import make_env
    from maze_impala.evaluate.evaluator import episode_player

    envs = [make_env(task.env) for _ in range(min(len(seeds), 32))]
    try:
        results = episode_player(envs, policy, deterministic=True).play(list(enumerate(seeds)))
    finally:
        for env in envs:
            env.close()
    return np.array([r.episode_return for r in sorted(results, key=lambda r: r.episode_id)], dtype=float)


JUDGE_SEEDS = 7_000_000
"""The first seed of the judge's episodes: no evaluation in training uses them."""


def judge(task: Task, policy: Any, episodes: int) -> float:
    """The mean return of ``episodes`` greedy episodes of ``policy`` (with seeds that no evaluation in training
    used): the final policy judged on more episodes than an epoch's evaluation."""
    return float(episode_returns(task, policy, [JUDGE_SEEDS + i for i in range(episodes)]).mean())


def run_once(
    task: Task,
    runner: str,
    seed: int,
    algorithm: ImpalaAlgorithmConfig,
    window: int,
    stop: bool,
    final_episodes: int = 0,
) -> dict:
    """One training run (stopped ``window`` env steps after reaching the threshold with ``stop``), summarised;
    with ``final_episodes``, its final policy is also judged on that many greedy episodes."""
    from maze_impala.train.setup import build_trainer

    watch = Watch(task.threshold, stop_after=window if stop else None)
    with tempfile.TemporaryDirectory() as out:
        model = ModelConfig(**task.model)
        config = TrainingConfig(
            task.env, algorithm, model, RunnerConfig(runner, **task.runner), output=QUIET, seed=seed
        )
        trainer = build_trainer(config, Path(out))
        trainer.outputs.writers.append(watch)
        try:
            trainer.train()
        except _Stopped:
            pass
        judged = judge(task, trainer.learner.policy, final_episodes) if final_episodes else None
    returns, steps = watch.column(RETURN), watch.column(STEPS)
    elapsed = watch.column(ELAPSED)  # from the start of the run's set-up: start-up included
    tail = returns[-max(1, len(returns) // 10) :]
    final_eval = float(watch.column(EVAL)[-1])
    row = {
        "seed": seed,
        "critic_swing": critic_swing(watch),
        "critic_swing_after_fit": critic_swing(watch, skip=FIRST_FIT),
        "critic_losses": {key: [float(f"{x:.4g}") for x in v] for key, v in critic_losses(watch).items()},
        "evals": [float(f"{x:.6g}") for x in watch.column(EVAL)],
        "sgd_steps_share": sgd_steps_share(watch, algorithm.n_sgd_passes * algorithm.sgd_minibatches),
        "final": float(np.nanmean(tail)),
        "final_eval": final_eval,
        "judged": judged,
        "steps": None,
        "seconds": None,
        "collapsed": False,
    }
    reached = np.flatnonzero(returns >= task.threshold)
    if task.eval_threshold is not None and final_eval < task.eval_threshold:
        reached = reached[:0]  # the final policy must also evaluate at the task's evaluation threshold
    if len(reached):
        first = int(reached[0])
        after = steps > steps[first]
        if window and not stop:  # a stopped run ended at its first epoch at or past the window: all of it counts
            after &= steps <= steps[first] + window
        if stop:  # the final return of a stopped run: that of the epochs it watched (or of reaching, if none)
            row["final"] = float(np.nanmean(returns[after] if after.any() else returns[first : first + 1]))
        low = np.nanmin(returns[after]) if after.any() and not np.isnan(returns[after]).all() else math.inf
        row.update(
            steps=int(steps[first]),
            seconds=round(float(elapsed[first]), 2),
            collapsed=bool(low < task.floor),
            lowest_after=float(low) if math.isfinite(low) else None,
            drift=solved_drift(watch, after),
        )
    return row


def critic_losses(watch: Watch) -> dict[str, np.ndarray]:
    """Each critic's value loss per epoch, in the env's units: a normalised critic's loss
    (``algorithm.value_normalization``) is divided by its scale's square, which moves during a run, so its epochs
    compare once multiplied back."""
    columns = sorted({name for row in watch.rows for name in row if name.startswith(VALUE_LOSS + "/")})
    scale = lambda name: np.nan_to_num(watch.column(VALUE_SCALE + name[len(VALUE_LOSS) :]), nan=1.0)  # noqa: E731
    return {name[len(VALUE_LOSS) + 1 :]: watch.column(name) * scale(name) ** 2 for name in columns}


FIRST_FIT = 0.1
"""The share of a run's first epochs in which a critic fits its targets from its random start: a loss there is far
above the run's median by construction, not a swing (:func:`critic_swing` with ``skip``)."""


def critic_swing(watch: Watch, skip: float = 0.0) -> float | None:
    """The largest epoch's critic value loss over the run's median (its largest critic's), in the env's units: how
    far the critic swings; ``skip``: the largest of the epochs after that share of the run's first ones."""
    ratios = []
    for losses in critic_losses(watch).values():
        losses = losses[~np.isnan(losses)]
        later = losses[int(len(losses) * skip) :]
        if len(later) and np.median(losses) > 0:
            ratios.append(float(later.max() / np.median(losses)))
    return max(ratios) if ratios else None


def sgd_steps_share(watch: Watch, planned: int) -> float | None:
    """The optimizer steps the run's updates took, as a share of the ``planned`` ones: below 1 where a KL stop
    (``algorithm.target_kl``) ended batches early."""
    taken = watch.column(SGD_STEPS)
    taken = taken[~np.isnan(taken)]
    return float(taken.mean() / planned) if len(taken) else None


def solved_drift(watch: Watch, epochs: np.ndarray) -> float | None:
    """The median over ``epochs`` of the policy's per-update KL (its largest step key's): how far each update moves
    a policy that has reached the threshold, the drift that ends in a fall."""
    columns = {name for row in watch.rows for name in row if name.startswith(UPDATE_KL + "/")}
    per_epoch = np.fmax.reduce([watch.column(name) for name in columns], axis=0) if columns else np.array([])
    chosen = per_epoch[epochs] if len(per_epoch) else per_epoch
    return float(np.nanmedian(chosen)) if len(chosen) and not np.isnan(chosen).all() else None


def summarise(name: str, runner: str, rows: list[dict]) -> dict:
    hits = [r for r in rows if r["steps"] is not None]
    median = lambda key: statistics.median(r[key] for r in hits) if hits else None  # noqa: E731
    return {
        "env": name,
        "runner": runner,
        "reached": f"{len(hits)}/{len(rows)}",
        "median_steps": median("steps"),
        "median_seconds": median("seconds"),
        "final_return": statistics.mean(r["final"] for r in rows),
        "final_eval": statistics.mean(r["final_eval"] for r in rows),
        "median_eval": statistics.median(r["final_eval"] for r in rows),
        "median_judged": statistics.median(j)
        if (j := [r["judged"] for r in rows if r.get("judged") is not None])
        else None,
        "collapses": sum(r["collapsed"] for r in hits),
        "median_drift": statistics.median(d) if (d := [r["drift"] for r in hits if r["drift"] is not None]) else None,
        "runs": rows,
    }


def print_table(summaries: list[dict]) -> None:
    print(
        "| env | runner | budget | reached | median env steps | median s | final return | collapses | drift | "
        "final eval (mean) | final eval (median) | judged (median) | others publish |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        steps = "-" if s["median_steps"] is None else f"{s['median_steps']:,.0f}"
        seconds = "-" if s["median_seconds"] is None else f"{s['median_seconds']:.1f}"
        drift = "-" if s["median_drift"] is None else f"{s['median_drift']:.1e}"
        judged = "-" if s.get("median_judged") is None else f"{s['median_judged']:.2f}"
        task = SUITE[s["env"]]
        budget = f"{task.budget:,}" if task.budget else "default"
        final = f"{s['final_return']:.2f}" + per_agent(task, s["final_return"])
        evaluated = f"{s['final_eval']:.2f}" + per_agent(task, s["final_eval"])
        print(
            f"| {s['env']} | {s['runner']} | {budget} | {s['reached']} | {steps} | {seconds} | "
            f"{final} | {s['collapses']} | {drift} | {evaluated} | "
            f"{s['median_eval']:.2f} | {judged} | {task.peer or '-'} |"
        )


def per_agent(task: Task, team_return: float) -> str:
    """`` (x per agent)`` where the task's return sums several agents' (the team return), else nothing."""
    return f" ({team_return / task.agents:.2f} per agent)" if task.agents > 1 else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(SUITE), choices=list(SUITE))
    parser.add_argument("--runners", nargs="+", default=["local"], choices=["dev", "local", "ray"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--epoch-length", type=int, default=10, help="updates per epoch (the grain of the table)")
    parser.add_argument("--window", type=int, default=200_000, help="env steps after reaching to watch for a collapse")
    parser.add_argument(
        "--stop",
        action="store_true",
        help="end each run at its first epoch --window env steps or more after it reached the threshold",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="algorithm settings to change")
    parser.add_argument("--model", nargs="*", default=[], metavar="FIELD=VALUE", help="model settings to change")
    parser.add_argument("--json", help="also write every run to this JSON file")
    parser.add_argument(
        "--reward-scale", type=float, default=1.0, help="multiply every reward by this (the table: unscaled returns)"
    )
    parser.add_argument(
        "--final-episodes",
        type=int,
        default=0,
        help="also judge each run's final policy on this many greedy episodes (the table's 'judged'; 0: not)",
    )
    parser.add_argument(
        "--calibrate",
        type=float,
        default=3.0,
        help="seconds of the calibration (learner alone) before and after (0: none)",
    )
    args = parser.parse_args()
    changes = dict(item.split("=", 1) for item in args.set)
    # build_trainer's module imports torch; import it here, so that every run's seconds are those of a process that
    # has it, not the first run's alone with the import in it
    importlib.import_module("maze_impala.train.setup")
    calibration = [calibration_ms(args.calibrate)] if args.calibrate else []
    summaries = []
    for name in args.envs:
        task = with_model(SUITE[name], dict(item.split("=", 1) for item in args.model))
        task = with_reward_scale(task, args.reward_scale)
        algorithm = algorithm_for(args.epoch_length, changes, task.budget, task.algorithm)
        for runner in args.runners:
            rows = []
            for seed in args.seeds:
                row = run_once(task, runner, seed, algorithm, args.window, args.stop, args.final_episodes)
                rows.append(unscaled(row, args.reward_scale))
                print(f"{name} {runner} seed {seed}: {json.dumps(rows[-1])}", flush=True)
            summaries.append(summarise(name, runner, rows))
    print()
    print_table(summaries)
    if args.calibrate:
        calibration.append(calibration_ms(args.calibrate))
        print(describe(calibration))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"calibration_ms_per_update": calibration, "tables": summaries}, f, indent=1)


if __name__ == "__main__":
    main()
