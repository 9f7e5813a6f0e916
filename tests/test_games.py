"""Multi-agent runs a user can judge: games against a fixed opponent per seat, per-agent returns."""

import json
import types

import numpy as np
import pandas as pd
import pytest
import torch
from clitools import TINY, maze_run
from tiny import QUIET

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, RunnerConfig, train
from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ConfigError, OpponentPoolConfig
from maze_impala.config.algorithm import RolloutEvaluatorConfig
from maze_impala.core import ActorID, Trajectory
from maze_impala.envs.factory import make_env
from maze_impala.envs.layout import select_columns
from maze_impala.evaluate.games import Games, summary
from maze_impala.events.api import EventHub, mean
from maze_impala.events.interfaces import EpisodeEvents, GameEvents
from maze_impala.events.stats import StatKey, StatsAggregator, by_column
from maze_impala.events.tables import agent_return_column, read_columns
from maze_impala.nn.acting import Acting
from maze_impala.nn.models import make_policy, make_random_policy
from maze_impala.play.games import outcome
from maze_impala.play.lineup import OPPONENT_STATE, Lineup, PolicyMapping, RoutedActing, resolve_opponents, seated
from maze_impala.play.pool import SnapshotPool
from maze_impala.play.spec import PolicySpec

TICTACTOE = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "pettingzoo.classic.tictactoe_v3",
}


class Constant(Acting):
    """Acts ``action`` for every row and counts its calls in a state of its own."""

    def __init__(self, action: int):
        self.action = action

    def state_shapes(self, step_key):
        return {"calls": (1,)}

    def act(self, step_key, obs, state, agent_ids, noise):
        rows = len(agent_ids)
        return {"a": np.full(rows, self.action)}, np.full(rows, -self.action, np.float32), {"calls": state["calls"] + 1}

    def load(self, flat):
        self.loaded = flat


def test_seated_acting_routes_each_agent_to_its_policy_and_keeps_both_states_apart():
    trained, opponent = Constant(1), Constant(2)
    acting = seated(trained, opponent, frozenset({ActorID("player", 1)}))
    assert acting.state_shapes("player") == {"calls": (1,), OPPONENT_STATE + "calls": (1,)}
    agents = np.array([0, 1, 1, 0, 1])
    state = {"calls": np.zeros((5, 1), np.float32), OPPONENT_STATE + "calls": np.full((5, 1), 10, np.float32)}
    actions, log_probs, state = acting.act("player", {"x": np.zeros((5, 2))}, state, agents, None)
    assert actions["a"].tolist() == [2, 1, 1, 2, 1]
    assert log_probs.tolist() == [-2, -1, -1, -2, -1]
    assert state["calls"][:, 0].tolist() == [0, 1, 1, 0, 1]  # only the trained policy's rows moved on
    assert state[OPPONENT_STATE + "calls"][:, 0].tolist() == [11, 10, 10, 11, 10]
    acting.load(np.ones(3))
    assert hasattr(trained, "loaded") and not hasattr(opponent, "loaded")  # the opponent keeps its own weights


