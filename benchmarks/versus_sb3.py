"""maze_impala beside Stable-Baselines3's PPO on the same machine, seeds and env-step budgets, runs alternating.

    python benchmarks/versus_sb3.py                                  # every task, seeds 1-3
    python benchmarks/versus_sb3.py --tasks cartpole --seeds 1 2 3 --json out.json
    python benchmarks/versus_sb3.py --tasks minatar --sb3-budget 1000000   # SB3 stops (and anneals) sooner
    python benchmarks/versus_sb3.py --tasks cartpole --tools maze_impala --set envs_per_actor=16   # other settings
    python benchmarks/versus_sb3.py --tasks cartpole --load 1       # beside a program busy on a core

SB3 is never a dependency of maze_impala: this script installs it into a virtual environment of its own
(``--venv``, default ``~/.cache/maze_impala/sb3-venv``), which sees this Python's packages (torch, gymnasium and
maze_impala's example envs; those of the venv this script runs in) but not the reverse, and installs SB3 pinned to
this Python's torch, gymnasium and numpy: both tools run on the same builds, a CPU torch on a CPU machine.

Each run is a fresh process; the time to the threshold counts from the moment that process is started (imports, env
and actor start-up included) to the moment the mean return of the latest 100 training episodes first reaches the
task's threshold: for maze_impala as the learner takes the rollout that ended them, for SB3 (its ``ep_info_buffer``)
after every rollout. A run stops there, or at its budget. The runs of a seed go one after the other, maze_impala
first, then SB3, so that a slow period of a shared machine hits both.

Tasks (maze_impala with the shipped settings of the task's env config; SB3 with the RL Zoo's settings):

* ``cartpole``: CartPole-v1 to 475; SB3 PPO with ``ppo.yml``'s CartPole-v1 settings (8 envs, 32 steps, batches of
  256, 20 epochs, gamma 0.98, GAE lambda 0.8, lr and clip range 1e-3 and 0.2 annealed).
* ``lunarlander``: LunarLander-v3 to 200 within 1M env steps; SB3 PPO with ``ppo.yml``'s LunarLander-v2 settings
  (16 envs, 1,024 steps, batches of 64, 4 epochs, gamma 0.999, GAE lambda 0.98, entropy 0.01, 1M env steps).
* ``walker2d``: MuJoCo Walker2d-v5 to 2,000 within 1M env steps (``pip install "maze_impala[mujoco]"``); SB3 PPO
  with ``ppo.yml``'s tuned Walker2d-v3 settings (1 env, 512 steps, batches of 32, 20 epochs, lr 5.05e-5, clip range
  0.1, entropy 5.85e-4, observations and rewards normalised by ``VecNormalize``).
* ``pixel-goal``: ``env=pixel_goal`` (a 6x6 RGB image, optimum 0.90) to 0.85; ``pixel-goal-24``: the same task
  drawn 4 pixels a cell (24x24). SB3 PPO with the Zoo's Atari settings (8 envs, 128 steps, 4 epochs, batches of
  256, lr 2.5e-4 and clip range 0.1 annealed, entropy 0.01) and a small CNN (32 and 64 3x3 convolutions of stride
  2, a 256-wide layer): SB3's own Nature CNN needs images of 36x36 or more.
* ``minatar``: ``env=minatar`` (MinAtar Breakout, 10x10x4) to 10; SB3 as for the pixel goal.
* ``tictactoe``: PettingZoo tic-tac-toe until a greedy evaluation wins or draws at least 0.95 of 50 games per seat
  against uniformly random play, in both seats. maze_impala: ``env=tictactoe`` (self-play, never against random
  play; its own evaluation after every epoch of 25,600 env steps). SB3: sb3-contrib's ``MaskablePPO`` with a flat
  MLP and the legal-move masks, trained against the random player in alternating seats (the setup of PettingZoo's
  SB3 tutorials), 8 envs of 256 steps and otherwise its defaults, evaluated the same way every 24,576 of its
  steps. Env steps are the trained policy's moves for both (SB3's env steps also make the random player's move).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import yaml
from harness import Load

TASKS = {
    # name: (threshold, env-step budget)
    "cartpole": (475.0, 500_000),
    "lunarlander": (200.0, 1_000_000),
    "walker2d": (2000.0, 1_000_000),
    "pixel-goal": (0.85, 400_000),
    "pixel-goal-24": (0.85, 400_000),
    "minatar": (10.0, 2_000_000),
    "tictactoe": (0.95, 1_000_000),
}
ZOO_MLP = {
    # task: (env, envs, the RL Zoo's ppo.yml settings; "annealed": linear from the value to 0)
    "cartpole": (
        "CartPole-v1",
        8,
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "annealed": {"learning_rate": 1e-3, "clip_range": 0.2},
        },
    ),
    "lunarlander": (  # the Zoo's LunarLander-v2 settings
        "LunarLander-v3",
        16,
        {"n_steps": 1024, "batch_size": 64, "gae_lambda": 0.98, "gamma": 0.999, "n_epochs": 4, "ent_coef": 0.01},
    ),
    "walker2d": (  # the Zoo's tuned Walker2d-v3 settings, with its VecNormalize of observations and rewards
        "Walker2d-v5",
        1,
        {
            "normalize": True,
            "n_steps": 512,
            "batch_size": 32,
            "gamma": 0.99,
            "learning_rate": 5.05041e-05,
            "ent_coef": 0.000585045,
            "clip_range": 0.1,
            "n_epochs": 20,
            "gae_lambda": 0.95,
            "max_grad_norm": 1.0,
            "vf_coef": 0.871923,
        },
    ),
}
SB3 = ("stable-baselines3==2.9.2", "sb3-contrib==2.9.2")
"""SB3 2.9 is the first release that accepts Gymnasium 1.3 and later (2.7 asks for gymnasium<1.3)."""
WINDOW = 100
"""Both tools are judged alike: the mean return of the latest 100 training episodes, checked as they end."""
DEFAULT_VENV = Path.home() / ".cache" / "maze_impala" / "sb3-venv"


SHARED = ("torch", "gymnasium", "numpy")
"""What both tools must run on: this Python's own builds (a CPU torch stays the CPU torch)."""


