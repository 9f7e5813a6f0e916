"""The package's layers import downwards only: every import counted, at module level, inside functions and under
``TYPE_CHECKING`` (docs/architecture.md shows the floors)."""

from __future__ import annotations

import ast
from pathlib import Path

import maze_impala

ROOT = Path(maze_impala.__file__).parent

FLOORS = [
    {"core", "run_files", "masking", "machine", "startup", "children", "conf"},
    {"config", "files"},
    {"events", "checkpoints"},
    {"envs"},
    {"nn"},
    {"play"},
    {"actors", "impala", "deploy", "testing"},
    {"evaluate", "report"},
    {"train"},
    {"api", "multirun"},
    {"cli", "__init__"},
    {"__main__"},
]
"""Each wing (a folder, or a module at the package's top) on its floor: a wing imports wings of lower floors only."""


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Per module, the package's modules it imports, every import statement counted."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("maze_impala"):
                targets = [known(f"{node.module}.{alias.name}") or known(node.module) for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names if alias.name.startswith("maze_impala")]
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def _wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_wing_imports_only_the_floors_below_it():
    floor = {wing: level for level, wings in enumerate(FLOORS) for wing in wings}
    modules = _modules()
    missing = {_wing(m) for m in modules} - set(floor)
    assert not missing, f"wings without a floor in FLOORS: {sorted(missing)}"
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in _imports(modules).items()
        for target in targets
        if _wing(target) != _wing(module) and floor[_wing(target)] >= floor[_wing(module)]
    )
    assert not upward, "imports that go up or sideways:\n" + "\n".join(upward)


def test_no_module_imports_itself_through_others():
    graph = _imports(_modules())
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("an import circle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
