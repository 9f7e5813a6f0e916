"""Recurrent policies: the learner re-unrolls what the actors computed, from the states they recorded.

With the weights the actors used, the learner's log-probabilities of the recorded actions must equal the
actors' own (float error only) at every decision: across episode ends, time-limit cut-offs and agent exits
inside a rollout, for multi-agent columns and for two step keys, in every SGD pass and minibatch (RLlib's
IMPALA with an LSTM crashed with more than one pass per batch, ray #8616, and its chunk borders inserted a step
mid-episode, ray PR #47132).
"""

import functools

import numpy as np
import pytest
import torch

from maze_impala.actors.actor import ActorSpec
from maze_impala.actors.weights import SharedWeights
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.envs.examples import CoordinationEnv, CuttingEnv
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.impala import learner as learner_module
from maze_impala.impala.batch import stack_step
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.nn.normalize import RunningMeanStd
from maze_impala.nn.torch_acting import numpy_form_of
from maze_impala.play.lineup import Lineup
from maze_impala.testing import CounterEnv, TwoStepEnv, leaving_agents_aec, leaving_agents_parallel

ENVS = {
    "cartpole": "CartPole-v1",  # episodes end (terminated) inside rollouts; the flat fast path
    "counter": CounterEnv,  # time limits: truncated every 5 steps
    "two-step-keys": functools.partial(TwoStepEnv, n_steps=3, end_mid_step_at=2),
    "cutting": CuttingEnv,
    "coordination": CoordinationEnv,  # three agents' columns
    "leaving-parallel": leaving_agents_parallel,  # agents terminate and are truncated one by one
    "leaving-aec": leaving_agents_aec,
}


def _recurrent_setup(env_fn, kind="lstm", acting="numpy", normalize=True, **algorithm):
    env = make_env(env_fn)
    model = ModelConfig(hidden_units=[16], recurrent=kind, recurrent_units=12, normalize_observations=normalize)
    torch.manual_seed(3)
    policy = make_policy(env, model)
    with torch.no_grad():  # a state that matters: large recurrent weights, and logits far from uniform
        for name, p in policy.named_parameters():
            if "core" in name:
                p.mul_(4.0)
        for key in policy.step_keys:
            policy.network(key)._linears[-1].weight.mul_(100.0)
    for stats in (m for m in policy.modules() if isinstance(m, RunningMeanStd)):
        # statistics of a long run: the learner's update of them with one batch moves no log-probability
        stats.count.fill_(1e12), stats.mean.fill_(0.3), stats.var.fill_(2.0)
    critic = make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    config = ImpalaAlgorithmConfig(lr=1e-9, **algorithm)  # steps too small to move any log-probability
    learner = ImpalaLearner(policy, critic, config, EventHub().publisher(MultiStepIMPALAEvents))
    form = numpy_form_of(policy) if acting == "numpy" else None
    spec = ActorSpec(env_fn, Lineup.of(model, numpy_form=form), n_rollout_steps=7, envs_per_actor=3, seed=1)
    return learner, spec.build(0, SharedWeights(policy))


def _recorded_forwards(monkeypatch):
    seen = []
    original = learner_module.impala_loss

    def recording(batches, forward, distributions, *args, **kwargs):
        seen.append({k: (batches[k], forward[k].logits.detach(), distributions[k]) for k in batches})
        return original(batches, forward, distributions, *args, **kwargs)

    monkeypatch.setattr(learner_module, "impala_loss", recording)
    return seen


@pytest.mark.parametrize("env_fn", ENVS.values(), ids=ENVS.keys())
def test_the_learner_recomputes_the_actors_log_probabilities_in_every_pass_and_minibatch(env_fn, monkeypatch):
    learner, actor = _recurrent_setup(env_fn, n_sgd_passes=3, n_sgd_minibatches=2)
    seen, ends = _recorded_forwards(monkeypatch), 0
    for _ in range(6):  # later rollouts start from states carried over from earlier ones
        rollout = actor.rollout()
        ends += sum(int((tr.terminated | tr.truncated).sum()) for tr in rollout.trajectories.values())
        seen.clear()
        learner.step([rollout])
        assert len(seen) == 3 * 2, "every pass over every minibatch"
        for minibatch in seen:
            for batch, logits, distribution in minibatch.values():
                ours = distribution.log_prob(logits, batch.actions)[batch.mask]
                torch.testing.assert_close(ours, batch.behaviour_log_probs[batch.mask], rtol=1e-4, atol=2e-5)
    assert ends > 0, "episodes (or agents) ended inside the rollouts"


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("acting", ["numpy", "torch"])
def test_the_recorded_first_states_are_what_the_log_probabilities_depend_on(kind, acting):
    learner, actor = _recurrent_setup(CounterEnv, kind, acting, normalize=False)
    for _ in range(3):
        rollout = actor.rollout()
    batch = stack_step([rollout], 0, learner.device)
    assert all(np.abs(v).max() > 0.01 for v in rollout.trajectories[0].initial_state.values())
    with torch.no_grad():
        ours = learner._anchor({0: batch}, {0: learner.policy.distribution(0)}, False).log_probs[0]
        torch.testing.assert_close(ours, batch.behaviour_log_probs, rtol=1e-4, atol=2e-5)
        zeroed = {k: torch.zeros_like(v) for k, v in batch.initial_state.items()}
        unrolled = learner.policy.unroll(0, batch.observations, zeroed, batch.first, batch.agent_ids)
        wrong = learner.policy.distribution(0).log_prob(unrolled.logits, batch.actions)
    assert (wrong - batch.behaviour_log_probs).abs().max() > 1e-3, "the state matters: the test can fail"


def test_a_truncated_decision_bootstraps_from_the_memory_it_ended_with():
    learner, actor = _recurrent_setup(CounterEnv, normalize=False)
    actor.rollout()
    rollout = actor.rollout()  # CounterEnv truncates every 5 steps
    batch = stack_step([rollout], 0, learner.device)
    t, col = (int(v) for v in batch.truncated_index[0])
    with torch.no_grad():
        rewards = learner._rewards_with_truncation(0, batch)
        # by hand: unroll the column alone up to and including decision t, then step the core on the final obs
        policy, state = learner.policy, {k: v[col : col + 1] for k, v in batch.initial_state.items()}
        net = policy.network(0)
        for row in range(t + 1):
            x = net.features({k: v[row, col : col + 1] for k, v in batch.observations.items()}, 1)
            _, state = net.core.step(x, state)
        final = {k: v[0:1] for k, v in batch.truncated_observations.items()}
        memory = net.core.step(net.features(final, 1), state)[0]
        value = learner.critic.values(0, final, 1, memory=memory)
    torch.testing.assert_close(rewards[t, col], batch.rewards[t, col] + learner.config.gamma * value[0])


def test_a_recurrent_policy_with_the_delta_critic_is_refused():
    from maze_impala.config import ConfigError

    with pytest.raises(ConfigError, match=r"model\.critic=delta"):
        ModelConfig(recurrent="lstm", critic="delta")
