"""Per-subject caps of reminders (issue 24): at most N deliveries per subject in any rolling
window, across that subject's schedules; the excess is skipped (kind ``capped``, the cap as the
reason), decided per batch in its still-due transaction.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import scheduler
from jobs import Worker
from scheduler import Scheduler
from scheduler.delivery import DeliveryHandler, SubjectAsToken, SubjectCap, cap_from_env
from scheduler.errors import InvalidPushConfig
from scheduler.simulated import SimulatedChannel
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
DAY = datetime(2026, 3, 7, tzinfo=UTC)
CAP = SubjectCap(max_deliveries=2, window=timedelta(hours=1))


def at(hhmm: str) -> datetime:
    h, m = hhmm.split(":")
    return DAY + timedelta(hours=int(h), minutes=int(m))


def create(conn: psycopg.Connection[Any], subject: str, hhmm: str) -> int:
    return scheduler.create_schedule(
        conn, job_type="reminder", rule=f"daily@{hhmm}", zone="UTC", subject=subject, jitter=0,
        payload={"subject": subject, "message": hhmm}, now=T0,
    ).id  # fmt: skip


def run_at(db_url: str, handler: DeliveryHandler, clock: FrozenClock, when: datetime) -> None:
    """A tick a minute before ``when``, then a worker at ``when``."""
    clock.set(when - timedelta(minutes=1))
    replica = Scheduler(db_url, clock=clock, lookahead=timedelta(minutes=2))
    replica.tick()
    replica.close()
    clock.set(when)
    Worker(db_url, {"reminder": handler}, clock=clock, listen=False).run_until_idle()


def test_the_cap_holds_at_the_window_edges_across_a_subjects_schedules(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    times = ["08:00", "08:30", "08:59", "09:00", "09:29", "09:30"]
    ids = {t: create(conn, "u", t) for t in times}
    other = create(conn, "v", "08:59")  # another subject: its own count
    same_time = [create(conn, "w", "10:30") for _ in range(3)]  # one batch, three of a subject
    conn.commit()
    clock = FrozenClock(DAY)
    handler = DeliveryHandler(
        db_url, [SimulatedChannel(db_url)], resolver=SubjectAsToken("simulated"), clock=clock,
        cap=CAP,
    )  # fmt: skip
    try:
        for t in [*times, "10:30"]:
            run_at(db_url, handler, clock, at(t))
    finally:
        asyncio.run(handler.aclose())
    sent = {r[0] for r in conn.execute("SELECT schedule_id FROM simulated_pushes").fetchall()}
    # 08:00 and 08:30 fill the window; 08:59 is within an hour of 08:00 (capped); at 09:00 the
    # 08:00 delivery has left the window (a window is (now - 1 h, now]); 09:29 sees 08:30 and
    # 09:00 (capped); at 09:30 the 08:30 one has left.
    assert sent == {ids["08:00"], ids["08:30"], ids["09:00"], ids["09:30"], other,
                    *same_time[:2]}  # fmt: skip
    skips = conn.execute(
        "SELECT schedule_id, kind, reason FROM schedule_skips ORDER BY schedule_id"
    ).fetchall()
    reason = "capped: at most 2 per 3600 s"
    assert skips == sorted(
        [(ids["08:59"], "capped", reason), (ids["09:29"], "capped", reason),
         (same_time[2], "capped", reason)]
    )  # fmt: skip
    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert statuses == {"succeeded": 10}
    counted = conn.execute(
        "SELECT skipped_count FROM schedules WHERE id = %s", (ids["08:59"],)
    ).fetchone()
    assert counted == (1,)


def test_a_retried_delivery_is_not_counted_twice(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    first = create(conn, "u", "08:00")
    second = create(conn, "u", "08:10")
    conn.commit()
    clock = FrozenClock(DAY)
    flaky = SimulatedChannel(db_url, transient_rate=1.0, seed=3)  # every send fails: retried
    handler = DeliveryHandler(
        db_url, [flaky], resolver=SubjectAsToken("simulated"), clock=clock,
        cap=SubjectCap(max_deliveries=2, window=timedelta(hours=1)),
    )  # fmt: skip
    try:
        run_at(db_url, handler, clock, at("08:00"))
        assert conn.execute("SELECT status FROM jobs_all").fetchone() == ("retrying",)
        flaky.transient_rate = 0.0
        clock.set(at("08:05"))  # the retry of 08:00 counts once: 08:10 still fits
        Worker(db_url, {"reminder": handler}, clock=clock, listen=False).run_until_idle()
        run_at(db_url, handler, clock, at("08:10"))
    finally:
        asyncio.run(handler.aclose())
    sent = sorted(r[0] for r in conn.execute("SELECT schedule_id FROM simulated_pushes"))
    assert sent == [first, second]
    assert conn.execute("SELECT count(*) FROM schedule_skips").fetchone() == (0,)


@pytest.mark.parametrize(
    ("n", "window"),
    [(0, timedelta(hours=1)), (True, timedelta(hours=1)), (2, timedelta(0)),
     (2, timedelta(days=32)), (2, 3600)],
)  # fmt: skip
def test_a_bad_cap_is_refused_naming_the_field(n: Any, window: Any) -> None:
    with pytest.raises(InvalidPushConfig) as raised:
        SubjectCap(n, window)
    assert raised.value.field in ("max_deliveries", "window")


def test_the_worker_app_reads_its_cap_from_the_environment() -> None:
    assert cap_from_env({"TOCKWORK_PUSH_SUBJECT_CAP": "3/3600"}) == SubjectCap(
        3, timedelta(hours=1)
    )
    assert cap_from_env({"TOCKWORK_PUSH_SUBJECT_CAP": " "}) is None
    assert cap_from_env({}) is None
