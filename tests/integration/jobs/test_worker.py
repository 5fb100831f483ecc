"""The worker runtime: every handler outcome, retries to dead and back, isolation, poll-only."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

import jobs
from jobs import Job, JobSpec, RetryPolicies, RetryPolicy, Worker
from jobs.service import Reconnect
from jobs.store import PgJobStore
from tests.processes import wait_for
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
POLICY = RetryPolicies(
    default=RetryPolicy(base=timedelta(seconds=10), jitter=0.0, rate_limit_cap=timedelta(hours=1))
)


def row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    r = conn.execute(
        "SELECT status, attempts, run_at, last_error_code, completed_at, locked_by"
        " FROM jobs_all WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert r is not None
    return tuple(r)


def raiser(exc: BaseException) -> jobs.Handler:
    def handler(_job: Job) -> None:
        raise exc

    return handler


OUTCOMES: list[tuple[str, BaseException | None, tuple[Any, ...]]] = [
    ("ok", None, ("succeeded", 1, T0, None, T0, None)),
    (
        "transient",
        jobs.TransientError("timeout"),
        ("retrying", 1, T0 + timedelta(seconds=10), "transient", None, None),
    ),
    (
        "retry_after",
        jobs.Retry(after=timedelta(minutes=1)),
        ("retrying", 1, T0 + timedelta(minutes=1), "retry", None, None),
    ),
    (
        "rate_limited",
        jobs.RateLimited(120),
        # A 429 takes its attempt back (RetryPolicy.rate_limited_for): attempts stays 0.
        ("retrying", 0, T0 + timedelta(seconds=120), "rate_limited", None, None),
    ),
    (
        "rate_limited_capped",
        jobs.RateLimited(timedelta(hours=10)),
        ("retrying", 0, T0 + timedelta(hours=1), "rate_limited", None, None),
    ),
    (
        "permanent",
        jobs.PermanentError("bad token", code="invalid_token"),
        ("dead", 1, T0, "invalid_token", T0, None),
    ),
    ("cancel", jobs.Cancel("revoked"), ("cancelled", 1, T0, "cancelled", T0, None)),
    ("snooze", jobs.Snooze(300), ("pending", 0, T0 + timedelta(seconds=300), None, None, None)),
    (
        "unknown",
        ValueError("boom"),
        ("retrying", 1, T0 + timedelta(seconds=10), "unknown.ValueError", None, None),
    ),
]


@pytest.mark.parametrize(("name", "exc", "expected"), OUTCOMES, ids=[o[0] for o in OUTCOMES])
def test_each_handler_outcome(
    conn: psycopg.Connection[Any],
    db_url: str,
    name: str,
    exc: BaseException | None,
    expected: tuple[Any, ...],
) -> None:
    handler: jobs.Handler = (lambda _job: None) if exc is None else raiser(exc)
    job_id = jobs.enqueue(conn, name, {}, now=T0).id
    conn.commit()
    worker = Worker(db_url, {name: handler}, clock=FrozenClock(T0), retry=POLICY, listen=False)
    stats = worker.run_until_idle()
    assert stats.claimed == 1
    assert row(conn, job_id) == expected
    (attempt,) = jobs.job_attempts(conn, job_id)
    assert attempt.outcome == (
        "succeeded"
        if exc is None
        else {
            "snooze": "snoozed",
            "permanent": "dead",
            "cancel": "cancelled",
            "rate_limited": "rate_limited",
            "rate_limited_capped": "rate_limited",
        }.get(name, "retry")
    )


def test_a_job_type_without_handler_logs_one_line_without_traceback(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: each retry of a job whose type this worker has no handler for logged a
    traceback (of the worker's own raise). Now one warning line naming the job type."""
    caplog.set_level(logging.WARNING, logger="tockwork")
    job_id = jobs.enqueue(conn, "orphan_type", {}, now=T0).id
    conn.commit()
    worker = Worker(
        db_url, {"other": lambda _job: None}, clock=FrozenClock(T0), retry=POLICY, listen=False
    )
    assert worker.run_until_idle().claimed == 1
    assert row(conn, job_id)[0] == "retrying" and row(conn, job_id)[3] == "no_handler"
    records = [r for r in caplog.records if f"job {job_id}" in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert "no handler for job type 'orphan_type'" in records[0].getMessage()
    assert records[0].exc_info is None
    assert "Traceback" not in caplog.text


def test_unknown_errors_die_after_the_small_limit(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    clock = FrozenClock(T0)
    job_id = jobs.enqueue(conn, "flaky", {}, max_attempts=10, now=T0).id
    conn.commit()
    worker = Worker(
        db_url, {"flaky": raiser(KeyError("x"))}, clock=clock, retry=POLICY, listen=False
    )
    statuses = []
    for _ in range(3):
        worker.run_until_idle()
        statuses.append(row(conn, job_id)[0])
        clock.advance(timedelta(hours=2))
    assert statuses == ["retrying", "retrying", "dead"]
    assert row(conn, job_id)[3] == "unknown.KeyError"


def test_exhausted_then_dead_then_requeued_then_succeeds(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    clock = FrozenClock(T0)
    broken = threading.Event()
    broken.set()
    seen: list[int] = []

    def handler(job: Job) -> None:
        seen.append(job.attempt)
        if broken.is_set():
            raise jobs.TransientError("provider down")

    job_id = jobs.enqueue(conn, "push", {"u": 1}, max_attempts=3, now=T0).id
    conn.commit()
    worker = Worker(db_url, {"push": handler}, clock=clock, retry=POLICY, listen=False)
    for _ in range(3):
        worker.run_until_idle()
        clock.advance(timedelta(hours=1))
    record = jobs.get_job(conn, job_id)
    assert (record.status, record.attempts, record.last_error_code) == ("dead", 3, "transient")
    assert record.payload == {"u": 1}
    assert [j.id for j in jobs.list_jobs(conn)] == [job_id]
    conn.commit()

    broken.clear()
    assert jobs.requeue(conn, queue="default", error_code="transient", now=clock.now()) == [job_id]
    conn.commit()
    worker.run_until_idle()
    record = jobs.get_job(conn, job_id)
    assert (record.status, record.attempts) == ("succeeded", 1)
    assert seen == [1, 2, 3, 1]
    outcomes = [a.outcome for a in jobs.job_attempts(conn, job_id)]
    assert outcomes == ["retry", "retry", "dead", "succeeded"]


def test_requeue_and_cancel_need_a_filter(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.requeue(conn)
    assert info.value.field == "filter"
    with pytest.raises(jobs.InvalidJob):
        jobs.cancel(conn, queue="Not Valid")


def test_cancel_waiting_jobs(conn: psycopg.Connection[Any]) -> None:
    a = jobs.enqueue(conn, "t", {}).id
    b = jobs.enqueue(conn, "t", {}, queue="other").id
    assert jobs.cancel(conn, ids=[a], reason="user_deleted") == [a]
    assert jobs.get_job(conn, a).status == "cancelled"
    assert jobs.get_job(conn, b).status == "pending"


def test_poll_only_processes_everything(conn: psycopg.Connection[Any], db_url: str) -> None:
    done: list[int] = []
    lock = threading.Lock()

    def handler(job: Job) -> None:
        with lock:
            done.append(job.payload["i"])

    jobs.enqueue_many(
        conn,
        [JobSpec("t", {"i": i}, queue="a" if i % 2 else "b") for i in range(500)],
        now=T0,
    )
    conn.commit()
    worker = Worker(db_url, {"t": handler}, {"a": 4, "b": 2}, clock=FrozenClock(T0), listen=False)
    stats = worker.run_until_idle()
    assert sorted(done) == list(range(500))
    assert stats.outcomes == {"succeeded": 500}
    assert conn.execute("SELECT count(*) FROM job_attempts").fetchone() == (500,)
    assert conn.execute("SELECT count(*) FROM jobs_all WHERE status <> 'succeeded'").fetchone() == (
        0,
    )


def test_no_idle_probe_after_a_claim_that_got_all_it_asked_for(
    conn: psycopg.Connection[Any], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a full claim the next cycle claims again anyway (a job fallen due included), so the
    worker does not ask when the next job falls due (job_next_due, a round trip) before it
    sleeps; after a short claim it does."""
    jobs.enqueue_many(conn, [JobSpec("t", {}) for _ in range(2)], now=T0)
    conn.commit()
    probes: list[int] = []
    next_due = PgJobStore.next_due

    def probe(store: PgJobStore, *args: Any, **kwargs: Any) -> float | None:
        probes.append(worker.stats.claims)
        return next_due(store, *args, **kwargs)

    monkeypatch.setattr(PgJobStore, "next_due", probe)
    release = threading.Event()
    worker = Worker(
        db_url, {"t": lambda _job: release.wait(30)}, {"default": 2}, clock=FrozenClock(T0),
        listen=False,
    )  # fmt: skip
    with worker._session(until_idle=False):
        try:
            # A fast handler measured: the target of jobs claimed ahead grows after a full
            # claim, so a slot is free after it (the case in which the probe was sent).
            worker._sizers["default"].seconds_per_job = 0.001
            worker._step(until_idle=False)  # wants 2 (the threads), gets 2: full
            assert (worker.stats.claimed, probes) == (2, [])
            assert worker._has_free_slot()
            worker._step(until_idle=False)  # wants 2 ahead, gets none: short, a slot free
            assert (worker.stats.claimed, probes) == (2, [2])
        finally:
            release.set()
    assert worker.stats.outcomes == {"succeeded": 2}


def test_a_flood_of_reports_never_delays_critical_alerts(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    release_reports = threading.Event()
    alert_done = threading.Event()
    reports_started = threading.Event()

    def report(_job: Job) -> None:
        reports_started.set()
        release_reports.wait(30)

    def alert(_job: Job) -> None:
        alert_done.set()

    jobs.enqueue_many(conn, [JobSpec("report", {}, queue="reports") for _ in range(2000)])
    conn.commit()
    worker = Worker(
        db_url,
        {"report": report, "alert": alert},
        {"critical_alerts": 2, "reports": 1},
        poll_interval=timedelta(seconds=5),
    )
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        assert reports_started.wait(10)
        with psycopg.connect(db_url) as c:
            jobs.enqueue(c, "alert", {}, queue="critical_alerts")
        # The notification wakes the worker; the alert does not wait behind 2,000 reports.
        assert alert_done.wait(10)
        stats = jobs.queue_stats(conn)
        reports = next(s for s in stats if s.queue == "reports")
        assert reports.leased == 1
        assert reports.ready == 1999
    finally:
        worker.stop()
        release_reports.set()
        runner.join(30)
    assert not runner.is_alive()
    assert conn.execute("SELECT count(*) FROM jobs_all WHERE status = 'leased'").fetchone() == (0,)


def test_stop_gives_back_leases_of_handlers_that_overrun_the_grace(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    started = threading.Event()
    release = threading.Event()

    def slow(_job: Job) -> None:
        started.set()
        release.wait(30)

    job_id = jobs.enqueue(conn, "slow", {}).id
    conn.commit()
    worker = Worker(db_url, {"slow": slow}, grace=timedelta(seconds=0.2), listen=False)
    runner = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        assert started.wait(10)
        worker.stop()
        runner.join(10)
        assert not runner.is_alive()
        assert row(conn, job_id)[0] == "retrying"
        assert worker.stats.released == 1
    finally:
        release.set()
    assert [a.outcome for a in jobs.job_attempts(conn, job_id)] == ["interrupted"]


def test_a_running_worker_rides_out_a_lost_connection(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    done = threading.Event()
    worker = Worker(
        db_url,
        {"t": lambda _job: done.set()},
        listen=False,
        poll_interval=timedelta(seconds=0.02),
        connect_kwargs={"application_name": "tockwork-test-worker"},
        name="w1",
        reconnect=Reconnect(backoff=RetryPolicy(base=timedelta(seconds=0.01), jitter=0.0)),
    )
    worker.start()
    with psycopg.connect(db_url, autocommit=True) as auto:
        try:
            assert worker.wait_started(10)
            wait_for(
                auto,
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'tockwork-test-worker'",
            )
            auto.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'tockwork-test-worker'"
            )
            jobs.enqueue(auto, "t", {})  # reaches the worker on its new connection only
            assert done.wait(10)
        finally:
            worker.stop()
            assert worker.wait(30)
    assert worker.stats.outcomes == {"succeeded": 1}
    lost = [r.getMessage() for r in caplog.records if "connection lost" in r.getMessage()]
    restored = [r.getMessage() for r in caplog.records if "connection restored" in r.getMessage()]
    assert [m.split(":")[0] for m in lost] == ["worker w1"]
    assert len(restored) == 1


@pytest.mark.parametrize(
    ("zone", "tzinfo"),
    [
        ("Etc/UTC", UTC),  # another name of UTC: the session is set to 'UTC'
        ("UTC", UTC),
        ("Europe/Paris", ZoneInfo("Europe/Paris")),  # any other zone is left as it is
    ],
)
def test_a_worker_session_in_utc_by_another_name_is_set_to_utc(
    conn: psycopg.Connection[Any], db_url: str, zone: str, tzinfo: tzinfo
) -> None:
    seen: list[tuple[datetime, str]] = []

    def handler(job: Job) -> None:
        def effect(c: psycopg.Connection[Any]) -> None:
            row = c.execute("SELECT current_setting('TimeZone')").fetchone()
            assert row is not None
            seen.append((job.run_at, row[0]))

        jobs.in_completion(effect)

    jobs.enqueue(conn, "t", {}, now=T0)
    conn.commit()
    worker = Worker(
        db_url,
        {"t": handler},
        clock=FrozenClock(T0),
        listen=False,
        connect_kwargs={"options": f"-c TimeZone={zone}"},
    )
    assert worker.run_until_idle().outcomes == {"succeeded": 1}
    [(run_at, setting)] = seen
    assert run_at == T0 and run_at.tzinfo == tzinfo
    assert setting == ("UTC" if zone == "Etc/UTC" else zone)
