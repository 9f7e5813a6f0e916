"""Per-step learning: exact V-trace on padded columns, masks, the three critics, per-agent networks."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.examples import CoordinationEnv
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.events.stats import StatsAggregator, by_column
from maze_impala.impala.batch import stack_step
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.impala.losses import impala_loss
from maze_impala.impala.vtrace import vtrace
from maze_impala.nn.acting import StreamNoise
from maze_impala.nn.critics import DeltaStateCritic, SharedStateCritic, make_critic
from maze_impala.nn.models import StructuredPolicy, make_policy
from maze_impala.nn.networks import PerAgentNet
from maze_impala.play.lineup import Lineup
from maze_impala.testing import TwoStepEnv

MODEL = ModelConfig(hidden_units=[16], normalize_observations=False)
PREFIX = "train/MultiStepIMPALAEvents/"


def test_vtrace_on_an_edge_padded_column_equals_vtrace_on_the_column_alone():
    torch.manual_seed(1)
    T, L = 6, 3  # column 1 holds only L decisions
    log_rhos, rewards = 0.3 * torch.randn(T, 2), torch.randn(T, 2)
    discounts = 0.9 * (torch.rand(T, 2) > 0.2).float()
    values = torch.randn(T + 1, 2)
    mask = torch.ones(T, 2, dtype=torch.bool)
    mask[L:, 1] = False
    values[L + 1 :, 1] = values[L, 1]  # rows after the bootstrap row repeat it (Trajectory.padded)
    padded = vtrace(
        log_rhos=torch.where(mask, log_rhos, 0.0),
        discounts=torch.where(mask, discounts, 1.0),
        rewards=torch.where(mask, rewards, 0.0),
        values=values[:-1],
        bootstrap_value=values[-1],
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
        lambda_=0.95,
    )
    alone = vtrace(
        log_rhos=log_rhos[:L, 1:],
        discounts=discounts[:L, 1:],
        rewards=rewards[:L, 1:],
        values=values[:L, 1:],
        bootstrap_value=values[L, 1:],
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
        lambda_=0.95,
    )
    torch.testing.assert_close(padded.vs[:L, 1:], alone.vs)
    torch.testing.assert_close(padded.pg_advantages[:L, 1:], alone.pg_advantages)
    torch.testing.assert_close(padded.vs[L:, 1], values[L:T, 1])  # padding learns nothing


def _learner(env_fn, model=MODEL, n_envs=2, n_steps=4, **overrides):
    env = make_env(env_fn)
    policy = make_policy(env, model)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    hub = EventHub()
    stats = StatsAggregator("train", [MultiStepIMPALAEvents])
    hub.listeners.append(stats)
    hand = {  # the hand computations', in the env's units
        "n_sgd_minibatches": 1,
        "vtrace_lambda": 1.0,
        "normalize_advantages": False,
        "value_normalization": "off",
    }
    config = ImpalaAlgorithmConfig(**{**hand, **overrides})
    learner = ImpalaLearner(policy, critic, config, hub.publisher(MultiStepIMPALAEvents))
    actor = ActorSpec(env_fn, Lineup.of(model), n_steps, n_envs, seed=0).build(0, SharedWeights(policy))
    return learner, actor, stats


def test_each_step_key_learns_from_its_own_vtrace_targets_with_separate_gradient_norms():
    learner, actor, stats = _learner(  # one minibatch: the loss of the whole batch is the one reported
        lambda: TwoStepEnv(n_steps=3, end_mid_step_at=1), n_envs=1, n_steps=3, gamma=0.9, n_sgd_minibatches=1
    )
    rollouts = [actor.rollout(), actor.rollout()]
    batch = stack_step(rollouts, "b", learner.device)
    assert not batch.mask.all()  # "b" columns of different lengths were padded
    values = learner.critic.values("b", batch.observations, batch_dims=2).detach()
    expected = []
    for col in range(batch.mask.shape[1]):  # V-trace of every column over its own decisions only
        n = int(batch.mask[:, col].sum())
        logits = learner.policy.logits("b", {"x": batch.observations["x"][:n, col]})
        log_pi = learner.policy.distribution("b").log_prob(logits, {"u": batch.actions["u"][:n, col]}).detach()
        done = batch.terminated[:n, col]
        result = vtrace(
            log_rhos=(log_pi - batch.behaviour_log_probs[:n, col])[:, None],
            discounts=(0.9 * (~done).float())[:, None],
            rewards=batch.rewards[:n, col : col + 1],
            values=values[:n, col : col + 1],
            bootstrap_value=values[n, col : col + 1],
            clip_rho_threshold=1.0,
            clip_pg_rho_threshold=1.0,
        )
        expected.append((result.vs[:, 0] - values[:n, col]).pow(2))
    learner.step(rollouts)
    row = by_column(stats.reduce())
    torch.testing.assert_close(
        row[PREFIX + "critic_value_loss/mean/critic_key=b"], 0.5 * torch.cat(expected).mean().item()
    )
    for key in ("a", "b"):
        assert row[PREFIX + f"policy_grad_norm/mean/step_key={key}"] > 0
        assert row[PREFIX + f"critic_grad_norm/mean/critic_key={key}"] > 0
        assert np.isfinite(row[PREFIX + f"policy_loss/mean/step_key={key}"])
    assert row[PREFIX + "policy_grad_norm/mean/step_key=a"] != row[PREFIX + "policy_grad_norm/mean/step_key=b"]


def _masked_policy(n_actions=4):
    obs = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (2,)), "action_mask": gym.spaces.MultiBinary(n_actions)})
    act = gym.spaces.Dict({"action": gym.spaces.Discrete(n_actions)})
    return StructuredPolicy({0: obs}, {0: act}, MODEL)


def test_masked_actions_are_never_sampled_and_have_zero_probability():
    policy = _masked_policy()
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 1]] * 500, dtype=torch.int8)
    obs = {"x": torch.randn(1000, 2), "action_mask": mask}
    actions, log_probs, _ = policy.act(0, obs, noise=StreamNoise(0))
    assert mask.gather(1, actions["action"][:, None]).all()
    logits = policy.logits(0, obs)
    dist = policy.distribution(0)
    assert dist.log_prob(logits, {"action": torch.ones(1000, dtype=torch.long)}).exp().max() == 0.0
    torch.testing.assert_close(log_probs[1::2], torch.zeros(500))  # one allowed action: probability 1
    torch.testing.assert_close(dist.entropy(logits)[1::2], torch.zeros(500))
    with torch.no_grad():
        policy.networks["0"].body[-1].weight.zero_()
    uniform = policy.logits(0, obs)
    torch.testing.assert_close(dist.entropy(uniform)[0], torch.tensor(np.log(2.0), dtype=torch.float32))


def test_a_fully_masked_action_head_is_a_clear_error():
    policy = _masked_policy()
    obs = {"x": torch.zeros(2, 2), "action_mask": torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.int8)}
    with pytest.raises(ValueError, match="masks every action"):
        policy.act(0, obs)


def test_the_shared_critic_is_one_network_trained_on_every_sub_step():
    learner, actor, stats = _learner(TwoStepEnv, ModelConfig(hidden_units=[16], critic="shared"))
    assert isinstance(learner.critic, SharedStateCritic)
    obs = {"x": torch.randn(5, 3)}
    assert not torch.allclose(learner.critic.values("a", obs), learner.critic.values("b", obs))  # step key input
    learner.step([actor.rollout()])
    row = by_column(stats.reduce())
    # every critic statistic of the one network under its one name (the mean over the step keys it values)
    for name in ("critic_grad_norm", "critic_value_loss", "critic_value"):
        assert np.isfinite(row[PREFIX + f"{name}/mean/critic_key=shared"]), name
        assert PREFIX + f"{name}/mean/critic_key=a" not in row and PREFIX + f"{name}/mean/critic_key=b" not in row
    assert row[PREFIX + "critic_value_loss/mean/critic_key=shared"] > 0


def test_the_delta_critic_adds_to_the_previous_sub_steps_value_without_training_it():
    learner, actor, stats = _learner(TwoStepEnv, ModelConfig(hidden_units=[16], critic="delta"))
    critic = learner.critic
    assert isinstance(critic, DeltaStateCritic)
    obs_a, obs_b = {"x": torch.randn(5, 3)}, {"x": torch.randn(5, 3)}
    value_b = critic.values("b", obs_b, ancestors={"a": obs_a})
    own_b = critic.networks["b"](obs_b, 1).squeeze(-1)
    torch.testing.assert_close(value_b, critic.values("a", obs_a) + own_b)
    value_b.sum().backward()
    assert all(p.grad is None for p in critic.networks["a"].parameters())
    rollout = actor.rollout()
    b = rollout.trajectories["b"]
    a_obs = rollout.trajectories["a"].observations["x"]
    np.testing.assert_array_equal(b.ancestors["a"]["x"][:-1], a_obs[: b.n_steps])  # same structured step
    learner.step([rollout])
    assert by_column(stats.reduce())[PREFIX + "critic_grad_norm/mean/critic_key=b"] > 0


def test_the_delta_critic_needs_one_agent_per_step_key():
    env = CoordinationEnv()
    with pytest.raises(ValueError, match=r"model\.critic=delta"):
        make_critic(env.observation_spaces_dict, env.agent_counts_dict, ModelConfig(critic="delta"))


def test_per_agent_networks_route_every_entry_to_its_agents_network():
    env = CoordinationEnv()
    policy = make_policy(env, ModelConfig(hidden_units=[8], per_agent_networks=True))
    net = policy.networks["0"]
    assert isinstance(net, PerAgentNet) and len(net.agents) == 3
    obs = {"agent": torch.tensor([[2, 0, 1], [1, 1, 0]]), "blocked": torch.tensor([[0, 1, 2], [3, 3, 3]])}
    agent_ids = torch.tensor([2, 0, 1])  # over the last batch axis (columns)
    out = policy.logits(0, obs, batch_dims=2, agent_ids=agent_ids)
    for col, agent in enumerate(agent_ids.tolist()):
        alone = net.agents[agent]({k: v[:, col] for k, v in obs.items()}, 1)
        torch.testing.assert_close(out[:, col], alone)
    with pytest.raises(ValueError, match="fixed agent count"):
        StructuredPolicy(
            env.observation_spaces_dict, env.action_spaces_dict, ModelConfig(per_agent_networks=True), {0: -1}
        )


def test_per_agent_networks_train_on_their_own_agents_data():
    learner, actor, _stats = _learner(CoordinationEnv, ModelConfig(hidden_units=[8], per_agent_networks=True))
    before = [p.clone() for p in learner.policy.networks["0"].agents[1].parameters()]
    learner.step([actor.rollout()])
    after = list(learner.policy.networks["0"].agents[1].parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


@pytest.mark.parametrize(
    ("case", "env_kwargs", "n_steps"),
    [
        ("default crediting", {"n_steps": 3}, 3),
        ("split rewards", {"n_steps": 3, "split_rewards": True}, 3),
        ("episode ends between the sub-steps", {"n_steps": 3, "end_mid_step_at": 1}, 2),
    ],
)
def test_credit_discounting_and_bootstrapping_across_the_sub_steps_of_one_step_by_hand(case, env_kwargs, n_steps):
    """TwoStepEnv: per structured step, "a" returns 0.5, then "b" returns 1 + u (its action). By default the step's
    reward, 1.5 + u, is credited to both sub-steps' decisions; with split rewards "a" gets 2 and "b" 10 + u. Each
    step key discounts by gamma per structured step and bootstraps from its own next decision: with every value 0,
    its targets are the discounted sums of its own credited rewards, up to its actor's episode end."""
    gamma = 0.9
    learner, actor, _ = _learner(lambda: TwoStepEnv(**env_kwargs), n_envs=1, n_steps=n_steps, gamma=gamma)
    with torch.no_grad():  # V = 0 everywhere
        for network in learner.critic.networks_by_key().values():
            network._linears[-1].weight.zero_(), network._linears[-1].bias.zero_()
    rollout = actor.rollout()
    u = rollout.trajectories["b"].actions["u"][:, 0]
    if case == "default crediting":
        expected = {"a": 1.5 + u, "b": 1.5 + u}
    elif case == "split rewards":
        expected = {"a": np.full(3, 2.0), "b": 10.0 + u}
    else:  # step 0 complete, step 1 ended after "a": "a" was credited what step 1 returned (0.5), "b" never acted
        expected = {"a": np.array([1.5 + u[0], 0.5]), "b": np.array([1.5 + u[0]])}
    for key, rewards in expected.items():
        trajectory = rollout.trajectories[key]
        np.testing.assert_allclose(trajectory.rewards[:, 0], rewards, rtol=1e-6)
        assert trajectory.terminated[-1, 0], f"{key}: the episode ended after its last decision"
        batch = stack_step([rollout], key, learner.device)
        forward = learner._forward(key, batch)
        _, losses = impala_loss({key: batch}, {key: forward}, {key: learner.policy.distribution(key)}, learner.config)
        targets = [sum(gamma**k * r for k, r in enumerate(rewards[t:])) for t in range(len(rewards))]
        value_loss = 0.5 * np.mean(np.square(targets))  # 0.5 mean((v_t - V(x_t))^2) with V = 0
        assert losses[key].value_loss.item() == pytest.approx(value_loss, rel=1e-5), key


def test_a_delta_critics_later_network_normalises_the_change_it_predicts():
    """With value normalisation, each delta network's statistics are of its own targets: the value targets less the
    earlier sub-steps' values, which it adds to."""
    from maze_impala.impala.losses import value_targets

    model = ModelConfig(hidden_units=[16], critic="delta", normalize_observations=False)
    learner, actor, _ = _learner(TwoStepEnv, model, value_normalization="popart")
    rollouts = [actor.rollout()]
    batch = stack_step(rollouts, "b", learner.device)
    forward = learner._forward("b", batch)
    targets = value_targets({"b": batch}, {"b": forward}, {"b": learner.policy.distribution("b")}, learner.config)["b"]
    previous = learner.critic.values("a", batch.ancestors["a"], 2)[:-1].detach()
    own = (targets - previous)[batch.mask].double()
    learner.step(rollouts)
    norm = learner.critic.normalizer("b")
    assert float(norm.mu) == pytest.approx(float(own.mean()), rel=1e-4, abs=1e-6)
    assert float(norm.sigma) == pytest.approx(float(own.std(unbiased=False)), rel=1e-3)
