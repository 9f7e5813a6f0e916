"""Tuning with Hydra's Optuna sweeper and the shipped search space (``hydra/sweeper=impala_search``): a 2-trial study
on CartPole whose objective is each run's final evaluation."""

import pandas as pd
import pytest
import yaml
from clitools import maze_run, run_cli
from columns import EVAL

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")


@pytest.mark.slow
def test_a_two_trial_study_maximises_the_runs_final_evaluation(tmp_path):
    sweep = tmp_path / "study"
    proc = maze_run(
        tmp_path,
        (
            "-cn conf_train -m hydra/sweeper=impala_search hydra.sweeper.n_trials=2 "
            "runner=dev algorithm.n_epochs=2 algorithm.epoch_length=3 "
            "algorithm.envs_per_actor=4 algorithm.rollout_evaluator.n_episodes=2 "
            "output.progress=false"
        ),
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    finals = [pd.read_csv(job / "stats.csv")[EVAL].iloc[-1] for job in sorted(sweep.glob("job_*"))]
    assert len(finals) == 2
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(max(finals))
    assert set(results["best_params"]) >= {"algorithm.lr", "algorithm.gamma", "algorithm.n_sgd_minibatches"}


@pytest.mark.slow
def test_a_study_is_kept_in_its_folder_continued_and_opened(tmp_path):
    """The study's database is in the sweep's folder; the same command with that folder adds trials to it (new job
    folders beside the first), and optuna.load_study opens it; the end names the best configuration's folders."""
    import optuna

    sweep = tmp_path / "study"
    args = [
        "-cn",
        "conf_train",
        "-m",
        "hydra/sweeper=impala_search",
        "hydra.sweeper.n_trials=1",
        "runner=dev",
        "algorithm.n_epochs=1",
        "algorithm.epoch_length=2",
        "algorithm.envs_per_actor=4",
        "algorithm.rollout_evaluator.n_episodes=2",
        "output.progress=false",
        f"hydra.sweep.dir={sweep}",
    ]
    for seed in (1, 2):  # another sampler seed for the second session: other settings to try
        proc = run_cli([*args, f"hydra.sweeper.sampler.seed={seed}"], cwd=tmp_path, timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert "AssertionError" not in proc.stderr and "setup plugin alembic" not in proc.stderr
    assert sorted(p.name for p in sweep.glob("job_*")) == ["job_0", "job_1"]
    study = optuna.load_study(study_name="maze_impala", storage=f"sqlite:///{sweep / 'study.db'}")
    assert len(study.trials) == 2 and study.best_value == max(t.value for t in study.trials)
    summary = pd.read_csv(sweep / "summary.csv")
    assert set(" ".join(summary["folders"]).split()) == {"job_0", "job_1"}
    assert "maze-run: best mean final evaluation" in proc.stdout + proc.stderr
