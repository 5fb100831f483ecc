"""SQL lives in named .sql files: every named query is used, names never collide, and no SQL
statement hides in a Python string of jobs/ or scheduler/."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from jobs.queries import load, templates

ROOT = Path(__file__).resolve().parents[1].parent
# SQL components (each with its own sql/ folder): the packages, and the simulated provider's
# opt-in component inside scheduler.
PACKAGES = ("jobs", "scheduler", "scheduler.simulated")

# Python files that hold SQL text: only the demos, which report their results with ad-hoc
# queries over the tables, as an operator would in psql (and the demo queue's own table). They
# are programs beside the library, not part of it.
KNOWN_SQL_IN_PYTHON = {"scheduler/demos/reminders.py", "scheduler/demos/queue.py"}

_STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|COPY|CREATE|ALTER|DROP|TRUNCATE|SET)\s+\S"
)


def string_constants(path: Path) -> Iterator[str]:
    """Every string literal of a module but its docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            yield node.value


def sources(package: str) -> list[Path]:
    """The Python files of a component, without those of a component nested inside it."""
    folder = ROOT / package.replace(".", "/")
    nested = [ROOT / p.replace(".", "/") for p in PACKAGES if p.startswith(package + ".")]
    return sorted(f for f in folder.rglob("*.py") if not any(f.is_relative_to(n) for n in nested))


def sql_in_python(path: Path) -> list[str]:
    return [s for s in string_constants(path) if _STATEMENT.match(s)]


def test_no_sql_statement_in_python_strings() -> None:
    found = {
        str(f.relative_to(ROOT)): sql_in_python(f) for package in PACKAGES for f in sources(package)
    }
    offenders = {f: s for f, s in found.items() if s and f not in KNOWN_SQL_IN_PYTHON}
    assert offenders == {}
    # An exception that is no longer needed goes from the list.
    assert {f for f in KNOWN_SQL_IN_PYTHON if (ROOT / f).exists() and not found.get(f)} == set()


def test_the_scanner_sees_sql_in_strings_but_not_in_docstrings(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""SELECT in a docstring is prose."""\n'
        'def f():\n    """DELETE FROM docs."""\n'
        '    return ("SELECT 1", "DELETE FROM jobs", "Select a queue", "UPDATE")\n'
    )
    assert sql_in_python(module) == ["SELECT 1", "DELETE FROM jobs"]


def used_strings(package: str) -> set[str]:
    return {s for f in sources(package) for s in string_constants(f)}


def used_queries(package: str) -> set[str]:
    """The names a package's code uses: a template's name (``variant("job_claim", ...)``) uses
    every query of its variant table."""
    used = used_strings(package)
    for name, table in templates(package).items():
        if name in used:
            used |= set(table.values())
    return used


def test_every_named_query_is_used_by_its_package() -> None:
    unused = {p: sorted(set(load(p)) - used_queries(p)) for p in PACKAGES}
    assert unused == {p: [] for p in PACKAGES}


def literal_names(expr: ast.expr) -> list[str]:
    """The string literals an argument can evaluate to: ``"x"``, or ``"a" if c else "b"``."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [expr.value]
    if isinstance(expr, ast.IfExp):
        return literal_names(expr.body) + literal_names(expr.orelse)
    return []


def test_every_query_name_a_package_calls_exists() -> None:
    """``query("x")`` (also ``query("a" if c else "b")``) names a query of the caller's package."""
    missing: dict[str, list[str]] = {}
    for package in PACKAGES:
        defined = set(load(package))
        for f in sources(package):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if not name.endswith("query"):
                    continue
                bad = [n for n in literal_names(node.args[0]) if n not in defined]
                if bad:
                    missing.setdefault(str(f.relative_to(ROOT)), []).extend(bad)
    assert missing == {}


def test_query_names_start_with_their_table_and_never_collide_across_packages() -> None:
    names = {p: set(load(p)) for p in PACKAGES}
    for a in PACKAGES:
        for b in PACKAGES:
            assert a == b or names[a] & names[b] == set(), (a, b)
    prefixes = {
        "jobs": ("job_", "outbox_event_", "process_", "tockwork_migration_", "pg_"),
        "scheduler": (  # dashboard_: views, audit
            "schedule_",
            "pg_",
            "dashboard_",
            "device_",
            "webhook_",
            "apns_provider_token_",
            "subject_delivery_",
        ),
        "scheduler.simulated": ("simulated_push_",),
    }
    assert {p: sorted(n for n in names[p] if not n.startswith(prefixes[p])) for p in PACKAGES} == {
        p: [] for p in PACKAGES
    }