def sb3_venv(venv_dir: Path) -> Path:
    """A virtual environment whose Python sees this one's packages, those of the venv this script runs in included
    (``system_site_packages`` would give the base interpreter's instead): a ``.pth`` file names this Python's
    site-packages folders. Returns the file of constraints that pins :data:`SHARED` at this Python's versions, so
    that installing SB3 takes no other torch (a CUDA build of several GB) and no other gymnasium."""
    python = venv_dir / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(system_site_packages=False, with_pip=True).create(venv_dir)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = [p for p in dict.fromkeys(sys.path) if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (Path(site) / "maze_impala_parent.pth").write_text("".join(f"{p}\n" for p in ours))
    from importlib.metadata import version

    constraints = venv_dir / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version(name)}\n" for name in SHARED))
    return constraints


def sb3_python(venv_dir: Path) -> Path:
    """The Python of a virtual environment with SB3 (made and filled on first use), on this one's torch, gymnasium
    and numpy (:func:`sb3_venv`)."""
    python = venv_dir / "bin" / "python"
    constraints = sb3_venv(venv_dir)
    wanted = " ".join(pin.split("==")[1] for pin in SB3)
    installed = "import stable_baselines3 as a, sb3_contrib as b; print(a.__version__, b.__version__)"
    check = subprocess.run([str(python), "-c", installed], capture_output=True, text=True)
    if check.returncode != 0 or check.stdout.strip() != wanted:  # absent, or another release: install the pins
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *SB3], check=True)
    return python


