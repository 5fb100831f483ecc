"""``async def`` handlers in the worker: the same outcomes, slots, effects and stop as sync ones.

Concurrency is measured with a counter and ordered with events (a handler that reaches the
limit sets one, the test releases them all), never with sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import Batch, BatchHandler, Job, JobSpec, Worker, batch_handler
from jobs.batch import is_async_handler
from tests.integration.jobs.async_apps import HANDLERS
from tests.integration.jobs.test_worker import OUTCOMES, POLICY, T0, row
from tests.processes import start_tockwork, wait_for
from timezones.clock import FrozenClock


def worker(db_url: str, handlers: dict[str, Any], **kw: Any) -> Worker:
    kw.setdefault("clock", FrozenClock(T0))
    return Worker(db_url, handlers, retry=POLICY, listen=False, **kw)


# -- detection ------------------------------------------------------------------------------


async def _coro(_job: Job) -> None:
    return None


class _AsyncCallable:
    async def __call__(self, _job: Job) -> None:
        return None


class _AsyncBatch(BatchHandler):
    async def __call__(self, batch: Batch) -> None:
        return None


def test_coroutine_functions_are_detected_in_every_shape() -> None:
    assert is_async_handler(_coro)
    assert is_async_handler(functools.partial(_coro))
    assert is_async_handler(_AsyncCallable())
    assert is_async_handler(BatchHandler(_coro))  # type: ignore[arg-type]
    assert is_async_handler(_AsyncBatch())
    assert is_async_handler(HANDLERS["ping"]) and is_async_handler(HANDLERS["pings"])
    assert not is_async_handler(HANDLERS["sync_ping"])
    assert not is_async_handler(BatchHandler(lambda b: None))
    assert not is_async_handler(print)


# -- outcomes -------------------------------------------------------------------------------


def async_raiser(exc: BaseException | None) -> Any:
    async def handler(_job: Job) -> None:
        await asyncio.sleep(0)
        if exc is not None:
            raise exc

    return handler


@pytest.mark.parametrize(("name", "exc", "expected"), OUTCOMES, ids=[o[0] for o in OUTCOMES])
def test_each_async_handler_outcome_maps_as_for_sync(
    conn: psycopg.Connection[Any],
    db_url: str,
    name: str,
    exc: BaseException | None,
    expected: tuple[Any, ...],
) -> None:
    job_id = jobs.enqueue(conn, name, {}, now=T0).id
    conn.commit()
    stats = worker(db_url, {name: async_raiser(exc)}).run_until_idle()
    assert row(conn, job_id) == expected
    assert sum(stats.outcomes.values()) == 1


def test_async_batch_handler_outcomes_and_bisection(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    kinds = ["ok", "retry", "fail", "snooze", "undecided", "poison"]
    ids = {
        k: jobs.enqueue_many(conn, [JobSpec("push", {"k": k}) for _ in range(2)], now=T0)
        for k in kinds
    }
    conn.commit()
    sizes: list[int] = []

    @batch_handler
    async def push(batch: Batch) -> None:
        sizes.append(len(batch))
        await asyncio.sleep(0)
        for job in batch:
            match job.payload["k"]:
                case "ok":
                    batch.succeed(job)
                case "retry":
                    batch.retry(job, "provider 503")
                case "fail":
                    batch.fail(job, "token rejected", code="invalid_token")
                case "snooze":
                    batch.snooze(job, timedelta(seconds=300))
        if any(j.payload["k"] == "poison" for j in batch.undecided()):
            raise jobs.PermanentError("poison", code="poison")

    stats = worker(db_url, {"push": push}, prefetch=100).run_until_idle()
    status = {k: {row(conn, e.id)[:2] for e in v} for k, v in ids.items()}
    assert status == {
        "ok": {("succeeded", 1)},
        "retry": {("retrying", 1)},
        "fail": {("dead", 1)},
        "snooze": {("pending", 0)},
        "undecided": {("succeeded", 1)},  # isolated from the poison by the re-runs
        "poison": {("dead", 1)},
    }
    assert sizes[0] == 12 and stats.batches == 1 and stats.reruns == len(sizes) - 1 > 0


def test_in_completion_from_concurrent_async_handlers_keeps_each_jobs_effects(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Four coroutines interleave on one loop thread (a barrier holds them all inside their
    handler); each job's effect is its own, which a thread-local would mix up."""
    conn.execute("CREATE TABLE effects (job_id bigint, written_for bigint)")
    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("fx", {}) for _ in range(8)], now=T0)]
    conn.commit()
    barrier: asyncio.Barrier | None = None

    async def fx(job: Job) -> None:
        nonlocal barrier
        barrier = barrier or asyncio.Barrier(4)
        async with asyncio.timeout(10):
            await barrier.wait()  # all four are inside their handler now

        def effect(c: psycopg.Connection[Any]) -> None:
            c.execute("INSERT INTO effects VALUES (%s, %s)", (job.id, job.id))

        jobs.in_completion(effect)

    stats = worker(db_url, {"fx": fx}, queues={"default": 4}, prefetch=0).run_until_idle()
    assert stats.outcomes == {"succeeded": 8}
    written = conn.execute("SELECT job_id, written_for FROM effects ORDER BY 1").fetchall()
    assert written == [(i, i) for i in ids]


