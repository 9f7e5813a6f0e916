"""Every episode ends: an env without a time limit of its own has its episodes cut at ``max_episode_steps``, in
training, evaluation, the rollout CLI and games; an env's own limit is kept; the console says so once.

Every test bounds its episodes by steps (the cap), never by the clock.
"""

import csv

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from clitools import TINY, run_cli

from maze_impala.actors.actor import PlayProgress, RolloutActor
from maze_impala.config import ConfigError, RolloutConfig, TrainingConfig
from maze_impala.envs.factory import make_env
from maze_impala.events.api import EventHub, sum_
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.events.stats import StatKey
from maze_impala.play.spec import PolicySpec, load_acting
from maze_impala.testing import CounterEnv, EndlessEnv
from maze_impala.train.watch import EpisodeWatch

ENDLESS = "env._target_=maze_impala.testing.EndlessEnv"
EVAL_TRUNCATED = StatKey.of(EpisodeEvents.episode_truncated, sum_, "eval").column()


def _player(envs, cap):
    return RolloutActor(
        envs, None, load_acting(PolicySpec.random(), envs[0]), 16, seed=0, stepping="general", max_episode_steps=cap
    )


def test_an_endless_env_plays_episodes_of_the_cap_each_marked_truncated():
    envs = [make_env(EndlessEnv()) for _ in range(2)]
    seen: list[PlayProgress] = []
    results = _player(envs, 40).play([(i, i) for i in range(3)], on_progress=seen.append)
    assert [r.steps for r in results] == [40, 40, 40]
    assert all(r.truncated and r.capped for r in results)
    assert [row["truncated"] for row in (r.kpi_row() for r in results)] == [1, 1, 1]
    assert seen[-1] == PlayProgress(3, 3, 40) and all(p.longest <= 40 for p in seen)


def test_an_env_with_a_time_limit_of_its_own_keeps_it():
    gym.register("maze-test/Counter-v0", entry_point=lambda: CounterEnv(limit=2**62), max_episode_steps=30)
    try:
        envs = [make_env("maze-test/Counter-v0")]
        assert envs[0].time_limit == 30
        results = _player(envs, 5).play([(0, 0)])
    finally:
        gym.registry.pop("maze-test/Counter-v0")
    assert results[0].steps == 30 and results[0].truncated and not results[0].capped


def test_training_episodes_of_an_endless_env_end_at_the_cap_on_the_fast_path():
    envs = [make_env(EndlessEnv()) for _ in range(3)]
    actor = RolloutActor(envs, None, load_acting(PolicySpec.random(), envs[0]), 32, seed=0, max_episode_steps=10)
    assert type(actor.stepping).__name__ == "FlatStepping"
    rollout = actor.rollout()
    lengths = [r.values["value"] for r in rollout.events if r.event == "episode_length"]
    truncated = [r.values["value"] for r in rollout.events if r.event == "episode_truncated"]
    assert lengths == [10] * 9 and truncated == [1] * 9  # 3 envs, 32 steps: 3 whole episodes each
    trajectory = rollout.trajectories[0]
    assert trajectory.truncated[:, 0].nonzero()[0].tolist() == [9, 19, 29]
    assert not trajectory.terminated.any()
    obs = trajectory.observations["observation"][:, 0, 0]
    assert obs[10] == 0 and obs[9] == 9, "a new episode starts after the cap"


def test_the_cap_is_validated():
    with pytest.raises(ConfigError, match="max_episode_steps must be null or an int >= 1"):
        TrainingConfig(max_episode_steps=0)
    with pytest.raises(ConfigError, match="max_episode_steps"):
        RolloutConfig(policy={"type": "random"}, env="CartPole-v1", max_episode_steps=1.5)


def test_training_without_ending_episodes_says_so_once_naming_the_key():
    said: list[str] = []
    watch = EpisodeWatch(n_envs=4, rollout_steps=8, cap=27_000, say=said.append)

    for _ in range(40):
        watch.stepped(32)  # no episode's events heard
    assert len(said) == 1 and "no training episode has ended in the last 640 env steps" in said[0]
    heard: list[str] = []
    ending = EpisodeWatch(n_envs=4, rollout_steps=8, cap=27_000, say=heard.append)
    hub = EventHub()
    hub.listeners.append(ending)
    for _ in range(40):
        hub.publisher(EpisodeEvents).episode_length(value=50)  # an episode ended in every batch
        ending.stepped(32)
    assert heard == [] and ending.quiet_steps == 0
    assert "max_episode_steps=27,000" in said[0] and "set max_episode_steps=<steps>" in said[0]


@pytest.mark.slow
def test_training_on_an_endless_env_evaluates_truncated_episodes_and_says_so_once(tmp_path):
    proc = run_cli(
        ["-cn", "conf_train", ENDLESS, "runner=dev", "max_episode_steps=200", *TINY, f"hydra.run.dir={tmp_path}"],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    stats = pd.read_csv(tmp_path / "stats.csv")
    assert stats[EVAL_TRUNCATED].tolist() == [2, 2]
    with open(tmp_path / "kpis.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(r["epoch"], r["steps"], r["truncated"]) for r in rows] == [
        ("1", "200", "1"),
        ("1", "200", "1"),
        ("2", "200", "1"),
        ("2", "200", "1"),
    ]
    log = (tmp_path / "train.log").read_text()
    assert log.count("2 of 2 evaluation episodes reached max_episode_steps=200 without ending") == 1, log


@pytest.mark.slow
def test_the_rollout_cli_on_an_endless_env_writes_every_episode_truncated(tmp_path):
    proc = run_cli(
        [
            "-cn",
            "conf_rollout",
            "policy=random_policy",
            ENDLESS,
            "n_episodes=3",
            "max_episode_steps=300",
            f"hydra.run.dir={tmp_path}",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert kpis["steps"].tolist() == [300] * 3 and kpis["truncated"].tolist() == [1] * 3
    assert proc.stdout.count("3 of 3 episodes reached max_episode_steps=300") == 1, proc.stdout


def test_a_slow_evaluation_is_reported_once_with_its_progress():
    said: list[str] = []
    clock = iter(np.arange(0.0, 1000.0, 50.0))
    watch = EpisodeWatch(n_envs=4, rollout_steps=8, cap=1000, say=said.append, clock=lambda: float(next(clock)))
    watch.evaluation_start(training_seconds=10.0)
    parts = [watch.evaluating(PlayProgress(done, 8, 100 * done)) for done in range(4)]
    assert parts[1] == "evaluating: 1/8 episodes, the longest 100 steps"
    assert len(said) == 1 and "the evaluation has run 100 s, 10x the epoch's training: 1/8 episodes" in said[0]
    assert "max_episode_steps=1,000" in said[0]


def test_an_interrupted_rollout_writes_the_episodes_it_played(tmp_path):
    from maze_impala.config import RolloutRunnerConfig
    from maze_impala.config.run import PolicyConfig
    from maze_impala.evaluate.rollout import rollout

    env = {"_target_": "maze_impala.testing.InterruptedEnv"}
    config = RolloutConfig(
        policy=PolicyConfig(type="random"),
        env=env,
        n_episodes=5,
        runner=RolloutRunnerConfig("dev", envs_per_process=1),
        progress=False,
    )
    with pytest.raises(KeyboardInterrupt):
        rollout(config, tmp_path)
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert kpis["episode_id"].tolist() == [0, 1] and kpis["steps"].tolist() == [5, 5]
    assert (tmp_path / "stats.csv").is_file()
