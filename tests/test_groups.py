"""Policies mapped to agents: shared, one per agent, or one per group of agents."""

import numpy as np
import pytest
import torch

from maze_impala.config import ConfigError, ModelConfig
from maze_impala.core import ActorID
from maze_impala.envs.factory import make_env
from maze_impala.nn.groups import agent_routes
from maze_impala.nn.models import make_policy

SPREAD = {
    "_target_": "maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env",
    "name": "mpe2.simple_spread_v3",
    "api": "parallel",
}
AGENTS = {f"agent_{i}": ActorID("agent", i) for i in range(3)} | {"boss": ActorID("boss", 0)}
COUNTS = {"agent": 3, "boss": 1}


def test_routes_give_each_group_a_network_and_the_other_agents_one_more():
    assert agent_routes({}, False, AGENTS, COUNTS) == {}  # shared
    assert agent_routes({}, True, AGENTS, COUNTS) == {"agent": [0, 1, 2]}  # a step key of one agent needs no route
    assert agent_routes({"pair": ["agent_1", "agent_2"]}, False, AGENTS, COUNTS) == {"agent": [0, 1, 1]}
    assert agent_routes({"a": ["agent_2"], "b": ["agent_0"]}, False, AGENTS, COUNTS) == {"agent": [0, 1, 2]}
    assert agent_routes({"all": ["agent_0", "agent_1", "agent_2"]}, False, AGENTS, COUNTS) == {}  # one network
    with pytest.raises(ValueError, match=r"does not have: \['agent_7'\]; its agents: \['agent_0', 'agent_1'"):
        agent_routes({"pair": ["agent_0", "agent_7"]}, False, AGENTS, COUNTS)


def test_the_agents_of_a_group_act_with_one_network_and_the_others_with_their_own():
    env = make_env(SPREAD)
    policy = make_policy(env, ModelConfig(agent_groups={"pair": ["agent_0", "agent_1"]}))
    (key,) = policy.step_keys
    obs = {"observation": torch.as_tensor(np.random.default_rng(0).normal(size=(1, 18)), dtype=torch.float32)}
    logits = [policy.logits(key, obs, agent_ids=torch.tensor([agent])) for agent in range(3)]
    assert torch.equal(logits[0], logits[1]) and not torch.allclose(logits[0], logits[2])
    assert len(policy.network(key).agents) == 2
    env.close()


def test_groups_that_overlap_or_contradict_per_agent_networks_are_refused():
    with pytest.raises(ConfigError, match=r"puts \['agent_1'\] in more than one group"):
        ModelConfig(agent_groups={"a": ["agent_0", "agent_1"], "b": ["agent_1"]})
    with pytest.raises(ConfigError, match="use one of them"):
        ModelConfig(agent_groups={"a": ["agent_0"]}, per_agent_networks=True)
    with pytest.raises(ConfigError, match=r"model\.agent_groups"):
        ModelConfig(agent_groups={"a": []})
