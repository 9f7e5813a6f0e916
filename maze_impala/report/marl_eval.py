"""Evaluation results in marl-eval's JSON (InstaDeep's ``id-marl-eval``), which its plotting tools and rliable read.

One file holds every run given: ``environment -> task -> algorithm -> seed_<seed> -> step_<i>`` with the
``step_count`` (env steps) and ``elapsed_time`` (seconds) of evaluation ``i`` and, per metric, the list of its
values over that evaluation's episodes; ``absolute_metrics`` holds the last evaluation's. Metrics: ``return``
(the team's), ``return_<agent>`` per named agent, and, with games against an opponent, ``win_rate`` and
``draw_rate`` (one value per seat).

The environment is the env's family (``gymnasium``, a PettingZoo package such as ``pettingzoo.classic``, or the
module of a ``_target_``), the task its id or name; the algorithm is ``impala``, followed by the overrides in which
a multirun's configurations differ (marl-eval forbids commas in it). Written by ``maze-plot RUN ... --marl-eval``
and at the end of every multirun (``metrics.json`` beside ``summary.csv``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from maze_impala.files import atomic_write_text
from maze_impala.report.compare import STATS, Run, configurations, find_runs
from maze_impala.run_files import CONFIG_YAML, KPI_CSV


def env_names(record: Any) -> tuple[str, str]:
    """``(environment, task)`` of a run's env record (its ``config.yaml`` ``env``)."""
    if isinstance(record, str):
        return "gymnasium", record
    if isinstance(record, dict):
        target, name = str(record.get("_target_", "")), record.get("name")
        if target.endswith("make_pettingzoo_env") and isinstance(name, str):
            family, _, task = name.rpartition(".")
            return family or "pettingzoo", task
        if isinstance(name, str):  # make_gym_env and the like
            return "gymnasium", name
        module, _, task = target.rpartition(".")
        return module or "custom", task or "env"
    return "custom", "env"


def _agent_metrics(rows: Any, prefix: str) -> dict[str, str]:
    """The kpis.csv columns of per-agent returns (``prefix...``), each with its metric name (``return_<agent>``)."""
    return {c: "return_" + c.split("=", 1)[1] for c in rows.columns if c.startswith(prefix)}


def run_data(run: Run) -> dict[str, Any]:
    """One run's ``step_<i>`` entries and ``absolute_metrics``, from its stats.csv and kpis.csv."""
    import pandas as pd

    from maze_impala.events.api import last, mean
    from maze_impala.events.interfaces import GameEvents, RunEvents
    from maze_impala.events.stats import StatKey
    from maze_impala.events.tables import agent_return_column
    from maze_impala.run_files import KPI_CSV

    stats = pd.read_csv(run.path / STATS).set_index("epoch")
    kpis = pd.read_csv(run.path / KPI_CSV)
    agents = _agent_metrics(kpis, agent_return_column(""))
    elapsed = StatKey.of(RunEvents.elapsed_seconds, last).column()
    games = {
        name: StatKey.of(event, mean, "eval").column() + "/"
        for name, event in (("win_rate", GameEvents.win), ("draw_rate", GameEvents.draw))
    }
    data: dict[str, Any] = {}
    for i, (epoch, episodes) in enumerate(kpis.groupby("epoch", sort=True)):
        row = stats.loc[epoch] if epoch in stats.index else None
        step: dict[str, Any] = {
            "step_count": int(row["env_steps"]) if row is not None else 0,
            "elapsed_time": float(row[elapsed]) if row is not None and elapsed in row else 0.0,
            "return": episodes["return"].astype(float).tolist(),
        }
        step.update({metric: episodes[column].dropna().astype(float).tolist() for column, metric in agents.items()})
        for metric, prefix in games.items():
            seats = [c for c in stats.columns if c.startswith(prefix)]
            if seats and row is not None:
                step[metric] = [float(row[c]) for c in seats if not math.isnan(row[c])]
        data[f"step_{i}"] = step
    if data:
        final = data[f"step_{len(data) - 1}"]
        data["absolute_metrics"] = {k: v for k, v in final.items() if k != "step_count"}
    return data


def write_marl_eval(paths: list[Path], out: Path) -> Path | None:
    """One marl-eval JSON of the runs under ``paths`` (run dirs or multirun folders) at ``out``; None if no run."""
    from omegaconf import OmegaConf

    runs = [run for run in find_runs(paths) if (run.path / KPI_CSV).is_file()]
    if not runs:
        return None
    tree: dict[str, Any] = {}
    groups = configurations(runs)
    for configuration in groups:
        algorithm = "impala" if len(groups) == 1 else f"impala {configuration.label}".replace(",", ";")
        for run in configuration.runs:
            config = OmegaConf.to_container(OmegaConf.load(run.path / CONFIG_YAML))
            assert isinstance(config, dict)
            environment, task = env_names(config.get("env"))
            seeds = tree.setdefault(environment, {}).setdefault(task, {}).setdefault(algorithm, {})
            seeds[f"seed_{config.get('seed', len(seeds))}"] = run_data(run)
    atomic_write_text(out, json.dumps(tree, indent=2))
    return out
