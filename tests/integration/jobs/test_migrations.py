"""Migrations: they produce schema.sql exactly, are idempotent and safe to run concurrently."""

from __future__ import annotations

import importlib
import threading
from typing import Any

import psycopg
import pytest

from jobs.errors import MigrationError
from jobs.migrate import Migration, available, migrate, pending, schema_sql
from scheduler.migrations import ALL_COMPONENTS, COMPONENTS
from scheduler.simulated import COMPONENT as SIMULATED

# Everything about a table that matters: columns, constraints, indexes, storage options, and for
# a partitioned table its partition key and the bounds of its partitions (a migrated database
# has only the default partitions: the days are created by the maintenance).
CATALOG = """
SELECT 'column', c.relname || '.' || a.attname,
       format_type(a.atttypid, a.atttypmod) || ' notnull=' || a.attnotnull
       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' identity=' || a.attidentity::text
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relname <> 'tockwork_migrations'
UNION ALL
SELECT 'constraint', c.relname || '.' || con.conname, pg_get_constraintdef(con.oid)
FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relname <> 'tockwork_migrations'
UNION ALL
SELECT 'index', indexname, indexdef FROM pg_indexes
WHERE schemaname = 'public' AND tablename <> 'tockwork_migrations'
UNION ALL
SELECT 'options', c.relname, coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'p', 'I')
  AND c.relname NOT LIKE 'tockwork_migrations%'
UNION ALL
SELECT 'partitioning', c.relname, pg_get_partkeydef(c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind = 'p'
UNION ALL
SELECT 'partition', c.relname,
       i.inhparent::regclass::text || ' ' || pg_get_expr(c.relpartbound, c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_inherits i ON i.inhrelid = c.oid
WHERE n.nspname = 'public' AND c.relispartition AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'sequence', c.relname, format_type(s.seqtypid, NULL)
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'function', p.proname, pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'view', viewname, definition FROM pg_views WHERE schemaname = 'public'
UNION ALL
SELECT 'trigger', tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT tgisinternal
ORDER BY 1, 2
"""


def catalog(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as c:
        return [tuple(r) for r in c.execute(CATALOG).fetchall()]


def test_migrations_produce_schema_sql_exactly(empty_db_url: str, db_url: str) -> None:
    with psycopg.connect(empty_db_url) as c:
        for component in ALL_COMPONENTS:
            c.execute(schema_sql(component))
    from_schema = catalog(empty_db_url)
    from_migrations = catalog(db_url)  # the migrated template
    assert from_schema, "the catalog query found nothing: the comparison would be vacuous"
    assert any(kind == "index" for kind, *_ in from_schema)
    assert from_migrations == from_schema


def test_migrate_is_idempotent(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        assert migrate(c, ALL_COMPONENTS) == []
        assert pending(c, ALL_COMPONENTS) == []
        rows = c.execute(
            "SELECT component, version FROM tockwork_migrations ORDER BY applied_at, component"
        ).fetchall()
    assert sorted(rows) == sorted(
        (comp, m.version) for comp in ALL_COMPONENTS for m in available(comp)
    )


def test_concurrent_migrators_apply_once(empty_db_url: str) -> None:
    barrier = threading.Barrier(4)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(empty_db_url) as c:
                barrier.wait(timeout=10)
                results.append(migrate(c, COMPONENTS))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = sum(len(available(comp)) for comp in COMPONENTS)
    assert sorted(len(r) for r in results) == [0, 0, 0, total]


def test_an_edited_applied_migration_is_refused(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = available("jobs")
    edited = [Migration(m.component, m.version, m.name, m.sql + "\n-- edited") for m in original]
    # jobs.migrate is also the name of the re-exported function: patch the module itself.
    module = importlib.import_module("jobs.migrate")
    monkeypatch.setattr(module, "available", lambda component: edited)
    with psycopg.connect(db_url) as c, pytest.raises(MigrationError, match="changed after"):
        migrate(c, COMPONENTS)


def _has_simulated_table(url: str) -> bool:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT to_regclass('simulated_pushes') IS NOT NULL").fetchone()
    return bool(row and row[0])


def test_the_simulated_provider_table_is_opt_in(empty_db_url: str) -> None:
    with psycopg.connect(empty_db_url) as c:
        migrate(c, COMPONENTS)
    assert not _has_simulated_table(empty_db_url)
    with psycopg.connect(empty_db_url) as c:
        assert migrate(c, (SIMULATED,)) == [
            f"{SIMULATED}/0001_simulated_pushes",
            f"{SIMULATED}/0002_simulated_channel",
        ]
    assert _has_simulated_table(empty_db_url)


def test_a_database_with_simulated_deliveries_keeps_them(empty_db_url: str) -> None:
    """Databases migrated before the component existed got the table from scheduler/0001; the
    rows they hold survive the move (scheduler/0002 keeps a non-empty table, the component's
    0001 adopts it)."""
    first = {c: available(c)[:1] for c in COMPONENTS}
    with psycopg.connect(empty_db_url) as c, c.transaction():
        for migrations in first.values():
            for m in migrations:
                c.execute(m.sql)
        c.execute("INSERT INTO simulated_pushes (effect_key, job_id, attempt) VALUES ('k', 1, 1)")
    # Record those first migrations as applied, as an older Tockwork would have.
    with psycopg.connect(empty_db_url) as c:
        migrate(c, ())
        for component, migrations in first.items():
            for m in migrations:
                c.execute(
                    "INSERT INTO tockwork_migrations (component, version, name, checksum)"
                    " VALUES (%s, %s, %s, %s)",
                    (component, m.version, m.name, m.checksum),
                )
        c.commit()
        assert "scheduler/0002_simulated_pushes_out" in migrate(c, ALL_COMPONENTS)
        row = c.execute("SELECT effect_key FROM simulated_pushes").fetchall()
    assert row == [("k",)]
