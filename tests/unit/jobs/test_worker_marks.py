"""Which running jobs a worker reports started (``Worker._due_marks``): those that have run for
``mark_after``, and not those whose outcome is being written; what ended leaves the queue."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from jobs.model import Job
from jobs.retry import SUCCEEDED
from jobs.store import Finished
from jobs.worker import MARK_AFTER_LEASE_SHARE, Worker

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def job(job_id: int) -> Job:
    return Job(job_id, "default", "x", {}, 1, 3, None, None, 0, T0, T0, 7, None, None, None)


def worker(inflight: list[int]) -> Worker:
    w = Worker("postgresql:///unused", {"x": lambda _job: None}, lease=timedelta(seconds=20))
    w._inflight = {i: job(i) for i in inflight}
    return w


def test_mark_after_is_a_share_of_the_lease() -> None:
    assert worker([]).mark_after == 20 * MARK_AFTER_LEASE_SHARE == 2.0


def test_a_cycle_marks_the_running_jobs_started_before_the_instant() -> None:
    w = worker([1, 2, 4, 5])
    w._unmarked.extend([(10.0, [(1, 7), (2, 7), (3, 7)]), (11.0, [(4, 7)]), (20.0, [(5, 7)])])
    # 3 has ended (not in flight), 2's outcome is written by this cycle: neither is marked.
    finished = [Finished(job(2), SUCCEEDED, T0, 1.0)]
    assert w._due_marks(11.0, finished) == [(1, 7), (4, 7)]
    assert list(w._unmarked) == [(20.0, [(5, 7)])]  # started later: kept for a later cycle
    assert w._due_marks(11.0, ()) == []


def test_calls_that_ended_leave_the_queue_before_their_time() -> None:
    w = worker([9])
    w._unmarked.extend([(10.0, [(1, 7)]), (10.5, [(2, 7), (3, 7)]), (11.0, [(9, 7)])])
    assert w._due_marks(0.0, ()) == []  # nothing old enough to mark ...
    assert list(w._unmarked) == [(11.0, [(9, 7)])]  # ... but the ended calls are gone


def test_the_heartbeat_marks_every_running_job() -> None:
    w = worker([1, 5])
    w._unmarked.extend([(10.0, [(1, 7)]), (1e12, [(5, 7)])])
    assert w._due_marks(math.inf, ()) == [(1, 7), (5, 7)]
    assert not w._unmarked
