"""Observation keys that only the critics see: a centralised critic on the env's global state, a policy that
never reads it."""

import numpy as np
import pandas as pd
import pytest
import torch
from clitools import TINY, maze_run

from maze_impala import load_policy
from maze_impala.config import ConfigError, ModelConfig
from maze_impala.envs.factory import make_env
from maze_impala.envs.pettingzoo_adapter import GLOBAL_STATE
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.torch_acting import TorchActing, make_acting

SPREAD = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "mpe2.simple_spread_v3",
    "api": "parallel",
    "global_state": True,
}
TICTACTOE = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "pettingzoo.classic.tictactoe_v3",
    "global_state": "observations",
}
CENTRAL = ModelConfig(critic_only_keys=[GLOBAL_STATE])


def _observations(env, n: int) -> dict[str, np.ndarray]:
    rows = []
    for seed in range(n):
        obs, _ = env.reset(seed=seed)
        rows.append(obs)
    return {k: np.stack([r[k] for r in rows]) for k in rows[0]}


@pytest.mark.parametrize("spec", [SPREAD, TICTACTOE], ids=["parallel-state", "aec-observations"])
def test_the_policy_acts_alike_whatever_a_critic_only_key_holds_and_the_critic_reads_it(spec):
    env = make_env(spec)
    env.reset(seed=0)
    key = env.actor_id().step_key
    assert GLOBAL_STATE in env.observation_spaces_dict[key].spaces
    policy = make_policy(env, CENTRAL)
    assert GLOBAL_STATE not in policy.observation_spaces[key].spaces
    obs = _observations(env, 6)
    changed = {**obs, GLOBAL_STATE: obs[GLOBAL_STATE] + np.random.default_rng(0).normal(size=obs[GLOBAL_STATE].shape)}
    agents = np.zeros(6, dtype=np.int64)
    actings = [make_acting(policy), TorchActing(policy)]
    assert isinstance(actings[0], NumpyActing)  # both ways to act ignore the key (tic-tac-toe's board: in the MLP)
    for acting in actings:
        (a1, lp1, _), (a2, lp2, _) = (acting.act(key, o, {}, agents, StreamNoise(1)) for o in (obs, changed))
        assert all(np.array_equal(a1[k], a2[k]) for k in a1) and np.array_equal(lp1, lp2)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, CENTRAL)
    values = [critic.values(key, {k: torch.as_tensor(v) for k, v in o.items()}) for o in (obs, changed)]
    assert not torch.allclose(values[0], values[1])  # the critic does see the global state
    env.close()


def test_the_joint_observation_holds_every_agents_observation_in_turn():
    import gymnasium as gym

    env = make_env({**SPREAD, "global_state": "observations"})
    obs, _ = env.reset(seed=3)
    joint = obs[GLOBAL_STATE]
    from mpe2 import simple_spread_v3

    own = list(simple_spread_v3.parallel_env().reset(seed=3)[0].values())  # the same env's, agent by agent
    assert np.allclose(joint[:-3], np.concatenate(own)) and np.allclose(joint[: own[0].size], obs["observation"])
    assert np.array_equal(joint[-3:], np.ones(3))  # then each agent's presence flag: all three observe
    env.close()
    env = make_env(TICTACTOE)
    env.reset(seed=0)
    env.step({"action": np.int64(4)})  # the first player takes the centre, the second a corner
    obs = env.step({"action": np.int64(0)})[0]
    pz = env.env
    views = [gym.spaces.flatten(pz.observation_space(a), pz.observe(a)) for a in pz.possible_agents]
    assert np.array_equal(obs[GLOBAL_STATE], np.concatenate([*views, np.ones(2)]))
    assert [view[9:].sum() for view in views] == [2, 2]  # each player's board (after its mask) has both pieces
    env.close()


