"""Schedules as operators run them (issue 24): overlap policies, trigger now, backfill, pause
with a note and an end, lifetime (start_at, end_at, max_runs), paging. Real PostgreSQL; time is
pinned (the scheduler's clock and every call's ``now``); jobs are claimed and completed through
the worker's store, as a worker does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs.metrics import REGISTRY
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from scheduler import InvalidSchedule, Overlap, Scheduler
from timezones import FrozenClock

T0 = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)
LEASE = timedelta(minutes=30)


@pytest.fixture
def store(db_url: str) -> Iterator[PgJobStore]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield PgJobStore(c)


def tick(db_url: str, at: datetime) -> scheduler.TickResult:
    replica = Scheduler(db_url, clock=FrozenClock(at), lookahead=timedelta(minutes=5))
    try:
        return replica.tick(at)
    finally:
        replica.close()


def jobs_of(conn: psycopg.Connection[Any], schedule_id: int) -> list[tuple[str, str]]:
    """(nominal instant as HH:MM UTC, status) of the schedule's jobs, by id."""
    rows = conn.execute(
        "SELECT to_char((payload->'tockwork_schedule'->>'at')::timestamptz AT TIME ZONE 'UTC',"
        " 'HH24:MI'), status FROM jobs_all "
        "WHERE (payload->'tockwork_schedule'->>'id')::bigint = %s ORDER BY id",
        (schedule_id,),
    ).fetchall()
    return [(k, s) for k, s in rows]


def skips_of(conn: psycopg.Connection[Any], schedule_id: int, kind: str) -> list[str]:
    rows = conn.execute(
        "SELECT occurrence_key FROM schedule_skips WHERE schedule_id = %s AND kind = %s "
        "ORDER BY occurrence_at",
        (schedule_id, kind),
    ).fetchall()
    return [r[0] for r in rows]


def every_minute(conn: psycopg.Connection[Any], **kw: Any) -> scheduler.Schedule:
    s = scheduler.create_schedule(
        conn, job_type="maint", rule="every:1m", zone="UTC", key="m", now=T0, **kw
    )
    conn.commit()
    return s


def test_definitions_skip_and_reminders_allow_by_default(conn: psycopg.Connection[Any]) -> None:
    named = scheduler.create_schedule(
        conn, job_type="m", rule="daily@08:00", zone="UTC", key="k", now=T0
    )
    reminder = scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="UTC", subject="u", now=T0
    )
    assert (named.overlap, reminder.overlap) == (Overlap.SKIP, Overlap.ALLOW)
    with pytest.raises(InvalidSchedule) as info:
        scheduler.create_schedule(
            conn, job_type="m", rule="daily@08:00", zone="UTC", overlap="queue", now=T0
        )
    assert info.value.field == "overlap"


def test_skip_never_runs_two_at_once_and_counts_the_skips(
    conn: psycopg.Connection[Any], db_url: str, store: PgJobStore
) -> None:
    """A maintenance job that takes 2.5 minutes on an every-minute rule: the occurrences while
    it runs are skipped and counted, never enqueued beside it."""
    s = every_minute(conn, overlap="skip")
    minute = timedelta(minutes=1)
    running: list[Any] = []
    counted = REGISTRY.get_sample_value("tockwork_scheduler_overlap_skips_total") or 0.0
    for i in range(1, 11):
        now = T0 + i * minute
        tick(db_url, now)
        if i % 3 == 1:  # the job runs 2.5 minutes: from this tick to before the third
            claimed = store.claim({"default": 10}, "w", LEASE, now)
            assert len(claimed) == 1
            running = claimed
        if i % 3 == 0 and running:
            store.complete([Finished(j, SUCCEEDED, now, 1.0) for j in running], "w", now)
            running = []
        active = conn.execute(
            "SELECT count(*) FROM jobs_all WHERE status IN ('pending', 'leased', 'retrying')"
        ).fetchone()
        assert active is not None and active[0] <= 1
    after = scheduler.get_schedule(conn, s.id)
    enqueued = jobs_of(conn, s.id)
    skipped = skips_of(conn, s.id, "overlap")
    # Minutes 1, 4, 7, 10 ran; 2, 3, 5, 6, 8, 9 were skipped (the job was leased).
    assert [k for k, _ in enqueued] == ["00:01", "00:04", "00:07", "00:10"]
    assert len(skipped) == 6 and after.overlap_skipped_count == 6
    assert after.enqueued_count == 4
    # The ticks' metric counts them too (the replicas' default registry).
    assert REGISTRY.get_sample_value("tockwork_scheduler_overlap_skips_total") == counted + 6


