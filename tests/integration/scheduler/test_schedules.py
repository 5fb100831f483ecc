"""Schedules and the tick against a real PostgreSQL, with time pinned."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import scheduler
from scheduler import InvalidSchedule, Scheduler
from scheduler.planner import jitter_offset
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)  # a Friday; US DST starts Sunday 2026-03-08


def scheduled_jobs(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT idempotency_key, run_at, status, payload->'tockwork_schedule'->>'occurrence'"
            " FROM jobs_all ORDER BY run_at, id"
        ).fetchall()
    ]


def tick(db_url: str, now: datetime, **kwargs: Any) -> scheduler.TickResult:
    s = Scheduler(db_url, clock=FrozenClock(now), **kwargs)
    try:
        return s.tick()
    finally:
        s.close()


def test_create_computes_the_first_occurrence_strictly_after_now(
    conn: psycopg.Connection[Any],
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="America/Chicago", subject="user-1",
        now=T0,
    )  # fmt: skip
    # 08:00 CST on Friday 2026-03-06 is 14:00Z, after T0 = 12:00Z.
    assert s.next_run_at == datetime(2026, 3, 6, 14, 0, tzinfo=UTC)
    assert s.next_occurrence_key == "2026-03-06T08:00"
    assert s.catch_up == "latest"
    assert s.rule_json["version"] == 1
    defn = scheduler.create_schedule(
        conn, job_type="retention", rule="cron:0 3 * * *", zone="UTC", key="retention", now=T0
    )
    assert defn.catch_up == "all"
    with pytest.raises(scheduler.ScheduleExists):
        scheduler.create_schedule(
            conn, job_type="retention", rule="cron:0 4 * * *", zone="UTC", key="retention"
        )


def test_tick_enqueues_each_occurrence_once_across_the_dst_change(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="America/Chicago", now=T0
    )
    conn.commit()
    clock = T0
    for _ in range(4 * 24):  # four days, one tick an hour, each twice
        clock += timedelta(hours=1)
        tick(db_url, clock, lookahead=timedelta(minutes=5))
        tick(db_url, clock, lookahead=timedelta(minutes=5))
    rows = scheduled_jobs(conn)
    assert [r[3] for r in rows] == [
        "2026-03-06T08:00", "2026-03-07T08:00", "2026-03-08T08:00", "2026-03-09T08:00",
    ]  # fmt: skip
    # 08:00 local is 14:00Z before the change and 13:00Z after it.
    assert [r[1].hour for r in rows] == [14, 14, 13, 13]
    assert rows[0][0] == f"schedule:{s.id}:2026-03-06T08:00"
    after = scheduler.get_schedule(conn, s.id)
    assert after.enqueued_count == 4
    assert after.next_occurrence_key == "2026-03-10T08:00"


def test_lookahead_enqueues_early_with_run_at_at_the_occurrence(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    scheduler.create_schedule(conn, job_type="r", rule="daily@08:00", zone="UTC", now=T0)
    conn.commit()
    # Created at Friday noon: the first occurrence is Saturday 08:00Z.
    early = tick(db_url, datetime(2026, 3, 7, 7, 54, tzinfo=UTC), lookahead=timedelta(minutes=5))
    assert early.enqueued == 0
    result = tick(db_url, datetime(2026, 3, 7, 7, 56, tzinfo=UTC), lookahead=timedelta(minutes=5))
    assert result.enqueued == 1
    ((_key, run_at, status, occ),) = scheduled_jobs(conn)
    assert (run_at, status, occ) == (
        datetime(2026, 3, 7, 8, 0, tzinfo=UTC),
        "pending",
        "2026-03-07T08:00",
    )


@pytest.mark.parametrize(
    ("policy", "delivered", "missed"),
    [
        ("skip", [], 3),
        ("latest", ["2026-03-09T08:00"], 2),
        ("all", ["2026-03-07T08:00", "2026-03-08T08:00", "2026-03-09T08:00"], 0),
    ],
)
def test_catch_up_after_downtime(
    conn: psycopg.Connection[Any], db_url: str, policy: str, delivered: list[str], missed: int
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="UTC", catch_up=policy, now=T0
    )
    conn.commit()
    # Down from Friday noon to Monday 08:30: three occurrences fell due meanwhile.
    result = tick(db_url, datetime(2026, 3, 9, 8, 30, tzinfo=UTC), lookahead=timedelta(0))
    assert [r[3] for r in scheduled_jobs(conn)] == delivered
    assert result.missed == missed
    after = scheduler.get_schedule(conn, s.id)
    assert after.missed_count == missed
    assert after.next_occurrence_key == "2026-03-10T08:00"
    kinds = conn.execute("SELECT kind, count(*) FROM schedule_skips GROUP BY 1").fetchall()
    assert kinds == ([("missed", missed)] if missed else [])


def test_latest_beyond_the_grace_is_missed_not_delivered(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="UTC", catch_up="latest",
        catch_up_grace=timedelta(minutes=30), now=T0,
    )  # fmt: skip
    conn.commit()
    result = tick(db_url, datetime(2026, 3, 7, 9, 0, tzinfo=UTC), lookahead=timedelta(0))
    assert (result.enqueued, result.missed) == (0, 1)


def test_quiet_hours_defer_and_skip(conn: psycopg.Connection[Any], db_url: str) -> None:
    defer = scheduler.create_schedule(
        conn, job_type="r", rule="daily@23:00", zone="Europe/Paris",
        quiet_hours={"start": "22:00", "end": "07:30", "action": "defer"}, now=T0,
    )  # fmt: skip
    skip = scheduler.create_schedule(
        conn, job_type="s", rule="daily@23:00", zone="Europe/Paris",
        quiet_hours={"start": "22:00", "end": "07:30", "action": "skip"}, now=T0,
    )  # fmt: skip
    conn.commit()
    result = tick(db_url, datetime(2026, 3, 6, 21, 59, tzinfo=UTC), lookahead=timedelta(hours=1))
    assert (result.enqueued, result.skipped) == (1, 1)
    ((_k, run_at, _st, occ),) = scheduled_jobs(conn)
    # 23:00 Paris is in the quiet window: delivered at 07:30 Paris (06:30Z) the next morning.
    assert (occ, run_at) == ("2026-03-06T23:00", datetime(2026, 3, 7, 6, 30, tzinfo=UTC))
    assert scheduler.get_schedule(conn, skip.id).skipped_count == 1
    assert scheduler.get_schedule(conn, defer.id).enqueued_count == 1


def test_jitter_is_deterministic_bounded_and_spreads_a_herd(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    for user in range(200):
        scheduler.create_schedule(
            conn, job_type="r", rule="daily@08:00", zone="UTC", subject=user, jitter=120, now=T0
        )
    conn.commit()
    tick(db_url, datetime(2026, 3, 7, 7, 59, tzinfo=UTC), lookahead=timedelta(minutes=2))
    rows = conn.execute(
        "SELECT (payload->'tockwork_schedule'->>'id')::bigint, run_at FROM jobs_all"
    ).fetchall()
    assert len(rows) == 200
    base = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
    offsets = [run_at - base for _sid, run_at in rows]
    assert all(timedelta(0) <= o < timedelta(seconds=120) for o in offsets)
    assert len({o.seconds // 10 for o in offsets}) >= 10  # spread over the window
    for sid, run_at in rows:
        assert run_at - base == jitter_offset(sid, "2026-03-07T08:00", 120)


def test_replicas_ticking_at_once_enqueue_each_occurrence_once(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    zones = ["America/New_York", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe", "UTC"]
    for i in range(300):
        scheduler.create_schedule(
            conn, job_type="r", rule="every:15m" if i % 3 == 0 else "daily@08:00",
            zone=zones[i % len(zones)], subject=i, now=T0,
        )  # fmt: skip
    conn.commit()
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def replica() -> None:
        try:
            s = Scheduler(db_url, batch_size=37, lookahead=timedelta(minutes=1))
            barrier.wait(10)
            now = T0
            for _ in range(12):
                now += timedelta(hours=4)
                s.tick(now)
            s.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replica) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = conn.execute(
        "SELECT idempotency_key, count(*) FROM jobs_all GROUP BY 1 HAVING count(*) > 1"
    ).fetchall()
    assert rows == []
    total = conn.execute("SELECT count(*) FROM jobs_all").fetchone()
    counted = conn.execute("SELECT sum(enqueued_count) FROM schedules").fetchone()
    assert total is not None and counted is not None
    assert total[0] == counted[0] > 300


def test_zone_change_supersedes_and_never_repeats_a_local_day(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="Europe/Berlin", subject="traveller", now=T0
    )
    conn.commit()
    # Saturday 08:00 Berlin (07:00Z) is enqueued ahead at 06:58Z ...
    tick(db_url, datetime(2026, 3, 7, 6, 58, tzinfo=UTC), lookahead=timedelta(minutes=5))
    # ... and delivered; the user flies to New York and changes zone at 09:00Z (04:00 there).
    conn.execute("UPDATE jobs SET status = 'succeeded'")
    changed = scheduler.update_schedule(
        conn, s.id, zone="America/New_York", now=datetime(2026, 3, 7, 9, 0, tzinfo=UTC)
    )
    conn.commit()
    assert changed.version == 2
    # 08:00 New York on Saturday is 13:00Z, after the change: same local day, same key.
    assert changed.next_occurrence_key == "2026-03-07T08:00"
    result = tick(db_url, datetime(2026, 3, 7, 12, 58, tzinfo=UTC), lookahead=timedelta(minutes=5))
    assert (result.enqueued, result.duplicates) == (0, 1)
    assert len(scheduled_jobs(conn)) == 1

    # Enqueued ahead then the zone changes before it is due: the waiting job is superseded.
    tick(db_url, datetime(2026, 3, 8, 11, 58, tzinfo=UTC), lookahead=timedelta(minutes=5))
    sunday = [r for r in scheduled_jobs(conn) if r[3] == "2026-03-08T08:00"]
    assert [r[2] for r in sunday] == ["pending"]
    scheduler.update_schedule(
        conn, s.id, zone="America/Chicago", now=datetime(2026, 3, 8, 11, 59, tzinfo=UTC)
    )
    conn.commit()
    tick(db_url, datetime(2026, 3, 8, 12, 58, tzinfo=UTC), lookahead=timedelta(minutes=5))
    sunday = [r for r in scheduled_jobs(conn) if r[3] == "2026-03-08T08:00"]
    statuses = sorted(r[2] for r in sunday)
    assert statuses == ["cancelled", "pending"]
    pending = next(r for r in sunday if r[2] == "pending")
    assert pending[1] == datetime(2026, 3, 8, 13, 0, tzinfo=UTC)  # 08:00 CDT
    skips = conn.execute("SELECT kind, occurrence_key FROM schedule_skips").fetchall()
    assert skips == [("superseded", "2026-03-08T08:00")]


def test_pause_resume_delete(conn: psycopg.Connection[Any], db_url: str) -> None:
    s = scheduler.create_schedule(conn, job_type="r", rule="daily@08:00", zone="UTC", now=T0)
    conn.commit()
    tick(db_url, datetime(2026, 3, 7, 7, 58, tzinfo=UTC), lookahead=timedelta(minutes=5))
    scheduler.pause(conn, s.id, now=datetime(2026, 3, 7, 7, 59, tzinfo=UTC))
    conn.commit()
    assert [r[2] for r in scheduled_jobs(conn)] == ["cancelled"]
    assert tick(db_url, datetime(2026, 3, 9, 7, 58, tzinfo=UTC)).enqueued == 0
    resumed = scheduler.resume(conn, s.id, now=datetime(2026, 3, 9, 9, 0, tzinfo=UTC))
    conn.commit()
    assert resumed.next_occurrence_key == "2026-03-10T08:00"
    assert scheduler.delete(conn, s.id)
    assert not scheduler.delete(conn, s.id)
    with pytest.raises(scheduler.ScheduleNotFound):
        scheduler.get_schedule(conn, s.id)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"zone": "America/Chicgo"}, "zone"),
        ({"zone": "+05:00"}, "zone"),
        ({"rule": "daily@25:00"}, "rule"),
        ({"rule": "cron:0 0 31 2 *"}, "rule"),
        ({"catch_up": "sometimes"}, "catch_up"),
        ({"gap": "later"}, "gap"),
        ({"fold": "third"}, "fold"),
        ({"quiet_hours": {"start": "22:00"}}, "quiet_hours"),
        ({"quiet_hours": {"start": "22:00", "end": "7am"}}, "quiet_hours.end"),
        ({"jitter": -5}, "jitter"),
        ({"queue": "Bad Queue"}, "queue"),
        ({"payload": [1, 2]}, "payload"),
        ({"job_type": ""}, "job_type"),
        ({"key": ""}, "key"),
        ({"subject": True}, "subject"),
        ({"organization_id": "not-a-uuid"}, "organization_id"),
        ({"jitter": 86_401}, "jitter"),
        ({"catch_up_grace": -1}, "catch_up_grace"),
        ({"catch_up_max": 0}, "catch_up_max"),
        ({"quiet_hours": {"start": "10pm", "end": "07:00"}}, "quiet_hours.start"),
        (
            {"quiet_hours": {"start": "22:00", "end": "07:00", "action": "maybe"}},
            "quiet_hours.action",
        ),
        ({"source": "cli"}, "source"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    conn: psycopg.Connection[Any], kwargs: dict[str, Any], field: str
) -> None:
    args: dict[str, Any] = {"job_type": "r", "rule": "daily@08:00", "zone": "UTC", **kwargs}
    with pytest.raises(InvalidSchedule) as info:
        scheduler.create_schedule(conn, now=T0, **args)
    assert info.value.field == field
    assert conn.execute("SELECT count(*) FROM schedules").fetchone() == (0,)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"zone": "America/Chicgo"}, "items[1].zone"),
        ({"bogus": 1}, "items[1].bogus"),
        ({"zone": None, "rule": "daily@25:00"}, "items[1].rule"),
    ],
)
def test_bulk_create_names_the_item_and_writes_nothing(
    conn: psycopg.Connection[Any], bad: dict[str, Any], field: str
) -> None:
    good = {"job_type": "r", "rule": "daily@08:00", "zone": "UTC"}
    with pytest.raises(InvalidSchedule) as info:
        scheduler.create_schedules(conn, [good, {**good, **bad}, good], now=T0)
    assert info.value.field == field
    assert conn.execute("SELECT count(*) FROM schedules").fetchone() == (0,)
    missing = {k: v for k, v in good.items() if k != "zone"}
    with pytest.raises(InvalidSchedule) as info:
        scheduler.create_schedules(conn, [good, missing], now=T0)
    assert (info.value.field, info.value.reason) == ("items[1].zone", "is required")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"zone": "America/Chicgo"}, "zone"),
        ({"quiet_hours": {"start": "22:00", "end": "7am"}}, "quiet_hours.end"),
        ({"catch_up_max": 0}, "catch_up_max"),
        ({"key": "other"}, "key"),
        ({"organization_id": None}, "organization_id"),
        ({"paused": True}, "paused"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_update_names_the_field_and_writes_nothing(
    conn: psycopg.Connection[Any], changes: dict[str, Any], field: str
) -> None:
    s = scheduler.create_schedule(conn, job_type="r", rule="daily@08:00", zone="UTC", now=T0)
    with pytest.raises(InvalidSchedule) as info:
        scheduler.update_schedule(conn, s.id, now=T0, **changes)
    assert info.value.field == field
    assert scheduler.get_schedule(conn, s.id) == s


def test_update_merges_changes_into_what_the_schedule_has(conn: psycopg.Connection[Any]) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="UTC", key="k", catch_up="skip",
        payload={"a": 1}, quiet_hours={"start": "22:00", "end": "07:00"}, jitter=30, now=T0,
    )  # fmt: skip
    # Not timing: nothing recomputed, the rest kept; catch_up=None keeps the policy it has.
    kept = scheduler.update_schedule(conn, s.id, queue="other", catch_up=None, now=T0)
    assert (kept.queue, kept.catch_up, kept.payload, kept.jitter_seconds) == (
        "other", "skip", {"a": 1}, 30,
    )  # fmt: skip
    assert (kept.quiet_hours, kept.key, kept.version) == (s.quiet_hours, "k", 2)
    assert kept.cursor_at == s.cursor_at
    # The same rule written another way is no change of timing; another jitter is.
    same = scheduler.update_schedule(
        conn, s.id, rule={"kind": "daily", "at": "08:00"}, now=T0 + timedelta(hours=1)
    )
    assert same.cursor_at == s.cursor_at
    moved = scheduler.update_schedule(conn, s.id, jitter=0, now=T0 + timedelta(hours=1))
    assert moved.cursor_at == T0 + timedelta(hours=1)
    cleared = scheduler.update_schedule(conn, s.id, quiet_hours=None, catch_up_grace=60, now=T0)
    assert (cleared.quiet_hours, cleared.catch_up_grace_seconds) == (None, 60)


def test_a_new_tz_database_recomputes_next_run_at(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    s = scheduler.create_schedule(
        conn, job_type="r", rule="daily@09:00", zone="America/Vancouver", now=T0
    )
    right = s.next_run_at
    conn.execute(
        "UPDATE schedules SET tzdb_version = '2025b', next_run_at = next_run_at + interval '1 hour'"
    )
    conn.commit()
    sched = Scheduler(db_url, clock=FrozenClock(T0))
    try:
        assert sched.recompute_stale_tzdb() == 1
        assert sched.recompute_stale_tzdb() == 0  # idempotent
    finally:
        sched.close()
    again = scheduler.get_schedule(conn, s.id)
    assert again.next_run_at == right
    assert again.tzdb_version != "2025b"
