"""Typed events: checked calls, reducers, grouping, and the CSV's stable columns."""

import csv

import numpy as np
import pandas as pd
import pytest

from maze_impala.events.api import (
    EventCollector,
    EventHub,
    EventInterface,
    epoch_stats,
    max_,
    mean,
    std,
    sum_,
)
from maze_impala.events.stats import StatKey, StatsAggregator, by_column
from maze_impala.events.writers import CsvWriter
from maze_impala.impala.events import MultiStepIMPALAEvents


class MachineEvents(EventInterface):
    @epoch_stats(mean, max_, group_by="machine")
    def utilisation(self, machine: int, value: float):
        """Share of time busy."""

    @epoch_stats(sum_, std)
    def parts(self, good: int, bad: int):
        """Parts produced."""


def _hub(scope="train"):
    hub = EventHub()
    agg = StatsAggregator(scope, [MachineEvents])
    hub.listeners.append(agg)
    return hub, hub.publisher(MachineEvents), agg


def test_reducers_and_grouping_against_hand_computed_values():
    _, events, agg = _hub()
    for machine, value in [(0, 0.5), (1, 0.9), (0, 0.7), (1, 0.1), (0, 0.9)]:
        events.utilisation(machine=machine, value=value)
    events.parts(good=3, bad=1)
    events.parts(5, 0)
    stats = agg.reduce()
    assert stats[StatKey("train", "MachineEvents", "utilisation", "value", "mean", "machine=0")] == pytest.approx(0.7)
    assert stats[StatKey("train", "MachineEvents", "utilisation", "value", "max", "machine=1")] == pytest.approx(0.9)
    assert stats[StatKey("train", "MachineEvents", "parts", "good", "sum")] == 8
    assert stats[StatKey("train", "MachineEvents", "parts", "bad", "std")] == pytest.approx(np.std([1, 0]))
    assert agg.reduce() == {}, "reduce() starts a new epoch"
    cols = by_column(stats)
    assert "train/MachineEvents/utilisation/mean/machine=0" in cols
    assert "train/MachineEvents/parts/good/sum" in cols


def test_wrong_event_call_raises_at_the_call():
    _, events, _ = _hub()
    with pytest.raises(TypeError, match=r"MachineEvents\.utilisation.*unknown argument\(s\) \['machin'\]"):
        events.utilisation(machin=1, value=0.3)
    with pytest.raises(TypeError, match="missing a required argument: 'value'"):
        events.utilisation(machine=1)


def test_declaring_an_unknown_group_is_an_error():
    with pytest.raises(TypeError, match="group_by='nope'"):

        class Bad(EventInterface):
            @epoch_stats(mean, group_by="nope")
            def x(self, value: float): ...


def test_records_replay_once_into_another_hub():
    actor_hub = EventHub()
    collector = EventCollector()
    actor_hub.listeners.append(collector)
    actor_hub.publisher(MachineEvents).utilisation(machine=2, value=0.25)
    learner_hub, _, agg = _hub()
    learner_hub.replay(collector.drain())
    assert collector.drain() == []
    stats = by_column(agg.reduce())
    assert stats["train/MachineEvents/utilisation/mean/machine=2"] == 0.25


def test_impala_interface_has_the_maze_events_plus_policy_lag_and_stacking():
    names = set(MultiStepIMPALAEvents.event_specs())
    assert {
        "time_backprop",
        "time_stacking",
        "time_dequeuing_actors",
        "time_learner_rollout",
        "time_loss_computation",
        "estimated_queue_sizes",
        "policy_loss",
        "policy_entropy",
        "policy_grad_norm",
        "critic_value",
        "critic_value_loss",
        "critic_grad_norm",
        "policy_lag",
    } <= names


def test_the_phase_clock_waits_for_a_cuda_device_before_each_lap_and_never_on_a_cpu(monkeypatch):
    import torch

    from maze_impala.impala.metrics import PhaseClock

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(torch.device(device)))
    cpu = PhaseClock("cpu")
    cpu.lap("stack")
    assert waited == []
    gpu = PhaseClock(torch.device("cuda:1"))
    gpu.lap("stack")
    gpu.lap("apply")
    assert waited == [torch.device("cuda:1")] * 2
    assert set(gpu.seconds) == set(PhaseClock.PHASES) and gpu.seconds["stack"] >= 0.0


def test_csv_columns_stay_stable_when_stats_come_and_go(tmp_path):
    path = tmp_path / "stats.csv"
    writer = CsvWriter(path)
    writer.write(1, 100, {"a": 1.0})
    writer.write(2, 200, {"a": 2.0, "b": 5.0})
    writer.write(3, 300, {"b": 6.0})
    with open(path) as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["epoch", "env_steps", "a", "b"]
    assert rows[1] == ["1", "100", "1.0", ""]
    assert rows[3] == ["3", "300", "", "6.0"]
    frame = pd.read_csv(path)
    assert frame["a"].isna().tolist() == [False, False, True]
    assert frame["b"].tolist()[1:] == [5.0, 6.0]
