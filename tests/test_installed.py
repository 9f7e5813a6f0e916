"""The suite tests what users install: the package in site-packages, complete, with its configs and scripts."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import maze_impala

ROOT = Path(__file__).resolve().parents[1]
INSTALLED = Path(maze_impala.__file__).resolve().parent


def test_the_suite_imports_the_installed_package_not_the_source_tree():
    # a virtual environment inside the clone (.venv/, the usual layout) is an install, not the source tree
    assert INSTALLED != (ROOT / "maze_impala").resolve(), (
        f"maze_impala was imported from {INSTALLED}, inside the source tree: install it (pip install -c "
        "constraints/cpu.txt '.[dev]', not editable) and run the tests from another directory, e.g. bash .ci/run"
    )


def test_every_subpackage_and_config_file_of_the_source_tree_is_installed():
    source = ROOT / "maze_impala"
    wanted = [p.relative_to(source) for p in source.rglob("*") if p.suffix in (".py", ".yaml", ".txt", ".json")]
    wanted = [p for p in wanted if "__pycache__" not in p.parts]
    assert any(p.parts[0] == "conf" for p in wanted) and Path("envs/examples/__init__.py") in wanted
    assert Path("envs/jobshop/data/ta01.txt") in wanted and Path("envs/jobshop/data/bounds.json") in wanted
    missing = [str(p) for p in wanted if not (INSTALLED / p).is_file()]
    assert missing == [], f"the installed package lacks {missing}"


def test_console_scripts_are_installed_and_run():
    for script in ("maze-run", "maze-plot"):
        assert shutil.which(script), f"{script} is not on PATH"
    proc = subprocess.run(["maze-run", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "conf_train" in proc.stdout and "schema" not in proc.stdout
    bare = subprocess.run(["maze-run", "algorithm=impala"], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and "usage: maze-run -cn CONFIG" in bare.stderr


def test_importing_the_package_leaves_out_torch_and_the_tables_and_plotting_libraries():
    # Every actor process imports maze_impala: about 0.4 s more per process with pandas and omegaconf in the chain,
    # and 1.2 s with torch, which an actor whose policy acts in numpy does without.
    heavy = ("torch", "pandas", "omegaconf", "hydra", "matplotlib")
    # What an actor process imports: the package, its entry point, the CLI (which spawn re-imports as the main
    # script of a `maze-run` run), and what a user's script imports at its top (spawn re-imports that too).
    modules = "maze_impala, maze_impala.actors.worker, maze_impala.actors.weights, maze_impala.cli"
    script = "from maze_impala import ImpalaAlgorithmConfig, RunnerConfig, load_policy, train"
    code = f"import sys, {modules}; {script}; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"importing {modules} imported {proc.stdout.strip()}: import them where used"


def test_the_cpu_install_line_takes_torchs_cpu_build_and_the_metadata_names_no_index():
    """The README's first install line gets torch's CPU build from PyTorch's CPU wheel index, at the version that
    ``constraints/cpu.txt`` pins (which then keeps it); the package's installed metadata names no index (pip would
    not honour one there, and it would bind GPU users to the CPU build)."""
    from importlib.metadata import distribution

    install = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)[0].splitlines()
    pinned = [line for line in (ROOT / "constraints" / "cpu.txt").read_text().splitlines() if line.startswith("torch")]
    assert pinned == ["torch==2.13.0"], pinned
    first = install[0].split("#")[0].split()
    assert first[:4] == ["python3", "-m", "pip", "install"] and pinned[0] in first, install[0]
    assert first[first.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu", install[0]
    assert all("-c constraints/cpu.txt" in line for line in install[1:]), install
    metadata = str(distribution("maze_impala").read_text("METADATA")).split("\n\n", 1)[0]
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    assert requires == ["Requires-Dist: torch>=2.3"], requires
    assert "download.pytorch.org" not in metadata
