"""Every Python example in the README and the docs runs, as a file of its own (the tutorials run in test_learning
and test_episode_events)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHORTER = {"n_epochs=24": "n_epochs=1"}
"""The examples' full runs, shortened for the test (the code path is the same)."""


def snippets(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def test_the_docs_have_python_examples():
    counts = {path.name: len(snippets(path)) for path in DOCS}
    assert counts["README.md"] >= 1 and sum(counts.values()) >= 8, counts


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_each_python_example_runs_as_a_script(tmp_path, path):
    """The examples of one file run in order, each as its own script, in one directory (later ones may read
    what earlier ones wrote, e.g. a run under outputs/)."""
    if not snippets(path):
        pytest.skip(f"{path.name} has no Python example")
    if any('"outputs/train"' in code for code in snippets(path)):  # they read the run the doc's maze-run made
        first = ["-cn", "conf_train", "algorithm=impala", "algorithm.n_epochs=1", "algorithm.epoch_length=5",
                 "runner=dev", "hydra.run.dir=outputs/train/first"]  # fmt: skip
        assert run_cli(first, cwd=tmp_path, command=("maze-run",)).returncode == 0
    for i, code in enumerate(snippets(path)):
        for full, short in SHORTER.items():
            code = code.replace(full, short)
        script = tmp_path / f"example_{i}.py"
        script.write_text(code)
        proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{path.name}, example {i + 1}:\n{code}\n{proc.stderr[-3000:]}"
