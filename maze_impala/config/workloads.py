"""The shipped env families' own settings (``maze_impala/conf/env/<name>.yaml``), readable without the CLI.

``maze-run -cn conf_train env=minatar`` composes the family's env with the algorithm, model and runner settings its
config carries; a :func:`~maze_impala.train` caller, a benchmark or a test reads the same settings here::

    from maze_impala import ImpalaAlgorithmConfig, ModelConfig, train
    from maze_impala.config.workloads import workload

    minatar = workload("minatar")
    train(minatar.env, ImpalaAlgorithmConfig(**minatar.algorithm), ModelConfig(**minatar.model))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def config_dir() -> Path:
    """The shipped configs (``maze_impala/conf``); add your own with ``--config-dir`` (see the docs)."""
    return Path(__file__).resolve().parent.parent / "conf"


@dataclass(frozen=True)
class Workload:
    """One shipped ``env=<name>`` config: its env, and the settings it carries for each other concern (plain dicts of
    the config dataclasses' fields; empty where it sets none)."""

    env: dict[str, Any]
    algorithm: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    runner: dict[str, Any] = field(default_factory=dict)


def workload(name: str) -> Workload:
    """The shipped ``env=<name>`` config; a ValueError naming the shipped ones for a name that is none."""
    from omegaconf import OmegaConf  # only here: the package's import stays light for actor processes

    path = config_dir() / "env" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ValueError(f"no shipped env config {name!r}; the shipped ones: {', '.join(known)}")
    config = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(config, dict)
    if "env" not in config:  # an env node only
        return Workload(env=config)
    return Workload(dict(config["env"]), *(dict(config.get(key, {})) for key in ("algorithm", "model", "runner")))


def shipped_env(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The env of the shipped ``env=<name>`` config and the algorithm settings it sets (``env=minigrid`` sets its
    own entropy bonus)."""
    found = workload(name)
    return found.env, found.algorithm


def shipped_model(name: str) -> dict[str, Any]:
    """The model settings the shipped ``env=<name>`` config sets (``env=minatar``: its image encoder), if any."""
    return workload(name).model


def shipped_runner(name: str) -> dict[str, Any]:
    """The runner settings the shipped ``env=<name>`` config sets, if any."""
    return workload(name).runner
