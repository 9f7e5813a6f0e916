"""The training loop: evaluation per epoch, best model, early stopping, reproducibility."""

import math
import time

import pytest
import torch

from maze_impala import ImpalaAlgorithmConfig, ModelConfig, OutputConfig, Player, RunnerConfig, train
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config import TrainingConfig
from maze_impala.config.evaluation import RolloutEvaluatorConfig
from maze_impala.events.interfaces import RunEvents
from maze_impala.events.stats import StatKey
from maze_impala.train.setup import build_trainer
from maze_impala.train.state import TrainerState

EVAL_EPISODES = RolloutEvaluatorConfig().n_episodes  # the shipped evaluation's episodes

DEV = RunnerConfig(type="dev")
QUIET = OutputConfig(console=False, tensorboard=False)
SMALL = dict(epoch_length=3, envs_per_actor=4, n_rollout_steps=16, num_actors=2)


def test_patience_stops_early_on_ties_and_the_best_model_is_the_newest_tie(tmp_path):
    # lr ~ 0: the deterministic evaluation (fixed seeds) returns the same score every epoch,
    # so after the first epoch nothing improves and patience=2 stops training after epoch 3;
    # each tie replaces model_best.pt, so it holds epoch 3.
    algorithm = ImpalaAlgorithmConfig(n_epochs=10, patience=2, lr=1e-12, **SMALL)
    still = ModelConfig(normalize_observations=False)  # nor observation statistics that move
    result = train("CartPole-v1", algorithm, still, runner=DEV, output=QUIET, seed=3, output_dir=tmp_path)
    assert result.epochs == 3 and result.stopped_early
    evals = result.column("eval/EpisodeEvents/episode_return/mean")
    assert len(evals) == 3 and evals[0] == evals[1] == evals[2] == result.best_eval_return
    assert read_checkpoint(tmp_path / "model_best.pt")["epoch"] == 3
    last = read_checkpoint(tmp_path / "model_last.pt")
    assert last["epoch"] == 3 and last["version"] == 9 and last["env_steps"] == result.env_steps
    assert {"policy", "critic", "optimizer", "config"} <= set(last)


def test_a_target_score_stops_at_the_first_evaluation_that_reaches_it_and_saves_it(tmp_path):
    # The same frozen policy as above scores the same every epoch: a target at its score stops after epoch 1, a
    # target just above it never stops the run.
    frozen, still = dict(n_epochs=3, lr=1e-12, **SMALL), ModelConfig(normalize_observations=False)
    first = train(
        "CartPole-v1",
        ImpalaAlgorithmConfig(**frozen),
        still,
        runner=DEV,
        output=QUIET,
        seed=3,
        output_dir=tmp_path / "all",
    )
    score = first.best_eval_return
    reached = train(
        "CartPole-v1",
        ImpalaAlgorithmConfig(target_score=score, **frozen),
        still,
        runner=DEV,
        output=QUIET,
        seed=3,
        output_dir=tmp_path / "reached",
    )
    assert reached.epochs == 1 and reached.stopped_early and reached.best_eval_return == score
    assert read_checkpoint(tmp_path / "reached" / "model_last.pt")["epoch"] == 1
    above = train(
        "CartPole-v1",
        ImpalaAlgorithmConfig(target_score=score + 0.5, **frozen),
        still,
        runner=DEV,
        output=QUIET,
        seed=3,
        output_dir=tmp_path / "above",
    )
    assert above.epochs == 3 and not above.stopped_early


def test_every_epoch_is_evaluated_and_counted(tmp_path):
    algorithm = ImpalaAlgorithmConfig(n_epochs=2, **SMALL)
    result = train("CartPole-v1", algorithm, runner=DEV, output=QUIET, seed=0, output_dir=tmp_path)
    assert result.epochs == 2 and not result.stopped_early
    assert result.env_steps == algorithm.total_env_steps == 2 * 3 * 1 * 4 * 16  # epochs x updates x batch x envs x T
    assert result.column("eval/EpisodeEvents/episode_return/count") == [float(EVAL_EPISODES)] * 2
    assert all(not math.isnan(x) for x in result.column("train/EpisodeEvents/episode_return/mean"))


def test_same_seed_same_result_with_the_sequential_backend(tmp_path):
    algorithm = ImpalaAlgorithmConfig(n_epochs=2, **SMALL)
    model = ModelConfig(hidden_units=[32])
    runs = [train("CartPole-v1", algorithm, model, DEV, 11, tmp_path / str(i), output=QUIET) for i in range(2)]
    train("CartPole-v1", algorithm, model, DEV, output=QUIET, seed=12, output_dir=tmp_path / "other")
    timing = ("time_", "per_second", "seconds", "waiting")  # how long things took: the machine's, not the seed's
    deterministic = [c for c in runs[0].history[0] if not any(word in c for word in timing)]
    for column in deterministic:
        assert runs[0].column(column) == runs[1].column(column), column
    a, b, c = (read_checkpoint(tmp_path / d / "model_last.pt")["policy"] for d in ("0", "1", "other"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("burn_in", [1])
def test_critic_burn_in_epochs_train_only_the_critic(tmp_path, burn_in):
    algorithm = ImpalaAlgorithmConfig(n_epochs=2, critic_burn_in_epochs=burn_in, **SMALL)
    result = train("CartPole-v1", algorithm, runner=DEV, output=QUIET, seed=0, output_dir=tmp_path)
    grad_norms = result.column("train/MultiStepIMPALAEvents/policy_grad_norm/mean/step_key=0")
    assert math.isnan(grad_norms[0]) and grad_norms[1] > 0, "no policy update in the burn-in epoch"
    assert result.column("train/MultiStepIMPALAEvents/critic_grad_norm/mean/critic_key=0")[0] > 0


def test_a_run_with_an_env_class_can_be_reloaded(tmp_path):
    from maze_impala import load_policy
    from maze_impala.testing import CounterEnv

    train(CounterEnv, ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    record = read_checkpoint(tmp_path / "model_last.pt")["config"]
    assert record["env"] == {"_target_": "maze_impala.testing.CounterEnv"}
    policy, env = load_policy(tmp_path / "model_last.pt")
    obs, _ = env.reset(seed=0)
    assert env.action_spaces_dict[0].contains(Player(policy, deterministic=False)(obs, env.actor_id()))


def test_elapsed_seconds_count_from_the_set_up_so_a_run_s_time_includes_its_start_up(tmp_path):
    # The time to a return is a user's wait: from the call of train, the actors' start-up included. The set-up
    # here is stretched by a pause between building the trainer and training; the first epoch's elapsed_seconds
    # must hold both, and no more than the whole.
    config = TrainingConfig("CartPole-v1", ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET)
    before = time.perf_counter()
    trainer = build_trainer(config, tmp_path)
    assert before <= trainer.started <= time.perf_counter()
    time.sleep(0.5)
    result = trainer.train()
    whole = time.perf_counter() - before
    elapsed = result.column(StatKey.of(RunEvents.elapsed_seconds, "last", "train").column())
    assert 0.5 < elapsed[0] <= whole


def test_a_tied_evaluation_keeps_the_newer_model_but_only_a_better_one_resets_the_patience():
    state = TrainerState()
    assert state.record(1, 0.5, {}) and state.epochs_since_best == 0
    assert not state.record(2, 0.25, {}) and state.epochs_since_best == 1
    assert state.record(3, 0.5, {}) and state.epochs_since_best == 2  # a tie: model_best.pt is this epoch's
    assert state.record(4, 1.0, {}) and state.epochs_since_best == 0 and state.best_eval_return == 1.0
