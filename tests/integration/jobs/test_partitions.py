"""History in day partitions (jobs.partitions): created ahead, dropped whole, the default
partition emptied by batches, and effect-once exact across a partition boundary (midnight)."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest

import jobs
from jobs import effects, partitions
from jobs.maintenance import RetentionConfig, clean
from jobs.maintenance import ensure_partitions as ensure_queue_partitions
from scheduler import maintenance
from tests.locks import wait_for_lock_wait

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
MIDNIGHT = datetime(2026, 7, 1, tzinfo=UTC)


def where(conn: psycopg.Connection[Any], table: str) -> list[tuple[str, int]]:
    """Rows per partition of ``table``: ``[(partition, rows)]``, by partition name."""
    rows = conn.execute(
        f"SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1 ORDER BY 1"  # noqa: S608
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def attempt(conn: psycopg.Connection[Any], job_id: int, at: datetime) -> None:
    conn.execute(
        "INSERT INTO job_attempts (job_id, attempt, queue, job_type, finished_at, outcome)"
        " VALUES (%s, 1, 'default', 't', %s, 'succeeded')",
        (job_id, at),
    )


def test_partitions_are_created_ahead_and_rows_go_to_their_day(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    conn.autocommit = True
    created = maintenance.ensure_partitions(conn, ahead_days=2, now=NOW)
    assert created == {
        "job_attempts": 3, "job_effects": 3, "job_history": 3, "schedule_skips": 3
    }  # fmt: skip
    assert partitions.partitions(conn, partitions.ATTEMPTS) == [
        date(2026, 6, 30), date(2026, 7, 1), date(2026, 7, 2)
    ]  # fmt: skip
    again = maintenance.ensure_partitions(conn, ahead_days=2, now=NOW)
    assert again == {
        "job_attempts": 0, "job_effects": 0, "job_history": 0, "schedule_skips": 0
    }  # idempotent  # fmt: skip
    attempt(conn, 1, NOW)
    attempt(conn, 2, MIDNIGHT)  # the first instant of the next day
    attempt(conn, 3, NOW + timedelta(days=10))  # no partition: the default one takes it
    assert where(conn, "job_attempts") == [
        ("job_attempts_default", 1), ("job_attempts_p20260630", 1), ("job_attempts_p20260701", 1)
    ]  # fmt: skip
    with pytest.raises(jobs.InvalidJob) as info:
        partitions.ensure_partitions(conn, partitions.ATTEMPTS, ahead_days=-1, now=NOW)
    assert info.value.field == "ahead_days"


def test_a_day_whose_rows_sit_in_the_default_partition_is_skipped(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    attempt(conn, 1, NOW)  # before any partition exists: into the default one
    assert partitions.ensure_partitions(conn, partitions.ATTEMPTS, ahead_days=1, now=NOW) == [
        date(2026, 7, 1)
    ]
    assert where(conn, "job_attempts") == [("job_attempts_default", 1)]
    assert [r.outcome for r in jobs.job_attempts(conn, 1)] == ["succeeded"]


def test_retention_drops_expired_days_whole_and_deletes_the_default_by_batches(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    start = NOW - timedelta(days=40)
    for day in range(41):
        partitions.ensure_partitions(
            conn, partitions.ATTEMPTS, ahead_days=0, now=start + timedelta(days=day)
        )
        partitions.ensure_partitions(
            conn, partitions.EFFECTS, ahead_days=0, now=start + timedelta(days=day)
        )
    for day in range(41):
        attempt(conn, day, start + timedelta(days=day))
        attempt(conn, day, start + timedelta(days=day, hours=1))
    old_default = NOW - timedelta(days=100)
    attempt(conn, 999, old_default)  # a converted or stray row: in the default partition
    for i in range(3):
        effects.record_once(conn, f"e{i}", now=NOW - timedelta(days=35 - i))
    batches: list[tuple[str, int]] = []
    counts = clean(
        conn,
        RetentionConfig(attempt_retention=timedelta(days=30), effect_retention=timedelta(days=30)),
        now=NOW,
        on_batch=lambda kind, n: batches.append((kind, n)),
    )
    # Days whose end is 30 days or more before NOW: June 30 12:00 - 30 days = May 31 12:00, so
    # the days May 21 .. May 30 (10 days of 2 attempts) go whole; May 31 stays (rounds up).
    assert counts["attempts"] == 10 * 2 + 1
    assert [n for kind, n in batches if kind == "job_attempts_partition"] == [2] * 10
    assert [n for kind, n in batches if kind == "attempts"] == [1]  # the default's row
    assert partitions.partitions(conn, partitions.ATTEMPTS)[0] == date(2026, 5, 31)
    assert counts["effects"] == 3  # May 26, 27, 28: their days are gone
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (0,)
    again = clean(conn, RetentionConfig(attempt_retention=timedelta(days=30)), now=NOW)
    assert again["attempts"] == 0 and again["effects"] == 0


def test_an_effect_recorded_before_midnight_is_found_after_it(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    partitions.ensure_partitions(conn, partitions.EFFECTS, ahead_days=3, now=NOW)
    assert effects.record_once(conn, "push:1", now=MIDNIGHT - timedelta(hours=3))
    assert effects.record_many(conn, ["push:2"], now=MIDNIGHT - timedelta(minutes=1)) == {"push:2"}
    after = MIDNIGHT + timedelta(seconds=1)
    assert not effects.record_once(conn, "push:1", now=after)
    assert not effects.record_once(conn, "push:2", now=after)
    assert effects.record_many(
        conn, ["push:1", "push:2", "push:3"], now=after + timedelta(days=1)
    ) == {"push:3"}
    assert effects.recorded(conn, ["push:1", "push:2", "push:3", "push:4"]) == {
        "push:1", "push:2", "push:3"
    }  # fmt: skip
    # push:2 was recorded within an hour of midnight: its guard row is in the next day.
    assert where(conn, "job_effects") == [
        ("job_effects_p20260630", 2), ("job_effects_p20260701", 1), ("job_effects_p20260702", 1)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("first_at", "second_at"),
    [
        (MIDNIGHT - timedelta(seconds=1), MIDNIGHT + timedelta(seconds=1)),
        (MIDNIGHT + timedelta(seconds=1), MIDNIGHT - timedelta(seconds=1)),
    ],
    ids=["earlier-first", "later-first"],
)
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_concurrent_records_across_midnight_record_once(
    db_url: str, first_at: datetime, second_at: datetime, outcome: str
) -> None:
    """Two transactions record one key, on either side of midnight (two partitions), the second
    while the first is open: the second waits for the first and is new only if it rolled back."""
    with psycopg.connect(db_url, autocommit=True) as c:
        partitions.ensure_partitions(c, partitions.EFFECTS, ahead_days=3, now=NOW)
    results: list[bool] = []
    with psycopg.connect(db_url) as first:
        assert effects.record_once(first, "push:9", now=first_at)

        def second() -> None:
            with psycopg.connect(db_url, application_name="second") as c, c.transaction():
                results.append(effects.record_once(c, "push:9", now=second_at))

        thread = threading.Thread(target=second)
        thread.start()
        wait_for_lock_wait(db_url, "second")
        if outcome == "commit":
            first.commit()
        else:
            first.rollback()
        thread.join(timeout=30)
    assert results == [outcome == "rollback"]
    with psycopg.connect(db_url) as c:
        found = {r[0] for r in c.execute("SELECT recorded_at FROM job_effects").fetchall()}
    # A losing record may leave its own day's row beside the winner's (it found the key only
    # through the conflict): the key is recorded either way, and the winner's rows are all there.
    assert (first_at in found) == (outcome == "commit")
    assert (found == {second_at}) == (outcome == "rollback")


def test_concurrent_batches_across_midnight_record_each_key_once(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        partitions.ensure_partitions(c, partitions.EFFECTS, ahead_days=3, now=NOW)
    results: list[set[str]] = []
    with psycopg.connect(db_url) as first:
        assert effects.record_many(first, ["a", "b"], now=MIDNIGHT - timedelta(minutes=5)) == {
            "a", "b"
        }  # fmt: skip

        def second() -> None:
            with psycopg.connect(db_url, application_name="second") as c, c.transaction():
                results.append(
                    effects.record_many(c, ["b", "c"], now=MIDNIGHT + timedelta(minutes=5))
                )

        thread = threading.Thread(target=second)
        thread.start()
        wait_for_lock_wait(db_url, "second")
        first.commit()
        thread.join(timeout=30)
    assert results == [{"c"}]


def test_ensure_partitions_of_the_queue(conn: psycopg.Connection[Any]) -> None:
    conn.autocommit = True
    assert ensure_queue_partitions(conn, ahead_days=0, now=NOW) == {
        "job_attempts": 1, "job_effects": 1, "job_history": 1
    }  # fmt: skip


def test_the_maintenance_job_creates_the_week_ahead(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tockwork.partitions`` as the maintenance worker runs it (the database clock)."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    handler = maintenance.app()["tockwork.partitions"]
    handler(cast(jobs.Job, None))  # the job's fields are not read
    with psycopg.connect(db_url) as c:
        today = c.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
        assert today is not None
        week = [today[0] + timedelta(days=n) for n in range(maintenance.AHEAD_DAYS + 1)]
        for table in (partitions.ATTEMPTS, partitions.EFFECTS, maintenance.SKIPS):
            assert partitions.partitions(c, table) == week
