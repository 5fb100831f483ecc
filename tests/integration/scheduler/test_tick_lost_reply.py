"""A tick whose commit reply is lost (issue 13 §1): run again, it neither enqueues an occurrence
twice nor skips one. Each batch commits its jobs with the cursors that planned them, so a batch
that committed is not planned again, and one that did not is planned again whole."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import scheduler
from jobs.retry import RetryPolicy
from jobs.service import Reconnect
from scheduler import Scheduler
from tests.faultproxy import FaultProxy, is_commit
from timezones import FrozenClock

FRI_1200 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
MON_0758 = datetime(2026, 3, 9, 7, 58, tzinfo=UTC)
EXPECTED = [datetime(2026, 3, d, 8, 0, tzinfo=UTC) for d in (7, 8, 9)]  # Sat, Sun, Mon 08:00
SCHEDULES = 7
FAST = Reconnect(backoff=RetryPolicy(base=timedelta(milliseconds=1), jitter=0.0))


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(db_url) as p:
        yield p


@pytest.mark.parametrize("mode", ["after", "before"])
def test_a_tick_run_again_after_a_lost_commit_enqueues_each_occurrence_once(
    conn: psycopg.Connection[Any], proxy: FaultProxy, mode: Any
) -> None:
    ids = [
        scheduler.create_schedule(
            conn, job_type="remind", rule="daily@08:00", zone="UTC", catch_up="all", now=FRI_1200
        ).id
        for _ in range(SCHEDULES)
    ]
    conn.commit()
    # The replies of the first three batch commits are lost ("after": the batch committed;
    # "before": it did not); each time the tick runs again from the start on a new connection.
    # Only the ticks' commits: the start-up's own (a tz database check) fails the start at once.
    ticking = threading.Event()
    proxy.on_request = lambda sql: ticking.set() if "pg_try_advisory_xact_lock" in sql else None
    proxy.drop_reply(lambda sql: ticking.is_set() and is_commit(sql), times=3, mode=mode)
    replica = Scheduler(
        proxy.url,
        clock=FrozenClock(MON_0758),
        lookahead=timedelta(minutes=5),
        max_lookahead=timedelta(minutes=5),  # no backlog probe: every COMMIT is a batch's
        batch_size=2,
        reconnect=FAST,
    )
    totals = replica.run_until_idle()
    assert proxy.counts.faults == 3
    runs: dict[int, list[datetime]] = defaultdict(list)
    for schedule_id, run_at in conn.execute(
        "SELECT split_part(idempotency_key, ':', 2)::bigint, run_at FROM jobs_all ORDER BY run_at"
    ):
        runs[schedule_id].append(run_at)
    assert runs == dict.fromkeys(ids, EXPECTED)
    # A batch that committed was not planned again (no duplicate even reached the insert).
    # (The totals count the tick that finished: the batches of a tick that failed are lost.)
    assert totals.duplicates == 0
