"""Step/episode/epoch levels, env events and KPIs, DataFrames, event logs, the progress line."""

import io

import numpy as np
import pandas as pd
import pytest
import torch
from playing import play_episodes

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.sequential import SequentialActors
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ModelConfig
from maze_impala.envs.examples import CoordinationEnv
from maze_impala.envs.examples.coordination import CoordinationEvents
from maze_impala.events.api import (
    EventHub,
    EventInterface,
    EventRecord,
    episode_stats,
    epoch_stats,
    max_,
    mean,
    step_stats,
    sum_,
)
from maze_impala.events.episodes import reduce_episode
from maze_impala.events.frames import read_stats_csv, to_dataframe
from maze_impala.events.progress import Progress
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.events.tables import CsvTable, EventLogWriter, kpi_row, read_event_logs
from maze_impala.events.writers import CsvWriter
from maze_impala.nn.models import StructuredPolicy, make_policy
from maze_impala.play.lineup import Lineup


class FactoryEvents(EventInterface):
    @step_stats(sum_)
    @episode_stats(max_)
    @epoch_stats(mean, group_by="line")
    def output(self, line: int, value: float):
        """Parts made by a line in one sub-step; summed per step, the best step of an episode, mean over episodes."""

    @episode_stats(sum_)
    @epoch_stats(mean)
    def cost(self, value: float):
        """Cost of one step; per episode: the total."""

    @epoch_stats(max_)
    def alarm(self, level: int):
        """Not reduced before the epoch."""


def _record(event, **values):
    return EventRecord("FactoryEvents", event, values)


def test_step_then_episode_then_epoch_reduction_against_hand_computed_values():
    episode = [
        (0, _record("output", line=1, value=2.0)),
        (0, _record("output", line=1, value=3.0)),  # step 0, line 1: 5
        (0, _record("output", line=2, value=7.0)),
        (1, _record("output", line=1, value=4.0)),  # step 1, line 1: 4
        (0, _record("cost", value=1.5)),
        (1, _record("cost", value=2.5)),
        (1, _record("alarm", level=3)),
    ]
    reduced = {(r.event, r.values.get("line")): r.values for r in reduce_episode(episode)}
    assert reduced[("output", 1)]["value"] == 5.0  # max over steps of the per-step sums
    assert reduced[("output", 2)]["value"] == 7.0
    assert reduced[("cost", None)]["value"] == 4.0
    assert reduced[("alarm", None)]["level"] == 3
    stats = StatsAggregator("eval")
    for record in reduce_episode(episode) + reduce_episode([(0, _record("output", line=1, value=9.0))]):
        stats(record)
    row = by_column(stats.reduce())
    assert row["eval/FactoryEvents/output/mean/line=1"] == pytest.approx((5.0 + 9.0) / 2)
    assert row["eval/FactoryEvents/cost/mean"] == 4.0


def test_a_wrong_event_call_raises_even_when_nobody_listens():
    events = EventHub().publisher(FactoryEvents)
    events.cost(value=1.0)  # fine, and records nothing
    with pytest.raises(TypeError, match="unknown argument"):
        events.cost(valu=1.0)
    with pytest.raises(TypeError, match="missing a required argument: 'line'"):
        events.output(value=1.0)


def test_env_events_and_kpis_from_actor_processes_arrive_once():
    model = ModelConfig(hidden_units=[8])
    policy = make_policy(CoordinationEnv(), model)
    pool = SequentialActors(ActorSpec(CoordinationEnv, Lineup.of(model), 10, 3, seed=0), SharedWeights(policy), 1)
    hub, stats = EventHub(), StatsAggregator("train")
    hub.listeners.append(stats)
    with pool:
        rollouts = pool.collect(2)
    for rollout in rollouts:
        hub.replay(rollout.events)
    row = by_column(stats.reduce())
    episodes = row["train/EpisodeEvents/episode_return/count"]
    assert episodes == 2 * 3  # 2 rollouts x 3 envs x 10 structured steps: one episode each
    steps = [r for rollout in rollouts for r in rollout.events if r.event == "step_outcome"]
    assert len(steps) == 6 * 10  # one per structured step, not reduced per episode (no episode reducer)
    kpis = [r for rollout in rollouts for r in rollout.events if r.interface == "KpiEvents"]
    assert len(kpis) == 6 * 2  # cover_rate and collisions_per_step, once per episode
    assert 0.0 <= row["train/KpiEvents/kpi/mean/name=cover_rate"] <= 1.0


class _ClaimOwnResource(torch.nn.Module):
    """A policy network by which agent i always claims resource i (a fixed convention)."""

    def state_shapes(self):
        return {}

    def step(self, obs, state, agent_ids=None):
        return 10.0 * torch.nn.functional.one_hot(obs["agent"].long(), 4).float(), state


