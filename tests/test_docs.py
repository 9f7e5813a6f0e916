"""Every Python example and every shell command of the README and the docs runs, so the docs cannot drift from the
code: from a temporary directory, against the installed package, on small budgets.

The commands of one page run in order in one directory, after an env of a user's (``my_env.py``,
``conf/env/my_env.yaml``) and, where the page reads a run before it trains one, a trained run
(``outputs/train/first``) were put there; a placeholder (``<time>``, ``<a>``, ...) names the newest run of its
kind. Training commands get a small budget in place of theirs. Not run: installs (CI runs them), the test suite
itself, servers (TensorBoard, the docs site) and what needs a Ray cluster or a GPU.
"""

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from clitools import MY_ENV, WARM, run_cli
from warm import starter

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHORTER = {"n_epochs=24": "n_epochs=1, epoch_length=2"}
"""The Python examples' full runs, shortened (the code path is the same)."""
NOT_RUN = ("pip install", "-m venv", ".ci/run", "tensorboard ", "mkdocs ", "ray start", "address=auto", "device=cuda")
BUDGET = {
    "algorithm.n_epochs": "2",
    "algorithm.epoch_length": "2",
    "algorithm.envs_per_actor": "4",
    "algorithm.n_rollout_steps": "8",
    "algorithm.rollout_evaluator.n_episodes": "1",
    "output.progress": "false",
    "output.plot": "false",
}
"""A training command's budget in the tests (its own n_epochs counts where smaller). No training_curves.png: drawing it
takes a second of every run's few, and tests/test_cli.py checks it."""
HEAVY = {
    "env=butterfly": {"+env.max_cycles": "25", "algorithm.envs_per_actor": "1", "algorithm.n_rollout_steps": "4"},
    "env=atari": {"+env.max_episode_steps": "400"},
}
"""Envs whose training commands get a smaller budget still: pistonball's 20 agents decide on images in every env step,
and its 125 cycles took the budget's evaluation episode alone 7 s (the page's command took 54 s in all); a game of
Pong played to 21 points took its evaluation episode 3.6 s of the command's 11."""


SHELL = set("|&;<>$`*?")
"""Characters that make a line the shell's to run."""


def snippets(path: Path, language: str = "python") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def commands(path: Path) -> list[str]:
    """The shell commands of a page, in order, without their comments."""
    found = []
    for block in snippets(path, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                found.append(command)
    return found


def budgeted(command: str) -> str:
    """A training command with the test's budget: its other keys kept, budget keys set (n_epochs at most 2)."""
    words = shlex.split(command)
    if "conf_train" not in words or "--cfg" in words:
        return command
    given = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w and not w.startswith("-")}
    budget = dict(BUDGET)
    if "algorithm.n_epochs" in given:
        budget["algorithm.n_epochs"] = str(min(int(given["algorithm.n_epochs"]), 2))

    for env, smaller in HEAVY.items():
        if env in words:
            budget.update(smaller)
    kept = [w for w in words if w.split("=", 1)[0] not in budget]
    return shlex.join([*kept, *(f"{k}={v}" for k, v in budget.items())])


def continued(command: str, cwd: Path) -> str:
    """A resume with one epoch more than the run it continues has trained (``algorithm.n_epochs`` is a run's total:
    the docs' resumes train on, so the budget's must too)."""
    words = shlex.split(command)
    run = next((w.split("=", 1)[1] for w in words if w.startswith("resume=")), None)
    if run is None:
        return command
    done = len((cwd / run / "stats.csv").read_text().splitlines()) - 1
    kept = [w for w in words if not w.startswith("algorithm.n_epochs=")]
    return shlex.join([*kept, f"algorithm.n_epochs={done + 1}"])


def newest(directory: Path, skip: int = 0) -> Path:
    runs = sorted(
        (p for p in directory.iterdir() if p.is_dir() and not (p / "FAILED").exists()), key=lambda p: p.stat().st_mtime
    )
    return runs[-1 - skip]


def placed(command: str, cwd: Path) -> str:
    """The command with its placeholders filled in: the newest run (or multirun, or rollout) of its kind."""
    for kind in ("train", "rollout"):
        for skip, name in ((0, "<time>"), (0, "<a>"), (1, "<b>")):
            pattern = f"outputs/{kind}/{name}"
            if pattern in command:
                command = command.replace(pattern, str(newest(cwd / "outputs" / kind, skip).relative_to(cwd)))
    if "multirun/train/<time>" in command:
        command = command.replace("multirun/train/<time>", str(newest(cwd / "multirun" / "train").relative_to(cwd)))
    if "input_dir=..." in command:
        command = command.replace("input_dir=...", f"input_dir={newest(cwd / 'outputs' / 'train').relative_to(cwd)}")
    return command


