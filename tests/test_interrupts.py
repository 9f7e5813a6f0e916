"""A run interrupted at every stage: what it says, what its directory keeps, and what a resume of it then does.

A resume that is refused never removes or changes the directory it was asked to resume, and an interrupt before
the first checkpoint prints no resume command. ``interrupting.py`` is ``maze-run`` interrupting itself with SIGINT at
one stage, on the installed package.
"""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import run_cli

pytestmark = pytest.mark.slow
INTERRUPTING = Path(__file__).resolve().parent / "interrupting.py"
RUN = [
    "-cn",
    "conf_train",
    "runner=dev",
    "algorithm.n_epochs=3",
    "algorithm.epoch_length=2",
    "algorithm.envs_per_actor=4",
    "algorithm.rollout_evaluator.n_episodes=2",
]


def interrupted_run(stage, out):
    proc = subprocess.run(
        [sys.executable, str(INTERRUPTING), stage, *RUN, f"hydra.run.dir={out}"],
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 130, proc.stderr
    return proc.stderr


def snapshot(directory):
    """Every file under ``directory`` and a hash of its bytes."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def resume(out, *extra):
    return run_cli([*RUN, *extra, f"resume={out}"], cwd=out.parent)


def test_an_interrupt_while_torch_is_imported_exits_130_in_one_line_and_leaves_no_directory(tmp_path):
    out = tmp_path / "outputs" / "train" / "run"
    proc = subprocess.run(
        [sys.executable, str(INTERRUPTING), "import", *RUN, f"hydra.run.dir={out}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    stderr = proc.stderr
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and f"interrupted before training started ({out} was removed)" in stderr, stderr
    assert not (tmp_path / "outputs").exists(), "nor the folders the run's directory was made in"


def test_an_interrupt_before_the_actors_start_removes_the_new_directory_and_says_so(tmp_path):
    out = tmp_path / "run"
    stderr = interrupted_run("actors", out)
    assert f"interrupted before training started ({out} was removed)" in stderr
    assert "resume=" not in stderr and not out.exists()


@pytest.mark.parametrize("stage", ["update:1", "checkpoint:1"])
def test_an_interrupt_before_the_first_checkpoint_offers_no_resume_and_a_resume_of_it_changes_nothing(tmp_path, stage):
    out = tmp_path / "run"
    stderr = interrupted_run(stage, out)
    assert "interrupted before the first checkpoint" in stderr and "nothing to resume" in stderr
    assert "resume=" not in stderr
    command = stderr.split("Start it again with\n", 1)[1].strip()
    assert command.startswith("maze-run -cn conf_train runner=dev algorithm.n_epochs=3"), command
    assert command.endswith(f"hydra.run.dir={out}"), "the same directory, which holds no results"
    kept = snapshot(out)
    assert "train.log" in kept and "config.yaml" in kept and "model_last.pt" not in kept
    assert not list(out.glob(".*.tmp")), "a torn checkpoint leaves no temporary file"
    proc = resume(out)
    assert proc.returncode == 2 and "stopped before its first checkpoint" in proc.stderr, proc.stderr
    assert f"{out} is left as it was" in proc.stderr
    assert snapshot(out) == kept, "a refused resume neither removes nor changes the directory"
    proc = run_cli(command.split()[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "done after 3 epochs" in proc.stdout and (out / "model_last.pt").is_file()


@pytest.mark.parametrize("stage", ["update:4", "checkpoint:3"])
def test_an_interrupt_after_a_checkpoint_resumes_from_it(tmp_path, stage):
    """Mid-epoch (the second update of epoch 2), and in the middle of writing epoch 2's first checkpoint (each epoch
    writes ``model_last.pt`` before its evaluation and after it): ``model_last.pt`` still holds epoch 1, which the
    printed command continues to the end."""
    out = tmp_path / "run"
    stderr = interrupted_run(stage, out)
    assert f"{out / 'model_last.pt'} holds epoch 1" in stderr, stderr
    command = stderr.split("continue the run with\n", 1)[1].strip()
    assert command.endswith(f"resume={out}"), command
    proc = run_cli(command.split()[1:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "done after 3 epochs" in proc.stdout
    log = (out / "train.log").read_text()
    assert f"resuming {out} after epoch 1" in log
    assert "[WARNING] maze-run: interrupted;" in log and "[ERROR]" not in log, "a user's Ctrl-C is no error"
    assert [line.split(",")[0] for line in (out / "stats.csv").read_text().splitlines()[1:]] == ["1", "2", "3"]


@pytest.mark.parametrize("epoch", [1, 2])
def test_an_interrupt_during_an_evaluation_keeps_the_epoch_it_trained(tmp_path, epoch):
    """Stopped as epoch 1's (or 2's) evaluation starts: ``model_last.pt`` holds that epoch's training, and the resume
    evaluates it again instead of training it again; the tables have every epoch once."""
    out = tmp_path / "run"
    stderr = interrupted_run(f"evaluate:{epoch}", out)
    before = f"epoch {epoch - 1} and " if epoch > 1 else ""
    assert f"{out / 'model_last.pt'} holds {before}the training of epoch {epoch}, whose evaluation" in stderr, stderr
    assert (out / "model_best.pt").is_file() == (epoch > 1), "model_best.pt is written after an evaluation"
    proc = resume(out)
    assert proc.returncode == 0, proc.stderr
    log = (out / "train.log").read_text()
    assert f"resuming {out} after epoch {epoch - 1} (epoch {epoch} trained; its evaluation runs again)" in log, log
    lines = (out / "stats.csv").read_text().splitlines()
    header, rows = lines[0].split(","), [line.split(",") for line in lines[1:]]
    assert [row[0] for row in rows] == ["1", "2", "3"]
    steps = header.index("env_steps")
    assert [int(float(row[steps])) for row in rows] == [e * 2 * 4 * 32 for e in (1, 2, 3)], "no epoch trained twice"
    assert [line.split(",")[0] for line in (out / "kpis.csv").read_text().splitlines()[1:]] == [
        "1",
        "1",
        "2",
        "2",
        "3",
        "3",
    ]


def test_refused_resumes_leave_the_directory_as_it_was(tmp_path):
    """A changed key, too few epochs, and a directory that does not exist: each refused, nothing written."""
    out = tmp_path / "run"
    interrupted_run("update:4", out)
    kept = snapshot(out)
    changed = resume(out, "algorithm.lr=0.5")
    assert changed.returncode == 2 and "with another config (algorithm.lr" in changed.stderr, changed.stderr
    assert f"{out} is left as it was" in changed.stderr
    assert "Traceback" not in changed.stderr and changed.stderr.count("with another config") == 1, changed.stderr
    fewer = resume(out, "algorithm.n_epochs=1")
    assert fewer.returncode == 2 and "has trained 1 epoch already" in fewer.stderr, fewer.stderr
    assert "Traceback" not in fewer.stderr and fewer.stderr.count("has trained 1 epoch already") == 1, fewer.stderr
    assert snapshot(out) == kept
    missing = resume(tmp_path / "nowhere")
    assert missing.returncode == 2 and "there is no such directory" in missing.stderr
    assert not (tmp_path / "nowhere").exists()


def test_a_configuration_error_in_an_existing_directory_leaves_it_as_it_was(tmp_path):
    """``hydra.run.dir`` naming a directory of before (here a run stopped before its first checkpoint): a bad key
    refuses the run and leaves that directory's files as they were (Hydra's own record, ``.hydra/``, aside)."""
    out = tmp_path / "run"
    interrupted_run("update:1", out)
    kept = snapshot(out)
    proc = run_cli([*RUN, "algorithm.lr=-1", f"hydra.run.dir={out}"], cwd=tmp_path)
    assert proc.returncode == 2 and f"{out} is left as it was" in proc.stderr, proc.stderr
    assert {k: v for k, v in snapshot(out).items() if not k.startswith(".hydra")} == {
        k: v for k, v in kept.items() if not k.startswith(".hydra")
    }


def test_an_interrupted_sweep_goes_on_by_the_commands_it_prints(tmp_path):
    """Ctrl-C in the second of three jobs: the job resumes by the printed command (its folder's name holds ``=`` and
    ``,``, which Hydra's grammar must get quoted), the third runs by its printed command into the sweep's folder,
    and the sweep's summary then holds all three."""
    import shlex

    sweep = tmp_path / "sweep"
    sweep_run = ["-cn", "conf_train", "-m", "seed=1,2,3", *RUN[2:], f"hydra.sweep.dir={sweep}"]
    # 3 epochs of 2 updates a job: update 10 is the second job's 4th, in its second epoch
    proc = subprocess.run(
        [sys.executable, str(INTERRUPTING), "update:10", *sweep_run],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 130, proc.stderr
    assert "stopped in job 2 of 3" in proc.stderr, proc.stderr
    resume_line = proc.stderr.split("continue the run with\n", 1)[1].splitlines()[0].strip()
    rest = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith("maze-run -cn conf_train -m")]
    assert len(rest) == 1 and "seed=3" in rest[0], proc.stderr
    assert f"maze-plot {sweep} --summary" in proc.stderr
    for command in (resume_line, rest[0]):
        done = run_cli(shlex.split(command)[1:], cwd=tmp_path)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    jobs = sorted(p for p in sweep.iterdir() if (p / "stats.csv").is_file())
    assert [p.name.rsplit("seed=", 1)[1] for p in jobs] == ["1", "2", "3"]
    for job in jobs:
        assert [line.split(",")[0] for line in (job / "stats.csv").read_text().splitlines()[1:]] == ["1", "2", "3"]
    import pandas as pd

    assert pd.read_csv(sweep / "summary.csv")["runs"].tolist() == [3], "one configuration, its three seeds"
