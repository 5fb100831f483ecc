"""Built-in maintenance: retention in batches, lease recovery, definitions kept apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs.store import PgJobStore
from scheduler import maintenance
from scheduler.definitions import load_file, sync

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)


def age_jobs(conn: psycopg.Connection[Any], status: str, days: int, n: int) -> list[int]:
    ids = [r.id for r in jobs.enqueue_many(conn, [jobs.JobSpec("t", {}) for _ in range(n)])]
    conn.execute(
        "UPDATE jobs SET status = %s, completed_at = %s WHERE id = ANY(%s)",
        (status, NOW - timedelta(days=days), ids),
    )
    conn.execute(
        "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
        " SELECT id, 1, queue, job_type, completed_at, 'succeeded'"
        " FROM jobs_all WHERE id = ANY(%s)",
        (ids,),
    )
    return ids


def test_retention_deletes_old_finished_jobs_and_keeps_dead_ones(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maintenance, "BATCH", 7)  # several batches
    old_ok = age_jobs(conn, "succeeded", 10, 20)
    old_cancelled = age_jobs(conn, "cancelled", 10, 3)
    recent = age_jobs(conn, "succeeded", 1, 5)
    dead = age_jobs(conn, "dead", 100, 4)
    pending = jobs.enqueue(conn, "t", {}).id
    conn.commit()
    counts = maintenance.retention(conn, {"attempts_days": 5}, now=NOW)
    assert counts["jobs"] == len(old_ok) + len(old_cancelled)
    left = {r[0] for r in conn.execute("SELECT id FROM jobs_all").fetchall()}
    assert left == {*recent, *dead, pending}
    # attempts older than 5 days go too (including the dead jobs' history, by age)
    assert counts["attempts"] == 20 + 3 + 4
    again = maintenance.retention(conn, {"attempts_days": 5}, now=NOW)
    assert again["jobs"] == 0 and again["attempts"] == 0  # idempotent
    maintenance.retention(conn, {"dead_days": 30}, now=NOW)
    assert not {r[0] for r in conn.execute("SELECT id FROM jobs_all").fetchall()} & set(dead)


def test_lease_recovery_job(conn: psycopg.Connection[Any], db_url: str) -> None:
    job_id = jobs.enqueue(conn, "t", {}, now=NOW).id
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as c:
        store = PgJobStore(c)
        (job,) = store.claim({"default": 1}, "crashed", timedelta(seconds=30), NOW)
        # It started (a lease never marked started would go back to 'pending').
        store.heartbeat([(job_id, job.lease_token)], timedelta(seconds=30), NOW, started=[job_id])
    assert maintenance.lease_recovery(conn, now=NOW + timedelta(minutes=1)) == 1
    assert jobs.get_job(conn, job_id).status == "retrying"
    assert maintenance.lease_recovery(conn, now=NOW + timedelta(minutes=1)) == 0


def test_builtin_and_user_definitions_never_remove_each_other(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    created = maintenance.sync_maintenance(conn, now=NOW)
    assert sorted(created.created) == [
        "tockwork.attempt_rollup", "tockwork.lease_recovery", "tockwork.partitions",
        "tockwork.retention", "tockwork.tzdb_recompute",
    ]  # fmt: skip
    user_file = tmp_path / "defs.toml"
    user_file.write_text('[[schedule]]\nkey = "report"\nrule = "daily@06:00"\njob_type = "r"\n')
    result = sync(conn, load_file(user_file), now=NOW)
    assert (result.created, result.deleted) == (["report"], [])
    again = maintenance.sync_maintenance(conn, retention={"succeeded_days": 3}, now=NOW)
    assert (again.updated, again.deleted) == (["tockwork.retention"], [])
    assert scheduler.get_schedule(conn, key="report").job_type == "r"
    assert scheduler.get_schedule(conn, key="tockwork.retention").payload["succeeded_days"] == 3
    reserved = tmp_path / "reserved.toml"
    reserved.write_text(
        '[[schedule]]\nkey = "tockwork.mine"\nrule = "daily@06:00"\njob_type = "r"\n'
    )
    with pytest.raises(scheduler.InvalidSchedule) as info:
        sync(conn, load_file(reserved), now=NOW)
    assert info.value.field == "key"


def test_bad_retention_settings_are_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        maintenance.retention(conn, {"succeeded_days": -1}, now=NOW)
    assert info.value.field == "succeeded_days"
    with pytest.raises(jobs.InvalidJob):
        maintenance.definitions(retention={"forever": 1})


def test_retention_deletes_processed_outbox_events_and_keeps_dead_ones(
    conn: psycopg.Connection[Any],
) -> None:
    ids = [
        jobs.outbox.record(
            conn, aggregate_type="order", aggregate_id=str(i), event_type="e", payload={}
        )
        for i in range(3)
    ]
    conn.execute(
        "UPDATE outbox_events SET processed_at = %s WHERE id = ANY(%s)",
        (NOW - timedelta(days=30), ids[:2]),
    )
    conn.execute("UPDATE outbox_events SET dead_at = %s WHERE id = %s", (NOW, ids[2]))
    conn.commit()
    assert maintenance.retention(conn, now=NOW)["outbox"] == 2
    left = [r[0] for r in conn.execute("SELECT id FROM outbox_events").fetchall()]
    assert left == [ids[2]]


def test_retention_deletes_old_schedule_skips(conn: psycopg.Connection[Any]) -> None:
    schedule = scheduler.create_schedule(
        conn, job_type="r", rule="daily@06:00", zone="UTC", now=NOW - timedelta(days=60)
    )
    for days in (40, 31, 29):
        conn.execute(
            "INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind,"
            " recorded_at) VALUES (%s, %s, %s, 'skipped', %s)",
            (schedule.id, f"k{days}", NOW, NOW - timedelta(days=days)),
        )
    conn.commit()
    counts = maintenance.retention(conn, now=NOW)
    assert counts["skips"] == 2
    left = [r[0] for r in conn.execute("SELECT occurrence_key FROM schedule_skips").fetchall()]
    assert left == ["k29"]
    assert maintenance.retention(conn, {"skips_days": 0}, now=NOW)["skips"] == 1


def test_retention_removes_finished_one_off_schedules_only(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Issue 24: a finished schedule is kept and marked; a finished one-off schedule goes after
    ``finished_once_days``, a finished recurring one (end_at, max_runs) stays."""
    start = NOW - timedelta(days=40)
    once = scheduler.create_schedule(
        conn, job_type="r", rule="once:2026-01-01T00:00", zone="UTC", now=start,
        allow_past=True,
    )  # fmt: skip
    recurring = scheduler.create_schedule(
        conn, job_type="r", rule="daily@06:00", zone="UTC", now=start, allow_past=True,
        end_at=start - timedelta(days=1),
    )  # fmt: skip
    conn.commit()
    assert once.finished and recurring.finished
    assert maintenance.retention(conn, now=NOW - timedelta(days=20))["finished_schedules"] == 0
    assert maintenance.retention(conn, now=NOW)["finished_schedules"] == 1
    left = [r[0] for r in conn.execute("SELECT id FROM schedules").fetchall()]
    assert left == [recurring.id]