def test_a_policy_mapping_routes_groups_of_agents_and_hands_each_policy_its_own_state_and_games():
    learner, ally, rival = Constant(1), Constant(2), Constant(3)
    games = []
    hears = types.SimpleNamespace(
        game_over=lambda key, state, ids, result, events: games.append((ids.tolist(), state, result))
    )
    mapping = PolicyMapping(
        {ActorID("p", 0): "learner", ActorID("p", 2): "learner", ActorID("p", 1): "ally"},
        default="rival",
        learned="learner",
    )
    assert mapping.learned_agents() == {ActorID("p", 0), ActorID("p", 2)}  # a group of two agents
    acting = RoutedActing({"learner": learner, "ally": ally, "rival": rival}, mapping, listeners={"rival": hears})
    assert acting.state_shapes("p") == {"calls": (1,), "ally.calls": (1,), "rival.calls": (1,)}
    assert acting.learned_state("p") == ("calls",)  # only the learned policy's state goes to the learner
    agents = np.array([3, 2, 1, 0, 4])
    state = {name: np.zeros((5, 1), np.float32) for name in acting.state_shapes("p")}
    actions, _, state = acting.act("p", {"x": np.zeros((5, 2))}, state, agents, None)
    assert actions["a"].tolist() == [3, 1, 2, 1, 3]
    assert [state[n][:, 0].tolist() for n in ("calls", "ally.calls", "rival.calls")] == [
        [0, 1, 0, 1, 0],
        [0, 0, 1, 0, 0],
        [1, 0, 0, 0, 1],
    ]
    acting.game_over("p", state, agents, "win", EventHub())
    ((ids, own, result),) = games  # the rival's agents (the one listener), with its own state under its own names
    assert ids == [3, 4] and list(own) == ["calls"] and own["calls"][:, 0].tolist() == [1, 1] and result == "win"
    with pytest.raises(ValueError, match=r"policies \['coach'\]"):
        RoutedActing({"learner": learner}, PolicyMapping({ActorID("p", 0): "coach"}, "learner", "learner"))


def test_actors_training_against_the_pool_hand_over_their_seat_and_report_its_games():
    env = make_env(TICTACTOE)
    policy = make_policy(env, ModelConfig(image_encoder="flatten"))
    spec = ActorSpec(TICTACTOE, Lineup.of(ModelConfig(image_encoder="flatten"), "pool", 2), 16, 4, seed=3)
    weights, snapshots = SharedWeights(policy, snapshot_slots=1), SnapshotPool(OpponentPoolConfig(size=1))
    snapshots.offer(policy, 0)
    weights.publish_snapshots(snapshots.snapshots)
    actor = spec.build(1, weights)
    try:
        rollout = actor.rollout()
        (trajectory,) = rollout.trajectories.values()
        assert set(trajectory.agent_ids.tolist()) == {1}  # the second seat's decisions only
        assert trajectory.initial_state == {}  # the feed-forward policy's own state: none of the opponent's
        games = [r for r in rollout.events if r.interface == GameEvents.__name__ and r.event in ("win", "draw", "loss")]
        assert games and {r.values["seat"] for r in games} == {"player_2"}
        assert sum(r.values["value"] for r in games) == len(games) / 3  # one outcome per game
    finally:
        actor.close()
    with pytest.raises(ConfigError, match="train_opponent=pool"):
        resolve_opponents(make_env(TICTACTOE), judge="pool")


def test_a_recurrent_policy_against_the_pool_hands_over_its_own_state_only():
    model = ModelConfig(image_encoder="flatten", hidden_units=[8], recurrent="lstm")
    policy = make_policy(make_env(TICTACTOE), model)
    weights, snapshots = SharedWeights(policy, snapshot_slots=1), SnapshotPool(OpponentPoolConfig(size=1))
    snapshots.offer(policy, 0)
    weights.publish_snapshots(snapshots.snapshots)
    actor = ActorSpec(TICTACTOE, Lineup.of(model, "pool", 1), 8, 2, seed=0).build(0, weights)
    try:
        assert any(name.startswith(OPPONENT_STATE) for name in actor.acting.state_shapes("player"))  # kept...
        (trajectory,) = actor.rollout().trajectories.values()
        assert set(trajectory.initial_state) == set(policy.state_shapes("player"))  # ...but not handed over
    finally:
        actor.close()


def test_outcomes_compare_the_seat_with_the_best_other_seat():
    agents = {"a": ActorID("p", 0), "b": ActorID("p", 1), "c": ActorID("p", 2)}
    returns = {agents["a"]: 1.0, agents["b"]: 1.0, agents["c"]: -2.0}
    assert outcome(returns, agents["a"], agents) == "draw"
    assert outcome(returns, agents["c"], agents) == "loss"
    assert outcome({agents["a"]: 0.5}, agents["a"], agents) == "win"  # an agent that never acted scores 0