# -- slots shared by sync and async calls ---------------------------------------------------


def test_sync_and_async_handlers_share_the_queues_concurrency(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    limit = 3
    lock = threading.Lock()
    running = peak = 0
    kinds_seen: set[str] = set()
    full = threading.Event()
    release = threading.Event()

    def enter(kind: str) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
            kinds_seen.add(kind)
            if running == limit:
                full.set()

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    def sync_h(_job: Job) -> None:
        enter("sync")
        try:
            assert release.wait(10)
        finally:
            leave()

    async def async_h(_job: Job) -> None:
        enter("async")
        try:
            assert await asyncio.to_thread(release.wait, 10)
        finally:
            leave()

    specs = [JobSpec("s" if i % 2 else "a", {}) for i in range(12)]
    jobs.enqueue_many(conn, specs, now=T0)
    conn.commit()
    w = worker(db_url, {"s": sync_h, "a": async_h}, queues={"default": limit}, prefetch=20)
    runner = threading.Thread(target=w.run_until_idle)
    runner.start()
    try:
        assert full.wait(10)
        # At the limit, the claimed jobs beyond it are waiting, not running.
        with lock:
            assert running == limit
    finally:
        release.set()
        runner.join(30)
    assert not runner.is_alive()
    assert peak == limit
    assert kinds_seen == {"sync", "async"}
    assert w.stats.outcomes == {"succeeded": 12}


# -- graceful stop --------------------------------------------------------------------------


def test_stop_lets_a_running_coroutine_finish_within_the_grace(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    started = threading.Event()
    release = threading.Event()

    async def slow(_job: Job) -> None:
        started.set()
        await asyncio.to_thread(release.wait, 10)

    job_id = jobs.enqueue(conn, "slow", {}).id
    conn.commit()
    w = Worker(db_url, {"slow": slow}, grace=timedelta(seconds=30), listen=False)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        assert started.wait(10)
        w.stop()
        release.set()
        runner.join(30)
        assert not runner.is_alive()
    finally:
        release.set()
    assert row(conn, job_id)[0] == "succeeded"
    assert w.stats.released == 0


def test_stop_gives_back_the_lease_of_a_coroutine_past_the_grace_and_cancels_it(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    started = threading.Event()
    cancelled = threading.Event()

    async def hangs(_job: Job) -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # never set
        except asyncio.CancelledError:
            cancelled.set()
            raise

    job_id = jobs.enqueue(conn, "hangs", {}).id
    conn.commit()
    w = Worker(db_url, {"hangs": hangs}, grace=timedelta(seconds=0.2), listen=False)
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    assert started.wait(10)
    w.stop()
    runner.join(30)
    assert not runner.is_alive()
    assert cancelled.is_set()
    assert row(conn, job_id)[0] == "retrying"
    assert w.stats.released == 1
    assert [a.outcome for a in jobs.job_attempts(conn, job_id)] == ["interrupted"]
    assert conn.execute("SELECT count(*) FROM jobs_all WHERE status = 'leased'").fetchone() == (0,)


# -- a real `tockwork worker` process -------------------------------------------------------


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE runs (job_id bigint, kind text)")
        yield c


def kinds(auto: psycopg.Connection[Any]) -> Sequence[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in auto.execute("SELECT kind, count(DISTINCT job_id) FROM runs GROUP BY 1 ORDER BY 1")
    ]


def test_tockwork_worker_detects_and_runs_async_handlers(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    specs = (
        [JobSpec("ping", {}) for _ in range(20)]
        + [JobSpec("pings", {}) for _ in range(120)]
        + [JobSpec("sync_ping", {}) for _ in range(20)]
    )
    jobs.enqueue_many(auto, specs)
    proc = start_tockwork(
        db_url,
        "worker",
        "--app",
        "tests.integration.jobs.async_apps:HANDLERS",
        "--poll",
        "0.05",
        "--no-listen",
    )
    try:
        wait_for(auto, "SELECT count(*) = 160 FROM jobs_all WHERE status = 'succeeded'")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        _out, err = proc.communicate()
    assert kinds(auto) == [("async", 20), ("async_batch", 120), ("sync", 20)], err.decode()
    assert auto.execute("SELECT count(*) FROM runs").fetchone() == (160,)
