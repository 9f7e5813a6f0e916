"""The usage example of core.py's docstring is true: it runs as written."""

import re

import maze_impala.core
from maze_impala.actors.actor import ActorSpec
from maze_impala.config import ImpalaAlgorithmConfig, ModelConfig
from maze_impala.core import Learner, WeightPublisher, WeightSource
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub
from maze_impala.impala.events import MultiStepIMPALAEvents
from maze_impala.impala.learner import ImpalaLearner
from maze_impala.nn.critics import make_critic
from maze_impala.nn.models import make_policy
from maze_impala.play.lineup import Lineup


def test_the_docstring_loop_runs_and_trains():
    example = re.search(r"::\n\n(.*?)\n\n[A-Z]", maze_impala.core.__doc__, flags=re.S).group(1)
    model = ModelConfig(hidden_units=[16])
    env = make_env("CartPole-v1")
    policy, critic = make_policy(env, model), make_critic(env.observation_spaces_dict, env.agent_counts_dict, model)
    learner = ImpalaLearner(policy, critic, ImpalaAlgorithmConfig(), EventHub().publisher(MultiStepIMPALAEvents))
    spec = ActorSpec("CartPole-v1", Lineup.of(model), n_rollout_steps=8, envs_per_actor=4, seed=0)
    names = {"learner": learner, "spec": spec}
    exec(compile("\n".join(line[4:] for line in example.splitlines()), "core.py docstring", "exec"), names)
    assert learner.version == 4 and names["weights"].version() == 4
    assert isinstance(learner, Learner)
    assert isinstance(names["weights"], WeightSource) and isinstance(names["weights"], WeightPublisher)