def test_kpi_csv_of_a_shipped_env_matches_a_hand_computed_episode(tmp_path):
    env = CoordinationEnv(n_agents=3, n_steps=10)
    policy = StructuredPolicy(env.observation_spaces_dict, env.action_spaces_dict, ModelConfig(hidden_units=[1]))
    policy.networks["0"] = _ClaimOwnResource()
    (result,) = play_episodes([env], policy, [(0, 42)], deterministic=True)
    # By hand: the agents claim {0, 1, 2}, which covers the open resources exactly when resource 3 is
    # blocked; otherwise the claim of the blocked resource collides. The env draws the blocked resource
    # of each step (and one more after the last) from default_rng(seed).
    rng = np.random.default_rng(42)
    blocked = [int(rng.integers(4)) for _ in range(10)]
    covered = [b == 3 for b in blocked]
    CsvTable(tmp_path / "kpis.csv").append([kpi_row(0, 42, result.steps, result.episode_return, result.kpis)])
    row = pd.read_csv(tmp_path / "kpis.csv").iloc[0]
    assert row["episode_id"] == 0 and row["seed"] == 42 and row["steps"] == 10
    assert row["return"] == sum(covered)
    assert row["cover_rate"] == pytest.approx(sum(covered) / 10)
    assert row["collisions_per_step"] == pytest.approx(sum(not c for c in covered) / 10)


def test_stats_dataframe_round_trips_through_the_csv(tmp_path):
    hub = EventHub()
    stats = StatsAggregator("train")
    hub.listeners.append(stats)
    events = hub.publisher(FactoryEvents)
    writer, rows = CsvWriter(tmp_path / "stats.csv"), []
    for epoch, publish in enumerate([lambda: events.cost(value=2.0), lambda: events.alarm(level=4)], start=1):
        publish()
        epoch_stats_ = stats.reduce()
        rows.append((epoch, 100 * epoch, epoch_stats_))
        writer.write(epoch, 100 * epoch, by_column(epoch_stats_))
    wide = to_dataframe(rows)
    pd.testing.assert_frame_equal(read_stats_csv(tmp_path), wide, check_dtype=False)
    assert np.isnan(wide.loc[1, "train/FactoryEvents/cost/mean"])  # missing in epoch 2: empty, not shifted
    long = to_dataframe(rows, "long")
    assert long[["epoch", "event", "reducer", "value"]].values.tolist() == [
        [1, "cost", "mean", 2.0],
        [2, "alarm", "max", 4.0],
    ]


def test_event_logs_load_back_into_pandas(tmp_path):
    env = CoordinationEnv(n_steps=3)
    policy = make_policy(env, ModelConfig(hidden_units=[4]))
    (result,) = play_episodes([env], policy, [(7, 1)], True, keep_raw_events=True)
    logs = EventLogWriter(tmp_path / "event_logs")
    logs.add(result.episode_id, result.raw, epoch=2)
    logs.flush()
    tables = read_event_logs(tmp_path)
    frame = tables["CoordinationEvents.step_outcome"]
    assert list(frame.columns) == ["epoch", "episode_id", "step", "covered", "distinct_claims", "collisions"]
    assert frame["step"].tolist() == [0, 1, 2] and (frame["episode_id"] == 7).all()
    assert frame["covered"].sum() == result.episode_return
    assert CoordinationEvents.__name__ in next(iter(tables))


def test_progress_prints_status_lines_when_not_a_terminal():
    stream = io.StringIO()
    progress = Progress(5, stream=stream, interval=0.0)
    progress(EventRecord("EpisodeEvents", "episode_return", {"value": 10.0}))
    progress(EventRecord("EpisodeEvents", "episode_return", {"value": 20.0}))
    progress.update(2, 5000)
    line = stream.getvalue().strip()
    assert line.startswith("epoch 2/5 | 5,000 env steps |") and line.endswith("return 15 (mean of the last 2 episodes)")
    progress.update(3, 6000, part="update 20/50")  # in the middle of an epoch: not taken for its end
    assert stream.getvalue().strip().splitlines()[-1].startswith("epoch 3/5, update 20/50 | 6,000 env steps |")


def test_in_a_terminal_the_status_line_ends_before_other_output():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = Progress(5, stream=stream)
    progress.add_return(3.0)
    progress.update(1, 100, force=True)
    progress.end_line()
    stream.write("--- epoch 1 ---\n")
    assert stream.getvalue().endswith("(mean of the last episode)\n--- epoch 1 ---\n")
    progress.end_line()  # nothing pending: no empty line
    assert stream.getvalue().endswith("--- epoch 1 ---\n")