def files(path: Path) -> dict[str, str]:
    """The files a page shows whole (```python title="name.py"```): a user would save them before its commands."""
    return dict(re.findall(r'```python title="([\w./]+)"\n(.*?)```', path.read_text(), flags=re.S))


def reads_a_run_first(steps: list[str]) -> bool:
    """Whether a page's commands (or examples) read a run's outputs before they train one of their own."""
    for step in steps:
        if "outputs/" in step or "input_dir=" in step:
            return True
        if "conf_train" in step or "train(" in step:
            return False
    return False


def _prepare(cwd: Path, path: Path | None = None, first_run: bool = True) -> None:
    """The files a user would have: the page's files, an env of their own, and (``first_run``) a trained run."""
    for name, text in (files(path) if path else {}).items():
        (cwd / name).write_text(text)
    (cwd / "my_env.py").write_text(MY_ENV)
    (cwd / "conf" / "env").mkdir(parents=True)
    (cwd / "conf" / "env" / "my_env.yaml").write_text("_target_: my_env.MyEnv\nsize: 3\n")
    if not first_run:
        return
    first = ["-cn", "conf_train", "runner=dev", "hydra.run.dir=outputs/train/first"]
    proc = run_cli([*shlex.split(budgeted(shlex.join(first)))], cwd=cwd, command=("maze-run",))
    assert proc.returncode == 0, proc.stderr


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess:
    """A page's command line: ``maze-run``/``maze-plot`` warm (tests/warm.py), anything else by the shell."""
    words = shlex.split(line)
    if not SHELL.intersection(line) and (words[0],) in WARM:
        return run_cli(words[1:], cwd, command=(words[0],))
    return subprocess.run(line, shell=True, cwd=cwd, capture_output=True, text=True, timeout=300)


def runs_ray(path: Path) -> bool:
    """Whether a page's commands or examples start a Ray: such a page runs among the Ray tests (one Ray at a time)."""
    runnable = [c for c in commands(path) if not any(skip in c for skip in NOT_RUN)]
    return any("runner=ray" in c for c in runnable) or any('RunnerConfig("ray")' in code for code in snippets(path))


PAGES = [pytest.param(p, id=p.name, marks=[pytest.mark.xdist_group("ray")] if runs_ray(p) else []) for p in DOCS]


def test_the_docs_have_examples():
    counts = {path.name: (len(snippets(path)), len(commands(path))) for path in DOCS}
    assert counts["README.md"][0] >= 1 and counts["getting_started.md"][1] >= 10, counts
    assert "class MyNet(nn.Module)" in files(ROOT / "docs" / "models.md")["my_networks.py"]
    assert reads_a_run_first(commands(ROOT / "docs" / "events.md"))
    assert not reads_a_run_first(commands(ROOT / "README.md"))
    assert [p.name for p in DOCS if runs_ray(p)] == ["distributed.md"]
    assert budgeted("maze-run -cn conf_train algorithm.n_epochs=48 seed=7") == (
        "maze-run -cn conf_train seed=7 algorithm.n_epochs=2 algorithm.epoch_length=2 algorithm.envs_per_actor=4 "
        "algorithm.n_rollout_steps=8 algorithm.rollout_evaluator.n_episodes=1 output.progress=false output.plot=false"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", PAGES)
def test_every_shell_command_of_a_page_runs(tmp_path, path):
    runnable = [c for c in commands(path) if not any(skip in c for skip in NOT_RUN)]
    if not runnable:
        pytest.skip(f"{path.name} has no command to run")
    _prepare(tmp_path, path, first_run=reads_a_run_first(runnable))
    for command in runnable:
        line = continued(placed(budgeted(command), tmp_path), tmp_path)
        proc = run_line(line, tmp_path)
        assert proc.returncode == 0, f"{path.name}: {command}\n(ran: {line})\n{proc.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("path", PAGES)
def test_each_python_example_runs_as_a_script(tmp_path, path):
    """The examples of one file run in order, each as its own script, in one directory (later ones may read what
    earlier ones wrote, e.g. a run under outputs/)."""
    if not snippets(path):
        pytest.skip(f"{path.name} has no Python example")
    _prepare(tmp_path, first_run=reads_a_run_first(snippets(path)))
    for i, code in enumerate(snippets(path)):
        for full, short in SHORTER.items():
            code = code.replace(full, short)
        script = tmp_path / f"example_{i}.py"
        script.write_text(code)
        proc = starter().run(script.name, [], cwd=tmp_path, kind="script")
        assert proc.returncode == 0, f"{path.name}, example {i + 1}:\n{code}\n{proc.stderr[-3000:]}"
        assert not re.search(r"\s\.\.\.\s", proc.stdout), f"{path.name}, example {i + 1} prints a table cut to '...'"
