"""Experiment trackers behind the stats-writer seam, tested offline by reading back what a run logged."""

import struct
import time

import pandas as pd
import pytest

from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train
from maze_impala.events.trackers import mlflow_key

pytestmark = pytest.mark.slow
SMALL = ImpalaAlgorithmConfig(n_epochs=2, epoch_length=2, envs_per_actor=4, n_rollout_steps=8)
RETURN = "train/EpisodeEvents/episode_return/mean"
LOSS = "train/MultiStepIMPALAEvents/policy_loss/mean/step_key=0"


def _wandb_history(run_dir):
    """The history records of an offline W&B run: its .wandb file is a LevelDB-style log of protobuf records."""
    import json

    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, position, records, pending = path.read_bytes(), 7, [], b""  # 7 bytes of W&B's header
    while position + 7 <= len(data):
        if 32768 - position % 32768 < 7:  # a block's tail too short for a record header
            position += 32768 - position % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk, position = data[position + 7 : position + 7 + length], position + 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind in (2, 3):
            pending += chunk
        elif kind == 4:
            records.append(pending + chunk)
            pending = b""
    rows = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def test_weights_and_biases_gets_every_rows_statistics_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    quiet = OutputConfig(console=False, progress=False, tensorboard=False, plot=False, wandb=True)
    train("CartPole-v1", SMALL, runner=RunnerConfig("dev"), output=quiet, output_dir=tmp_path)
    stats = pd.read_csv(tmp_path / "stats.csv")
    history, deadline = _wandb_history(tmp_path), time.monotonic() + 30
    while len(history) < len(stats) and time.monotonic() < deadline:  # W&B's service may still be writing its file
        time.sleep(0.5)
        history = _wandb_history(tmp_path)
    assert [row["_step"] for row in history] == stats["env_steps"].tolist()
    assert [row[LOSS] for row in history] == pytest.approx(stats[LOSS].tolist())
    assert [row.get(RETURN) for row in history][-1] == pytest.approx(stats[RETURN].iloc[-1])


def test_mlflow_gets_every_rows_statistics_in_the_runs_local_file_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from mlflow.tracking import MlflowClient

    quiet = OutputConfig(console=False, progress=False, tensorboard=False, plot=False, mlflow=True)
    train("CartPole-v1", SMALL, runner=RunnerConfig("dev"), output=quiet, output_dir=tmp_path)
    stats = pd.read_csv(tmp_path / "stats.csv")
    client = MlflowClient((tmp_path / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.run_name == tmp_path.name and run.data.params["algorithm.lr"] == str(ImpalaAlgorithmConfig().lr)
    for column in (RETURN, LOSS):  # an epoch without a value (no episode ended yet) logs none
        logged, expected = client.get_metric_history(run.info.run_id, mlflow_key(column)), stats[["env_steps", column]]
        expected = expected.dropna()
        assert [m.step for m in logged] == expected["env_steps"].tolist()
        assert [m.value for m in logged] == pytest.approx(expected[column].tolist())
    assert mlflow_key(LOSS).endswith("step_key:0")
