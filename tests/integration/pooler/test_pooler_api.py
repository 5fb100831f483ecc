"""The library through a real transaction-mode PgBouncer (one server connection per database).

Each test has at least two clients of the pooler take turns on the one server connection, so a
statement prepared by one client, a setting or a LISTEN left on the session, would reach the
other: the first test shows that this set-up does break psycopg's defaults.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import jobs
import scheduler
from jobs import JobSpec, Relay, Worker, outbox
from scheduler import health
from scheduler.definitions import Definition, sync
from scheduler.schedules import get_schedule, list_schedules, preview
from scheduler.tick import Scheduler
from tests.integration.outbox.apps import projections
from tests.integration.pooler.conftest import SHARED_DB, PgBouncer
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_the_pooler_is_in_transaction_mode_and_breaks_psycopg_defaults(
    pgbouncer: PgBouncer, server_url: str
) -> None:
    """Two clients, one server connection: psycopg's prepared statements collide, unless the
    connections are opened for a transaction pooler (no prepared statements)."""
    config = {row[0]: row[1] for row in pgbouncer.show("CONFIG")}
    assert config["pool_mode"] == "transaction"
    shared = pgbouncer.url(make_conninfo(server_url, dbname=SHARED_DB))

    with (
        psycopg.connect(shared, autocommit=True, prepare_threshold=0) as a,
        psycopg.connect(shared, autocommit=True, prepare_threshold=0) as b,
    ):
        a.execute("SELECT 1 WHERE %s::int > 0", (1,))  # prepares _pg3_0 on the server
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            b.execute("SELECT 2 WHERE %s::int > 0", (2,))  # its own _pg3_0: taken

    with (
        jobs.connect(shared, pooler="transaction", autocommit=True, prepare_threshold=0) as a,
        jobs.connect(shared, pooler="transaction", autocommit=True, prepare_threshold=0) as b,
    ):
        for i in range(10):
            assert a.execute("SELECT %s::int WHERE true", (i,)).fetchone() == (i,)
            assert b.execute("SELECT %s::text WHERE true", (str(i),)).fetchone() == (str(i),)


def test_enqueue_and_enqueue_many_through_the_pooler(
    pooler_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Two producers take turns for more than psycopg's prepare threshold: single enqueues,
    idempotent ones, and enqueue_many both through COPY and through the keyed INSERT path."""
    with (
        jobs.connect(pooler_url, pooler="transaction") as a,
        jobs.connect(pooler_url, pooler="transaction", autocommit=True) as b,
    ):
        for i in range(8):
            with a.transaction():
                jobs.enqueue(a, "quick", {"i": i}, idempotency_key=f"a:{i}")
            jobs.enqueue(b, "quick", {"i": i}, queue="other")
            assert jobs.enqueue(b, "quick", {"i": i}, idempotency_key=f"a:{i}").created is False
            with a.transaction():
                got = jobs.enqueue_many(a, [JobSpec("bulk", {"i": i, "n": n}) for n in range(30)])
            assert len(got) == 30
            keyed = [JobSpec("keyed", {"n": n}, idempotency_key=f"k:{i}:{n}") for n in range(5)]
            assert all(e.created for e in jobs.enqueue_many(b, keyed))
        stats = {s.queue: s.ready for s in jobs.queue_stats(b)}
    counts = dict(conn.execute("SELECT job_type, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert counts == {"quick": 16, "bulk": 240, "keyed": 40}
    assert stats == {"default": 8 + 240 + 40, "other": 8}


def test_schedules_api_through_the_pooler(pooler_url: str, conn: psycopg.Connection[Any]) -> None:
    """Create (one and many, the latter pipelined), update, list, read, preview, sync
    definitions, and tick with a library Scheduler: two clients taking turns."""
    with (
        jobs.connect(pooler_url, pooler="transaction") as a,
        jobs.connect(pooler_url, pooler="transaction") as b,
    ):
        ids = []
        for i in range(6):
            with a.transaction():
                s = scheduler.create_schedule(
                    a, job_type="reminder", rule="daily@08:00", zone="Europe/Paris",
                    subject=f"user-{i}", now=T0,
                )  # fmt: skip
            ids.append(s.id)
            with b.transaction():
                scheduler.update_schedule(b, s.id, rule="daily@09:30", now=T0)
                assert get_schedule(b, s.id).rule_json["at"] == "09:30"
        with a.transaction():
            many = scheduler.create_schedules(
                a,
                [
                    {"job_type": "ping", "rule": "every:1m", "zone": "UTC", "subject": f"s{n}"}
                    for n in range(20)
                ],
                now=T0,
            )
        assert len(many) == 20
        with b.transaction():
            result = sync(b, [Definition(key="nightly", job_type="report", rule="daily@02:00",
                                         zone="America/Chicago")], now=T0)  # fmt: skip
        assert result.created == ["nightly"]
        assert len(list_schedules(a, limit=100)) == 27
        a.commit()
        assert preview(get_schedule(b, ids[0]), T0, 3)[0].local.hour == 9
        b.commit()

    kwargs = jobs.connect_kwargs("transaction")
    clock = FrozenClock(T0)
    replicas = [Scheduler(pooler_url, clock=clock, connect_kwargs=kwargs) for _ in range(2)]
    enqueued = 0
    try:
        for _ in range(6):  # past psycopg's prepare threshold on each replica
            clock.advance(timedelta(minutes=1))
            enqueued += sum(r.tick().enqueued for r in replicas)
    finally:
        for r in replicas:
            r.close()
    # Each occurrence once: one job per (schedule, minute), whichever replica enqueued it.
    row = conn.execute(
        "SELECT count(*), count(DISTINCT idempotency_key) FROM jobs_all WHERE job_type = 'ping'"
    ).fetchone()
    assert row is not None and row[0] == row[1] >= 20 * 6
    assert enqueued == conn.execute("SELECT count(*) FROM jobs_all").fetchone()[0]  # type: ignore[index]


def test_worker_through_the_pooler_polls_only_and_says_so_once(
    pooler_url: str, conn: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    with jobs.connect(pooler_url, pooler="transaction") as producer, producer.transaction():
        jobs.enqueue_many(producer, [JobSpec("noop", {"n": n}) for n in range(60)])
    ran: list[int] = []
    lock = threading.Lock()

    def noop(job: jobs.Job) -> None:
        with lock:  # a second client of the pooler, taking turns with the worker's
            row = side.execute("SELECT %s::bigint WHERE true", (job.id,)).fetchone()
            assert row is not None
            ran.append(row[0])

    side = jobs.connect(pooler_url, pooler="transaction", autocommit=True)
    worker = Worker(
        pooler_url,
        {"noop": noop},
        {"default": 2},
        prefetch=1,  # many small claims: past the prepare threshold
        pooler="transaction",
    )
    with side, caplog.at_level(logging.INFO, logger="tockwork"):
        stats = worker.run_until_idle()
    assert stats.claimed == 60 and len(ran) == 60
    assert not worker.listening
    poll_only = [r for r in caplog.records if "transaction-mode pooler" in r.getMessage()]
    assert len(poll_only) == 1
    assert conn.execute("SELECT count(*) FROM jobs_all WHERE status = 'succeeded'").fetchone() == (
        60,
    )


def test_worker_listens_over_the_direct_url(pooler_url: str, db_url: str) -> None:
    worker = Worker(
        pooler_url, {"noop": lambda job: None}, pooler="transaction", listen_conninfo=db_url
    )
    worker.start()
    try:
        assert worker.wait_started(10)
        assert worker.wait_listening(10)
    finally:
        worker.stop()
        assert worker.wait(20)


def test_relay_through_the_pooler(pooler_url: str, conn: psycopg.Connection[Any]) -> None:
    with jobs.connect(pooler_url, pooler="transaction", autocommit=True) as producer:
        for i in range(30):
            outbox.record(
                producer, aggregate_type="order", aggregate_id=f"o-{i}",
                event_type="order.placed", payload={"n": i},
            )  # fmt: skip
    stats = Relay(pooler_url, projections, batch_size=4, pooler="transaction").run_until_idle()
    assert stats.processed == 30
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (30,)


def test_health_leaves_no_setting_on_the_pooled_session(
    pgbouncer: PgBouncer, server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/healthz sets its statement timeout for its own transactions only: the next client of
    the one server connection still has the default."""
    monkeypatch.setenv("TOCKWORK_POOLER", "transaction")
    shared = pgbouncer.url(make_conninfo(server_url, dbname=SHARED_DB))
    ok, details = health.Health(shared, poll_only=True, timeout=1.5, max_scheduler_lag=None)()
    checks = details["checks"]
    # The shared database has no Tockwork schema: only that check fails, and says what to run.
    assert not ok and not checks["schema"]["ok"], details
    assert "tockwork migrate" in checks["schema"]["detail"]
    assert all(c["ok"] for name, c in checks.items() if name != "schema"), details
    with jobs.connect(shared, autocommit=True) as other:
        assert other.execute("SHOW statement_timeout").fetchone() == ("0",)
