"""A tick batch writes its jobs in run_at order (the workers' claim order), so that a jittered
herd lands in the table as runs of pages the claims walk front to back (scheduler.tick); the
order changes where rows go, never which job belongs to which schedule or occurrence. Time is
pinned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import scheduler
from scheduler import Scheduler
from scheduler.planner import jitter_offset
from timezones import FrozenClock

FRI_1200 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)


def jobs_by_id(conn: psycopg.Connection[Any]) -> list[tuple[int, int, str, datetime]]:
    """(job id, schedule id, occurrence key, run_at) of every job, in id (insert) order."""
    rows = conn.execute(
        "SELECT id, (payload->'tockwork_schedule'->>'id')::bigint,"
        " payload->'tockwork_schedule'->>'occurrence', run_at FROM jobs_all ORDER BY id"
    ).fetchall()
    conn.commit()
    return [(int(r[0]), int(r[1]), str(r[2]), r[3]) for r in rows]


def test_each_batch_of_a_jittered_herd_is_written_in_run_at_order(db_url: str) -> None:
    """300 schedules with 300 s of jitter, ticked in batches of 100: within each batch the ids
    follow run_at; every job still has its schedule's own jittered run_at, and each schedule's
    last_job_id names its own job."""
    with psycopg.connect(db_url) as conn:
        ids = scheduler.create_schedules(
            conn,
            [
                {"job_type": "remind", "rule": "daily@08:00", "zone": "UTC", "subject": i,
                 "jitter": 300}
                for i in range(300)
            ],
            now=FRI_1200,
        )  # fmt: skip
        conn.commit()
        keys: dict[int, str] = dict(
            conn.execute("SELECT id, next_occurrence_key FROM schedules").fetchall()
        )
        conn.commit()
        replica = Scheduler(db_url, clock=FrozenClock(SAT_0800 - timedelta(minutes=1)),
                            batch_size=100, max_lookahead=timedelta(0))  # fmt: skip
        try:
            result = replica.tick()
        finally:
            replica.close()
        assert (result.enqueued, result.batches) == (300, 4)  # 3 full batches, 1 empty
        jobs = jobs_by_id(conn)
        rows = conn.execute("SELECT id, last_job_id FROM schedules").fetchall()
        last_job: dict[int, int] = dict(rows)
        conn.commit()
    assert {s: run_at for _, s, _, run_at in jobs} == {
        i: SAT_0800 + jitter_offset(i, keys[i], 300) for i in ids
    }
    assert last_job == {s: job_id for job_id, s, _, _ in jobs}
    for start in range(0, 300, 100):
        run_ats = [run_at for *_, run_at in jobs[start : start + 100]]
        assert run_ats == sorted(run_ats), f"batch at {start} not in run_at order"
    # Not vacuous: in schedule order the rows would not have been sorted.
    by_schedule = [run_at for _, _, _, run_at in sorted(jobs, key=lambda j: j[1])]
    assert by_schedule != sorted(by_schedule)
    whole = [run_at for *_, run_at in jobs]
    assert whole != sorted(whole)  # three batches, each sorted on its own


def test_occurrences_reordered_within_a_schedule_keep_their_last_job(db_url: str) -> None:
    """Every 15 minutes with quiet hours until 07:30 (deferred) and 600 s of jitter: the
    occurrences 06:30 .. 07:15 all run at 07:30 plus their own jitter, so run_at order is not
    occurrence order. The schedule's last_job_id is still the job of its last occurrence."""
    now = datetime(2026, 3, 7, 6, 20, tzinfo=UTC)
    with psycopg.connect(db_url) as conn:
        quiet = {"start": "22:00", "end": "07:30", "action": "defer"}
        created = [
            scheduler.create_schedule(
                conn, job_type="r", rule="every:15m", zone="UTC", subject=i, jitter=600,
                quiet_hours=quiet, now=now,
            )
            for i in range(5)
        ]  # fmt: skip
        conn.commit()
        replica = Scheduler(db_url, clock=FrozenClock(now), lookahead=timedelta(minutes=56),
                            max_lookahead=timedelta(0))  # fmt: skip
        try:
            assert replica.tick().enqueued == 5 * 4
        finally:
            replica.close()
        jobs = jobs_by_id(conn)
        schedules = [scheduler.get_schedule(conn, s.id) for s in created]
        conn.commit()
    reordered = 0
    for s in schedules:
        own = [(occ, job_id, run_at) for job_id, sid, occ, run_at in jobs if sid == s.id]
        assert [occ for occ, _, _ in sorted(own)] == [
            "2026-03-07T06:30:00Z", "2026-03-07T06:45:00Z", "2026-03-07T07:00:00Z",
            "2026-03-07T07:15:00Z",
        ]  # fmt: skip
        last_occurrence, last_job, _ = max(own)
        assert (s.last_occurrence_key, s.last_job_id) == (last_occurrence, last_job)
        run_ats = [run_at for _, _, run_at in sorted(own)]
        assert all(at >= datetime(2026, 3, 7, 7, 30, tzinfo=UTC) for at in run_ats)
        reordered += run_ats != sorted(run_ats)
    assert reordered  # not vacuous: some schedule's jobs were written out of occurrence order
