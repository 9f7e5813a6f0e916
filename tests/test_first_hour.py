"""What a new user does in the first hour, from a directory of their own, with the installed package."""

import functools
import re
import tempfile
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from clitools import MY_ENV, PLOT, TINY, maze_run, run_cli
from tiny import QUIET

from maze_impala import ConfigError, ImpalaAlgorithmConfig, OutputConfig, RunnerConfig, load_policy, train
from maze_impala.checkpoints import UnsafeCheckpointError, read_checkpoint
from maze_impala.envs.factory import make_env
from maze_impala.evaluate.evaluator import RolloutEvaluator, mean_return
from maze_impala.events.api import EventHub, EventInterface, epoch_stats, mean
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.events.stats import StatKey
from maze_impala.nn.models import make_random_policy
from maze_impala.testing import CounterEnv

SMALL = dict(n_epochs=1, epoch_length=2, envs_per_actor=2, n_rollout_steps=8, num_actors=1)
DEV = RunnerConfig("dev")


def test_python_train_and_the_cli_default_to_the_same_runner():
    from hydra import compose, initialize_config_dir

    from maze_impala.cli import config_dir, register_schemas, to_training_config

    register_schemas()
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        composed = to_training_config(compose(config_name="conf_train"))
    assert RunnerConfig().type == composed.runner.type == "local"
    assert ImpalaAlgorithmConfig() == composed.algorithm