def test_random_against_random_tictactoe_gives_the_known_rates():
    """Random play of tic-tac-toe: the first player wins 58.5%, the second 28.8%, 12.7% are drawn."""
    hub, stats = EventHub(), StatsAggregator("eval")
    hub.listeners.append(stats)
    games = Games(TICTACTOE, PolicySpec.random(), 600, True, seed=7, hub=hub)
    try:
        results = games.play(make_random_policy(games.envs[0], seed=3))
    finally:
        games.close()
    rates = {row["seat"]: row for row in summary(results)}
    assert rates["player_1"]["games"] == rates["player_2"]["games"] == 600
    assert abs(rates["player_1"]["win"] - 0.585) < 0.07 and abs(rates["player_1"]["draw"] - 0.127) < 0.05
    assert abs(rates["player_2"]["win"] - 0.288) < 0.07 and abs(rates["player_2"]["draw"] - 0.127) < 0.05
    row = by_column(stats.reduce())
    win = StatKey.of(GameEvents.win, mean, "eval", group="seat=player_2").column()
    assert row[win] == pytest.approx(rates["player_2"]["win"])


def test_games_need_an_env_with_agents_and_an_opponent_that_exists():
    with pytest.raises(ConfigError, match="two or more agents"):
        Games("CartPole-v1", PolicySpec.random(), 2, True, 0)
    with pytest.raises(ConfigError, match="two or more agents"):
        resolve_opponents(make_env("CartPole-v1"), judge="random")
    with pytest.raises(ConfigError, match=r"neither 'random', 'mcts' \(or mcts:<simulations>\) nor a checkpoint"):
        resolve_opponents(make_env(TICTACTOE), judge="/nowhere/run")
    with pytest.raises(ValueError, match="resolve_opponents resolves names"):
        Lineup.of(ModelConfig(), "random", 1)  # a name is resolved once, where the run is built
    with pytest.raises(ConfigError, match=r"rollout_evaluator\.opponent"):
        RolloutEvaluatorConfig(opponent="")


def test_training_against_an_opponent_reports_rates_per_seat_and_returns_per_agent(tmp_path):
    evaluation = RolloutEvaluatorConfig(n_episodes=4, opponent="random")
    algorithm = ImpalaAlgorithmConfig(
        n_epochs=2, epoch_length=2, envs_per_actor=4, n_rollout_steps=8, rollout_evaluator=evaluation
    )
    result = train(TICTACTOE, algorithm, runner=RunnerConfig("dev"), output=QUIET, output_dir=tmp_path)
    for seat in ("player_1", "player_2"):
        rates = [
            result.column(StatKey.of(e, mean, "eval", group=f"seat={seat}").column())
            for e in (GameEvents.win, GameEvents.draw, GameEvents.loss)
        ]
        assert np.allclose(np.sum(rates, axis=0), 1.0)  # every game is won, drawn or lost
        agent = StatKey.of(EpisodeEvents.agent_return, mean, "train", group=f"agent={seat}").column()
        assert len(result.column(agent)) == 2
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    agents = kpis[[agent_return_column("player_1"), agent_return_column("player_2")]]
    assert np.allclose(agents.sum(axis=1), kpis["return"])  # the team's return is the sum of the agents'
    # the best model is chosen by the games' score, not by the mean return (0 in zero-sum self-play)
    assert 0.0 <= result.best_eval_return <= 1.0


