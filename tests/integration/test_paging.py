"""Every list API pages by cursor (``after=``) with no upper bound on the total (issue 24), in
sync and async; and the schedule operations' async forms do what the sync ones do."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

import jobs
import scheduler
from jobs import outbox
from tests.integration.scheduler.test_async_schedules import run as run_async

T0 = datetime(2026, 6, 1, tzinfo=UTC)
R = TypeVar("R")


def pages(fetch: Callable[[Any], list[Any]], key: Callable[[Any], Any], size: int) -> list[Any]:
    """Everything, page by page: ``fetch(after)`` until a page comes back short."""
    found: list[Any] = []
    after = None
    while True:
        page = fetch(after)
        found.extend(page)
        if len(page) < size:
            return found
        after = key(page[-1])


def test_list_schedules_pages_by_id(conn: psycopg.Connection[Any]) -> None:
    ids = scheduler.create_schedules(
        conn,
        [{"job_type": "r", "rule": "daily@08:00", "zone": "UTC", "subject": f"u{i}"}
         for i in range(25)],
        now=T0,
    )  # fmt: skip
    every = pages(lambda after: scheduler.list_schedules(conn, limit=10, after=after),
                  lambda s: s.id, 10)  # fmt: skip
    assert [s.id for s in every] == ids
    with pytest.raises(scheduler.InvalidSchedule) as info:
        scheduler.list_schedules(conn, after=-1)
    assert info.value.field == "after"


def test_list_jobs_pages_by_id(conn: psycopg.Connection[Any]) -> None:
    jobs.enqueue_many(conn, [jobs.JobSpec("t", {"i": i}) for i in range(23)])
    conn.commit()
    statuses = ("pending",)
    every = pages(
        lambda after: jobs.list_jobs(conn, statuses=statuses, limit=5, after=after),
        lambda r: r.id,
        5,
    )
    assert [r.payload["i"] for r in every] == list(range(23))
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.list_jobs(conn, statuses=statuses, after=-1)
    assert info.value.field == "after"


def test_dead_outbox_events_page_in_the_order_they_died(conn: psycopg.Connection[Any]) -> None:
    for i in range(7):
        outbox.record(
            conn, aggregate_type="trip", aggregate_id=str(i), event_type="booked", payload={"i": i}
        )
    conn.execute(
        "UPDATE outbox_events SET dead_at = %s + seq * interval '1 second', last_error = 'x'",
        (T0,),
    )
    conn.commit()
    every = pages(lambda after: outbox.dead_events(conn, limit=3, after=after), lambda e: e.id, 3)
    assert [e.aggregate_id for e in every] == [str(i) for i in range(7)]
    with pytest.raises(jobs.InvalidJob):
        outbox.dead_events(conn, after="not-a-uuid")


def test_dead_outbox_events_page_in_async_too(conn: psycopg.Connection[Any], db_url: str) -> None:
    for i in range(5):
        outbox.record(
            conn, aggregate_type="trip", aggregate_id=str(i), event_type="booked", payload={"i": i}
        )
    conn.execute("UPDATE outbox_events SET dead_at = %s + seq * interval '1 second'", (T0,))
    conn.commit()

    async def scenario(c: psycopg.AsyncConnection[Any]) -> None:
        seen: list[str] = []
        after = None
        while True:
            page = await outbox.dead_events_async(c, limit=2, after=after)
            seen.extend(e.aggregate_id for e in page)
            if len(page) < 2:
                break
            after = page[-1].id
        assert seen == [str(i) for i in range(5)]
        with pytest.raises(jobs.InvalidJob):
            await outbox.dead_events_async(c, limit=0)

    run_async(db_url, scenario)


def test_the_async_forms_page_pause_trigger_and_backfill(db_url: str) -> None:
    async def scenario(c: psycopg.AsyncConnection[Any]) -> None:
        ids = await scheduler.create_schedules_async(
            c,
            [{"job_type": "m", "rule": "every:10m", "zone": "UTC", "key": f"k{i}"}
             for i in range(12)],
            now=T0,
        )  # fmt: skip
        seen: list[int] = []
        after = None
        while True:
            page = await scheduler.list_schedules_async(c, limit=5, after=after)
            seen.extend(s.id for s in page)
            if len(page) < 5:
                break
            after = page[-1].id
        assert seen == ids
        paused = await scheduler.pause_async(
            c, ids[0], note="n", until=T0 + timedelta(hours=1), now=T0
        )
        assert (paused.pause_note, paused.paused_until) == ("n", T0 + timedelta(hours=1))
        resumed = await scheduler.resume_async(c, ids[0], now=T0)
        assert not resumed.paused and resumed.pause_note is None
        run = await scheduler.trigger_async(c, ids[1], at=T0, now=T0 + timedelta(minutes=1))
        assert run.outcome == "created"
        done = await scheduler.backfill_async(
            c, ids[2], start=T0, end=T0 + timedelta(minutes=30), now=T0 + timedelta(hours=1)
        )
        assert done.done and done.count("created") == 3

    run_async(db_url, scenario)


@pytest.mark.slow
def test_paging_through_250_000_schedules(conn: psycopg.Connection[Any]) -> None:
    """A quarter of a million schedules, listed page by page: each once, in order, with no
    page slower than the first by much (keyset, not OFFSET). Rows written by SQL for speed."""
    total = int(os.environ.get("PAGING_TOTAL", "250000"))
    conn.execute(
        "INSERT INTO schedules (subject, job_type, rule, zone, cursor_at, tzdb_version) "
        'SELECT \'u\' || g, \'r\', \'{"version": 1, "kind": "daily", "at": "08:00"}\', '
        "'UTC', %s, 'x' FROM generate_series(1, %s) AS g",
        (T0, total),
    )
    conn.commit()
    started = time.monotonic()
    count = 0
    last = 0
    after = None
    while True:
        page = scheduler.list_schedules(conn, limit=10_000, after=after)
        for s in page:
            assert s.id > last
            last = s.id
        count += len(page)
        if len(page) < 10_000:
            break
        after = page[-1].id
    assert count == total
    print(f"paged {total:,} schedules in {time.monotonic() - started:.1f} s")
