"""Durable files: failed writes leave nothing behind and name the path; tables grow by appends; stale rollouts drop."""

import errno
import os
import time

import pandas as pd
import pytest

from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig
from maze_impala.config import TrainingConfig
from maze_impala.events.tables import CsvTable
from maze_impala.files import OutputWriteError, atomic_write_text, remove_stray_temp_files, save_torch
from maze_impala.train.setup import build_trainer


def test_a_failed_write_names_the_path_and_the_os_error_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "model_last.pt"
    atomic_write_text(target, "the previous checkpoint")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputWriteError, match=rf"cannot write {target}: No space left on device"):
        save_torch(target, {"weights": list(range(1000))})
    monkeypatch.undo()
    assert target.read_text() == "the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["model_last.pt"]


def test_stray_temporary_files_are_removed(tmp_path):
    (tmp_path / ".model_last.pt.1234.tmp").write_text("half a checkpoint")
    (tmp_path / "stats.csv").write_text("epoch\n1\n")
    assert [p.name for p in remove_stray_temp_files(tmp_path)] == [".model_last.pt.1234.tmp"]
    assert [p.name for p in tmp_path.iterdir()] == ["stats.csv"]


def test_tables_grow_by_appending_rows_not_by_rewriting_the_file(tmp_path, monkeypatch):
    table = CsvTable(tmp_path / "stats.csv", ["epoch"])
    table.append({"epoch": e, "x": e / 2} for e in range(1, 5001))
    reopened = CsvTable(tmp_path / "stats.csv")  # as a resumed run does

    def no_rewrite(*args):
        raise AssertionError("an append of known columns must not rewrite the file")

    monkeypatch.setattr("maze_impala.events.tables.atomic_write_text", no_rewrite)
    started = time.perf_counter()
    reopened.append([{"epoch": 5001, "x": 1.0}])
    assert time.perf_counter() - started < 0.05
    monkeypatch.undo()
    reopened.append([{"epoch": 5002, "y": 3.0}])  # a new column: the header widens once
    frame = pd.read_csv(tmp_path / "stats.csv")
    assert list(frame.columns) == ["epoch", "x", "y"] and len(frame) == 5002
    assert frame["y"].isna().sum() == 5001 and frame["epoch"].tolist() == list(range(1, 5003))


class _Aging:
    """A pool whose every other rollout comes from a policy 1,000 updates old (an actor that was stopped)."""

    def __init__(self, pool):
        self.pool, self.calls = pool, 0

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def collect(self, n, at_most=None):
        rollouts = self.pool.collect(n, at_most)
        self.calls += 1
        if self.calls % 2 == 0:
            for rollout in rollouts:
                rollout.policy_version -= 1000
        return rollouts


def test_rollouts_staler_than_max_policy_lag_are_dropped_and_counted(tmp_path):
    algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=5, envs_per_actor=2, n_rollout_steps=8, num_actors=1)
    config = TrainingConfig(
        "CartPole-v1",
        algorithm,
        runner=RunnerConfig("dev"),
        output=OutputConfig(console=False, tensorboard=False, progress=False, plot=False),
    )
    trainer = build_trainer(config, tmp_path)
    trainer.pool = _Aging(trainer.pool)
    result = trainer.train()
    assert trainer.learner.version == 5  # five updates, on fresh rollouts only
    assert result.history[0]["train/ActorEvents/dropped_stale_rollout/sum"] == 4
    assert result.history[0]["train/MultiStepIMPALAEvents/policy_lag/max"] == 0
