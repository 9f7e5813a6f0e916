"""PettingZoo MPE ``simple_spread_v3`` (Parallel API, 3 agents): the return after a fixed budget for each combination
of parameter sharing and critic, against the random policy.

    python benchmarks/simple_spread.py                          # 3 seeds, 512,000 env steps per run
    python benchmarks/simple_spread.py --seeds 1 --epochs 4

Each run is ``maze-run -cn conf_train env=pettingzoo env.name=mpe2.simple_spread_v3 env.api=parallel`` with the
shipped settings and, per combination:

- sharing: one policy for the three agents (the default), or one per agent (``model.per_agent_networks=true``);
- critic: centralised (shipped: ``env.global_state=observations model.critic_only_keys=[global_state]``, the
  critics read every agent's observation, the policies their own), or local (``env.global_state=false
  model.critic_only_keys=[]``: each agent's critic reads its own observation).

Then ``maze-run -cn conf_rollout`` plays ``--episodes`` episodes of the run's last model (``model_last.pt``, the
budget's end), sampled as in training, and the random policy plays as many. The table gives the team return
(the sum of the three agents' returns; an env step is one move of every agent), mean and lowest over the seeds.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd
from harness import maze_run

ENV = ["env=pettingzoo", "env.name=mpe2.simple_spread_v3", "env.api=parallel"]
SHARING = {"shared": [], "per agent": ["model.per_agent_networks=true"]}
CRITICS = {"local": ["env.global_state=false", "model.critic_only_keys=[]"], "centralised": []}
UPDATE = 32 * 32
"""Env steps of one update with the shipped settings (32 envs x 32 steps)."""


def mean_return(source: list[str], out: Path, episodes: int) -> float:
    """The mean team return of ``episodes`` sampled episodes (the rollout CLI's kpis_summary.csv)."""
    maze_run(
        [
            "-cn",
            "conf_rollout",
            *source,
            f"n_episodes={episodes}",
            "deterministic=false",
            "progress=false",
            f"hydra.run.dir={out}",
        ],
        out.parent,
    )
    return float(pd.read_csv(out / "kpis_summary.csv").set_index("kpi").loc["return", "mean"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--epochs", type=int, default=10, help="epochs of 50 updates of 1,024 env steps")
    parser.add_argument("--episodes", type=int, default=200, help="episodes played by each final model")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        random = mean_return(["policy=random_policy", *ENV], cwd / "random", args.episodes)
        print(f"random policy: {random:.2f}", flush=True)
        for sharing, shared_args in SHARING.items():
            for critic, critic_args in CRITICS.items():
                for seed in args.seeds:
                    run = cwd / f"run_{len(rows)}"
                    maze_run(
                        [
                            "-cn",
                            "conf_train",
                            *ENV,
                            *shared_args,
                            *critic_args,
                            f"seed={seed}",
                            f"algorithm.n_epochs={args.epochs}",
                            "output.progress=false",
                            "output.console=false",
                            f"hydra.run.dir={run}",
                        ],
                        cwd,
                    )
                    value = mean_return(
                        [f"input_dir={run}", "policy.checkpoint=model_last.pt"],
                        cwd / f"rollout_{len(rows)}",
                        args.episodes,
                    )
                    rows.append({"sharing": sharing, "critic": critic, "seed": seed, "return": value})
                    print(f"{sharing}, {critic} critic, seed {seed}: {value:.2f}", flush=True)
    results = pd.DataFrame(rows)
    steps = args.epochs * 50 * UPDATE
    print(
        f"\n| parameters | critic | team return after {steps:,} env steps (mean, lowest of {len(args.seeds)} "
        "seeds) |\n|---|---|---|"
    )
    for (sharing, critic), part in results.groupby(["sharing", "critic"], sort=False):
        print(f"| {sharing} | {critic} | {part['return'].mean():.2f} ({part['return'].min():.2f}) |")
    print(f"| random policy | | {random:.2f} |")


if __name__ == "__main__":
    main()
