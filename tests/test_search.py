"""Search as an opponent: OpenSpiel's MCTS bot on the board it is shown, through the actor's one loop."""

import numpy as np
import pytest
from clitools import run_cli

from maze_impala.config import ConfigError
from maze_impala.envs.pettingzoo_adapter import make_pettingzoo_env
from maze_impala.play.search import DEFAULT_SIMULATIONS, MctsActing, search_game, search_simulations
from maze_impala.play.spec import PolicySpec, opponent_spec

pyspiel = pytest.importorskip("pyspiel")


@pytest.mark.parametrize("game", ["connect_four_v3", "tictactoe_v3"])
def test_every_board_of_random_games_is_rebuilt_as_its_openspiel_state(game):
    """The state replayed from a seat's board: that seat to move, and the legal moves the env's mask allows."""
    env = make_pettingzoo_env(name=f"pettingzoo.classic.{game}")
    twin = search_game(env)
    openspiel = pyspiel.load_game(twin.openspiel)
    rng = np.random.default_rng(0)
    for episode in range(30):
        obs, _ = env.reset(seed=episode)
        done = False
        while not done:
            seat = env.actor_id().agent_id
            board = obs["observation"]
            first, second = (board[..., 0], board[..., 1]) if seat == 0 else (board[..., 1], board[..., 0])
            state = openspiel.new_initial_state()
            for move in twin.moves(first, second):
                state.apply_action(move)
            assert state.current_player() == seat
            assert sorted(state.legal_actions()) == np.flatnonzero(obs["action_mask"]).tolist()
            obs, _, terminated, truncated, _ = env.step({"action": rng.choice(np.flatnonzero(obs["action_mask"]))})
            done = terminated or truncated


def test_the_search_takes_a_win_in_one_and_blocks_a_loss_in_one():
    env = make_pettingzoo_env(name="pettingzoo.classic.connect_four_v3")
    acting = MctsActing(env, 200, seed=1)
    board = np.zeros((1, 6, 7, 2), dtype=np.int8)
    board[0, 5, 0:3, 0] = 1  # three of the first seat's in the bottom row, to move: it wins in column 3
    board[0, 4, 0:3, 1] = 1  # and the second seat's three above them
    actions, _, _ = acting.act("player", {"observation": board}, {}, np.array([0]), None)
    assert actions["action"].tolist() == [3]
    board = np.zeros((1, 6, 7, 2), dtype=np.int8)
    board[0, 5, 0:3, 1] = 1  # the first seat's three; the second seat (its own pieces first) must block column 3
    board[0, 5, 6, 0] = board[0, 4, 6, 0] = 1
    actions, _, _ = acting.act("player", {"observation": board}, {}, np.array([1]), None)
    assert actions["action"].tolist() == [3]


def test_opponent_names_of_the_search():
    assert search_simulations("mcts") == DEFAULT_SIMULATIONS and search_simulations("mcts:400") == 400
    assert search_simulations("random") is None
    for bad in ("mcts:0", "mcts:many"):
        with pytest.raises(ConfigError, match=r"whole number >= 1, as in opponent=mcts:400"):
            search_simulations(bad)
    spec = opponent_spec("mcts:7")
    assert spec.search == 7 and spec.model is None and spec.is_fixed
    assert PolicySpec.from_state_dict(spec.state_dict()) == spec, "a run's fixed opponents go into its checkpoints"


def test_an_env_without_an_openspiel_twin_is_refused_naming_the_games():
    from maze_impala.envs.examples import CoordinationEnv

    with pytest.raises(ConfigError, match=r"opponent=mcts plays the games OpenSpiel has a twin of, PettingZoo's "
                                          r"connect_four_v3, tictactoe_v3; this env is CoordinationEnv"):  # fmt: skip
        MctsActing(CoordinationEnv(), 10)


@pytest.mark.slow
def test_random_play_loses_to_the_search_in_both_seats_through_the_rollout_cli(tmp_path):
    out = tmp_path / "r"
    proc = run_cli(["-cn", "conf_rollout", "policy=random_policy", "env=connect_four", "opponent=mcts:50",
                    "n_episodes=10", f"hydra.run.dir={out}"], cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "20 games against mcts:50, 10 in each seat" in proc.stdout
    import pandas as pd

    summary = pd.read_csv(out / "games_summary.csv").set_index("seat")
    assert (summary["loss"] >= 0.9).all(), summary
