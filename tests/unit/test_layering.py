"""Dependencies point one way: timezones <- jobs <- scheduler, in Python imports and in SQL.

* Imports: no module imports a package above its own, and ``scheduler`` uses only the public
  API of ``jobs`` (the names in ``jobs.__all__``, its public modules) and :mod:`jobs.internal`,
  the one module that holds what the composition root needs beyond it.
* SQL: every ``.sql`` file of a package (named queries, migrations, schema) touches only the
  tables that package owns. The queue's maintenance lives in ``jobs``; the scheduler's lag gauge
  is read by ``scheduler`` with its own SQL.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

import pytest

import jobs
from jobs.queries import package_fragments

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "timezones": {"jobs", "scheduler", "psycopg"},  # pure: no database either
    "jobs": {"scheduler"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_points_the_wrong_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources found for {package}"
    offenders = {
        str(f.relative_to(ROOT)): sorted(imported_packages(f) & FORBIDDEN[package]) for f in files
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_the_check_sees_imports() -> None:
    """The scanner itself finds both import forms (so the test above can fail)."""
    here = imported_packages(Path(__file__))
    assert {"ast", "pytest", "pathlib", "__future__"} <= here


# -- scheduler uses the public API of jobs, and jobs.internal --------------------------------------

# What scheduler needs of jobs beyond jobs.__all__ comes from this one module (documented as for
# scheduler only, not a stable API). Tests and benches may import anything.
INTERNAL = "internal"


def private_jobs_uses(source: str, public: Iterable[str], modules: Iterable[str]) -> set[str]:
    """What ``source`` uses of ``jobs`` besides ``public`` and :mod:`jobs.internal`.

    Allowed: ``from jobs import X`` and ``jobs.X`` for X in ``public``; ``jobs.internal`` (any
    import form); a public submodule (in ``modules``, for example ``outbox``), which is public
    with its names. Anything else of jobs' submodules is reported.
    """
    api, allowed = set(public), {*modules, INTERNAL}
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "jobs":
                continue
            if len(parts) == 1:
                found.update(f"jobs.{a.name}" for a in node.names if a.name not in api | {INTERNAL})
            elif parts[1] not in allowed:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "jobs" and len(parts) > 1 and parts[1] not in allowed:
                    found.add(alias.name)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "jobs"
            and node.attr not in api | {INTERNAL}
        ):
            found.add(f"jobs.{node.attr}")
    return found


def public_modules() -> list[str]:
    return [n for n in jobs.__all__ if isinstance(getattr(jobs, n), ModuleType)]


def scheduler_sources() -> dict[str, str]:
    return {
        str(f.relative_to(ROOT)): f.read_text(encoding="utf-8")
        for f in sorted((ROOT / "scheduler").rglob("*.py"))
    }


def test_scheduler_uses_only_the_public_api_of_jobs_and_jobs_internal() -> None:
    modules = public_modules()
    assert "outbox" in modules and "enqueue" not in modules  # jobs.enqueue is the function
    assert INTERNAL not in jobs.__all__ and not set(modules) & {"queries", "validate", "logs"}
    used = {
        (path, name)
        for path, source in scheduler_sources().items()
        for name in private_jobs_uses(source, jobs.__all__, modules)
    }
    assert used == set()


def test_every_name_of_jobs_internal_is_used_by_scheduler() -> None:
    """An internal name nobody above jobs needs goes (or becomes public, if applications do)."""
    import jobs.internal

    sources = "\n".join(scheduler_sources().values())
    unused = [n for n in jobs.internal.__all__ if not re.search(rf"\b{re.escape(n)}\b", sources)]
    assert unused == []
    assert not set(jobs.internal.__all__) & set(jobs.__all__)  # one way to reach each name


def imports_jobs_internal(source: str) -> bool:
    """``source`` imports :mod:`jobs.internal` (in any form of import)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(
            a.name.startswith(f"jobs.{INTERNAL}") for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(f"jobs.{INTERNAL}"):
                return True
            if node.module == "jobs" and any(a.name == INTERNAL for a in node.names):
                return True
    return False


def test_only_scheduler_imports_jobs_internal() -> None:
    """Not jobs itself (it imports the real modules), not timezones, not the examples."""
    offenders = [
        str(f.relative_to(ROOT))
        for folder in ("jobs", "timezones", "examples")
        for f in sorted((ROOT / folder).rglob("*.py"))
        if imports_jobs_internal(f.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert imports_jobs_internal("from jobs.internal import logs")
    assert imports_jobs_internal("from jobs import internal")
    assert not imports_jobs_internal('"""See :mod:`jobs.internal`."""\nimport jobs')


def test_every_public_name_of_jobs_exists() -> None:
    import jobs.internal

    assert [name for name in jobs.__all__ if not hasattr(jobs, name)] == []
    assert len(set(jobs.__all__)) == len(jobs.__all__)
    assert [n for n in jobs.internal.__all__ if not hasattr(jobs.internal, n)] == []


def test_the_api_check_sees_private_uses() -> None:
    source = (
        "import jobs\nimport jobs.store\nfrom jobs import Worker, secret\n"
        "from jobs.enqueue import enqueue_columns\nfrom jobs.outbox import Projection\n"
        "from jobs.internal import validate\nimport jobs.internal\n"
        "jobs.admin.supersede()\njobs.enqueue()\njobs.internal.logs\n"
    )
    assert private_jobs_uses(source, ["Worker", "enqueue", "outbox"], ["outbox"]) == {
        "jobs.store", "jobs.secret", "jobs.enqueue", "jobs.admin",
    }  # fmt: skip


# -- SQL: each package touches only its own tables ------------------------------------------------

OWNERS: dict[str, frozenset[str]] = {
    "jobs": frozenset(
        {
            "jobs",
            "job_attempts",
            "job_attempts_default",
            "job_attempt_minutes",
            "job_effects",
            "job_effects_default",
            "job_history",
            "job_history_default",
            "jobs_all",
            "job_rate_limits",
            "job_queue_policies",
            "outbox_events",
            "processes",
            "tockwork_migrations",
        }
    ),
    "scheduler": frozenset(
        {
            "schedules",
            "schedule_skips",
            "schedule_skips_default",
            "dashboard_audit",
            "devices",
            "apns_provider_tokens",
            "subject_deliveries",
            "webhook_endpoints",
            "webhook_secrets",
            "webhook_attempts",
            "webhook_endpoint_rates",
        }
    ),
    # The simulated push provider's opt-in migration component (its own package and sql/).
    "scheduler/simulated": frozenset({"simulated_pushes"}),
}

# The scheduler's migration 0001 was applied in the field and cannot be edited: it creates the
# simulated provider's table, and 0002 drops it again when it is empty (the opt-in component
# scheduler/simulated/ then owns it). These two files are the only exceptions, besides the
# system catalog pg_database, which the development databases read (a demo's marker comment).
KNOWN_FOREIGN_TABLES = {
    ("scheduler/sql/migrations/0001_schedules.sql", "simulated_pushes"),
    ("scheduler/sql/migrations/0002_simulated_pushes_out.sql", "simulated_pushes"),
    # A system catalog: the pytest plugin lists the tables of its test database.
    ("scheduler/sql/pg_misc.sql", "pg_tables"),
    ("scheduler/sql/pg_misc.sql", "pg_database"),
    # A system view: the synchronous standbys attached to the primary (jobs/primary.py).
    ("jobs/sql/pg_misc.sql", "pg_stat_replication"),
    # A system view: whether a read replica's WAL receiver runs (scheduler/health.py).
    ("scheduler/sql/pg_misc.sql", "pg_stat_wal_receiver"),
    # The operator dashboard is the composition root's view over every component: it reads the
    # queue's tables (keyset pages, bounded counts, lateness). It writes them only through the
    # jobs API (jobs.requeue, jobs.cancel, jobs.outbox.retry_dead).
    ("scheduler/sql/dashboard.sql", "jobs"),
    ("scheduler/sql/dashboard.sql", "job_attempts"),
    # Finished jobs (jobs 0021): the pages that may show one read the view of every job.
    ("scheduler/sql/dashboard.sql", "jobs_all"),
    # The chart of the last hour reads the jobs component's per-minute rollup of attempts.
    ("scheduler/sql/dashboard.sql", "job_attempt_minutes"),
    ("scheduler/sql/dashboard.sql", "outbox_events"),
    # Partitioning the history (jobs 0020, scheduler 0009, jobs/partitions.py): the migrations
    # copy the tables' CHECK constraints from the catalog through a temporary table and look up
    # the indexes jobs.partitions.prepare() may have built; the maintenance lists the day
    # partitions from the catalog.
    ("jobs/sql/migrations/0020_history_partitions.sql", "pg_constraint"),
    ("jobs/sql/migrations/0020_history_partitions.sql", "tockwork_checks"),
    ("jobs/sql/migrations/0020_history_partitions.sql", "job_attempts_default_id_idx"),
    ("jobs/sql/migrations/0020_history_partitions.sql", "job_effects_default_pkey"),
    ("scheduler/sql/migrations/0009_schedule_skip_partitions.sql", "pg_constraint"),
    ("scheduler/sql/migrations/0009_schedule_skip_partitions.sql", "tockwork_checks"),
    ("jobs/sql/pg_misc.sql", "pg_class"),
    ("jobs/sql/pg_misc.sql", "pg_inherits"),
    # The delivery's one read and one record of a batch (scheduler/delivery.py) fold the
    # effect-once check and record into the scheduler's statements, one round trip each:
    # through jobs' fragments (job_effect_is_recorded, job_effect_insert_checked), so the SQL on
    # job_effects is still written in jobs/sql/job_effect.sql.
    ("scheduler/sql/device.sql", "job_effects"),
}

_COMMENT = re.compile(r"--[^\n]*")
_STRING = re.compile(r"'(?:[^']|'')*'")
# Functions that name a table in a string literal.
_REGCLASS = re.compile(r"\b(?:to_regclass|pg_get_serial_sequence)\s*\(\s*'([\w.]+)'", re.I)
_CTE = re.compile(r"\b(\w+)\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.I)
# Keyword pairs that are not table references: row locks, upserts, FK actions, comparisons,
# extract(field FROM ...), COPY's input.
_NOT_A_TABLE = re.compile(
    r"\bFOR\s+(?:NO\s+KEY\s+)?UPDATE\b|\bFOR\s+(?:KEY\s+)?SHARE\b|\bDO\s+UPDATE\b"
    r"|\bON\s+(?:UPDATE|DELETE)\b|\bDISTINCT\s+FROM\b|\bextract\s*\(\s*\w+\s+FROM\b"
    r"|\bFROM\s+STDIN\b",
    re.I,
)
_TABLE_REF = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE|COPY|REFERENCES|TRUNCATE(?:\s+TABLE)?"
    r"|(?:CREATE|ALTER|DROP)\s+(?:UNLOGGED\s+)?TABLE(?:\s+IF\s+(?:NOT\s+)?EXISTS)?"
    r"|CREATE\s+(?:UNIQUE\s+)?INDEX(?:\s+CONCURRENTLY)?(?:\s+IF\s+NOT\s+EXISTS)?\s+\w+\s+ON)"
    r"\s+(?:ONLY\s+)?([A-Za-z_][\w.]*)(\s*\()?",
    re.I,
)
_KEYWORDS = {"lateral", "select", "only", "stdin"}


def tables_touched(text: str) -> set[str]:
    """The tables a SQL text reads, writes, creates, alters or names (to_regclass('t'), ...)."""
    text = _COMMENT.sub(" ", text)
    tables = {name.split(".")[-1].lower() for name in _REGCLASS.findall(text)}
    text = _NOT_A_TABLE.sub(" ", _STRING.sub("''", text))
    ctes = {name.lower() for name in _CTE.findall(text)}
    for match in _TABLE_REF.finditer(text):
        keyword, name, call = match.group(1).upper(), match.group(2).lower(), match.group(3)
        if call and keyword in ("FROM", "JOIN"):
            continue  # a set-returning function: unnest(...), generate_series(...)
        name = name.split(".")[-1]
        if name not in ctes and name not in _KEYWORDS:
            tables.add(name)
    return tables


def owner(path: str) -> str:
    """The package (longest matching folder in OWNERS) a repository path belongs to."""
    matches = [p for p in OWNERS if path == p or path.startswith(p + "/")]
    assert matches, f"{path} belongs to no package in OWNERS"
    return max(matches, key=len)


def foreign_tables(files: Mapping[str, str]) -> dict[str, list[str]]:
    """``{path: tables it touches that its package does not own}``, known exceptions aside."""
    found: dict[str, list[str]] = {}
    for path, text in files.items():
        foreign = {
            t for t in tables_touched(text) - OWNERS[owner(path)]
            if (path, t) not in KNOWN_FOREIGN_TABLES
        }  # fmt: skip
        if foreign:
            found[path] = sorted(foreign)
    return found


_OTHER_PACKAGE_FRAGMENT = re.compile(r"\{\{\s*(\w+)\.(\w+)[^}]*\}\}")
_OWN_FRAGMENT = re.compile(r"\{\{\s*(\w+)(?:\s[^}]*)?\}\}")


def _with_other_packages_fragments(text: str) -> str:
    """A file's text with each ``{{package.fragment}}`` include replaced by that fragment's text
    (jobs/queries.py): what it includes of another package counts as its own reading."""

    def fragment(match: re.Match[str]) -> str:
        fragments = package_fragments(match.group(1))
        text = "\n".join(f.text for f in fragments[match.group(2)])

        # The fragments it includes in turn (of its own package: {{name ...}}), whole.
        def inner(found: re.Match[str]) -> str:
            return "\n".join(f.text for f in fragments.get(found.group(1), []))

        for _ in range(len(fragments)):
            text, n = _OWN_FRAGMENT.subn(inner, text)
            if not n:
                break
        return text

    return _OTHER_PACKAGE_FRAGMENT.sub(fragment, text)


def sql_files() -> dict[str, str]:
    return {
        str(f.relative_to(ROOT)): _with_other_packages_fragments(f.read_text(encoding="utf-8"))
        for package in ("jobs", "scheduler")
        for f in sorted((ROOT / package).rglob("*.sql"))
    }


def test_each_package_sql_touches_only_its_own_tables() -> None:
    files = sql_files()
    assert any("/migrations/" in p for p in files) and any(p.endswith("schema.sql") for p in files)
    assert foreign_tables(files) == {}


def test_every_owned_table_is_seen_in_its_package_sql() -> None:
    """The parser finds the tables (so the ownership test above is not vacuous)."""
    seen: dict[str, set[str]] = {}
    for path, text in sql_files().items():
        seen.setdefault(owner(path), set()).update(tables_touched(text))
    assert OWNERS["jobs"] <= seen["jobs"]
    assert OWNERS["scheduler"] <= seen["scheduler"]


def test_known_exceptions_are_still_needed() -> None:
    files = sql_files()
    stale = {
        (p, t) for p, t in KNOWN_FOREIGN_TABLES if p in files and t not in tables_touched(files[p])
    }
    assert stale == set()


def test_a_scheduler_query_reading_the_queue_tables_fails() -> None:
    files = {
        "scheduler/sql/schedule.sql": "-- name: x\nSELECT count(*) FROM jobs WHERE id = 1;",
        "jobs/sql/job.sql": "-- name: y\nSELECT to_regclass('schedules') IS NOT NULL;",
        "scheduler/simulated/sql/simulated_push.sql": "-- name: z\nDELETE FROM schedule_skips;",
        "scheduler/sql/migrations/0002_x.sql": "CREATE TABLE simulated_pushes (id int);",
    }
    assert foreign_tables(files) == {
        "scheduler/sql/schedule.sql": ["jobs"],
        "jobs/sql/job.sql": ["schedules"],
        "scheduler/simulated/sql/simulated_push.sql": ["schedule_skips"],
        "scheduler/sql/migrations/0002_x.sql": ["simulated_pushes"],
    }


def test_the_sql_scanner_tells_tables_from_ctes_functions_and_keywords() -> None:
    text = """
    -- FROM commented_out
    WITH doomed AS MATERIALIZED (
        SELECT j.id FROM jobs AS j
        JOIN job_attempts a ON a.job_id = j.id
        CROSS JOIN LATERAL (SELECT 1 FROM unnest(%(ids)b::bigint[]) AS t(id)) AS l
        WHERE j.organization_id IS NOT DISTINCT FROM %(org)s
          AND extract(epoch FROM j.run_at - now()) > 0 AND j.queue <> 'FROM strings'
        FOR NO KEY UPDATE SKIP LOCKED
    )
    DELETE FROM ONLY public.job_effects WHERE effect_key IN (SELECT effect_key FROM doomed);
    INSERT INTO outbox_events (id) SELECT g FROM generate_series(1, 3) AS g
        ON CONFLICT (id) DO UPDATE SET id = excluded.id;
    UPDATE schedules SET paused = true;
    COPY schedule_skips (id) FROM STDIN;
    CREATE UNIQUE INDEX IF NOT EXISTS x_idx ON simulated_pushes (effect_key);
    CREATE TABLE IF NOT EXISTS tockwork_migrations (id int REFERENCES other_table (id));
    SELECT to_regclass('probed'), nextval(pg_get_serial_sequence('sequenced', 'id'));
    """
    assert tables_touched(text) == {
        "jobs", "job_attempts", "job_effects", "outbox_events", "schedules", "schedule_skips",
        "simulated_pushes", "tockwork_migrations", "other_table", "probed", "sequenced",
    }  # fmt: skip