# --------------------------------------------------------------------------------------------- the runs' processes
def maze_run(task: str, seed: int, started: float) -> dict:
    """maze_impala with the task's shipped settings, stopped at the threshold."""
    from maze_impala import ModelConfig, OutputConfig, RunnerConfig, TrainingConfig
    from maze_impala.config import ImpalaAlgorithmConfig
    from maze_impala.config.workloads import shipped_env, shipped_model, shipped_runner
    from maze_impala.events.api import EventRecord, event_name, mean
    from maze_impala.events.interfaces import EpisodeEvents, GameEvents
    from maze_impala.events.stats import StatKey
    from maze_impala.events.writers import StatsWriter
    from maze_impala.train.setup import build_trainer
    from maze_impala.train.trainer import TrainingError

    threshold, budget = TASKS[task]
    env, algorithm = {
        "cartpole": ("CartPole-v1", {}),
        "lunarlander": ("LunarLander-v3", {}),
        "walker2d": ("Walker2d-v5", {}),
        "pixel-goal": shipped_env("pixel_goal"),
        "pixel-goal-24": ({**shipped_env("pixel_goal")[0], "cell_pixels": 4}, shipped_env("pixel_goal")[1]),
        "minatar": shipped_env("minatar"),
        "tictactoe": shipped_env("tictactoe"),
    }[task]
    algorithm = {**algorithm, **json.loads(os.environ.get("MAZE_SETTINGS") or "{}")}
    shipped = ImpalaAlgorithmConfig(**algorithm)
    updates = budget // shipped.env_steps_per_update
    epochs = max(1, updates // shipped.epoch_length)
    shipped_config = {
        "cartpole": None,
        "lunarlander": None,
        "walker2d": None,
        "minatar": "minatar",
        "tictactoe": "tictactoe",
    }.get(task, "pixel_goal")
    model = ModelConfig(**(shipped_model(shipped_config) if shipped_config else {}))
    runner = RunnerConfig(**(shipped_runner(shipped_config) if shipped_config else {}))
    config = TrainingConfig(
        env,
        ImpalaAlgorithmConfig(**{**algorithm, "n_epochs": epochs}),
        model,
        runner,
        OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
        seed=seed,
    )
    result = {"reached": None, "seconds": None, "env_steps": None}
    returns: deque[float] = deque(maxlen=WINDOW)
    episode_return = event_name(EpisodeEvents.episode_return)

    class Reached(Exception):
        pass

    with tempfile.TemporaryDirectory() as out:
        trainer = build_trainer(config, Path(out))

        def watch(record: EventRecord) -> None:  # every training episode, as the learner takes its rollout
            if (record.interface, record.event) == episode_return:
                returns.append(float(record.values["value"]))
                if len(returns) == WINDOW and sum(returns) / WINDOW >= threshold:
                    result.update(reached=True, seconds=time.time() - started, env_steps=trainer.state.env_steps)
                    raise Reached

        class Judged(StatsWriter):  # every epoch's evaluation against random play, where the task is a game
            def write(self, epoch: int, env_steps: int, row: dict[str, float]) -> None:
                seats = ("player_1", "player_2")
                rates = [
                    sum(
                        row.get(StatKey.of(e, mean, "eval", group=f"seat={seat}").column(), 0.0)
                        for e in (GameEvents.win, GameEvents.draw)
                    )
                    for seat in seats
                ]
                if min(rates) >= threshold:
                    result.update(reached=True, seconds=time.time() - started, env_steps=env_steps)
                    raise Reached

        if task == "tictactoe":
            trainer.outputs.writers.append(Judged())
        else:
            trainer.hub.listeners.append(watch)
        try:
            trainer.train()
        except Reached:  # from the epoch's writers
            pass
        except TrainingError as error:  # from the learner's update
            if not isinstance(error.__cause__, Reached):
                raise
        result["encoder"] = (Path(out) / "config.yaml").read_text().split("image_encoder: ")[1].split()[0]
    return result


def sb3_run(task: str, seed: int, started: float) -> dict:
    """SB3 PPO with the RL Zoo's settings for the task, stopped at the threshold (or ``SB3_BUDGET`` env steps,
    over which its schedules anneal, where set)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    threshold, budget = TASKS[task]
    budget = int(os.environ.get("SB3_BUDGET") or budget)
    torch.set_num_threads(1)  # as each of maze_impala's processes: the other core runs the envs

    def linear(start: float):
        return lambda progress: progress * start

    class SmallCNN(BaseFeaturesExtractor):
        """Two 3x3 convolutions of stride 2 and a 256-wide layer, for images too small for the Nature CNN."""

        def __init__(self, space: gym.spaces.Box, features_dim: int = 256):
            super().__init__(space, features_dim)
            self.convs = nn.Sequential(
                nn.Conv2d(space.shape[0], 32, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2, padding=1),
                nn.ReLU(),
                nn.Flatten(),
            )
            with torch.no_grad():
                n = self.convs(torch.zeros(1, *space.shape)).shape[1]
            self.linear = nn.Sequential(nn.Linear(n, features_dim), nn.ReLU())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.convs(x))

    if task == "tictactoe":
        return sb3_tictactoe(seed, started)
    if task in ZOO_MLP:
        env_id, n_envs, settings = ZOO_MLP[task]
        env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
        if settings.get("normalize"):  # the Monitor inside keeps the raw returns that both tools are judged on
            from stable_baselines3.common.vec_env import VecNormalize

            env = VecNormalize(env, gamma=settings["gamma"])
        fixed = {name: value for name, value in settings.items() if name not in ("annealed", "normalize")}
        schedules = {name: linear(value) for name, value in settings.get("annealed", {}).items()}
        model = PPO("MlpPolicy", env, **fixed, **schedules, seed=seed)
    else:
        if task.startswith("pixel-goal"):
            from maze_impala.envs.examples import PixelGoalEnv

            cells = 4 if task == "pixel-goal-24" else 1
            env = make_vec_env(PixelGoalEnv, n_envs=8, seed=seed, env_kwargs={"cell_pixels": cells})
        else:
            from maze_impala.envs.gym_adapter import make_gym  # registers MinAtar's envs

            def frames(env: gym.Env) -> gym.Env:  # bool planes as uint8 images, as SB3's CnnPolicy takes
                shape = env.observation_space.shape
                space = gym.spaces.Box(0, 255, shape, np.uint8)
                return gym.wrappers.TransformObservation(env, lambda o: o.astype(np.uint8) * 255, space)

            env = make_vec_env(lambda: make_gym("MinAtar/Breakout-v1"), n_envs=8, seed=seed, wrapper_class=frames)
        model = PPO(
            "CnnPolicy",
            env,
            n_steps=128,
            n_epochs=4,
            batch_size=256,
            learning_rate=linear(2.5e-4),
            clip_range=linear(0.1),
            vf_coef=0.5,
            ent_coef=0.01,
            seed=seed,
            policy_kwargs={"features_extractor_class": SmallCNN, "normalize_images": True},
        )
    result = {"reached": None, "seconds": None, "env_steps": None}

    class Watch(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            buffer = [info["r"] for info in self.model.ep_info_buffer]
            if len(buffer) == WINDOW and np.mean(buffer) >= threshold and result["reached"] is None:
                result.update(reached=True, seconds=time.time() - started, env_steps=self.num_timesteps)
                self.model.num_timesteps = budget  # ends learn() after this update

    model.learn(total_timesteps=budget, callback=Watch())
    return result


class VersusRandom(gym.Env):
    """PettingZoo tic-tac-toe as one player's Gymnasium env: the trained player takes the seats in turn, episode by
    episode (or always ``seat``), and the other seat moves uniformly at random among the legal moves. Reward +1 for
    a won game, -1 for a lost one, 0 for a draw; ``action_masks()`` gives the legal moves (for MaskablePPO)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (18,), np.float32)
    action_space = gym.spaces.Discrete(9)

    def __init__(self, seed: int = 0, seat: int | None = None):
        from pettingzoo.classic.tictactoe.tictactoe import env  # tictactoe_v3, without its deprecation warning

        self.game, self.seat, self.episodes = env(), seat, 0
        self.rng = np.random.default_rng(seed)

    def _observation(self) -> np.ndarray:
        return self.game.observe(self.me)["observation"].astype(np.float32).ravel()

    def _over(self) -> bool:
        return any(self.game.terminations.values()) or any(self.game.truncations.values())

    def _random_moves(self) -> None:
        while not self._over() and self.game.agent_selection != self.me:
            legal = np.flatnonzero(self.game.observe(self.game.agent_selection)["action_mask"])
            self.game.step(int(self.rng.choice(legal)))

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.game.reset(seed=int(self.rng.integers(2**31)))
        seat = self.seat if self.seat is not None else self.episodes % 2
        self.me, self.episodes = self.game.agents[seat], self.episodes + 1
        self._random_moves()
        return self._observation(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.game.step(int(action))
        self._random_moves()
        over = self._over()
        return self._observation(), float(self.game.rewards[self.me]) if over else 0.0, over, False, {}

    def action_masks(self) -> np.ndarray:
        return self.game.observe(self.me)["action_mask"].astype(bool)


def sb3_tictactoe(seed: int, started: float) -> dict:
    """sb3-contrib's MaskablePPO against the random player, judged by greedy games against it in both seats."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    threshold, budget = TASKS["tictactoe"]
    budget = int(os.environ.get("SB3_BUDGET") or budget)
    torch.set_num_threads(1)
    env = make_vec_env(VersusRandom, n_envs=8, seed=seed)
    model = MaskablePPO("MlpPolicy", env, n_steps=256, seed=seed)
    judges = [VersusRandom(seed=seed + 1000 * seat, seat=seat) for seat in (0, 1)]
    result = {"reached": None, "seconds": None, "env_steps": None}

    def rate(judge) -> float:
        """Win or draw in 50 greedy games in the judge's seat."""
        kept = 0
        for _ in range(50):
            obs, _ = judge.reset()
            while True:
                action, _ = model.predict(obs, deterministic=True, action_masks=judge.action_masks())
                obs, reward, over, _, _ = judge.step(action)
                if over:
                    kept += reward >= 0
                    break
        return kept / 50

    class Judge(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            if self.num_timesteps % 24_576 == 0 and result["reached"] is None:
                if min(rate(judge) for judge in judges) >= threshold:
                    result.update(reached=True, seconds=time.time() - started, env_steps=self.num_timesteps)
                    self.model.num_timesteps = budget  # ends learn() after this update

    model.learn(total_timesteps=budget, callback=Judge())
    return result


# ---------------------------------------------------------------------------------------------------- the driver
def run(tool: str, task: str, seed: int, python: Path, sb3_budget: int | None = None, settings: str = "") -> dict:
    """One run in a fresh process; its time counts from just before the process starts."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        started = time.time()
        command = [str(python), __file__, "--worker", tool, task, str(seed), repr(started), out.name]
        extra = {"SB3_BUDGET": str(sb3_budget or ""), "MAZE_SETTINGS": settings}
        subprocess.run(command, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1", **extra})
        row = json.loads(Path(out.name).read_text())
    return {"tool": tool, "task": task, "seed": seed, **row}


def summary(rows: list[dict]) -> list[dict]:
    table = []
    for task in dict.fromkeys(r["task"] for r in rows):
        line: dict = {"task": task}
        for tool in ("maze_impala", "sb3"):
            mine = [r for r in rows if r["task"] == task and r["tool"] == tool]
            done = [r for r in mine if r["reached"]]
            line[f"{tool}_reached"] = f"{len(done)}/{len(mine)}"
            line[f"{tool}_seconds"] = statistics.median(r["seconds"] for r in done) if done else None
            line[f"{tool}_env_steps"] = statistics.median(r["env_steps"] for r in done) if done else None
        if line["maze_impala_seconds"] and line["sb3_seconds"]:
            line["sooner"] = round(line["sb3_seconds"] / line["maze_impala_seconds"], 2)
            line["env_steps_ratio"] = round(line["maze_impala_env_steps"] / line["sb3_env_steps"], 2)
        table.append(line)
    return table


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        tool, task, seed, started, out = sys.argv[2:7]
        row = (maze_run if tool == "maze_impala" else sb3_run)(task, int(seed), float(started))
        Path(out).write_text(json.dumps(row))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="SB3's virtual environment")
    parser.add_argument("--sb3-budget", type=int, help="SB3's env-step budget (default: the task's)")
    parser.add_argument("--tools", nargs="+", default=["maze_impala", "sb3"], choices=["maze_impala", "sb3"])
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="FIELD=VALUE",
        help="maze_impala's algorithm settings to change (values as YAML)",
    )
    parser.add_argument("--json", help="also write every run and the table to this file")
    parser.add_argument(
        "--load", type=int, default=0, help="busy programs beside every run (as benchmarks/load.py starts them)"
    )
    args = parser.parse_args()
    python = sb3_python(args.venv) if "sb3" in args.tools else Path(sys.executable)
    settings = json.dumps({k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)})
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            for tool in args.tools:
                python_of = Path(sys.executable) if tool == "maze_impala" else python
                with Load(args.load):
                    rows.append(run(tool, task, seed, python_of, args.sb3_budget, settings))
                print(json.dumps(rows[-1]), flush=True)
    table = summary(rows)
    print(
        "| task | maze_impala: reached, median s, median env steps | SB3 PPO: reached, median s, median env steps "
        "| SB3's time / ours | our env steps / SB3's |"
    )
    print("|---|---|---|---|---|")
    for line in table:
        ours, theirs = (
            f"{line[f'{tool}_reached']}, {_number(line[f'{tool}_seconds'], '.1f')} s, "
            f"{_number(line[f'{tool}_env_steps'], ',.0f')}"
            for tool in ("maze_impala", "sb3")
        )
        print(f"| {line['task']} | {ours} | {theirs} | {line.get('sooner')} | {line.get('env_steps_ratio')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "table": table}, indent=1))


if __name__ == "__main__":
    main()
