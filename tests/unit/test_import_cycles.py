"""No import cycle inside any package.

A cycle (``engine`` imports ``rules`` imports ``engine``) means two modules hold one concept
between them, or a concept sits in the wrong module; function-level imports that dodge the
cycle at import time are cycles all the same, so they count here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("timezones", "jobs", "scheduler")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (anywhere in its body)."""
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import sub` imports the submodule when there is one.
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in files
                    else node.module
                    for alias in node.names
                ]
            for target in targets:
                # The module named needs its whole body run (`from pkg import X` needs all of
                # pkg/__init__); importing a.b.c also runs a/__init__ and a/b/__init__ first,
                # which is no edge for a module inside them (they are already running).
                if target in files and target != name:
                    graph[name].add(target)
                parts = target.split(".")
                for i in range(1, len(parts)):
                    prefix = ".".join(parts[:i])
                    if prefix in files and prefix != name and not name.startswith(prefix + "."):
                        graph[name].add(prefix)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_graph_sees_imports() -> None:
    graph = _graph("scheduler")
    assert "scheduler.planner" in graph["scheduler.tick"]
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_function_level_imports_count(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.engine import f\n")
    (tmp_path / "pkg" / "engine.py").write_text("from pkg.rules import R\n")
    (tmp_path / "pkg" / "rules.py").write_text("def g():\n    from pkg.engine import f\n")
    graph = _graph("pkg", tmp_path)
    assert graph["pkg.rules"] == {"pkg.engine"}
    (tmp_path / "pkg" / "slots.py").write_text("from pkg import f\n")
    assert _graph("pkg", tmp_path)["pkg.slots"] == {"pkg"}
    assert _cycle(graph) == ["pkg.engine", "pkg.rules", "pkg.engine"]


def test_modules_import_each_other_not_the_package_root() -> None:
    """``from timezones import X`` inside timezones goes through ``__init__`` (which imports
    everything): a cycle waiting to happen."""
    graph = _graph("timezones")
    assert [name for name, edges in graph.items() if "timezones" in edges] == []


def test_no_import_cycle_inside_a_package() -> None:
    cycles = {pkg: _cycle(_graph(pkg)) for pkg in PACKAGES}
    assert cycles == dict.fromkeys(PACKAGES)
