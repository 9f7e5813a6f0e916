"""Resume: a run continues from its last checkpoint, with its optimizer, schedule, counters and tables; one run per
directory; a SIGKILL at any moment leaves loadable checkpoints and a run that resumes without a gap or a duplicate."""

import os
import random
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from clitools import maze_run, run_cli

from maze_impala import ConfigError, ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, train
from maze_impala.checkpoints import read_checkpoint
from maze_impala.config.evaluation import RolloutEvaluatorConfig
from maze_impala.events.api import last
from maze_impala.events.stats import StatKey
from maze_impala.files import RunDirInUseError, RunDirLock
from maze_impala.impala.events import MultiStepIMPALAEvents

EVAL_EPISODES = RolloutEvaluatorConfig().n_episodes  # the shipped evaluation's episodes

SMALL = dict(epoch_length=4, envs_per_actor=2, n_rollout_steps=8, num_actors=1)
QUIET = OutputConfig(console=False, tensorboard=True, progress=False, plot=False)
DEV = RunnerConfig("dev")
LR = StatKey.of(MultiStepIMPALAEvents.learning_rate, last).column()


def test_a_resumed_run_continues_its_counters_schedule_optimizer_and_tables(tmp_path):
    algorithm = ImpalaAlgorithmConfig(n_epochs=2, **SMALL)
    train("CartPole-v1", algorithm, runner=DEV, output=QUIET, seed=5, output_dir=tmp_path)
    first = read_checkpoint(tmp_path / "model_last.pt")
    longer = ImpalaAlgorithmConfig(n_epochs=5, **SMALL)  # n_epochs may change: the schedule stretches
    result = train("CartPole-v1", longer, runner=DEV, output=QUIET, seed=5, resume_from=tmp_path)
    last_checkpoint = read_checkpoint(tmp_path / "model_last.pt")
    assert result.epochs == 5 and len(result.history) == 5
    assert last_checkpoint["version"] == 5 * 4 and last_checkpoint["epoch"] == 5
    # Adam's step count (n_sgd_passes x n_sgd_minibatches per update) continues from the first run's, not from zero
    passes = algorithm.n_sgd_passes * algorithm.sgd_minibatches  # 2 envs: 2 minibatches
    steps = [s["step"] for s in last_checkpoint["optimizer"]["state"].values()]
    assert all(int(step) == 20 * passes for step in steps)
    assert int(next(iter(first["optimizer"]["state"].values()))["step"]) == 8 * passes
    stats = pd.read_csv(tmp_path / "stats.csv")
    assert stats["epoch"].tolist() == [1, 2, 3, 4, 5]
    per_epoch = 4 * 2 * 8
    assert stats["env_steps"].tolist() == [per_epoch * e for e in range(1, 6)]
    # the learning rate continues from update 8 (the resumed schedule spans 5 epochs of 4 updates)
    lr = algorithm.lr
    expected = [lr * (1 - (4 * e - 1) / 8) for e in (1, 2)] + [lr * (1 - (4 * e - 1) / 20) for e in (3, 4, 5)]
    assert stats[LR].tolist() == pytest.approx(expected)
    kpis = pd.read_csv(tmp_path / "kpis.csv")
    assert sorted(set(kpis["epoch"])) == [1, 2, 3, 4, 5] and len(kpis) == 5 * EVAL_EPISODES