def test_the_events_and_kpis_tutorial_runs(tmp_path, monkeypatch, capsys):
    import runpy
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "tutorials" / "events_and_kpis.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--output-dir", str(tmp_path), "--episodes", "5"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "service_level" in out and "event log: 100 demand events" in out
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert len(kpis) == 5 and kpis["service_level"].between(0, 1).all()
    demand = read_event_logs(tmp_path)["InventoryEvents.demand"]
    served = demand.groupby("episode_id")["served"].sum() / demand.groupby("episode_id")["units"].sum()
    np.testing.assert_allclose(kpis["service_level"], served.values)  # the KPI, recomputed from the event log


def test_repeated_evaluations_listen_to_each_env_once():
    from maze_impala.evaluate.evaluator import RolloutEvaluator

    env = {"_target_": "maze_impala.envs.examples.CoordinationEnv"}
    hub, stats = EventHub(), StatsAggregator("eval")
    hub.listeners.append(stats)
    evaluator = RolloutEvaluator(env, 2, True, 0, hub)
    policy = make_policy(CoordinationEnv(), ModelConfig(hidden_units=[4]))
    first = [r.kpis for r in evaluator.evaluate(policy)]
    stats.reduce()
    for _ in range(2):
        assert [r.kpis for r in evaluator.evaluate(policy)] == first  # same seeds, same greedy policy
        row = by_column(stats.reduce())
        assert row["eval/EpisodeEvents/episode_return/count"] == 2
    assert all(len(e.event_hub.listeners) == 1 for e in evaluator.envs)


def test_after_a_resume_the_progress_rate_counts_this_process_only(monkeypatch):
    import time as time_module

    now = [100.0]
    monkeypatch.setattr(time_module, "perf_counter", lambda: now[0])
    stream = io.StringIO()
    progress = Progress(10, stream=stream, interval=0.0, start_steps=1_000_000, resumed_at=7)
    now[0] = 102.0  # 2 s of this process
    progress.update(8, 1_026_000)
    line = stream.getvalue().strip()
    assert "| 13,000 steps/s |" in line, line  # (1,026,000 - 1,000,000) / 2 s, not 1,026,000 / 2 s
    assert line.endswith("| no episode finished yet since the resume after epoch 7")


def test_the_status_line_says_when_no_episode_finished_and_shows_the_games_rates_per_seat():
    stream = io.StringIO()
    progress = Progress(3, stream=stream, interval=0.0)
    progress.update(1, 96)
    assert stream.getvalue().strip() == "epoch 1/3 | 96 env steps | " + stream.getvalue().split("| ")[2] + (
        "| no episode finished yet"
    )
    for seat, outcomes in (("player_1", ["win", "win", "loss", "draw"]), ("player_2", ["loss"])):
        for result in outcomes:
            progress.add_return(0.0)
            for name in ("win", "draw", "loss"):
                progress(EventRecord("GameEvents", name, {"seat": seat, "value": float(name == result)}))
    progress.update(2, 200)
    line = stream.getvalue().strip().splitlines()[-1]
    # before an evaluation: the training games' rates, labelled, and no zero-sum "return 0"
    rates = "player_1 0.50/0.25/0.25, player_2 0.00/0.00/1.00"
    assert line.endswith(f"| win/draw/loss of the last 4 training games a seat: {rates}"), line
    assert "return" not in line
    for seat, result in (("player_1", "win"), ("player_2", "draw")):
        for name in ("win", "draw", "loss"):
            progress.evaluation_games(EventRecord("GameEvents", name, {"seat": seat, "value": float(name == result)}))
    progress.update(2, 300)
    line = stream.getvalue().strip().splitlines()[-1]
    # then the evaluation's rates against its fixed opponent, what the docs judge a policy by
    rates = "player_1 1.00/0.00/0.00, player_2 0.00/1.00/0.00"
    assert line.endswith(f"| win/draw/loss of the last 1 evaluation game a seat: {rates}"), line  # the window said


def test_training_and_evaluation_episodes_publish_the_same_statistics(tmp_path):
    """One publisher for both: every episode statistic of training exists for the evaluation too, returns per step
    key included."""
    from maze_impala import ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train
    from maze_impala.events.interfaces import EpisodeEvents
    from maze_impala.events.stats import StatKey

    algorithm = ImpalaAlgorithmConfig(n_epochs=1, epoch_length=2, num_actors=1, envs_per_actor=4, n_rollout_steps=8)
    result = train(
        {"_target_": "maze_impala.testing.TwoStepEnv"},
        algorithm,
        runner=RunnerConfig(type="dev"),
        output_dir=tmp_path / "run",
        output=OutputConfig(console=False, progress=False, plot=False, tensorboard=False),
    )
    row = result.history[-1]
    for event, group in (
        (EpisodeEvents.episode_return, None),
        (EpisodeEvents.episode_length, None),
        (EpisodeEvents.step_key_return, "step_key=a"),
        (EpisodeEvents.step_key_return, "step_key=b"),
    ):
        for scope in ("train", "eval"):
            column = StatKey.of(event, "mean", scope, group=group).column()
            assert np.isfinite(row.get(column, np.nan)), column