def test_every_definition_has_a_handler_and_the_rollup_job_runs(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", db_url)
    handlers = maintenance.app()
    assert {d.job_type for d in maintenance.definitions()} == set(handlers)
    with psycopg.connect(db_url) as conn, conn.transaction():
        conn.execute(
            "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
            " VALUES (1, 1, 'default', 't', now() - interval '10 minutes', 'succeeded')"
        )
        jobs.enqueue(conn, "tockwork.attempt_rollup", {}, queue="maintenance")
    worker = jobs.Worker(db_url, handlers, {"maintenance": 1}, listen=False)
    worker.run_until_idle()
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT count(*), sum(attempts), min(minute) <= now() - interval '2 hours'"
            " FROM job_attempt_minutes"
        ).fetchone()
        (status,) = conn.execute(
            "SELECT status FROM jobs_all WHERE job_type = 'tockwork.attempt_rollup'"
        ).fetchone() or (None,)
    # Two hours of closed minutes filled in (backfill), the one attempt among them.
    assert status == "succeeded" and rows is not None
    assert rows == (120, 1, True)


def test_replicas_starting_at_once_sync_the_definitions_once(db_url: str) -> None:
    """Every scheduler replica syncs the built-in definitions when it starts (issue 26): two
    syncs in concurrent transactions do not both create a key (a unique violation would stop
    the second replica); the second waits on the lock, then finds them unchanged."""
    import threading

    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        first.execute("BEGIN")
        created = maintenance.sync_maintenance(first, now=NOW)
        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(maintenance.sync_maintenance(second, now=NOW))
        )
        thread.start()
        # The second sync waits on the advisory lock: an event in the database, not a time.
        with psycopg.connect(db_url, autocommit=True) as watcher:
            for _ in range(500):
                row = watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                if row == (1,):
                    break
                thread.join(0.01)
            assert row == (1,), "the second sync did not wait on the first"
        first.commit()
        thread.join(30)
        second.commit()
    assert len(created.created) == len(maintenance.definitions())
    assert len(results) == 1 and results[0].created == []
    assert len(results[0].unchanged) == len(maintenance.definitions())