def test_buffer_one_keeps_one_waiting(
    conn: psycopg.Connection[Any], db_url: str, store: PgJobStore
) -> None:
    s = every_minute(conn, overlap="buffer_one")
    tick(db_url, T0 + timedelta(minutes=1))
    (job,) = store.claim({"default": 10}, "w", LEASE, T0 + timedelta(minutes=1))
    for m in (2, 3, 4):
        tick(db_url, T0 + timedelta(minutes=m))
    assert [st for _, st in jobs_of(conn, s.id)] == ["leased", "pending"]
    assert len(skips_of(conn, s.id, "overlap")) == 2
    concurrency = conn.execute(
        "SELECT DISTINCT concurrency_key FROM jobs_all WHERE job_type = 'maint'"
    ).fetchall()
    assert concurrency == [(f"schedule:{s.id}",)]
    store.complete([Finished(job, SUCCEEDED, T0, 1.0)], "w", T0 + timedelta(minutes=4))
    tick(db_url, T0 + timedelta(minutes=5))
    assert [st for _, st in jobs_of(conn, s.id)] == ["succeeded", "pending", "pending"]


def test_cancel_previous_replaces_the_waiting_job(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = every_minute(conn, overlap="cancel_previous")
    tick(db_url, T0 + timedelta(minutes=1))
    tick(db_url, T0 + timedelta(minutes=2))
    assert [st for _, st in jobs_of(conn, s.id)] == ["cancelled", "pending"]


def test_allow_enqueues_ahead_and_overlap_policies_wait_for_the_instant(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    allow = every_minute(conn, overlap="allow")
    skip = scheduler.create_schedule(
        conn, job_type="maint", rule="every:1m", zone="UTC", key="s", now=T0, overlap="skip"
    )
    conn.commit()
    tick(db_url, T0 + timedelta(seconds=30))  # lookahead 5 min
    assert len(jobs_of(conn, allow.id)) == 5
    assert jobs_of(conn, skip.id) == []


def test_trigger_twice_with_the_same_nominal_time_is_one_job(
    conn: psycopg.Connection[Any],
) -> None:
    s = every_minute(conn, overlap="allow")
    at = T0 + timedelta(minutes=3, seconds=7)
    first = scheduler.trigger(conn, s.id, at=at, now=T0 + timedelta(minutes=4))
    again = scheduler.trigger(conn, s.id, at=at, now=T0 + timedelta(minutes=5))
    assert first.outcome == "created" and again.outcome == "existing"
    assert first.job_id == again.job_id
    assert first.occurrence_key == "manual:2026-06-01T00:03:07Z"
    other = scheduler.trigger(conn, s.id, now=T0 + timedelta(minutes=6))
    assert other.outcome == "created" and other.job_id != first.job_id


def test_trigger_applies_the_overlap_policy(conn: psycopg.Connection[Any]) -> None:
    s = every_minute(conn, overlap="skip")
    first = scheduler.trigger(conn, s.id, now=T0 + timedelta(minutes=4))
    second = scheduler.trigger(conn, s.id, now=T0 + timedelta(minutes=5))
    assert first.outcome == "created"
    assert second.outcome == "skipped" and second.job_id is None
    assert second.reason is not None and str(first.job_id) in second.reason
    assert scheduler.get_schedule(conn, s.id).overlap_skipped_count == 1


def test_backfill_over_a_half_run_window_doubles_nothing_and_misses_nothing(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="maint", rule="every:10m", zone="UTC", key="b", now=T0, overlap="allow"
    )
    conn.commit()
    tick(db_url, T0 + timedelta(minutes=25))  # ran 00:10 and 00:20 (and ahead to 00:30)
    ran = {k for k, _ in jobs_of(conn, s.id)}
    now = T0 + timedelta(hours=2)
    preview = scheduler.backfill(
        conn, s.id, start=T0, end=T0 + timedelta(hours=1), dry_run=True, now=now
    )
    assert preview.count("existing") == 3 and preview.count("would_create") == 3
    assert jobs_of(conn, s.id) == [(k, "pending") for k in sorted(ran)]  # a preview writes nothing
    seen: list[str] = []
    start = T0
    while True:
        done = scheduler.backfill(
            conn, s.id, start=start, end=T0 + timedelta(hours=1), batch=2, now=now
        )
        conn.commit()
        seen.extend(o.occurrence_key for o in done.occurrences)
        if done.resume_from is None:
            break
        start = done.resume_from
    keys = [k for k, _ in jobs_of(conn, s.id)]
    assert len(keys) == len(set(keys)) == 6  # 00:00 ... 00:50, each once
    assert len(seen) == len(set(seen)) == 6
    again = scheduler.backfill(
        conn, s.id, start=T0, end=T0 + timedelta(hours=1), batch=100, now=now
    )
    assert again.count("existing") == 6 and again.count("created") == 0


def test_backfill_refuses_bad_ranges(conn: psycopg.Connection[Any]) -> None:
    s = every_minute(conn)
    for kw, field in (
        ({"start": T0 + timedelta(hours=1), "end": T0}, "end"),
        ({"start": T0, "end": T0 + timedelta(days=1)}, "end"),  # the future
        ({"start": T0, "end": T0 + timedelta(minutes=1), "batch": 0}, "batch"),
        ({"start": T0, "end": T0 + timedelta(minutes=1), "overlap": "x"}, "overlap"),
        ({"start": T0.replace(tzinfo=None), "end": T0}, "start"),
    ):
        with pytest.raises(InvalidSchedule) as info:
            scheduler.backfill(conn, s.id, now=T0 + timedelta(hours=1), **kw)
        assert info.value.field == field


def test_pause_until_resumes_alone_without_catching_up(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="every:1h", zone="UTC", subject="u", now=T0
    )
    until = T0 + timedelta(hours=3, minutes=30)
    paused = scheduler.pause(conn, s.id, note="migrating the mail server", until=until, now=T0)
    conn.commit()
    assert paused.paused and paused.pause_note == "migrating the mail server"
    assert paused.paused_until == until
    assert paused.next_run_at == T0 + timedelta(hours=4)
    for h in range(1, 6):
        tick(db_url, T0 + timedelta(hours=h))
    after = scheduler.get_schedule(conn, s.id)
    assert not after.paused and after.pause_note is None and after.paused_until is None
    # 01:00-03:00 fell in the pause: not enqueued, not caught up; 04:00 on, as before.
    assert [k for k, _ in jobs_of(conn, s.id)] == ["04:00", "05:00"]
    with pytest.raises(InvalidSchedule) as info:
        scheduler.pause(conn, s.id, until=T0, now=T0 + timedelta(hours=5))
    assert info.value.field == "until"
    with pytest.raises(InvalidSchedule) as info:
        scheduler.pause(conn, s.id, note="x" * 501, now=T0)
    assert info.value.field == "note"


def test_pause_with_an_actor_is_audited(conn: psycopg.Connection[Any]) -> None:
    s = every_minute(conn)
    scheduler.pause(conn, s.id, note="disk full", actor="alice", now=T0)
    scheduler.resume(conn, s.id, actor="alice", now=T0 + timedelta(minutes=1))
    rows = conn.execute("SELECT actor, action, filter FROM dashboard_audit ORDER BY id").fetchall()
    assert rows == [
        ("alice", "pause", {"schedule_id": s.id, "note": "disk full"}),
        ("alice", "resume", {"schedule_id": s.id}),
    ]


def test_max_runs_ends_the_schedule_and_keeps_it(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="every:1h", zone="UTC", subject="u", max_runs=3, now=T0
    )
    conn.commit()
    assert s.remaining_runs == 3
    tick(db_url, T0 + timedelta(hours=1, minutes=58))  # 01:00 and (ahead) 02:00... up to 5 min
    mid = scheduler.get_schedule(conn, s.id)
    assert mid.remaining_runs == 1 and not mid.finished
    tick(db_url, T0 + timedelta(hours=2, minutes=58))
    tick(db_url, T0 + timedelta(hours=5))
    done = scheduler.get_schedule(conn, s.id)
    assert done.remaining_runs == 0 and done.finished and done.next_run_at is None
    assert done.finished_at == T0 + timedelta(hours=2, minutes=58)
    assert len(jobs_of(conn, s.id)) == 3


def test_start_and_end_bound_the_occurrences(conn: psycopg.Connection[Any], db_url: str) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="every:1h", zone="UTC", subject="u", now=T0,
        start_at=T0 + timedelta(hours=2), end_at=T0 + timedelta(hours=4),
    )  # fmt: skip
    conn.commit()
    assert s.next_run_at == T0 + timedelta(hours=2)
    for h in range(1, 7):
        tick(db_url, T0 + timedelta(hours=h))
    assert [k for k, _ in jobs_of(conn, s.id)] == ["02:00", "03:00", "04:00"]
    assert scheduler.get_schedule(conn, s.id).finished
    for kw, field in (
        ({"start_at": T0 + timedelta(hours=2), "end_at": T0 + timedelta(hours=1)}, "end_at"),
        ({"end_at": T0 - timedelta(hours=1)}, "end_at"),
        ({"max_runs": 0}, "max_runs"),
    ):
        with pytest.raises(InvalidSchedule) as info:
            scheduler.create_schedule(conn, job_type="r", rule="every:1h", zone="UTC", now=T0, **kw)
        assert info.value.field == field


def test_under_skip_a_backfill_finds_what_the_tick_ran_and_a_trigger_its_own_job(
    conn: psycopg.Connection[Any], db_url: str, store: PgJobStore
) -> None:
    """The overlap policies keep the occurrence keys: a backfill of a window the tick ran
    under ``skip`` creates nothing twice, and a trigger repeated after its job finished is
    still the same job."""
    s = scheduler.create_schedule(
        conn, job_type="maint", rule="every:10m", zone="UTC", key="d", now=T0
    )
    conn.commit()
    assert s.overlap is Overlap.SKIP
    for m in (10, 20, 30):
        tick(db_url, T0 + timedelta(minutes=m))
        for job in store.claim({"default": 10}, "w", LEASE, T0 + timedelta(minutes=m)):
            store.complete([Finished(job, SUCCEEDED, T0, 1.0)], "w", T0 + timedelta(minutes=m))
    now = T0 + timedelta(hours=1)
    done = scheduler.backfill(conn, s.id, start=T0, end=T0 + timedelta(minutes=35), now=now)
    assert [o.outcome for o in done.occurrences] == ["created", "existing", "existing", "existing"]
    conn.commit()
    # The backfilled job is remembered: under skip, a trigger while it waits is skipped.
    assert scheduler.trigger(conn, s.id, now=now).outcome == "skipped"
    for job in store.claim({"default": 10}, "w", LEASE, now):
        store.complete([Finished(job, SUCCEEDED, now, 1.0)], "w", now)
    at = T0 + timedelta(minutes=41)
    first = scheduler.trigger(conn, s.id, at=at, now=now)
    conn.commit()
    for job in store.claim({"default": 10}, "w", LEASE, now):
        store.complete([Finished(job, SUCCEEDED, now, 1.0)], "w", now)
    again = scheduler.trigger(conn, s.id, at=at, now=now + timedelta(minutes=1))
    assert (first.outcome, again.outcome) == ("created", "existing")
    assert again.job_id == first.job_id


def test_a_triggered_reminder_is_not_superseded_by_a_change_of_rule(
    conn: psycopg.Connection[Any],
) -> None:
    """An occurrence triggered by hand is no occurrence of the rule: the still-due check does
    not call it superseded when the rule changes before it runs; a pause still stops it."""
    from scheduler.reminders import still_due

    s = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="u", now=T0
    )
    run = scheduler.trigger(conn, s.id, at=T0 + timedelta(hours=1), now=T0 + timedelta(hours=1))
    scheduler.update_schedule(conn, s.id, rule="daily@09:00", now=T0 + timedelta(hours=1))
    assert run.job_id is not None
    record = jobs.get_job(conn, run.job_id)
    as_job = jobs.Job(
        id=record.id, queue=record.queue, job_type=record.job_type, payload=record.payload,
        attempt=1, max_attempts=record.max_attempts, idempotency_key=record.idempotency_key,
        organization_id=record.organization_id, priority=record.priority, run_at=record.run_at,
        created_at=record.created_at, lease_token=0,
    )  # fmt: skip
    assert still_due(conn, as_job, now=T0 + timedelta(hours=1)).due
    scheduler.pause(conn, s.id, now=T0 + timedelta(hours=1))
    assert still_due(conn, as_job, now=T0 + timedelta(hours=1)).reason == "paused"
