"""The benchmarks run against the installed package and print what their docs quote: a short run of each table."""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from clitools import train_tiny

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def run_script(name: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_learning_benchmark_prints_its_table_and_the_calibration(tmp_path):
    # 2 epochs of 10 updates: too short to reach 475, long enough to go through every part of the script
    out = tmp_path / "learning.json"
    args = ["--envs", "CartPole-v1", "--seeds", "1", "--set", "n_epochs=1", "epoch_length=20", "--final-episodes", "3"]
    stdout = run_script("learning.py", *args, "--calibrate", "0.5", "--json", str(out), cwd=tmp_path)
    assert "| CartPole-v1 | local | default | 0/1 | - | - |" in stdout
    assert "calibration: the learner took" in stdout
    report = json.loads(out.read_text())
    first, last = report["calibration_ms_per_update"]
    assert 0 < first < 10_000 and 0 < last < 10_000
    (table,) = report["tables"]
    (run,) = table["runs"]
    assert run["seed"] == 1 and run["steps"] is None and run["final"] > 0
    assert run["judged"] >= 8 and table["median_judged"] == run["judged"]  # 3 greedy episodes: CartPole's >= 8 steps
    assert run["sgd_steps_share"] == 1.0  # no KL stop: every update took all its optimizer steps


def test_throughput_measures_the_learner_alone_by_batch_size(tmp_path):
    args = ["--learner-only", "--learner-batches", "1", "2", "--seconds", "0.3", "--envs-per-actor", "4"]
    stdout = run_script("throughput.py", *args, cwd=tmp_path)
    rows = [line.split(" | ") for line in stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert [row[1] for row in rows] == ["128", "256"]  # 4 envs x 32 steps per rollout
    assert all(float(row[3].rstrip(" |").replace(",", "")) > 0 for row in rows)


def test_throughput_measures_a_shipped_env_family_with_its_own_settings_and_the_flags_given(monkeypatch):
    """``--env env=atari`` measures Pong as ``maze-run env=atari`` trains it (RMSProp, one pass, 16 envs, unrolls of
    20, its wrappers, ``image_encoder=auto`` as a run on that device resolves it), a flag that is given overriding."""
    import argparse

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import throughput

    args = argparse.Namespace(
        env="env=atari:name=ALE/Breakout-v5",
        hidden=None,
        model=[],
        device=None,
        num_actors=14,
        envs_per_actor=None,
        n_rollout_steps=None,
        actors_batch_size=4,
        min_actors_batch_size=None,
    )
    throughput.resolve(args)
    assert args.env["name"] == "ALE/Breakout-v5" and args.env["wrappers"]  # the family's env, with a key changed
    algorithm = throughput.algorithm_of(args, epoch_length=25)
    assert (algorithm.optimizer, algorithm.n_sgd_passes, algorithm.envs_per_actor, algorithm.n_rollout_steps) == (
        "rmsprop",
        1,
        16,
        20,
    )
    assert (algorithm.num_actors, algorithm.actors_batch_size, algorithm.epoch_length) == (14, 4, 25)
    assert algorithm.rollout_evaluator.n_episodes == 1  # evaluation is not in the rates: as short as it can be
    assert throughput.model_of(args).image_encoder == "nature"  # a CPU learner's
    args.device = "cuda"
    assert throughput.model_of(args).image_encoder == "impala"  # a GPU learner's, actors alike
    plain = argparse.Namespace(
        env="CartPole-v1", hidden=None, model=["recurrent=lstm"], device=None, **dict.fromkeys(throughput.FLAGS[:-1])
    )
    throughput.resolve(plain)
    shipped = throughput.ImpalaAlgorithmConfig()
    assert throughput.algorithm_of(plain).n_sgd_passes == shipped.n_sgd_passes and plain.device == "cpu"
    assert throughput.model_of(plain).recurrent == "lstm" and plain.hidden == [128, 128]


def test_the_learners_batches_of_several_sizes_share_the_rollouts_a_fresh_collection_gives(monkeypatch):
    """``benchmarks/gpu.py`` measures batches of 1 to 64 rollouts from one collection: a smaller batch must be what
    the seeded policy would collect for it alone, and a learner built beside it computes with the same policy."""
    import numpy as np

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import calibration

    from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig

    algorithm, model = ImpalaAlgorithmConfig(envs_per_actor=2, n_rollout_steps=4), ModelConfig()
    shared = calibration.Collector("CartPole-v1", algorithm, model)
    learner, batch = calibration.learner_and_batch("CartPole-v1", algorithm, model, 2, collector=shared)
    assert len(shared.take(3)) == 3 and shared.take(2) == batch  # the larger batch begins with the smaller one
    _, alone = calibration.learner_and_batch("CartPole-v1", algorithm, model, 2)
    for ours, theirs in zip(batch, alone):
        a, b = ours.trajectories[0], theirs.trajectories[0]
        np.testing.assert_array_equal(a.actions["action"], b.actions["action"])
        np.testing.assert_array_equal(a.behaviour_log_probs, b.behaviour_log_probs)
        np.testing.assert_array_equal(a.observations["observation"], b.observations["observation"])
    learner.step(batch)  # a batch the learner steps on
    assert learner.version == 1


def test_the_one_node_lstm_unroll_that_was_measured_is_exact(tmp_path):
    # docs/benchmarks.md reports its speed; the figures mean something only if it computes what the shipped unroll does
    stdout = run_script("lstm_unroll.py", "check", cwd=tmp_path)
    lines = dict(line.split(": ", 1) for line in stdout.splitlines())
    assert float(lines["largest difference in value"]) < 1e-12
    assert float(lines["largest difference in gradient"]) < 1e-12
    assert lines["gradcheck"] == "True"


def test_calibration_runs_alone(tmp_path):
    stdout = run_script("calibration.py", cwd=tmp_path)
    assert "ms per update" in stdout and "env steps per batch" in stdout


def test_a_stopped_run_ends_its_window_after_first_reaching_the_threshold(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning

    watch = learning.Watch(threshold=475.0, stop_after=2_000)
    for epoch, (steps, ret) in enumerate([(1_000, 300.0), (2_000, 480.0), (3_000, 420.0)], start=1):
        watch.write(epoch, steps, {learning.STEPS: steps, learning.RETURN: ret})
    assert watch.reached_at == 2_000
    with pytest.raises(learning._Stopped):
        watch.write(4, 4_000, {learning.STEPS: 4_000, learning.RETURN: 500.0})
    assert list(watch.column(learning.RETURN)) == [300.0, 480.0, 420.0, 500.0]
    never = learning.Watch(threshold=475.0)  # without stop_after: the whole run
    never.write(1, 1_000, {learning.RETURN: 500.0})
    never.write(2, 10**9, {learning.RETURN: 500.0})
    assert len(never.rows) == 2


def test_the_critic_swing_reads_a_normalised_critics_loss_in_the_envs_units(monkeypatch):
    """A normalised critic's loss is divided by its scale's square: the swing multiplies it back, so that a scale that
    shrinks over the run is not read as a swing, and a loss without a scale (value_normalization=off) is as it is."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning

    loss, scale = learning.VALUE_LOSS + "/critic_key=a", learning.VALUE_SCALE + "/critic_key=a"
    watch = learning.Watch(threshold=0.0)
    for epoch, (value, sigma) in enumerate([(1.0, 4.0), (4.0, 2.0), (16.0, 1.0), (1.0, 4.0)], start=1):
        watch.write(epoch, epoch, {loss: value, scale: sigma})
    assert learning.critic_swing(watch) == pytest.approx(1.0), "16 in every epoch, in the env's units"
    off = learning.Watch(threshold=0.0)
    for epoch, value in enumerate([1.0, 2.0, 20.0], start=1):
        off.write(epoch, epoch, {loss: value})
    assert learning.critic_swing(off) == pytest.approx(10.0)
    first_fit = learning.Watch(threshold=0.0)
    for epoch, value in enumerate([300.0] + [1.0] * 8 + [3.0], start=1):
        first_fit.write(epoch, epoch, {loss: value})
    assert learning.critic_swing(first_fit) == pytest.approx(300.0), "the whole run: its first fit included"
    assert learning.critic_swing(first_fit, skip=0.1) == pytest.approx(3.0), "after its first tenth"
    assert learning.critic_losses(watch)["critic_key=a"].tolist() == [16.0] * 4, "the series a run's record keeps"


def test_a_scaled_runs_record_is_read_in_the_envs_units(monkeypatch):
    """With every reward x100, a run's returns are divided by 100 and its critics' losses by 100 squared."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning

    row = {"final": -500.0, "judged": None, "evals": [-1000.0, -200.0], "critic_losses": {"a": [4e4]}, "seed": 1}
    back = learning.unscaled(row, 100.0)
    assert back == {"final": -5.0, "judged": None, "evals": [-10.0, -2.0], "critic_losses": {"a": [4.0]}, "seed": 1}


def test_model_settings_change_a_tasks_model_and_keep_its_own(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import learning

    changes = {"init": "default", "recurrent_units": "32", "hidden_units": "64,64"}
    task = learning.with_model(learning.SUITE["memory-lstm"], changes)
    assert task.model == {"recurrent": "lstm", "init": "default", "recurrent_units": 32, "hidden_units": [64, 64]}
    assert learning.SUITE["memory-lstm"].model == {"recurrent": "lstm"}


@pytest.mark.slow
def test_games_benchmark_trains_through_the_cli_and_prints_rates_per_seat(tmp_path):
    # one epoch of 25 updates, 10 games per seat: every part of the script, not its budget
    args = [
        "--games",
        "tictactoe",
        "--seeds",
        "1",
        "--budget",
        "1",
        "--games-per-seat",
        "10",
        "--search-games-per-seat",
        "10",
    ]
    args += ["--mcts", "5", "--search", "4"]  # against the bot: the policy alone, and searching 4 simulations a move
    pool = [
        "model.image_encoder=flatten",
        "algorithm.train_opponent_share=1.0",
        "algorithm.opponent_pool.snapshot_every=5",
    ]
    stdout = run_script("games.py", *args, "--set", *pool, cwd=tmp_path)
    assert "tictactoe seed 1 player_1: win" in stdout and "tictactoe seed 1 player_2: win" in stdout
    rows = [line for line in stdout.splitlines() if line.startswith("| tictactoe, 25,600 |")]
    assert len(rows) == 2 and "nan" not in stdout  # each seat's games against the pool in training, too
    assert all(row.split("|")[-2].strip() in ("win", "draw", "loss") for row in rows)  # against a best response
    curve = [line for line in stdout.split("over training", 1)[1].splitlines() if line.startswith("| 25,600 |")]
    assert len(curve) == 1, "one epoch: one row over training, not one per fraction of the budget"
    assert "runner=local" in stdout and "vary from run to run" in stdout
    searched = [line for line in stdout.splitlines() if line.startswith("| tictactoe | player_")]
    assert len(searched) == 4 and all(line.split("|")[3].strip() == "5" for line in searched), searched
    assert sorted(line.split("|")[4].strip() for line in searched) == ["policy alone"] * 2 + ["search 4"] * 2


def test_the_tictactoe_reference_solves_random_play_exactly(tmp_path):
    # the first player can win 99.48% against random play and never lose; the second can always avoid losing, and
    # maximising its expected reward instead loses 0.42% of games for more wins
    stdout = run_script("tictactoe_reference.py", cwd=tmp_path)
    assert "| first | most expected reward | 0.9948 | 0.0052 | 0.0000 | 0.9948 |" in stdout
    assert "| second | most expected reward | 0.9291 | 0.0667 | 0.0042 | 0.9249 |" in stdout
    assert "| second | fewest losses | 0.9164 | 0.0836 | 0.0000 | 0.9164 |" in stdout


def test_the_tictactoe_reference_evaluates_a_policy_exactly(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import tictactoe_reference as ref

    def uniform(board, mark):
        return {i: 1 / len(ref.free(board)) for i in ref.free(board)}

    # random play against itself, exactly: the first player wins 58.5%, the second 28.8%, 12.7% are drawn
    win, draw, loss = ref.solve("X", ref.sampled(uniform, "X"))("." * 9, "X")
    assert (round(win, 4), round(draw, 4), round(loss, 4)) == (0.5849, 0.127, 0.2881)

    def lowest(board, mark):  # always the first free square
        return {i: float(i == ref.free(board)[0]) for i in ref.free(board)}

    found = ref.mistakes("O", lowest, ref.solve("O", ref.best(ref.most_reward)))
    costs = [cost for cost, *_ in found]
    assert costs == sorted(costs, reverse=True) and all(cost > 0 for cost in costs)
    assert found[0][1:] == ("OOXOX..XX", 5, 6)  # the costliest: square 6 wins at once (0-3-6)
    assert ("X........", 1, 4) in [f[1:] for f in found]  # after a corner, the centre


@pytest.mark.slow
def test_the_tictactoe_reference_reads_a_trained_checkpoint(tmp_path):
    game = ["env=pettingzoo", "env.name=pettingzoo.classic.tictactoe_v3", "model.image_encoder=flatten"]
    run = train_tiny(tmp_path, game)
    stdout = run_script("tictactoe_reference.py", "--checkpoint", str(run / "model_last.pt"), cwd=tmp_path)
    rows = [line for line in stdout.splitlines() if "| checkpoint, " in line]
    exact, worst_case = rows[:4], rows[4:]
    assert len(exact) == 4  # sampled and most likely, in each seat
    assert len(worst_case) == 2 and all(row.split("|")[3].strip() in ("win", "draw", "loss") for row in worst_case)
    for row in exact:
        win, draw, loss = (float(x) for x in row.split("|")[3:6])
        assert abs(win + draw + loss - 1) < 2e-4  # probabilities, printed to 4 places
    assert "The second seat's costliest most likely moves" in stdout


def test_versus_sb3_judges_our_run_by_its_last_100_episodes_and_sums_up_the_seeds(tmp_path):
    """maze_impala's side of ``versus_sb3.py`` (SB3's needs its own venv): the shipped pixel goal reaches 0.85 in a
    fresh process, judged by the mean of its last 100 training episodes; and the table's medians and ratios."""
    import time

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import versus_sb3
    finally:
        sys.path.remove(str(BENCHMARKS))
    out = tmp_path / "run.json"
    started = time.time()
    subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "versus_sb3.py"),
            "--worker",
            "maze_impala",
            "pixel-goal",
            "1",
            repr(started),
            str(out),
        ],
        check=True,
        timeout=300,
        cwd=tmp_path,
    )
    row = json.loads(out.read_text())
    assert row["reached"] and row["encoder"] == "flatten" and 0 < row["seconds"] < time.time() - started
    assert 0 < row["env_steps"] < versus_sb3.TASKS["pixel-goal"][1]
    rows = [
        {"tool": "maze_impala", "task": "t", "seed": s, "reached": True, "seconds": s, "env_steps": 100 * s}
        for s in (1, 2, 3)
    ]
    rows += [
        {"tool": "sb3", "task": "t", "seed": 1, "reached": True, "seconds": 6.0, "env_steps": 50},
        {"tool": "sb3", "task": "t", "seed": 2, "reached": None, "seconds": None, "env_steps": None},
    ]
    (line,) = versus_sb3.summary(rows)
    assert line["maze_impala_reached"] == "3/3" and line["sb3_reached"] == "1/2"
    assert line["sooner"] == 3.0 and line["env_steps_ratio"] == 4.0


def test_versus_sb3s_tictactoe_against_random_play_gives_random_plays_known_rates():
    """The env SB3 trains on: random moves in it (legal by its masks) against its random player win, draw and lose
    as random play of tic-tac-toe does (first seat 0.585 wins and 0.127 draws, second seat 0.288 wins), seats in
    turn."""
    import numpy as np

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from versus_sb3 import VersusRandom
    finally:
        sys.path.remove(str(BENCHMARKS))
    env, rng = VersusRandom(seed=1), np.random.default_rng(2)
    results: dict[int, list[float]] = {0: [], 1: []}
    env.reset(seed=3)
    for game in range(3000):
        if game:
            env.reset()
        while True:
            _, reward, over, _, _ = env.step(int(rng.choice(np.flatnonzero(env.action_masks()))))
            if over:
                results[game % 2].append(reward)
                break
    for seat, wins, draws in ((0, 0.585, 0.127), (1, 0.288, 0.127)):
        outcomes = np.array(results[seat])
        assert abs((outcomes == 1).mean() - wins) < 0.04 and abs((outcomes == 0).mean() - draws) < 0.03, seat


def test_a_best_response_draws_against_perfect_play_and_beats_a_naive_policy(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import tictactoe_reference as ref

    assert ref.against_best_response(ref.perfect, "X") == "draw"
    assert ref.against_best_response(ref.perfect, "O") == "draw"

    def lowest(board, mark):  # always the first free square: the opponent finds the line that beats it
        return {i: float(i == ref.free(board)[0]) for i in ref.free(board)}

    assert ref.against_best_response(lowest, "X") == "loss" and ref.against_best_response(lowest, "O") == "loss"
    # perfect play against random play: never a loss, in either seat
    for me in ("X", "O"):
        assert ref.solve(me, ref.likeliest(ref.perfect, me))("." * 9, "X")[2] == 0.0


def test_the_device_benchmark_runs_on_the_cpu_with_tiny_batches(tmp_path):
    """``benchmarks/gpu.py`` on the CPU: the learner alone for each model, with the ops and host reads of one update
    (the figures its GPU table gives, here on 2 x 4 steps a rollout)."""
    out = tmp_path / "gpu.json"
    stdout = run_script(
        "gpu.py", "--device", "cpu", "--tiny", "--rollouts", "1", "--seconds", "0.2", "--json", str(out), cwd=tmp_path
    )
    header = "| model | compile | precision | rollouts | samples | updates/s | samples/s | first s | ops | host reads |"
    assert header in stdout
    rows = json.loads(out.read_text())
    assert [row["model"] for row in rows] == ["mlp", "impala", "nature"]
    assert all(row["updates/s"] > 0 and row["ops"] > 100 and row["samples"] == 8 for row in rows)


def test_startup_times_each_command_from_process_start_against_another_version(tmp_path):
    args = ["--rounds", "1", "--cases", "help", "refused", "--old-python", sys.executable]
    stdout = run_script("startup.py", *args, cwd=tmp_path)
    rows = {line.split(" | ")[0]: line.strip("| ").split(" | ")[1:] for line in stdout.splitlines() if "`" in line}
    for title in ("| `maze-run --help`", "| a refused key (`seeed=2`)"):
        this, old, ratio = map(float, rows[title])
        assert 0 < this < 60 and 0 < old < 60 and ratio == pytest.approx(this / old, rel=0.05)  # of unrounded medians


def test_the_deploy_benchmark_prints_a_row_per_backend(tmp_path):
    pytest.importorskip("onnxruntime")
    stdout = run_script("deploy.py", "--kinds", "cartpole-mlp", "--seconds", "0.2", cwd=tmp_path)
    rows = [line for line in stdout.splitlines() if line.startswith("| cartpole-mlp |")]
    assert [row.split(" | ")[1] for row in rows] == ["Player (torch)", "Player (numpy form)", "numpy", "onnx"], stdout


def test_the_benchmarks_harness_alternates_the_cases_and_takes_each_ones_median():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import harness
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert [harness.round_order(["a", "b"], i) for i in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert harness.round_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    order, heard = [], []
    figures = harness.alternating(
        3, ["a", "b"], lambda case: order.append(case) or len(order), lambda *seen: heard.append(seen)
    )
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert figures == {"a": [1, 4, 5], "b": [2, 3, 6]} and heard[1] == (0, "b", 2)
    assert harness.medians(figures) == {"a": 4, "b": 3}
    with pytest.raises(RuntimeError, match="maze-run -cn no_such_config failed"):
        harness.maze_run(["-cn", "no_such_config"], cwd=ROOT)


def test_the_learning_table_gives_an_mpe_return_per_team_and_per_agent():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import learning
    finally:
        sys.path.remove(str(BENCHMARKS))
    spread, listener = learning.SUITE["mpe-simple-spread"], learning.SUITE["mpe-speaker-listener"]
    assert (spread.agents, listener.agents) == (3, 2) and spread.env["api"] == "parallel"
    assert learning.per_agent(spread, -60.0) == " (-20.00 per agent)"
    assert learning.per_agent(listener, -30.0) == " (-15.00 per agent)"
    assert learning.per_agent(learning.SUITE["CartPole-v1"], 500.0) == ""


def test_versus_benchmarl_reads_a_run_in_both_conventions_and_finds_its_falls(tmp_path):
    """``versus_benchmarl.py``'s table from recorded runs (BenchMARL needs its own venv): the final figure (ours
    judged, theirs the last evaluation), the frames and seconds to MAPPO's final, the team's return as the agents'
    sum, and the largest fall of a run's second half below its best so far."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import versus_benchmarl as vb
    finally:
        sys.path.remove(str(BENCHMARKS))
    ours = {"frames": [10, 20, 30, 40], "seconds": [1.0, 2.0, 3.0, 4.0], "per_agent": [-30.0, -20.0, -25.0, -18.0]}
    ours.update(judged_per_agent=-17.0, wall=5.0, total_frames=40, task="simple_spread", tool="maze_impala", seed=1)
    ours.update(eval_episodes=32)
    mappo = {"frames": [10, 20, 30, 40], "seconds": [5.0, 9.0, 14.0, 20.0], "per_agent": [-40.0, -21.0, -30.0, -22.0]}
    mappo.update(wall=21.0, total_frames=40, task="simple_spread", tool="mappo", seed=1, eval_episodes=10)
    assert vb.final(ours) == -17.0 and vb.final(mappo) == -22.0
    assert vb.reach(ours, vb.final(mappo)) == (20, 2.0) and vb.reach(mappo, -1.0) == (None, None)
    assert vb.steadiness(ours) == pytest.approx(0.25) and vb.steadiness(mappo) == pytest.approx(9 / 21)
    assert vb.best_stretch(ours) == pytest.approx(-21.5), "2 evaluations of 32 episodes: the best pair's mean"
    assert vb.best_stretch(mappo) == pytest.approx(-28.25), "5 of 10 wanted, 4 recorded: all of them"
    busy = {**ours, "load": 1, "judged_per_agent": -19.0}  # a run beside a busy program: a row of its own
    (tmp_path / "ours.json").write_text(json.dumps([ours, busy]))  # recorded apart, tabled together (--table)
    (tmp_path / "theirs.json").write_text(json.dumps([mappo]))
    table = run_script("versus_benchmarl.py", "--table", "ours.json", "theirs.json", cwd=tmp_path)
    assert "| simple_spread | idle | maze_impala | 1 | -17.0 (-51.0) | -18.0 | -21.5 | 20 (1/1) | 2 |" in table, table
    assert "| simple_spread | idle | mappo | 1 | -22.0 (-66.0) | -21.0 | -28.2 | 20 (1/1) | 9 |" in table, table
    busy_row = "| simple_spread | beside 1 busy program | maze_impala | 1 | -19.0 (-57.0) | -18.0 | -21.5 | - (0/1) |"
    assert busy_row in table, "no MAPPO beside a busy program: no threshold"
    assert vb.flatten([[1.0, [2.0]], [3.0]]) == [1.0, 2.0, 3.0]


def test_versus_benchmarl_gives_both_tools_the_same_env_arguments_budget_and_evaluation_interval():
    """Each task's env arguments reach both command lines (BenchMARL's ``task.<key>``, ours ``+env.<key>``), MPE's
    discrete actions as BenchMARL's ``prefer_continuous_actions``, and multiwalker's sparser evaluations as both
    BenchMARL's interval and our epoch."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import versus_benchmarl as vb
    finally:
        sys.path.remove(str(BENCHMARKS))
    args = argparse.Namespace(frames=None, minutes=0.0, benchmarl_set=["x=1"], maze_set=["y=2"])
    spread, walker = vb.TASKS["simple_spread"], vb.TASKS["multiwalker"]
    theirs = vb.benchmarl_command(Path("py"), "mappo", spread, 3, args, "out")
    assert {"task.max_cycles=25", "experiment.prefer_continuous_actions=False", "seed=3", "x=1"} <= set(theirs)
    assert "experiment.max_n_frames=600000" in theirs and not any("task.continuous" in c for c in theirs)
    ours = vb.maze_command(spread, 3, args, Path("run"))
    assert {"env.name=mpe2.simple_spread_v3", "+env.max_cycles=25", "+env.continuous_actions=false", "y=2"} <= set(ours)
    assert {"algorithm.epoch_length=6", "algorithm.n_epochs=98"} <= set(ours), "586 updates of 1,024 frames"
    theirs = vb.benchmarl_command(Path("py"), "ippo", walker, 1, args, "out")
    assert {"task.remove_on_fall=true", "task.shared_reward=false", "experiment.prefer_continuous_actions=True"} <= set(
        theirs
    )
    assert {"experiment.evaluation_interval=30000", "experiment.max_n_frames=300000"} <= set(theirs)
    ours = vb.maze_command(walker, 1, args, Path("run"))
    assert {"+env.terminate_on_fall=false", "+env.remove_on_fall=true", "algorithm.epoch_length=30"} <= set(ours)
    assert vb.budget(walker, argparse.Namespace(frames=0, minutes=15.0)) == 100_000_000, "the minutes end it"
    assert vb.budget(walker, argparse.Namespace(frames=1000, minutes=0.0)) == 1000


def test_versus_benchmarl_kills_a_run_that_outlives_its_interrupt_and_keeps_what_it_logged_in_time(tmp_path):
    """A run that ignores its interrupt (BenchMARL on a busy machine can take minutes to stop) is killed with its
    group after the grace, and what it logged after the limit is cut from its record."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import versus_benchmarl as vb
    finally:
        sys.path.remove(str(BENCHMARKS))
    stubborn = "import signal, time, pathlib; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    stubborn += "pathlib.Path('first.csv').touch(); time.sleep(600)"
    wall, seen = vb.supervised([sys.executable, "-c", stubborn], tmp_path, 2 / 60, "first.csv", grace=1.0)
    assert 2.0 < wall < 30.0 and seen < 2.0
    iterations = [1, 2, 3, 4]
    evals = pd.Series([-30.0, -20.0, -15.0], index=[1, 3, 4])
    frames = pd.Series([6000, 12000, 18000, 24000], index=iterations)
    seconds = pd.Series([300.0, 600.0, 899.0, 960.0], index=iterations)  # the fourth ended after 15 minutes
    kept, total = vb.within_limit(evals, frames, seconds, 15.0)
    assert kept.tolist() == [-30.0, -20.0] and int(total.iloc[-1]) == 18000
    with pytest.raises(ValueError, match=r"no iteration of the run ended within 4\.0 minutes"):
        vb.within_limit(evals, frames, seconds, 4.0)


def test_profile_update_times_every_phase_of_a_step_and_its_floor(tmp_path):
    """``profile_update.py``: every phase of an update on CartPole, per optimizer step, beside the floor of the step's
    arithmetic (here of a narrower MLP than the shipped one)."""
    stdout = run_script("profile_update.py", "--threads", "1", "--updates", "1", "--width", "32", cwd=tmp_path)
    assert "CartPole-v1, an MLP of 32 x 32, 8 x 8 optimizer steps an update" in stdout
    rows = {
        cells[1].strip(): float(cells[2].replace(",", ""))
        for line in stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| phase") and len(cells := line.split("|")) == 4
    }
    for phase in ("prepare", "forward", "loss", "backward and zero", "clip", "optimizer", "floor"):
        assert rows[phase] > 0, phase
    assert rows["samples per second"] > 0
    steps = sum(rows[phase] for phase in ("forward", "loss", "backward and zero", "clip", "optimizer"))
    assert rows["floor"] < steps  # a 32-wide MLP's arithmetic is a small part of a step