def test_a_run_directory_holding_another_run_is_refused_unless_overwrite(tmp_path):
    train("CartPole-v1", ImpalaAlgorithmConfig(**SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    before = {name: (tmp_path / name).read_bytes() for name in ("model_best.pt", "stats.csv", "kpis.csv")}
    with pytest.raises(
        ConfigError,
        match=r"holds another run \(model_last.pt, model_best.pt, stats.csv, kpis.csv\).*"
        r"overwrite=true",
    ):
        train("CartPole-v1", ImpalaAlgorithmConfig(**SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    assert {name: (tmp_path / name).read_bytes() for name in before} == before  # nothing touched
    result = train(
        "CartPole-v1",
        ImpalaAlgorithmConfig(**SMALL | {"n_epochs": 2}),
        runner=DEV,
        output=QUIET,
        output_dir=tmp_path,
        overwrite=True,
    )
    assert pd.read_csv(tmp_path / "stats.csv")["epoch"].tolist() == [1, 2] and result.epochs == 2


def test_the_random_policy_samples_uniformly_even_when_asked_for_greedy_actions():
    env = make_env("CartPole-v1")
    evaluator = RolloutEvaluator("CartPole-v1", 100, True, 0, EventHub())
    returns = mean_return(evaluator.evaluate(make_random_policy(env)))
    assert 15 < returns < 35  # random CartPole: about 22; always the first action: about 9
    policy = make_random_policy(env)
    obs = {"observation": torch.zeros(2000, 4)}
    actions, _, _ = policy.act(0, obs)  # no noise: the most likely actions, which a random policy has none of
    assert 0.45 < actions["action"].float().mean() < 0.55


def test_the_random_policy_respects_masks():
    from maze_impala.envs.pettingzoo_adapter import make_pettingzoo_env

    env = make_pettingzoo_env("pettingzoo.classic.tictactoe_v3")
    policy = make_random_policy(env)
    obs, _ = env.reset(seed=0)
    key = env.actor_id().step_key
    mask_key = next(k for k in obs if k.endswith("_mask"))
    batch = {k: torch.as_tensor(np.stack([np.asarray(v)] * 500)) for k, v in obs.items()}
    batch[mask_key][:, :] = 0
    batch[mask_key][:, [2, 7]] = 1
    actions, _, _ = policy.act(key, batch)
    taken = set(next(iter(actions.values())).tolist())
    assert taken == {2, 7}


def test_partial_env_factories_are_recorded_so_that_the_policy_loads(tmp_path):
    factory = functools.partial(CounterEnv, limit=7)
    train(factory, ImpalaAlgorithmConfig(**SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    record = read_checkpoint(tmp_path / "model_best.pt")["config"]["env"]
    assert record == {"_target_": "maze_impala.testing.CounterEnv", "limit": 7}
    policy, env = load_policy(tmp_path / "model_best.pt")
    assert env.env.limit == 7 and policy is not None


@pytest.mark.parametrize("factory", [lambda: CounterEnv(), functools.partial(lambda: CounterEnv())])
def test_env_factories_that_cannot_be_rebuilt_are_refused_before_training(tmp_path, factory):
    with pytest.raises(ConfigError, match=r"cannot record the env factory .* functools.partial of one"):
        train(factory, ImpalaAlgorithmConfig(**SMALL), runner=DEV, output=QUIET, output_dir=tmp_path)
    assert not (tmp_path / "stats.csv").exists()


MARKER = Path(tempfile.gettempdir()) / "maze_impala_unpickled_code_ran"


class _RunsCode:
    def __reduce__(self):
        return (Path.touch, (MARKER,))


def test_a_checkpoint_whose_unpickling_would_run_code_is_refused(tmp_path):
    marker = MARKER
    marker.unlink(missing_ok=True)
    evil = tmp_path / "model_best.pt"
    torch.save({"policy": {}, "payload": _RunsCode()}, evil)
    with zipfile.ZipFile(evil) as archive:  # the file really holds the payload
        assert any(b"touch" in archive.read(n) for n in archive.namelist() if n.endswith(".pkl"))
    with pytest.raises(UnsafeCheckpointError, match=r"refused to load .* could run code"):
        read_checkpoint(evil)
    assert not marker.exists()


def test_the_training_result_repr_stays_short(tmp_path):
    result = train(
        "CartPole-v1", ImpalaAlgorithmConfig(**SMALL | {"n_epochs": 3}), runner=DEV, output=QUIET, output_dir=tmp_path
    )
    assert len(repr(result)) < 300 and len(result.history) == 3


def test_stat_keys_are_named_through_the_event_interfaces():
    key = StatKey.of(EpisodeEvents.episode_return, mean, scope="eval")
    assert key.column() == "eval/EpisodeEvents/episode_return/mean"
    with pytest.raises(ValueError, match="has no 'sum' statistic"):
        StatKey.of(EpisodeEvents.episode_return, "sum")


def test_two_event_interfaces_with_one_name_are_refused_naming_both():
    source = "class EpisodeEvents(EventInterface):\n    @epoch_stats(mean)\n    def x(self, value: float): ...\n"
    with pytest.raises(TypeError, match=r"two event interfaces are named EpisodeEvents \(maze_impala.events"):
        exec(
            source,
            {"EventInterface": EventInterface, "epoch_stats": epoch_stats, "mean": mean, "__name__": "someone_else"},
        )


@pytest.mark.slow
def test_the_readme_random_baseline_runs_from_an_empty_directory(tmp_path):
    proc = run_cli(
        [
            "-cn",
            "conf_rollout",
            "policy=random_policy",
            "env=cutting",
            "n_episodes=4",
            f"hydra.run.dir={tmp_path / 'out'}",
        ],
        cwd=tmp_path,
        command=("maze-run",),
    )
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(tmp_path / "out" / "kpis.csv")) == 4
    assert (tmp_path / "out" / "rollout.log").stat().st_size > 0


@pytest.mark.slow
def test_a_users_own_env_trains_from_the_cli_as_the_docs_say(tmp_path):
    """docs/structured_envs.md, "Your own env from the command line", step by step."""
    (tmp_path / "my_env.py").write_text(textwrap.dedent(MY_ENV))
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "my_env.yaml").write_text("_target_: my_env.MyEnv\nsize: 3\n")
    short = [*TINY, "output.tensorboard=false"]
    runs = {
        "config_dir": ["-cn", "conf_train", "--config-dir", "conf", "env=my_env", "runner=local", *short],
        "target": ["-cn", "conf_train", "env._target_=my_env.MyEnv", "+env.size=3", "runner=local", *short],
    }
    for name, args in runs.items():
        proc = run_cli([*args, f"hydra.run.dir=outputs/train/{name}"], cwd=tmp_path, command=("maze-run",))
        assert proc.returncode == 0, proc.stderr
        kpis = pd.read_csv(tmp_path / "outputs" / "train" / name / "kpis.csv")
        assert (kpis["steps"] == 3).all()  # size=3 reached MyEnv
    proc = run_cli(
        [
            "-cn",
            "conf_rollout",
            "input_dir=outputs/train/target",
            "n_episodes=3",
            "hydra.run.dir=outputs/rollout/target",
        ],
        cwd=tmp_path,
        command=("maze-run",),
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_a_failing_env_ends_the_cli_with_one_line_and_the_traceback_in_the_log(tmp_path):
    out = tmp_path / "run"
    proc = maze_run(
        tmp_path,
        (
            "-cn conf_train env._target_=maze_impala.testing.FaultyEnv +env.fault=nan_reward "
            "+env.after=40 runner=local runner.max_restarts=0"
        ),
        *TINY,
        out=out,
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("maze-run: training failed in epoch 1: ActorFailedError: actor ")
    assert "non-finite reward" in lines[0] and f"the traceback is in {out / 'train.log'}" in lines[0]
    log = (out / "train.log").read_text()
    assert "Traceback" in log and "NonFiniteError" in log
    assert (out / "FAILED").read_text().startswith("training failed in epoch 1"), "marked failed: no epoch ended"


@pytest.mark.slow
def test_a_run_that_fails_after_a_checkpoint_says_how_to_resume_it(tmp_path):
    # Each env breaks at its 101st step, in its actor's 4th rollout of 32 steps: after the first update's epoch (an
    # actor makes at most 3 rollouts before the learner takes a second one).
    out = tmp_path / "run"
    proc = maze_run(
        tmp_path,
        (
            "-cn conf_train env._target_=maze_impala.testing.FaultyEnv +env.fault=nan_reward "
            "+env.after=100 runner=local runner.max_restarts=0 algorithm.n_epochs=20 "
            "algorithm.epoch_length=1 algorithm.envs_per_actor=2 "
            "algorithm.rollout_evaluator.n_episodes=1 output.tensorboard=false"
        ),
        out=out,
    )
    assert proc.returncode == 1
    assert "training failed in epoch" in proc.stderr and "non-finite reward" in proc.stderr
    holds = re.search(r"model_last.pt holds epoch (\d+); continue the run with\n  (maze-run .*)", proc.stderr)
    assert holds is not None, proc.stderr
    assert f"resume={out}" in holds.group(2) and "+env.after=100" in holds.group(2)
    assert read_checkpoint(out / "model_last.pt")["epoch"] == int(holds.group(1)) >= 1
    assert not (out / "FAILED").exists(), "its epochs are results"


def test_a_configuration_error_leaves_no_run_directory(tmp_path):
    out = tmp_path / "outputs" / "train" / "bad"
    proc = maze_run(tmp_path, "-cn conf_train algorithm.lr=-1", out=out)
    assert proc.returncode == 2 and "algorithm.lr must be a finite float > 0" in proc.stderr
    assert f"{out} was removed" in proc.stderr and not out.exists()
    assert not (tmp_path / "outputs").exists(), "nor the empty outputs/train/ it was made in"


def test_maze_plot_says_a_rollout_has_nothing_to_plot(tmp_path):
    (tmp_path / "stats.csv").write_text("epoch,env_steps,rollout/EpisodeEvents/episode_return/mean\n1,10,3.0\n")
    proc = run_cli([str(tmp_path)], tmp_path, command=PLOT, timeout=60)
    assert proc.returncode == 1 and "nothing to plot" in proc.stderr and "kpis.csv" in proc.stderr
    assert not (tmp_path / "training_curves.png").exists()


def test_pickle_of_plain_checkpoint_data_loads(tmp_path):
    path = tmp_path / "plain.pt"
    torch.save({"config": {"env": "CartPole-v1", "model": {"hidden_units": [4]}}, "version": 3}, path)
    assert read_checkpoint(path)["version"] == 3


def test_an_env_module_that_cannot_be_found_says_where_to_run_from(tmp_path):
    """A user's env (``my_env.MyEnv``) from a directory that does not hold ``my_env.py``: the error says what to do."""
    args = ["-cn", "conf_train", "env._target_=my_env.MyEnv", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = run_cli(args, cwd=tmp_path)
    assert proc.returncode == 2
    assert "run from the directory that holds my_env" in proc.stderr and "PYTHONPATH" in proc.stderr, proc.stderr


def test_train_and_maze_run_name_new_run_folders_alike():
    """``outputs/train/<time>`` to the microsecond, whether the run started from Python or the CLI."""
    from datetime import datetime

    from omegaconf import OmegaConf

    from maze_impala.cli import config_dir
    from maze_impala.train.rundir import RUN_TIME_FORMAT, new_run_dir

    hydra = OmegaConf.to_container(OmegaConf.load(config_dir() / "conf_train.yaml"))["hydra"]["run"]["dir"]
    assert hydra == f"outputs/train/${{now:{RUN_TIME_FORMAT}}}"
    folder = new_run_dir()
    assert folder.parent == Path("outputs", "train") and datetime.strptime(folder.name, RUN_TIME_FORMAT)


def test_hydras_flags_may_follow_the_overrides():
    from maze_impala.cli import options_first

    argv = ["algorithm.lr=0.01", "--cfg", "job", "resume=x", "-cd", "conf", "--info", "searchpath", "-m", "seed=2"]
    flags = ["--cfg", "job", "-cd", "conf", "--info", "searchpath", "-m"]
    assert options_first(argv) == [*flags, "algorithm.lr=0.01", "resume=x", "seed=2"]
    assert options_first(["-cn", "conf_train", "--info", "seed=2"]) == ["-cn", "conf_train", "--info", "seed=2"]


def test_cfg_after_an_override_prints_the_config(tmp_path):
    proc = maze_run(tmp_path, "-cn conf_train algorithm.lr=0.0123 --cfg job")
    assert proc.returncode == 0, proc.stderr
    assert "lr: 0.0123" in proc.stdout and "unrecognized arguments" not in proc.stderr


def test_the_console_epoch_table_shows_the_envs_kpis_and_each_agents_return(tmp_path, capsys):
    from maze_impala.envs.examples import CoordinationEnv, CuttingEnv

    console = OutputConfig(console=True, tensorboard=False, progress=False, plot=False)
    for env, shown in ((CuttingEnv, "train/KpiEvents/kpi/mean/name=fill_rate"), (CoordinationEnv, "agent_return")):
        train(env, ImpalaAlgorithmConfig(**SMALL), runner=DEV, output=console, output_dir=tmp_path / env.__name__)
        table = capsys.readouterr().out
        assert shown in table, table
    assert "eval/KpiEvents/kpi/mean/name=fill_rate" not in table  # (CoordinationEnv has no KPIs)
