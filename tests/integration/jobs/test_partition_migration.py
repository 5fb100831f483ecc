"""Migrating a database with history to partitioned history (jobs 0020, scheduler 0009): no row
is lost, the old tables become the default partitions, and everything reads and writes as
before; with jobs.partitions.prepare() first, the migration builds no index."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

import jobs
from jobs import effects, partitions
from jobs.migrate import Migration, available, migrate
from scheduler import maintenance
from scheduler.migrations import COMPONENTS

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
BEFORE = {"jobs": 20, "scheduler": 9}


def before_partitions(component: str) -> list[Migration]:
    return [m for m in available(component) if m.version < BEFORE.get(component, 10_000)]


def indexes(conn: psycopg.Connection[Any], table: str) -> set[str]:
    rows = conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))
    return {r[0] for r in rows.fetchall()}


@pytest.mark.parametrize("prepared", [False, True], ids=["direct", "prepared"])
def test_history_survives_the_conversion(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch, prepared: bool
) -> None:
    module = importlib.import_module("jobs.migrate")
    monkeypatch.setattr(module, "available", before_partitions)
    with psycopg.connect(empty_db_url) as c:
        migrate(c, COMPONENTS)
        c.execute(
            "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
            " SELECT g %% 5, g, 'default', 't', %s - make_interval(days => g), 'retry'"
            " FROM generate_series(1, 60) AS g",
            (NOW,),
        )
        c.execute(
            "INSERT INTO job_effects (effect_key, job_id, recorded_at)"
            " SELECT 'k' || g, g, %s - make_interval(days => g) FROM generate_series(1, 40) AS g",
            (NOW,),
        )
        c.execute(
            "INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind,"
            " recorded_at) SELECT 1, 'o' || g, %s, 'missed', %s - make_interval(days => g)"
            " FROM generate_series(1, 40) AS g",
            (NOW, NOW),
        )
        c.commit()
        old_max = c.execute("SELECT max(id) FROM job_attempts").fetchone()
    monkeypatch.undo()
    if prepared:
        with psycopg.connect(empty_db_url, autocommit=True) as c:
            assert len(partitions.prepare(c)) == 3
    with psycopg.connect(empty_db_url) as c:
        migrate(c, COMPONENTS)
        c.commit()
        c.autocommit = True
        if prepared:
            with psycopg.connect(empty_db_url, autocommit=True) as again:
                assert partitions.prepare(again) == []  # migrated: nothing to do
        kinds = c.execute(
            "SELECT relname, relkind::text, relispartition FROM pg_class"
            " WHERE relname IN ('job_attempts', 'job_attempts_default', 'job_effects',"
            " 'job_effects_default', 'schedule_skips', 'schedule_skips_default') ORDER BY 1"
        ).fetchall()
        assert kinds == [
            ("job_attempts", "p", False), ("job_attempts_default", "r", True),
            ("job_effects", "p", False), ("job_effects_default", "r", True),
            ("schedule_skips", "p", False), ("schedule_skips_default", "r", True),
        ]  # fmt: skip
        # Every row is still there, read through the parents as before.
        for table, n in (("job_attempts", 60), ("job_effects", 40), ("schedule_skips", 40)):
            assert c.execute(f"SELECT count(*) FROM {table}").fetchone() == (n,)  # noqa: S608
        assert [a.attempt for a in jobs.job_attempts(c, 2)] == [2, 7, 12, 17, 22, 27, 32, 37, 42,
                                                                47, 52, 57]  # fmt: skip
        # Effect-once holds for the records made before the conversion.
        assert not effects.record_once(c, "k3", now=NOW)
        assert effects.record_many(c, ["k1", "new"], now=NOW) == {"new"}
        # Ids go on from the old table's.
        c.execute(
            "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
            " VALUES (99, 1, 'default', 't', %s, 'succeeded')",
            (NOW,),
        )
        newest = c.execute("SELECT max(id) FROM job_attempts").fetchone()
        assert old_max is not None and newest == (old_max[0] + 1,)
        expected = {
            "job_attempts_default_pkey", "job_attempts_default_job_id_attempt_idx",
            "job_attempts_default_finished_at_idx", "job_attempts_default_id_idx",
        }  # fmt: skip
        assert indexes(c, "job_attempts_default") == expected
        assert indexes(c, "job_effects_default") == {
            "job_effects_default_pkey", "job_effects_default_recorded_at_idx"
        }  # fmt: skip
        # The maintenance creates the days ahead (today holds rows in the default partition:
        # it stays there), and retention empties the default partition by age.
        created = maintenance.ensure_partitions(c, ahead_days=2, now=NOW)
        assert created == {
            "job_attempts": 2, "job_effects": 2, "job_history": 3, "schedule_skips": 3
        }  # fmt: skip
        counts = maintenance.retention(c, {"attempts_days": 30, "skips_days": 30}, now=NOW)
        assert (counts["attempts"], counts["skips"]) == (30, 10)
        assert c.execute("SELECT count(*) FROM job_attempts").fetchone() == (31,)