def test_the_console_shows_the_rates_per_seat_and_the_curves_keep_a_seats_colour(tmp_path, capsys):
    """A zero-sum game's mean return is 0: the epoch table and the status line show win, draw and loss rates per
    seat, and in training_curves.png a seat has one colour in every panel."""
    from maze_impala.report.plots import training_curves

    evaluation = RolloutEvaluatorConfig(n_episodes=4, opponent="random")
    algorithm = ImpalaAlgorithmConfig(
        n_epochs=1, epoch_length=2, envs_per_actor=4, n_rollout_steps=8, rollout_evaluator=evaluation
    )
    output = OutputConfig(console=True, tensorboard=False, progress=True, plot=False)
    train(
        TICTACTOE,
        algorithm,
        model=ModelConfig(image_encoder="flatten"),
        runner=RunnerConfig("dev"),
        output=output,
        output_dir=tmp_path,
    )
    shown = capsys.readouterr().out
    for seat in ("player_1", "player_2"):
        for event in (GameEvents.win, GameEvents.draw, GameEvents.loss):
            assert StatKey.of(event, mean, "eval", group=f"seat={seat}").column() in shown, shown
    status = [line for line in shown.splitlines() if line.startswith("epoch 1/1 |")]
    assert status and "evaluation games a seat: player_1 " in status[-1] and ", player_2 " in status[-1]
    figure = training_curves(read_columns(tmp_path / "stats.csv"))
    colours: dict[str, set] = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            colours.setdefault(line.get_gid(), set()).add(line.get_color())
    assert {"seat=player_1", "seat=player_2"} <= colours.keys()
    assert all(len(found) == 1 for found in colours.values()), colours
    assert colours["seat=player_1"] != colours["seat=player_2"]


@pytest.mark.slow
def test_the_rollout_cli_plays_every_seat_against_random_and_against_another_run(tmp_path):
    game = ["env=pettingzoo", "env.name=pettingzoo.classic.tictactoe_v3", "model.image_encoder=flatten"]
    train_run = maze_run(
        tmp_path,
        "-cn conf_train",
        *game,
        *TINY,
        f"hydra.run.dir={tmp_path / 'run'}",
        "algorithm.rollout_evaluator.opponent=random",
    )
    assert train_run.returncode == 0, train_run.stderr
    assert "best evaluation score against random" in train_run.stdout
    for opponent in ("random", str(tmp_path / "run")):
        out = tmp_path / f"games_{len(opponent)}"
        played = maze_run(
            tmp_path,
            "-cn conf_rollout",
            f"input_dir={tmp_path / 'run'}",
            f"opponent={opponent}",
            "n_episodes=5",
            out=out,
        )
        assert played.returncode == 0, played.stderr
        table = pd.read_csv(out / "games_summary.csv").set_index("seat")
        assert list(table.index) == ["player_1", "player_2"] and table["games"].tolist() == [5, 5]
        assert np.allclose(table[["win", "draw", "loss"]].sum(axis=1), 1.0)
        assert len(pd.read_csv(out / "games.csv")) == 10
    cartpole = maze_run(tmp_path, "-cn conf_rollout policy=random_policy env=gym_env opponent=random")
    assert cartpole.returncode != 0 and "two or more agents" in cartpole.stderr


@pytest.mark.slow
def test_a_multirun_writes_evaluation_results_that_marl_eval_reads(tmp_path):
    """The multirun's metrics.json, checked by marl-eval's own loader (installed by .ci/run, without its pins)."""
    diagnose = pytest.importorskip("marl_eval.utils.diagnose_data_errors")
    processing = pytest.importorskip("marl_eval.utils.data_processing_utils")
    game = ["env=pettingzoo", "env.name=pettingzoo.classic.tictactoe_v3", "model.image_encoder=flatten"]
    sweep = ["runner=dev", "seed=1,2", "algorithm.rollout_evaluator.opponent=random", f"hydra.sweep.dir={tmp_path}/m"]
    proc = maze_run(tmp_path, "-cn conf_train -m", *game, *TINY, *sweep)
    assert proc.returncode == 0, proc.stderr
    # overrides too long for a folder name: the jobs are numbered (a name over 255 bytes failed the multirun)
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.is_dir()) == ["job_0", "job_1"]
    raw = json.loads((tmp_path / "m" / "metrics.json").read_text())
    seeds = raw["pettingzoo.classic"]["tictactoe_v3"]["impala"]
    assert sorted(seeds) == ["seed_1", "seed_2"] and sorted(seeds["seed_1"]) == ["absolute_metrics", "step_0", "step_1"]
    step = seeds["seed_2"]["step_1"]
    assert step["step_count"] > 0 and len(step["return"]) == 2 and len(step["win_rate"]) == 2
    assert all(diagnose.DiagnoseData(raw).check_data()["pettingzoo.classic"].values())
    processed = processing.data_process_pipeline(raw, metrics_to_normalize=["return"])
    assert processed["extra"]["number_of_runs"] == 2  # the loader returns the raw data when it cannot read it
    matrices, _ = processing.create_matrices_for_rliable(processed, "pettingzoo.classic", ["return"])
    assert matrices["mean_win_rate"]["impala"].shape == (2, 1)


