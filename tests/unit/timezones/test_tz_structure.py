"""The shape of the package: no import cycle inside ``timezones``.

The graph has one node per module of ``timezones/`` and an edge for every import of another
module of the package found anywhere in the source (module level, inside functions, under
``TYPE_CHECKING``): a function-level import hides a cycle from Python, not from this test.
``from timezones import X`` is an edge to the module ``X`` when there is one, else to the
package (``timezones/__init__.py``, which imports every module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import timezones

PACKAGE = Path(timezones.__file__).resolve().parent


def _module_name(path: Path) -> str:
    return "timezones" if path.stem == "__init__" else f"timezones.{path.stem}"


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (see the module docstring)."""
    modules = {_module_name(p) for p in package.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        name = _module_name(path)
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from . import x / from .x import y
                    base = "timezones" + (f".{base}" if base else "")
                if base == "timezones":
                    for alias in node.names:
                        sub = f"timezones.{alias.name}"
                        targets.append(sub if sub in modules else "timezones")
                else:
                    targets = [base]
            for imported in targets:
                target = imported
                while target not in modules and "." in target:
                    target = target.rsplit(".", 1)[0]  # timezones.x.y -> timezones.x
                if target in modules and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of modules (first == last), or ``None`` when the graph is acyclic."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_graph_sees_function_level_imports(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("from timezones.engine import f\n")
    (tmp_path / "engine.py").write_text("from timezones.rules import R\n")
    (tmp_path / "rules.py").write_text("def g():\n    from timezones.engine import f\n")
    graph = import_graph(tmp_path)
    assert graph["timezones.rules"] == {"timezones.engine"}
    assert find_cycle(graph) == ["timezones.engine", "timezones.rules", "timezones.engine"]


def test_no_import_cycle_inside_timezones() -> None:
    graph = import_graph(PACKAGE)
    assert "timezones.engine" in graph and "timezones.resolve" in graph
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_only_the_package_init_imports_from_the_package_root() -> None:
    """Modules import each other by module path; ``from timezones import X`` inside the package
    would go through ``__init__`` (which imports everything) and is a cycle waiting to happen."""
    graph = import_graph(PACKAGE)
    assert [name for name, edges in graph.items() if "timezones" in edges] == []
