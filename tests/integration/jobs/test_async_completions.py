"""How async handler calls end: each frees its queue's slot exactly once, however many end in
one pass of the event loop, and also when it was cancelled at stop.

A slot counted twice would let a queue run more coroutines than its concurrency; a slot never
given back (a call cancelled at stop whose end was not handed over) would leave a worker that
runs again with fewer slots, so a handler that needs two calls at once would wait forever.
Concurrency is measured with a counter and ordered with barriers, never with sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg

import jobs
from jobs import Job, JobSpec, Worker
from tests.integration.jobs.test_worker import POLICY, T0
from timezones.clock import FrozenClock


def test_many_short_coroutines_end_together_within_the_concurrency(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    limit = 8
    running = peak = 0
    ran: list[int] = []

    async def noop(job: Job) -> None:
        nonlocal running, peak
        running += 1  # one event loop thread: no lock needed
        peak = max(peak, running)
        await asyncio.sleep(0)  # let the other calls of this pass start and end with it
        running -= 1
        ran.append(job.id)

    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("noop", {}) for _ in range(600)], now=T0)]
    conn.commit()
    w = Worker(
        db_url,
        {"noop": noop},
        {"default": limit},
        prefetch=200,
        retry=POLICY,
        listen=False,
        clock=FrozenClock(T0),
    )
    stats = w.run_until_idle()
    assert sorted(ran) == sorted(ids)  # each once
    assert peak == limit  # the slots filled, and never more
    assert stats.outcomes == {"succeeded": 600}
    assert conn.execute(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM jobs_all"
    ).fetchone() == (600, 600)


def test_a_worker_run_again_after_a_cancelled_coroutine_has_all_its_slots(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    started = threading.Event()
    pair = threading.Barrier(2, timeout=20)  # two calls at once, or both fail

    async def hangs(_job: Job) -> None:
        started.set()
        await asyncio.Event().wait()  # never set: cancelled at stop

    async def together(_job: Job) -> None:
        await asyncio.to_thread(pair.wait)

    jobs.enqueue(conn, "hangs", {})
    conn.commit()
    w = Worker(
        db_url,
        {"hangs": hangs, "together": together},
        {"default": 2},
        grace=timedelta(seconds=0.2),
        listen=False,
    )
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    assert started.wait(10)
    w.stop()
    runner.join(30)
    assert not runner.is_alive()
    assert w.stats.released == 1
    conn.execute("DELETE FROM jobs")
    jobs.enqueue_many(conn, [JobSpec("together", {}) for _ in range(2)])
    conn.commit()
    stats = w.run_until_idle()
    assert not pair.broken
    assert stats.outcomes.get("succeeded") == 2
