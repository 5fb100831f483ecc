"""Batch handlers and completion effects against a real PostgreSQL, in one process."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import Batch, Job, JobSpec, RetryPolicies, RetryPolicy, Worker, batch_handler
from jobs.batch import RunEffects
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
POLICY = RetryPolicies(
    default=RetryPolicy(base=timedelta(seconds=10), jitter=0.0, rate_limit_cap=timedelta(hours=1))
)


def row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    r = conn.execute(
        "SELECT status, attempts, run_at, last_error_code FROM jobs_all WHERE id = %s", (job_id,)
    ).fetchone()
    assert r is not None
    return tuple(r)


@pytest.fixture
def auto(db_url: str) -> Any:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE deliveries (job_id bigint, attempt int)")
        c.execute("CREATE TABLE runs (job_id bigint, attempt int)")
        yield c


def deliver(conn: psycopg.Connection[Any], done: Sequence[Job]) -> None:
    conn.execute(
        "INSERT INTO deliveries (job_id, attempt) SELECT * FROM unnest(%s::bigint[], %s::int[])",
        ([j.id for j in done], [j.attempt for j in done]),
    )


def deliveries(conn: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    return [
        (r[0], r[1])
        for r in conn.execute("SELECT job_id, attempt FROM deliveries ORDER BY job_id, attempt")
    ]


def worker(db_url: str, handlers: dict[str, Any], **kw: Any) -> Worker:
    kw.setdefault("clock", FrozenClock(T0))
    kw.setdefault("prefetch", 1000)  # the whole backlog in the first claim: one batch
    return Worker(db_url, handlers, retry=POLICY, listen=False, **kw)


# The outcome each job's payload asks for, and the row it must leave (status, attempts, run_at,
# last_error_code).
MIXED: dict[str, tuple[Any, ...]] = {
    "explicit_success": ("succeeded", 1, T0, None),
    "undecided": ("succeeded", 1, T0, None),
    "retry": ("retrying", 1, T0 + timedelta(seconds=10), "error"),
    "retry_after": ("retrying", 1, T0 + timedelta(minutes=1), "timeout"),
    # A 429 takes its attempt back (RetryPolicy.rate_limited_for), as a snooze does.
    "rate_limited": ("retrying", 0, T0 + timedelta(seconds=120), "rate_limited"),
    "rate_limited_capped": ("retrying", 0, T0 + timedelta(hours=1), "rate_limited"),
    "fail": ("dead", 1, T0, "invalid_token"),
    "cancel": ("cancelled", 1, T0, "cancelled"),
    "snooze": ("pending", 0, T0 + timedelta(seconds=300), None),
    "retry_on_last_attempt": ("dead", 1, T0, "error"),
    "fail_then_succeed": ("succeeded", 1, T0, None),
}


def test_mixed_outcomes_in_one_batch_land_on_the_right_jobs(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    specs = [
        JobSpec(
            "push",
            {"outcome": name},
            max_attempts=1 if name == "retry_on_last_attempt" else None,
        )
        for name in MIXED
        for _ in range(3)  # three of each, interleaved by id below
    ]
    ids = [e.id for e in jobs.enqueue_many(conn, specs, now=T0)]
    conn.commit()
    sizes: list[int] = []

    @batch_handler
    def push(batch: Batch) -> None:
        sizes.append(len(batch))
        for job in batch.jobs:
            match job.payload["outcome"]:
                case "explicit_success":
                    batch.succeed(job)
                case "retry" | "retry_on_last_attempt":
                    batch.retry(job, "provider 503")
                case "retry_after":
                    batch.retry(job, "slow", code="timeout", delay=timedelta(minutes=1))
                case "rate_limited":
                    batch.rate_limited(job, timedelta(seconds=120))
                case "rate_limited_capped":
                    batch.rate_limited(job, timedelta(hours=10))
                case "fail":
                    batch.fail(job, "token rejected", code="invalid_token")
                case "cancel":
                    batch.cancel(job, "revoked")
                case "snooze":
                    batch.snooze(job, timedelta(seconds=300))
                case "fail_then_succeed":
                    batch.fail(job, "changed my mind")
                    batch.succeed(job)

    stats = worker(db_url, {"push": push}).run_until_idle()
    assert sizes == [len(specs)]
    assert stats.batches == 1 and stats.reruns == 0
    for job_id, spec in zip(ids, specs, strict=True):
        assert row(conn, job_id) == MIXED[spec.payload["outcome"]], spec.payload
    outcomes = {
        spec.payload["outcome"]: [a.outcome for a in jobs.job_attempts(conn, job_id)]
        for job_id, spec in zip(ids, specs, strict=True)
    }
    assert outcomes["snooze"] == ["snoozed"]
    assert outcomes["rate_limited"] == ["rate_limited"]
    assert outcomes["fail"] == ["dead"]
    assert outcomes["undecided"] == ["succeeded"]


def test_one_poison_job_in_a_batch_of_500(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tockwork")
    ids = [
        e.id
        for e in jobs.enqueue_many(
            conn, [JobSpec("push", {"poison": i == 123}) for i in range(500)], now=T0
        )
    ]
    conn.commit()
    calls: list[int] = []

    @batch_handler(max_batch=500)
    def push(batch: Batch) -> None:
        calls.append(len(batch))
        batch.in_completion(deliver)
        if any(j.payload["poison"] for j in batch.jobs):
            raise ValueError("cannot parse payload")

    with psycopg.connect(db_url, autocommit=True) as auto:
        auto.execute("CREATE TABLE deliveries (job_id bigint, attempt int)")
        stats = worker(db_url, {"push": push}).run_until_idle()
        assert stats.outcomes == {"succeeded": 499, "retry": 1}
        assert calls[0] == 500 and len(calls) <= 1 + 18
        assert stats.reruns == len(calls) - 1
        poison = ids[123]
        assert row(conn, poison) == (
            "retrying",
            1,
            T0 + timedelta(seconds=10),
            "unknown.ValueError",
        )
        assert [j for j, _ in deliveries(auto)] == [i for i in ids if i != poison]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "499 succeeded" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None


def test_a_transient_failure_of_a_whole_batch_retries_it_without_bisecting(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    jobs.enqueue_many(conn, [JobSpec("push", {}) for _ in range(50)], now=T0)
    conn.commit()
    calls: list[int] = []

    @batch_handler
    def push(batch: Batch) -> None:
        calls.append(len(batch))
        raise jobs.RateLimited(timedelta(seconds=45))

    stats = worker(db_url, {"push": push}).run_until_idle()
    assert calls == [50]
    assert stats.outcomes == {"rate_limited": 50}
    assert conn.execute("SELECT DISTINCT run_at FROM jobs_all").fetchall() == [
        (T0 + timedelta(seconds=45),)
    ]


def test_one_worker_serves_single_and_batch_handlers(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any]
) -> None:
    singles = [e.id for e in jobs.enqueue_many(conn, [JobSpec("one", {}) for _ in range(30)])]
    batched = [e.id for e in jobs.enqueue_many(conn, [JobSpec("many", {}) for _ in range(70)])]
    conn.commit()
    seen_single: list[int] = []
    lock = threading.Lock()

    def one(job: Job) -> None:
        with lock:
            seen_single.append(job.id)
        jobs.in_completion(lambda c: deliver(c, [job]))

    @batch_handler(max_batch=25)
    def many(batch: Batch) -> None:
        assert len(batch) <= 25
        batch.in_completion(deliver)

    stats = worker(db_url, {"one": one, "many": many}, clock=None).run_until_idle()
    assert stats.outcomes == {"succeeded": 100}
    assert sorted(seen_single) == singles
    assert stats.batches >= 3  # 70 jobs, at most 25 a batch
    assert deliveries(auto) == [(i, 1) for i in sorted(singles + batched)]


def test_a_single_handler_that_raises_runs_no_effect(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any]
) -> None:
    job_id = jobs.enqueue(conn, "one", {}, now=T0).id
    conn.commit()

    def one(job: Job) -> None:
        jobs.in_completion(lambda c: deliver(c, [job]))
        raise jobs.TransientError("provider down")

    stats = worker(db_url, {"one": one}).run_until_idle()
    assert stats.outcomes == {"retry": 1}
    assert deliveries(auto) == []
    assert row(conn, job_id)[0] == "retrying"


def run_in_thread(w: Worker) -> threading.Thread:
    t = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    t.start()
    return t


@pytest.mark.parametrize("taken_over", ["all", "one"])
def test_a_fenced_batch_commits_none_of_its_effects(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any], taken_over: str
) -> None:
    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("push", {}) for _ in range(5)], now=T0)]
    conn.commit()
    started, release = threading.Event(), threading.Event()

    @batch_handler
    def push(batch: Batch) -> None:
        batch.in_completion(deliver)
        started.set()
        assert release.wait(30)

    w = worker(db_url, {"push": push}, name="stale")
    runner = run_in_thread(w)
    try:
        assert started.wait(10)
        # While the handler runs, its leases expire and the reaper takes them back (pinned
        # time past the lease; the worker's heartbeats run on the real clock, 10 s apart).
        lost = ids if taken_over == "all" else ids[2:3]
        auto.execute(  # only these expire; they started (else the reaper gives them back)
            "UPDATE jobs SET locked_until = %s, started_token = lease_token WHERE id = ANY(%s)",
            (T0, lost),
        )
        assert len(PgJobStore(auto).reap(100, T0 + timedelta(seconds=1))) == len(lost)
        release.set()
        w.stop()
        runner.join(30)
        assert not runner.is_alive()
    finally:
        release.set()
    assert w.stats.fenced == len(lost)
    kept = [i for i in ids if i not in lost]
    assert deliveries(auto) == [(i, 1) for i in kept]
    for i in lost:
        assert row(auto, i)[0] == "retrying"
        assert [a.outcome for a in jobs.job_attempts(auto, i)] == ["lease_expired", "fenced"]
    for i in kept:
        assert row(auto, i)[0] == "succeeded"

    # The new owner delivers the taken-over jobs, once.
    worker(db_url, {"push": push}, clock=FrozenClock(T0 + timedelta(seconds=2))).run_until_idle()
    assert deliveries(auto) == sorted([(i, 1) for i in kept] + [(i, 2) for i in lost])


def test_an_effect_that_raises_commits_nothing_and_retries_its_jobs(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any]
) -> None:
    auto.execute("CREATE UNIQUE INDEX ON deliveries (job_id)")
    auto.execute("INSERT INTO deliveries VALUES (-1, 0)")
    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("push", {}) for _ in range(4)], now=T0)]
    conn.commit()

    def half_written(c: psycopg.Connection[Any], done: Sequence[Job]) -> None:
        deliver(c, done)
        c.execute("INSERT INTO deliveries VALUES (-1, 0)")  # unique violation: aborts

    @batch_handler
    def push(batch: Batch) -> None:
        batch.in_completion(half_written)

    stats = worker(db_url, {"push": push}).run_until_idle()
    assert stats.effect_failures == 1
    assert stats.outcomes == {"retry": 4}
    assert deliveries(auto) == [(-1, 0)]
    for i in ids:
        assert row(auto, i) == ("retrying", 1, T0 + timedelta(seconds=10), "completion_effect")


def test_effects_of_one_run_fail_alone_in_the_shared_transaction(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any]
) -> None:
    """Two runs' effects and outcomes in one completion transaction: the failing one rolls back
    to its savepoint, the other commits with its outcomes; a swallowed database error counts as
    a failure too."""
    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("push", {}) for _ in range(6)], now=T0)]
    conn.commit()
    store = PgJobStore(auto)
    claimed = store.claim({"default": 6}, "w", LEASE, T0)
    good, bad, swallowing = claimed[:2], claimed[2:4], claimed[4:]

    def fails(c: psycopg.Connection[Any], done: Sequence[Job]) -> None:
        deliver(c, done)
        raise RuntimeError("effect bug")

    def swallows(c: psycopg.Connection[Any], done: Sequence[Job]) -> None:
        deliver(c, done)
        with contextlib.suppress(psycopg.errors.DivisionByZero):
            c.execute("SELECT 1 / 0")

    seen: list[list[int]] = []

    def failed(held: Sequence[Job], exc: Exception) -> list[Any]:
        seen.append([j.id for j in held])
        from jobs.store import default_effect_failed

        return default_effect_failed(held, exc)

    written, more = store.complete_and_claim(
        [Finished(j, SUCCEEDED, T0, 1.0) for j in claimed],
        {"default": 5},
        "w",
        LEASE,
        T0,
        effects=[
            RunEffects((deliver,), tuple(good)),
            RunEffects((fails,), tuple(bad)),
            RunEffects((swallows,), tuple(swallowing)),
        ],
        effect_failed=failed,
    )
    assert more == []
    assert seen == [[j.id for j in bad], [j.id for j in swallowing]]
    assert written == {
        **{j.id: "succeeded" for j in good},
        **{j.id: "retry" for j in bad + swallowing},
    }
    assert deliveries(auto) == [(j.id, 1) for j in good]
    assert [row(auto, i)[3] for i in ids] == [None, None] + ["completion_effect"] * 4


def test_the_no_effect_path_takes_no_lock_statement(
    conn: psycopg.Connection[Any], db_url: str, auto: psycopg.Connection[Any]
) -> None:
    """Effects registered only for jobs that did not succeed cost nothing: no lock round trip."""
    jobs.enqueue_many(conn, [JobSpec("push", {}) for _ in range(3)], now=T0)
    conn.commit()
    store = PgJobStore(auto)
    claimed = store.claim({"default": 3}, "w", LEASE, T0)
    failed = jobs.retry.decide(claimed[0], jobs.TransientError("x"), RetryPolicy())
    statements: list[str] = []

    class Spy(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
            statements.append(str(query)[:40])
            return super().execute(query, params, **kw)

    auto.cursor_factory = Spy
    written, _ = store.complete_and_claim(
        [Finished(j, failed, T0, 1.0) for j in claimed],
        {},
        "w",
        LEASE,
        T0,
        effects=[RunEffects((deliver,), tuple(claimed))],
    )
    assert set(written.values()) == {"retry"}
    assert len(statements) == 1  # job_complete only
    assert deliveries(auto) == []


def test_stop_gives_back_jobs_claimed_ahead_without_using_an_attempt(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ids = [e.id for e in jobs.enqueue_many(conn, [JobSpec("slow", {}) for _ in range(11)])]
    conn.commit()
    started, release = threading.Event(), threading.Event()

    def slow(_job: Job) -> None:
        started.set()
        release.wait(30)

    w = Worker(
        db_url, {"slow": slow}, {"default": 1}, prefetch=10, grace=timedelta(0), listen=False
    )
    runner = run_in_thread(w)
    try:
        assert started.wait(10)
        w.stop()
        runner.join(30)
        assert not runner.is_alive()
    finally:
        release.set()
    assert (w.stats.returned, w.stats.released) == (10, 1)
    statuses = conn.execute(
        "SELECT status, attempts, count(*) FROM jobs_all GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert statuses == [("pending", 0, 10), ("retrying", 1, 1)]
    history = conn.execute("SELECT job_id, outcome FROM job_attempts").fetchall()
    assert len(history) == 1 and history[0][1] == "interrupted" and history[0][0] in ids


def test_defaults_claim_ahead_of_the_threads_for_fast_handlers(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    jobs.enqueue_many(conn, [JobSpec("noop", {}) for _ in range(3000)])
    conn.commit()
    w = Worker(db_url, {"noop": lambda _job: None}, listen=False)  # 4 threads, no prefetch
    stats = w.run_until_idle()
    assert stats.outcomes == {"succeeded": 3000}
    # Free threads alone would be at least 3000 / 4 = 750 claims.
    assert stats.claims < 150, stats.claims


def test_a_blocked_handler_hoards_no_leases(conn: psycopg.Connection[Any], db_url: str) -> None:
    jobs.enqueue_many(conn, [JobSpec("fast", {}) for _ in range(200)])
    conn.commit()
    fast_done = threading.Event()
    blocked, release = threading.Event(), threading.Event()
    count = [0]
    lock = threading.Lock()

    def fast(_job: Job) -> None:
        with lock:
            count[0] += 1
            if count[0] == 200:
                fast_done.set()

    def slow(_job: Job) -> None:
        blocked.set()
        release.wait(30)

    w = Worker(
        db_url,
        {"fast": fast, "slow": slow},
        {"default": 2, "slow": 2},
        poll_interval=timedelta(seconds=0.05),
    )
    runner = run_in_thread(w)
    try:
        assert fast_done.wait(20)
        jobs.enqueue_many(conn, [JobSpec("slow", {}, queue="slow") for _ in range(300)])
        conn.commit()
        assert blocked.wait(10)
        stats = {s.queue: s for s in jobs.queue_stats(conn)}
        conn.commit()
        # Two threads blocked, nothing measured: two leases, none ahead.
        assert stats["slow"].leased == 2
    finally:
        w.stop()
        release.set()
        runner.join(30)
    assert not runner.is_alive()
