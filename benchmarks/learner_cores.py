"""The learner's cores beside local actors: ``runner.learner_cores=leftover`` against ``all``, alternating.

    python benchmarks/learner_cores.py minatar 3 3 10     # env family, rounds, epochs, updates per epoch
    python benchmarks/learner_cores.py atari 2 3 8
    python benchmarks/learner_cores.py gym_env 3 3 25 recurrent=lstm   # model settings after the numbers

Each round trains the shipped ``env=<family>`` config (``runner=local``, one evaluation episode per epoch) once
with each setting, in alternating order, and takes the median training env steps/s of the epochs after the first;
the medians over the rounds and their ratio (all / leftover) are printed.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from typing import Any

import yaml
from harness import QUIET, alternating, medians

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, RunnerConfig, train
from maze_impala.config.workloads import shipped_env, shipped_model
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey

RATE = StatKey.of(RunEvents.env_steps_per_second, "last", "train").column()


def run(cores: str, family: str, epochs: int, length: int, model: dict[str, Any]) -> float:
    env, algorithm = shipped_env(family)
    settings = {**algorithm, "n_epochs": epochs, "epoch_length": length, "rollout_evaluator": {"n_episodes": 1}}
    with tempfile.TemporaryDirectory() as out:
        result = train(
            env,
            ImpalaAlgorithmConfig(**settings),
            ModelConfig(**{**shipped_model(family), **model}),
            RunnerConfig("local", learner_cores=cores),
            output=QUIET,
            output_dir=out,
            seed=1,
        )
    return statistics.median(result.column(RATE)[1:])


def main() -> None:
    family, rounds, epochs, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    model = {k: yaml.safe_load(v) for k, v in (change.split("=", 1) for change in sys.argv[5:])}  # values as YAML
    rates = alternating(
        rounds,
        ["leftover", "all"],
        lambda cores: run(cores, family, epochs, length, model),
        lambda index, cores, rate: print(
            f"{family} round {index + 1}: learner_cores={cores} {rate:,.0f} env steps/s", flush=True
        ),
    )
    leftover, every = medians(rates)["leftover"], medians(rates)["all"]
    print(
        f"{family}: leftover {leftover:,.0f}, all {every:,.0f} env steps/s (medians), "
        f"all / leftover {every / leftover:.2f}"
    )


if __name__ == "__main__":
    main()