def test_selected_columns_keep_their_data_and_their_truncated_decisions():
    T, N = 3, 4
    rng = np.random.default_rng(0)
    trajectory = Trajectory(
        observations={"x": rng.normal(size=(T + 1, N, 2))},
        actions={"a": rng.integers(0, 3, (T, N))},
        behaviour_log_probs=rng.normal(size=(T, N)).astype(np.float32),
        rewards=rng.normal(size=(T, N)),
        terminated=rng.random((T, N)) < 0.3,
        truncated=np.zeros((T, N), bool),
        truncated_observations={"x": np.array([[1.0, 1.0], [3.0, 3.0]])},
        truncated_index=np.array([[0, 1], [2, 3]]),
        mask=rng.random((T, N)) < 0.8,
        agent_ids=np.array([0, 1, 0, 1]),
        initial_state={"h": np.arange(N)[:, None]},
    )
    kept = select_columns(trajectory, np.array([1, 3]))
    assert kept.n_columns == 2 and kept.agent_ids.tolist() == [1, 1]
    assert np.array_equal(kept.observations["x"], trajectory.observations["x"][:, [1, 3]])
    assert np.array_equal(kept.mask, trajectory.mask[:, [1, 3]]) and kept.initial_state["h"][:, 0].tolist() == [1, 3]
    assert kept.truncated_index.tolist() == [[0, 0], [2, 1]]  # renumbered to the kept columns
    dropped = select_columns(trajectory, np.array([0, 2]))
    assert dropped.truncated_index.shape == (0, 2) and dropped.truncated_observations["x"].shape == (0, 2)


def test_an_actor_against_an_opponent_hands_over_only_its_own_seats_decisions():
    env = make_env(TICTACTOE)
    policy = make_policy(env, ModelConfig(image_encoder="flatten"))
    spec = ActorSpec(TICTACTOE, Lineup.of(ModelConfig(image_encoder="flatten"), PolicySpec.random(), 3), 8, 4, seed=3)
    for index, agent in ((0, 0), (1, 1), (2, 0)):  # the seats in turn
        actor = spec.build(index, SharedWeights(policy))
        try:
            rollout = actor.rollout()
            (trajectory,) = rollout.trajectories.values()
            assert set(trajectory.agent_ids.tolist()) == {agent} and trajectory.n_columns == 4  # one seat per env
            assert rollout.env_steps == 8 * 4  # the opponent's moves are env steps too
        finally:
            actor.close()
    actor = spec.build(3, SharedWeights(policy))  # past opponent_actors, self-play: every seat's decisions
    try:
        (trajectory,) = actor.rollout().trajectories.values()
        assert set(trajectory.agent_ids.tolist()) == {0, 1} and trajectory.n_columns == 8
    finally:
        actor.close()


@pytest.mark.slow
def test_training_against_the_random_player_beats_it_in_both_seats(tmp_path):
    """Tic-tac-toe, 76,800 env steps against the random player: it wins far more often than the random player
    would in each seat (58.5% as the first, 28.8% as the second player)."""
    evaluation = RolloutEvaluatorConfig(n_episodes=200, opponent="random")
    algorithm = ImpalaAlgorithmConfig(
        n_epochs=3, epoch_length=25, train_opponent="random", rollout_evaluator=evaluation
    )
    result = train(
        TICTACTOE,
        algorithm,
        ModelConfig(image_encoder="flatten"),
        RunnerConfig("dev"),
        output=QUIET,
        output_dir=tmp_path,
    )
    win = {
        seat: result.column(StatKey.of(GameEvents.win, mean, "eval", group=f"seat={seat}").column())[-1]
        for seat in ("player_1", "player_2")
    }
    assert win["player_1"] >= 0.9 and win["player_2"] >= 0.65, win


