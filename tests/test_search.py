"""Search as an opponent: OpenSpiel's MCTS bot on the board it is shown, through the actor's one loop."""

import numpy as np
import pytest
from clitools import maze_run

from maze_impala.config import ConfigError
from maze_impala.envs.pettingzoo_adapter import GLOBAL_STATE, make_pettingzoo_env
from maze_impala.play.search import DEFAULT_SIMULATIONS, MctsActing, search_game, search_simulations
from maze_impala.play.spec import PolicySpec, opponent_spec

pyspiel = pytest.importorskip("pyspiel")


@pytest.mark.parametrize("game", ["connect_four_v3", "tictactoe_v3"])
def test_every_board_of_random_games_is_rebuilt_as_its_openspiel_state(game):
    """The state replayed from a seat's board: that seat to move, and the legal moves the env's mask allows."""
    env = make_pettingzoo_env(name=f"pettingzoo.classic.{game}", global_state="observations")
    twin = search_game(env)
    openspiel = pyspiel.load_game(twin.openspiel)
    rng = np.random.default_rng(0)
    seats = list(env.env.possible_agents)
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
            # and back: what the seat is shown of the OpenSpiel state is what the env showed it
            shown = twin.observation(state.history(), seat, state.legal_actions(), len(obs["action_mask"]))
            joint = obs.pop(GLOBAL_STATE)
            assert set(shown) == set(obs) and all(np.array_equal(shown[k], obs[k]) for k in obs)
            assert all(shown[k].dtype == obs[k].dtype for k in obs)
            # and every seat's view joined, as a centralised critic reads them (env.global_state=observations)
            views = twin.views(state.history(), seat, state.legal_actions(), len(obs["action_mask"]), seats)
            assert np.array_equal(env.joint_observation(views), joint)
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
    for bad in ("mcts:0", "mcts:1", "mcts:many"):
        with pytest.raises(ConfigError, match=r"whole number >= 2, as in opponent=mcts:400"):
            search_simulations(bad)
    spec = opponent_spec("mcts:7")
    assert spec.search == 7 and spec.model is None and spec.has_no_model
    assert PolicySpec.from_state_dict(spec.state_dict()) == spec, "a run's fixed opponents go into its checkpoints"


def test_an_env_without_an_openspiel_twin_is_refused_naming_the_games():
    from maze_impala.envs.examples import CoordinationEnv

    with pytest.raises(
        ConfigError,
        match=r"opponent=mcts plays the games OpenSpiel has a twin of, PettingZoo's "
        r"connect_four_v3, tictactoe_v3; this env is CoordinationEnv",
    ):
        MctsActing(CoordinationEnv(), 10)


@pytest.mark.slow
def test_random_play_loses_to_the_search_in_both_seats_through_the_rollout_cli(tmp_path):
    out = tmp_path / "r"
    proc = maze_run(
        tmp_path, ("-cn conf_rollout policy=random_policy env=connect_four opponent=mcts:50 n_episodes=10"), out=out
    )
    assert proc.returncode == 0, proc.stderr
    assert "20 games against mcts:50, 10 in each seat" in proc.stdout
    import pandas as pd

    summary = pd.read_csv(out / "games_summary.csv").set_index("seat")
    assert (summary["loss"] >= 0.9).all(), summary


def _networks(env, favourite: int, value: float, strength: float = 6.0):
    """An untrained policy whose logits favour one move (by ``strength``), and a critic that values every state
    ``value`` for the seat to move (their last layers set by hand)."""
    import torch

    from maze_impala.config import ModelConfig
    from maze_impala.nn.critics import make_critic
    from maze_impala.nn.models import make_policy

    model = ModelConfig(hidden_units=[8], normalize_observations=False)
    policy = make_policy(env, model)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    with torch.no_grad():
        for module, bias in ((policy, torch.zeros(7)), (critic, torch.tensor([value]))):
            last = [m for m in module.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            last.bias.copy_(bias)
        [m for m in policy.modules() if isinstance(m, torch.nn.Linear)][-1].bias[favourite] = strength
    return policy, critic


def test_the_guided_search_takes_its_priors_from_the_policy_and_its_values_from_the_critic():
    from maze_impala.play.guided import GuidedSearch

    env = make_pettingzoo_env(name="pettingzoo.classic.connect_four_v3")
    policy, critic = _networks(env, favourite=2, value=0.5)
    search = GuidedSearch(env, policy, critic, simulations=2)
    state = pyspiel.load_game("connect_four").new_initial_state()
    state.apply_action(2)  # the second seat to move
    assert search.guide.evaluate(state).tolist() == pytest.approx([-0.5, 0.5])
    priors = dict(search.guide.prior(state))
    assert sorted(priors) == list(range(7)) and sum(priors.values()) == pytest.approx(1.0)
    assert max(priors, key=priors.get) == 2 and priors[2] == pytest.approx(np.exp(6) / (np.exp(6) + 6))
    for _ in range(5):  # column 2 full: the priors are renormalised over the legal moves
        state.apply_action(2)
    assert 2 not in dict(search.guide.prior(state))
    assert sum(dict(search.guide.prior(state)).values()) == pytest.approx(1.0)
    # two simulations (the root, then one move): the move is the policy's favourite, in both seats
    board = np.zeros((2, 6, 7, 2), dtype=np.int8)
    board[1, 5, 0, 1] = 1  # the second seat, after the first seat's piece in column 0
    actions, log_probs, _ = search.act("player", {"observation": board}, {}, np.array([0, 1]), None)
    assert actions["action"].tolist() == [2, 2] and log_probs.tolist() == [0.0, 0.0]


def test_the_guided_search_takes_a_win_in_one_against_its_policys_favourite():
    from maze_impala.play.guided import GuidedSearch

    env = make_pettingzoo_env(name="pettingzoo.classic.connect_four_v3")
    policy, critic = _networks(env, favourite=6, value=0.0, strength=2.0)  # the favourite's prior 0.55
    board = np.zeros((1, 6, 7, 2), dtype=np.int8)
    board[0, 5, 0:3, 0] = 1  # three of the first seat's in the bottom row: column 3 wins
    board[0, 4, 0:3, 1] = 1
    actions, _, _ = GuidedSearch(env, policy, critic, simulations=50).act(
        "player", {"observation": board}, {}, np.array([0]), None
    )
    assert actions["action"].tolist() == [3]


def test_search_at_play_time_is_refused_for_a_recurrent_policy_and_outside_games():
    from maze_impala.config import ModelConfig, RolloutConfig
    from maze_impala.nn.critics import make_critic
    from maze_impala.nn.models import make_policy
    from maze_impala.play.guided import GuidedSearch

    env = make_pettingzoo_env(name="pettingzoo.classic.connect_four_v3")
    model = ModelConfig(hidden_units=[8], recurrent="lstm")
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    with pytest.raises(ConfigError, match="needs a feed-forward policy"):
        GuidedSearch(env, make_policy(env, model), critic, 10)
    with pytest.raises(ConfigError, match="search=10 searches with a trained policy in games against an opponent"):
        RolloutConfig(input_dir=".", search=10)
    with pytest.raises(ConfigError, match="search"):
        RolloutConfig(input_dir=".", opponent="random", search=1)