def test_critic_only_keys_that_are_missing_or_leave_a_policy_blind_are_named():
    env = make_env(SPREAD)
    with pytest.raises(ValueError, match=r"\['secret'\] are not observation keys .* \['global_state', 'observation'\]"):
        make_policy(env, ModelConfig(critic_only_keys=["secret"]))
    plain = make_env({**SPREAD, "global_state": False})
    with pytest.raises(ValueError, match=r"with env.global_state=false give model.critic_only_keys=\[\] too"):
        make_policy(plain, CENTRAL)
    plain.close()
    with pytest.raises(ValueError, match="leaves the policy of step key"):
        make_policy(env, ModelConfig(critic_only_keys=[GLOBAL_STATE, "observation"]))
    with pytest.raises(ConfigError, match=r"model\.critic_only_keys"):
        ModelConfig(critic_only_keys="global_state")  # type: ignore[arg-type]
    with pytest.raises(Exception, match=r"tictactoe_v3 has no state\(\) .*; use env.global_state=observations"):
        make_env({**SPREAD, "name": "pettingzoo.classic.tictactoe_v3", "api": "aec"})  # through Hydra's instantiate
    with pytest.raises(Exception, match=r"env.global_state must be false, true \(state\), state or observations"):
        make_env({**SPREAD, "global_state": "everything"})
    env.close()


@pytest.mark.slow
def test_a_centralised_critic_trains_and_its_policy_plays_from_the_rollout_cli(tmp_path):
    spread = [
        "env=pettingzoo",
        "env.name=mpe2.simple_spread_v3",
        "env.api=parallel",
        "env.global_state=true",
        "model.critic_only_keys=[global_state]",
    ]
    proc = maze_run(tmp_path, "-cn conf_train", *spread, *TINY, out=tmp_path / "run")
    assert proc.returncode == 0, proc.stderr
    policy, env = load_policy(tmp_path / "run" / "model_last.pt")
    env.reset(seed=0)
    assert GLOBAL_STATE not in policy.observation_spaces[env.actor_id().step_key].spaces
    proc = maze_run(
        tmp_path, "-cn conf_rollout", f"input_dir={tmp_path / 'run'}", "n_episodes=3", out=tmp_path / "played"
    )
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(tmp_path / "played" / "kpis.csv")) == 3


def test_an_envs_failing_state_is_named_with_the_setting_that_avoids_it():
    """SISL multiwalker's ``state()`` reads the bodies of walkers that have left (``remove_on_fall=True``) and
    raises; the adapter names the env and the way out, and every agent's observation serves there."""
    pytest.importorskip("pettingzoo.sisl")
    walkers = {
        "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
        "name": "pettingzoo.sisl.multiwalker_v9",
        "api": "parallel",
        "terminate_on_fall": False,
        "remove_on_fall": True,
    }

    def play(env) -> int:
        """Random play until a walker has left; the sub-steps taken."""
        env.reset(seed=0)
        for step in range(2_000):
            space = env.action_spaces_dict[env.actor_id().step_key]
            space.seed(step)
            env.step(space.sample())
            if any(not exit.truncated for exit in env.get_actor_exits().values()):
                return step
        raise AssertionError("no walker fell in 2,000 sub-steps of random play")

    with pytest.raises(RuntimeError, match=r"multiwalker_v9\.state\(\) failed .*use env.global_state=observations"):
        play(make_env({**walkers, "global_state": True}))
    env = make_env({**walkers, "global_state": "observations"})
    play(env)
    (fallen,) = [a.agent_id for a, exit in env.get_actor_exits().items() if not exit.truncated]
    for _ in range(2):  # the two walkers left take the env's next step
        obs = env.step(env.action_spaces_dict[env.actor_id().step_key].sample())[0]
    space = env.observation_spaces_dict[env.actor_id().step_key][GLOBAL_STATE]
    assert obs[GLOBAL_STATE].shape == space.shape and space.contains(obs[GLOBAL_STATE])
    # the fallen walker's observation reads zeros and its presence flag 0; the others' flags stay 1
    flags, size = obs[GLOBAL_STATE][-3:], (space.shape[0] - 3) // 3
    assert np.array_equal(flags, [float(i != fallen) for i in range(3)])
    assert not obs[GLOBAL_STATE][fallen * size : (fallen + 1) * size].any()
    env.close()
