"""The adaptive lookahead: a herd the measured rate cannot enqueue within the lookahead is
started on early enough to be in the table before its instant, bounded by max_lookahead; how
early a job is inserted changes, never its run_at. Time is pinned; the rate is pinned
(``tick_rate``) except where its measurement is the point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import scheduler
from scheduler import InvalidSchedule, Scheduler
from scheduler.planner import LOOKAHEAD_SAFETY, adaptive_lookahead, jitter_offset
from scheduler.tick import INITIAL_RATE, PROBE_EVERY

FRI_1200 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
HERD = 200
MINUTE = timedelta(minutes=1)


def herd(conn: psycopg.Connection[Any], n: int = HERD, jitter: int = 0) -> list[int]:
    """``n`` reminders due at 08:00 UTC on Saturday."""
    ids = scheduler.create_schedules(
        conn,
        [
            {"job_type": "remind", "rule": "daily@08:00", "zone": "UTC", "subject": i,
             "jitter": jitter}
            for i in range(n)
        ],
        now=FRI_1200,
    )  # fmt: skip
    conn.commit()
    return ids


def jobs_run_at(conn: psycopg.Connection[Any]) -> dict[int, datetime]:
    rows = conn.execute(
        "SELECT (payload->'tockwork_schedule'->>'id')::bigint, run_at FROM jobs_all"
    ).fetchall()
    conn.commit()
    return {int(schedule_id): run_at for schedule_id, run_at in rows}


def test_the_formula() -> None:
    """Enqueueing ``due`` at ``rate`` takes due / rate seconds: look that far ahead (times the
    safety factor, plus the margin), never less than lookahead, never more than the maximum."""
    ten = timedelta(minutes=10)
    assert adaptive_lookahead(100, 1000.0, MINUTE, ten) == MINUTE
    assert adaptive_lookahead(100_000, 1000.0, MINUTE, ten) == timedelta(
        seconds=100 * LOOKAHEAD_SAFETY
    )
    assert adaptive_lookahead(100_000, 1000.0, MINUTE, ten, timedelta(seconds=10)) == timedelta(
        seconds=100 * LOOKAHEAD_SAFETY + 10
    )
    assert adaptive_lookahead(10**9, 1000.0, MINUTE, ten) == ten
    assert adaptive_lookahead(0, 0.0, MINUTE, ten) == ten  # no rate: as far as allowed


def test_a_herd_the_rate_cannot_keep_up_with_is_started_early(db_url: str) -> None:
    """200 schedules at 1/s take 200 s, times 1.5, plus the 10 s probe margin: 310 s. At 07:54
    (6 min ahead) the herd is beyond that; at 07:55 (5 min ahead) it is inside, and every job is
    enqueued then, with run_at 08:00, not earlier."""
    with psycopg.connect(db_url) as conn:
        herd(conn)
        replica = Scheduler(db_url, lookahead=MINUTE, tick_rate=1.0)
        try:
            assert replica.tick(SAT_0800 - timedelta(minutes=6)).enqueued == 0
            assert replica.effective_lookahead == timedelta(seconds=310)
            result = replica.tick(SAT_0800 - timedelta(minutes=5))
            assert result.enqueued == HERD
            assert replica.effective_lookahead == timedelta(seconds=310)
        finally:
            replica.close()
        assert set(jobs_run_at(conn).values()) == {SAT_0800}


def test_a_fast_replica_keeps_the_configured_lookahead(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        herd(conn)
        replica = Scheduler(db_url, lookahead=MINUTE, tick_rate=1e6)
        try:
            assert replica.tick(SAT_0800 - timedelta(minutes=5)).enqueued == 0
            assert replica.effective_lookahead == MINUTE
            assert replica.tick(SAT_0800 - MINUTE).enqueued == HERD
        finally:
            replica.close()


def test_the_extension_is_bounded_by_max_lookahead(db_url: str) -> None:
    """At 0.001/s the herd would want 300,000 s of lead: it gets 4 minutes, and before it is
    within them it is not even counted."""
    with psycopg.connect(db_url) as conn:
        herd(conn)
        replica = Scheduler(
            db_url, lookahead=MINUTE, max_lookahead=timedelta(minutes=4), tick_rate=0.001
        )
        try:
            assert replica.tick(SAT_0800 - timedelta(minutes=4) - PROBE_EVERY).enqueued == 0
            assert replica.effective_lookahead == MINUTE
            assert replica.tick(SAT_0800 - timedelta(minutes=4)).enqueued == HERD
            assert replica.effective_lookahead == timedelta(minutes=4)
        finally:
            replica.close()


def test_max_lookahead_at_or_below_lookahead_turns_the_adaptation_off(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        herd(conn)
        replica = Scheduler(db_url, lookahead=MINUTE, max_lookahead=MINUTE, tick_rate=0.001)
        try:
            assert replica.tick(SAT_0800 - timedelta(minutes=2)).enqueued == 0
            assert replica.effective_lookahead == MINUTE
        finally:
            replica.close()


def test_jitter_is_the_planners_whatever_the_horizon(db_url: str) -> None:
    """Enqueued 5 minutes early by the extension, each job still runs at 08:00 plus its own
    deterministic jitter, as it would have with the plain lookahead."""
    with psycopg.connect(db_url) as conn:
        ids = herd(conn, jitter=300)
        keys: dict[int, str] = dict(
            conn.execute("SELECT id, next_occurrence_key FROM schedules").fetchall()
        )
        conn.commit()
        replica = Scheduler(db_url, lookahead=MINUTE, tick_rate=1.0)
        try:
            assert replica.tick(SAT_0800 - timedelta(minutes=5)).enqueued == HERD
        finally:
            replica.close()
        run_ats = jobs_run_at(conn)
    assert run_ats == {i: SAT_0800 + jitter_offset(i, keys[i], 300) for i in ids}
    assert len(set(run_ats.values())) > HERD // 2  # spread, not all at 08:00


def test_the_count_is_probed_once_per_probe_interval_of_tick_time(db_url: str) -> None:
    """Between probes the last figure stands: schedules created a moment after a probe are seen
    at the next one."""
    with psycopg.connect(db_url) as conn:
        replica = Scheduler(db_url, lookahead=MINUTE, tick_rate=1.0)
        try:
            start = SAT_0800 - timedelta(minutes=5)
            assert replica.tick(start).enqueued == 0  # nothing yet
            herd(conn)
            assert replica.tick(start + PROBE_EVERY / 2).enqueued == 0  # the old count stands
            assert replica.tick(start + PROBE_EVERY).enqueued == HERD  # counted again
        finally:
            replica.close()


def test_the_rate_is_measured_over_full_batches(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        herd(conn, n=120)
        replica = Scheduler(db_url, lookahead=timedelta(minutes=5), batch_size=50)
        try:
            assert replica.rate == INITIAL_RATE
            assert replica.tick(SAT_0800 - MINUTE).enqueued == 120
            assert replica.rate != INITIAL_RATE
            assert replica.rate > 0
        finally:
            replica.close()


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(InvalidSchedule, match="tick_rate"):
        Scheduler("postgresql://unused", tick_rate=0)
