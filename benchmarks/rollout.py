"""Episodes per second of greedy evaluation (``maze-run -cn conf_rollout``): one env per forward pass against batched.

python benchmarks/rollout.py                      # trains a CartPole policy first (about 20 s)
python benchmarks/rollout.py --input-dir outputs/train/<time> --episodes 100

``envs_per_process=1`` plays one episode at a time with one observation per forward pass,
which is how rollouts ran before batching; the default plays 16 side by side with one
batched forward pass per step. Both runners (dev: this process; local: one process per
core) are measured in the same run, so their ratios compare.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness import QUIET

from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, train
from maze_impala.config import PolicyConfig, RolloutConfig, RolloutRunnerConfig
from maze_impala.evaluate.rollout import rollout


def trained_cartpole(out: Path) -> Path:
    train(
        "CartPole-v1",
        ImpalaAlgorithmConfig(n_epochs=8, eps=1e-3),
        runner=RunnerConfig("dev"),
        output=QUIET,
        seed=1,
        output_dir=out,
    )
    return out


def measure(input_dir: Path, episodes: int, runner: str, envs: int) -> tuple[float, float]:
    config = RolloutConfig(
        policy=PolicyConfig(type="torch"),
        input_dir=str(input_dir),
        n_episodes=episodes,
        runner=RolloutRunnerConfig(type=runner, envs_per_process=envs),
        progress=False,
    )
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        results = rollout(config, Path(out))
        seconds = time.perf_counter() - started
    return episodes / seconds, sum(r.episode_return for r in results) / len(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input-dir", help="a training run (default: train a CartPole policy first)")
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.input_dir) if args.input_dir else trained_cartpole(Path(tmp) / "run")
        rows = []
        for runner in ("dev", "local"):
            for envs in (1, 16):
                rate, mean_return = measure(run, args.episodes, runner, envs)
                rows.append((runner, envs, rate, mean_return))
    print(f"{'runner':<8}{'envs/process':>14}{'episodes/s':>12}{'mean return':>13}")
    for runner, envs, rate, mean_return in rows:
        print(f"{runner:<8}{envs:>14}{rate:>12.2f}{mean_return:>13.1f}")
    for runner in ("dev", "local"):
        one, batched = (r[2] for r in rows if r[0] == runner)
        print(f"{runner}: batched / one env per forward pass = {batched / one:.1f}x")


if __name__ == "__main__":
    main()