def test_an_opponent_checkpoint_is_read_where_the_spec_is_made_never_in_an_actor(tmp_path):
    from maze_impala.checkpoints import save_checkpoint

    env, model = make_env(TICTACTOE), ModelConfig(image_encoder="flatten")
    opponent = make_policy(env, model)
    record = {"env": TICTACTOE, "model": {"image_encoder": "flatten"}}
    save_checkpoint(tmp_path / "opponent.pt", {"policy": opponent.state_dict(), "config": record})
    (opponent_spec,) = resolve_opponents(env, train=str(tmp_path / "opponent.pt")).values()
    spec = ActorSpec(TICTACTOE, Lineup.of(model, opponent_spec, 1), 8, 2, seed=3)
    assert isinstance(spec.lineup.opponent, PolicySpec) and not spec.lineup.opponent.has_no_model
    (tmp_path / "opponent.pt").unlink()  # an actor that read the checkpoint would fail now
    actor = spec.build(0, SharedWeights(make_policy(env, model)))
    try:
        assert actor.rollout().env_steps == 8 * 2
    finally:
        actor.close()
    built = spec.lineup.opponent.policy(env)
    assert all(torch.equal(a, b) for a, b in zip(built.state_dict().values(), opponent.state_dict().values()))
    with pytest.raises(ConfigError, match=r"neither 'random', 'mcts' \(or mcts:<simulations>\) nor a checkpoint"):
        resolve_opponents(env, train=str(tmp_path / "opponent.pt"))


@pytest.mark.slow
def test_the_shipped_tictactoe_config_learns_by_self_play_beating_random_play_in_both_seats(tmp_path):
    """``env=tictactoe`` trains against itself and its snapshot pool, never against the random player: at a
    tenth of its budget (102,400 env steps) it already beats random play far beyond random play's own rates
    (0.70 and 0.42 win or draw in the first and second seat). On runner=dev, as the learning tests
    (tests/test_learning.py): the run repeats exactly, and costs the suite less CPU time than subprocess actors."""
    out = tmp_path / "run"
    run = maze_run(
        tmp_path,
        "-cn conf_train env=tictactoe algorithm.n_epochs=4 runner=dev",
        f"hydra.run.dir={out}",
        "output.tensorboard=false",
        "output.progress=false",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    last = pd.read_csv(out / "stats.csv").iloc[-1]
    train_against = StatKey.of(GameEvents.win, mean, "train", group="seat=player_1").column()
    assert train_against in last.index  # the pool's games, reported per seat
    for seat, least in (("player_1", 0.85), ("player_2", 0.6)):
        rate = sum(
            last[StatKey.of(e, mean, "eval", group=f"seat={seat}").column()] for e in (GameEvents.win, GameEvents.draw)
        )
        assert rate >= least, (seat, rate)


@pytest.mark.slow
def test_the_shipped_connect_four_config_learns_by_self_play_beating_random_play_in_both_seats(tmp_path):
    """``env=connect_four`` trains against itself and its snapshot pool (drawn by pfsp), never against the random
    player: at a tenth of its budget (102,400 env steps) it wins far more often than random play's own rates
    (0.54 and 0.46 in the first and second seat), on runner=dev as the tic-tac-toe test above."""
    out = tmp_path / "run"
    run = maze_run(
        tmp_path,
        "-cn conf_train env=connect_four algorithm.n_epochs=4 runner=dev",
        f"hydra.run.dir={out}",
        "output.tensorboard=false",
        "output.progress=false",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    last = pd.read_csv(out / "stats.csv").iloc[-1]
    for seat in ("player_0", "player_1"):
        rate = last[StatKey.of(GameEvents.win, mean, "eval", group=f"seat={seat}").column()]
        assert rate >= 0.7, (seat, rate)