def test_a_resume_that_changes_what_the_run_learns_is_refused(tmp_path):
    train("CartPole-v1", ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    changed = ImpalaAlgorithmConfig(n_epochs=2, **SMALL | {"epoch_length": 5}, lr=0.01)
    with pytest.raises(ConfigError, match=r"algorithm.epoch_length: 4 in the run, 5 now; algorithm.lr: 0.001 in the"):
        train("CartPole-v1", changed, runner=DEV, output=QUIET, resume_from=tmp_path)
    with pytest.raises(ConfigError, match=r"nothing: there is no such directory"):
        train("CartPole-v1", changed, runner=DEV, output=QUIET, resume_from=tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"holds no model_last\.pt"):
        train("CartPole-v1", changed, runner=DEV, output=QUIET, resume_from=tmp_path / "empty")
    same = ImpalaAlgorithmConfig(n_epochs=1, **SMALL)  # n_epochs is the run's total: 1 is done already
    with pytest.raises(ConfigError, match=r"algorithm.n_epochs=1: the run has trained 1 epoch already"):
        train("CartPole-v1", same, runner=DEV, output=QUIET, resume_from=tmp_path)


def test_a_run_of_an_earlier_release_resumes_when_the_keys_added_since_keep_their_defaults(tmp_path):
    from maze_impala.config import TrainingConfig
    from maze_impala.config.base import to_record
    from maze_impala.train.rundir import check_resumable

    current = to_record(TrainingConfig())
    earlier = to_record(TrainingConfig())
    del earlier["algorithm"]["entropy_schedule"], earlier["algorithm"]["opponent_pool"]  # keys it did not have
    assert set(check_resumable(earlier, current, tmp_path)) == {
        "algorithm.entropy_schedule",
        "algorithm.opponent_pool.size",
        "algorithm.opponent_pool.snapshot_every",
        "algorithm.opponent_pool.draw",
    }
    current["algorithm"]["entropy_schedule"] = "linear"  # a new key away from its default changes the run
    with pytest.raises(ConfigError, match=r"algorithm.entropy_schedule: absent in the run, 'linear' now"):
        check_resumable(earlier, current, tmp_path)
    earlier["algorithm"]["lr"] = None  # a key the run recorded keeps its value, null included
    with pytest.raises(ConfigError, match=r"algorithm.lr: None in the run, 0.001 now"):
        check_resumable(earlier, to_record(TrainingConfig()), tmp_path)


def test_a_run_of_an_earlier_release_resumes_with_its_own_values_where_the_defaults_moved(tmp_path):
    """Its gamma, recorded, and the advantages it never normalised (a key it lacks whose default is not the
    behaviour before it) are kept where the command line leaves today's defaults; a value given is refused."""
    from dataclasses import replace

    from maze_impala.config import TrainingConfig
    from maze_impala.config.base import to_record
    from maze_impala.train.resolve import with_values
    from maze_impala.train.rundir import check_resumable, run_values

    earlier = to_record(TrainingConfig())
    earlier["algorithm"]["gamma"] = 0.9
    del earlier["algorithm"]["normalize_advantages"]
    assert run_values(earlier, to_record(TrainingConfig())) == {
        "algorithm.gamma": 0.9,
        "algorithm.normalize_advantages": False,
    }
    resumed = with_values(TrainingConfig(), run_values(earlier, to_record(TrainingConfig())))
    assert resumed.algorithm.gamma == 0.9 and resumed.algorithm.normalize_advantages is False
    assert check_resumable(earlier, to_record(resumed), tmp_path) == {"algorithm.normalize_advantages": (None, False)}
    given = TrainingConfig(algorithm=replace(TrainingConfig().algorithm, gamma=0.95))
    with pytest.raises(ConfigError, match=r"algorithm.gamma: 0.9 in the run, 0.95 now"):
        check_resumable(earlier, to_record(with_values(given, run_values(earlier, to_record(given)))), tmp_path)


def test_a_second_run_in_a_directory_in_use_is_refused_naming_the_holder(tmp_path):
    with RunDirLock(tmp_path):
        with pytest.raises(RunDirInUseError, match=rf"in use by another run \(pid {os.getpid()}\)"):
            train(
                "CartPole-v1", ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET, output_dir=tmp_path
            )
    train("CartPole-v1", ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)


def test_a_clean_finish_leaves_no_lock_file_and_a_relocked_directory_stays_exclusive(tmp_path):
    from maze_impala.run_files import LOCK_FILE

    train("CartPole-v1", ImpalaAlgorithmConfig(n_epochs=1, **SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    assert not (tmp_path / LOCK_FILE).exists()
    first = RunDirLock(tmp_path).acquire()
    with pytest.raises(RunDirInUseError):
        RunDirLock(tmp_path).acquire()
    first.release()
    assert not (tmp_path / LOCK_FILE).exists()
    with RunDirLock(tmp_path), pytest.raises(RunDirInUseError):
        RunDirLock(tmp_path).acquire()


def test_a_lock_of_a_killed_run_does_not_block_the_next(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from maze_impala.files import RunDirLock; import time; "
            f"RunDirLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirInUseError, match=f"pid {holder.pid}"):
            RunDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    RunDirLock(tmp_path).acquire().release()


CARTPOLE = [
    "-cn",
    "conf_train",
    "algorithm=impala_cartpole",
    "algorithm.n_epochs=8",
    "runner=dev",
    "seed=1",
    "output.console=false",
    "output.tensorboard=false",
    "output.plot=false",
]
"""A third of the shipped updates (CartPole reaches 475 in the first few epochs): the suite's time."""


def _kill_during_training(out, rng, resume):
    """Start (or resume) the run, SIGKILL it at a random moment after its first checkpoint, or while it writes one."""
    args = [*CARTPOLE, f"resume={out}"] if resume else [*CARTPOLE, f"hydra.run.dir={out}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "maze_impala", *args],
        cwd=out.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        epoch0 = read_checkpoint(out / "model_last.pt")["epoch"] if resume else 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "model_last.pt").exists() and read_checkpoint(out / "model_last.pt")["epoch"] > epoch0:
                break
            time.sleep(0.05)
        writing = False
        until = time.monotonic() + rng.uniform(0.0, 3.0)
        while time.monotonic() < until and proc.poll() is None:  # kill at once if a checkpoint write is seen
            if any(p.name.startswith(".model_") for p in out.iterdir()):
                writing = True
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    return writing


@pytest.mark.slow
def test_sigkill_and_resume_continue_the_run_as_if_uninterrupted(tmp_path):
    out, rng = tmp_path / "run", random.Random(7)
    out.mkdir()
    for kill in range(3):
        _kill_during_training(out, rng, resume=kill > 0)
        for name in ("model_last.pt", "model_best.pt"):  # whatever the moment, both always load
            assert read_checkpoint(out / name)["version"] >= 0
    proc = run_cli([*CARTPOLE, f"resume={out}"], cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    stats = pd.read_csv(out / "stats.csv")
    algorithm = ImpalaAlgorithmConfig(eps=1e-3, n_epochs=8)
    epochs = list(range(1, algorithm.n_epochs + 1))
    assert stats["epoch"].tolist() == epochs  # no gap, no duplicate
    assert stats["env_steps"].tolist() == [e * algorithm.epoch_length * 32 * 32 for e in epochs]
    lr = [algorithm.lr * (1 - (e * algorithm.epoch_length - 1) / algorithm.total_updates) for e in epochs]
    assert stats[LR].tolist() == pytest.approx(lr)  # the schedule continued across every resume
    returns = stats["train/EpisodeEvents/episode_return/mean"]
    assert returns.max() >= 475, f"mean training return per epoch: {returns.round().tolist()}"
    assert read_checkpoint(out / "model_last.pt")["version"] == algorithm.total_updates
    kpis = pd.read_csv(out / "kpis.csv")
    assert kpis.groupby("epoch").size().tolist() == [EVAL_EPISODES] * algorithm.n_epochs


PLAIN = [
    "-cn",
    "conf_train",
    "runner=dev",
    "algorithm.n_epochs=1",
    "algorithm.epoch_length=3",
    "algorithm.envs_per_actor=4",
    "algorithm.patience=7",
    "algorithm.rollout_evaluator.n_episodes=2",
    "output.tensorboard=false",
    "output.plot=false",
    "output.console=false",
]
"""A one-epoch run whose settings differ from the defaults in keys a resume may change (n_epochs, patience, the
runner) and in keys it may not (epoch_length, envs_per_actor)."""


@pytest.mark.slow
def test_a_resume_that_names_no_setting_takes_every_one_from_the_run(tmp_path):
    """A finished run is refused (no epoch left), not trained on to the shipped n_epochs; an interrupted one
    trains to its own total with its own runner and patience."""
    import yaml

    from maze_impala.checkpoints import save_checkpoint

    out = tmp_path / "run"
    proc = run_cli([*PLAIN, f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    before = (out / "config.yaml").read_text()
    proc = maze_run(tmp_path, "-cn conf_train", f"resume={out}")
    assert proc.returncode == 2, proc.stderr
    assert "algorithm.n_epochs=1: the run has trained 1 epoch already" in proc.stderr
    assert (out / "config.yaml").read_text() == before and pd.read_csv(out / "stats.csv")["epoch"].tolist() == [1]
    # the same run as if it had been started for 3 epochs and stopped after its first
    state = read_checkpoint(out / "model_last.pt")
    state["config"]["algorithm"]["n_epochs"] = 3
    save_checkpoint(out / "model_last.pt", state)
    proc = maze_run(tmp_path, "-cn conf_train", f"resume={out}")
    assert proc.returncode == 0, proc.stderr
    assert pd.read_csv(out / "stats.csv")["epoch"].tolist() == [1, 2, 3]
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["algorithm"]["n_epochs"] == 3 and config["algorithm"]["patience"] == 7
    assert config["runner"]["type"] == "dev" and config["algorithm"]["epoch_length"] == 3
    # a value given still wins where a resume may change it, the default included
    proc = maze_run(tmp_path, "-cn conf_train", f"resume={out}", "algorithm.n_epochs=4", "algorithm.patience=0")
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["algorithm"]["n_epochs"] == 4 and config["algorithm"]["patience"] == 0


def test_the_keys_a_command_line_gives():
    from maze_impala.train.rundir import given_keys

    overrides = ["algorithm.lr=0.1", "+env.after=3", "env=cutting", "hydra.run.dir=x", "~model.networks", "seed=2"]
    assert given_keys(overrides) == {"algorithm.lr", "env.after", "env", "model.networks", "seed"}
