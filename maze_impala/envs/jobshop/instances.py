"""Job-shop instances: the standard text format, the shipped public sets, and random ones drawn as Taillard drew his.

The text format: a first line ``<jobs> <machines>``, then one line per job listing its operations in order as pairs
``<machine> <processing time>`` (machines numbered from 0); every job visits every machine once. The shipped files
(``data/``, with their best known bounds in ``data/bounds.json``) are Fisher and Thompson's ft06 and ft10, Lawrence's
la01-la05 and Taillard's ta01-ta10 (15 x 15) and ta41-ta50 (30 x 20); ``data/README.md`` says where they come from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

DATA = Path(__file__).parent / "data"
SETS = {
    "ft06": ["ft06"],
    "ft10": ["ft10"],
    "lawrence": [f"la{i:02d}" for i in range(1, 6)],
    "taillard15": [f"ta{i:02d}" for i in range(1, 11)],
    "taillard30": [f"ta{i:02d}" for i in range(41, 51)],
}
"""The shipped instance sets, by name (``env.instances=taillard15``)."""
MAX_DURATION = 99
"""Taillard's processing times are uniform in 1..99."""


@dataclass(frozen=True)
class Instance:
    """One job-shop problem: ``machines[j, k]`` is the machine of job j's k-th operation, ``durations[j, k]`` its
    processing time."""

    machines: np.ndarray
    durations: np.ndarray
    name: str = "random"
    upper_bound: int | None = None
    """The best known makespan (the optimum where the instance is closed); None: unknown."""

    @property
    def n_jobs(self) -> int:
        return int(self.machines.shape[0])

    @property
    def n_machines(self) -> int:
        return int(self.machines.shape[1])

    def lower_bound(self) -> int:
        """The larger of the longest job and the most loaded machine: no schedule ends sooner."""
        loads = np.bincount(self.machines.ravel(), weights=self.durations.ravel(), minlength=self.n_machines)
        return int(max(self.durations.sum(axis=1).max(), loads.max()))


def parse_instance(text: str, name: str = "instance", upper_bound: int | None = None) -> Instance:
    """An instance from the standard text format; a clear error for a malformed one."""
    lines = [line.split() for line in text.strip().splitlines() if line.strip() and not line.startswith("#")]
    try:
        n_jobs, n_machines = (int(x) for x in lines[0][:2])
        rows = [[int(x) for x in line] for line in lines[1 : 1 + n_jobs]]
    except (ValueError, IndexError) as error:
        raise ValueError(
            f"{name}: not a job-shop instance (first line '<jobs> <machines>', then a line per job)"
        ) from error
    if len(rows) != n_jobs or any(len(row) != 2 * n_machines for row in rows):
        raise ValueError(
            f"{name}: expected {n_jobs} job lines of {n_machines} '<machine> <time>' pairs each, "
            f"got {len(rows)} lines of {sorted({len(r) // 2 for r in rows})} pairs"
        )
    table = np.array(rows, dtype=np.int64).reshape(n_jobs, n_machines, 2)
    machines, durations = table[..., 0], table[..., 1]
    if any(sorted(job) != list(range(n_machines)) for job in machines.tolist()) or (durations < 0).any():
        raise ValueError(f"{name}: every job must visit machines 0..{n_machines - 1} once, with times >= 0")
    return Instance(machines, durations, name, upper_bound)


@cache
def known_bounds() -> dict[str, int]:
    """The best known upper bound of each shipped instance."""
    return {row["instance"]: int(row["upper_bound"]) for row in json.loads((DATA / "bounds.json").read_text())}


def read_instance(path: str | Path) -> Instance:
    """An instance file; its bound is the shipped one where the file's name is a shipped instance's."""
    path = Path(path)
    return parse_instance(path.read_text(), path.stem, known_bounds().get(path.stem))


def load_instances(spec: str | Path | list[str | Path]) -> list[Instance]:
    """Instances from a shipped set's name (:data:`SETS`), a shipped instance's name, a file, a directory (its
    ``.txt`` files, sorted) or a list of these."""
    if isinstance(spec, list | tuple):
        return [instance for part in spec for instance in load_instances(part)]
    text = str(spec)
    if text in SETS:
        return [read_instance(DATA / f"{name}.txt") for name in SETS[text]]
    if (DATA / f"{text}.txt").is_file() and not Path(text).exists():
        return [read_instance(DATA / f"{text}.txt")]
    path = Path(text).expanduser()
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise ValueError(f"env.instances: {path} holds no .txt instance files")
        return [read_instance(file) for file in files]
    if path.is_file():
        return [read_instance(path)]
    raise ValueError(
        f"env.instances: {text!r} is neither a file, a directory of .txt instances nor a shipped set "
        f"({', '.join(SETS)}) or instance"
    )


def random_instance(rng: np.random.Generator, n_jobs: int, n_machines: int) -> Instance:
    """An instance drawn as Taillard drew his: times uniform in 1..99, each job a random order of the machines."""
    machines = np.stack([rng.permutation(n_machines) for _ in range(n_jobs)])
    durations = rng.integers(1, MAX_DURATION + 1, size=(n_jobs, n_machines))
    return Instance(machines, durations)
