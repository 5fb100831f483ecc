"""Health, stats and metrics from a read replica (``--read-url``, issue 25).

A real primary and a streaming standby (tests/failover/servers.py). The checks that only read
(schema, scheduler lag) go to the standby, those that need the primary (database, LISTEN,
replication) stay on it, and a ``replica`` check states the standby's replay lag: above
``--max-replica-lag`` it fails, as it does when the standby follows no primary. A read URL that
reaches a primary is a usage error (exit 2, one line); one that cannot be reached fails the
``replica`` check of ``healthz`` and stops ``metrics-server`` from starting (one line).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, LiteralString

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.testclient import TestClient

import jobs
from jobs.primary import PrimaryWatch
from scheduler import health
from scheduler.dashboard import create_app
from scheduler.migrations import COMPONENTS
from tests.acceptance.cli_harness import Result, run
from tests.failover.servers import LocalServer, migrated_primary_and_standby, primary_and_standby
from tests.integration.dashboard.conftest import TOKEN, sign_in

DOWN = "postgresql://nobody@127.0.0.1:1/nothing"


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[LocalServer, LocalServer]]:
    """A migrated primary and its standby, shared by the tests that leave both running."""
    with migrated_primary_and_standby() as servers:
        yield servers


def _wait_for(url: str, sql: LiteralString, what: str, *params: object) -> None:
    """Wait until ``sql`` is true on ``url``: an event of another process (the standby's WAL
    receiver or replay), polled on the database."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(url, autocommit=True) as conn:
            if conn.execute(sql, params).fetchone() == (True,):
                return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _caught_up(primary: LocalServer, standby: LocalServer) -> None:
    """A commit on the primary, then wait until the standby replayed it."""
    with psycopg.connect(primary.url, autocommit=True) as conn:
        jobs.enqueue(conn, "replica.probe", {})
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    _wait_for(standby.url, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", "replay", row[0])


def _healthz(*argv: str, env: dict[str, str | None] | None = None) -> tuple[Result, Any]:
    result = run(["healthz", "--compact", "--timeout", "2", *argv], env=env)
    body = json.loads(result.out) if result.out.strip() else None
    return result, body


def test_healthz_reads_the_replica_and_states_its_lag(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    primary, standby = pair
    _caught_up(primary, standby)
    result, body = _healthz("--database-url", primary.url, "--read-url", standby.url)
    assert result.code == 0, result
    checks = body["checks"]
    assert list(checks) == [
        "database", "schema", "listen", "scheduler_lag", "replication", "replica",
    ]  # fmt: skip
    replica = checks["replica"]
    assert replica["ok"] is True, replica
    assert 0.0 <= replica["value"] < 30.0
    assert "behind the primary <= 30s" in replica["detail"]
    # the primary's checks still ask the primary: LISTEN (a standby refuses it) and its timeline
    assert checks["listen"]["detail"] == "database accepts LISTEN"
    assert "timeline 1" in checks["replication"]["detail"]

    # The same from $TOCKWORK_READ_URL; without either, no replica check.
    result, body = _healthz("--database-url", primary.url, env={"TOCKWORK_READ_URL": standby.url})
    assert result.code == 0 and "replica" in body["checks"], result
    result, body = _healthz("--database-url", primary.url, env={"TOCKWORK_READ_URL": None})
    assert result.code == 0 and "replica" not in body["checks"], result


def test_a_replica_behind_the_threshold_is_a_finding(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    """Replay paused on the standby while the primary commits: the standby has received WAL it
    has not replayed, and its lag is the time since the last commit it replayed, measured at a
    pinned instant ten minutes after that commit."""
    primary, standby = pair
    _caught_up(primary, standby)
    with psycopg.connect(standby.url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_last_xact_replay_timestamp()").fetchone()
        assert row is not None and isinstance(row[0], datetime)
        replayed: datetime = row[0]
        conn.execute("SELECT pg_wal_replay_pause()")
    try:
        with psycopg.connect(primary.url, autocommit=True) as conn:
            jobs.enqueue(conn, "replica.probe", {})
        _wait_for(standby.url, "SELECT pg_last_wal_receive_lsn() > pg_last_wal_replay_lsn()",
                  "WAL received and not replayed")  # fmt: skip
        at = replayed + timedelta(minutes=10)
        late = health.Health(primary.url, read_conninfo=standby.url, now=lambda: at)
        ok, details = late()
        assert not ok
        assert details["checks"]["replica"] == {
            "ok": False,
            "detail": "600.0s behind the primary > 30s: what is read there is that old",
            "value": 600.0,
        }
        lenient = health.Health(
            primary.url,
            read_conninfo=standby.url,
            now=lambda: at,
            max_replica_lag=timedelta(minutes=15),
        )
        ok, details = lenient()
        assert ok, details
        assert details["checks"]["replica"]["detail"] == "600.0s behind the primary <= 900s"
        unchecked = health.Health(
            primary.url, read_conninfo=standby.url, now=lambda: at, max_replica_lag=None
        )
        assert unchecked()[0]
    finally:
        with psycopg.connect(standby.url, autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")
    _caught_up(primary, standby)


def test_a_primary_given_as_the_replica_is_refused_in_one_line(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    primary, _ = pair
    for argv, env in (
        (["healthz", "--read-url", primary.url], None),
        (["metrics-server", "--port", "0", "--read-url", primary.url], None),
        (["stats", "--read-url", primary.url], None),
        (["healthz"], {"TOCKWORK_READ_URL": primary.url}),
    ):
        result = run([*argv, "--database-url", primary.url], env=env)
        assert result.code == 2, result
        assert result.err.strip().count("\n") == 0, result.err
        assert "--read-url" in result.err and "reaches a primary, not a streaming replica" in (
            result.err
        )
        assert "Traceback" not in result.err


def test_an_unreachable_replica_fails_its_checks_not_the_primarys(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    primary, _ = pair
    result, body = _healthz("--database-url", primary.url, "--read-url", DOWN)
    assert result.code == 1, result
    checks = body["checks"]
    assert checks["replica"]["ok"] is False
    assert checks["replica"]["detail"].startswith("unreachable: OperationalError: ")
    assert "\n" not in checks["replica"]["detail"]
    assert checks["schema"] == {
        "ok": False, "detail": "not checked: replica unreachable", "value": None,
    }  # fmt: skip
    assert checks["database"]["ok"] and checks["listen"]["ok"] and checks["replication"]["ok"]

    started = run(["metrics-server", "--port", "0", "--database-url", primary.url,
                   "--read-url", DOWN])  # fmt: skip
    assert started.code == 1, started
    assert started.err.strip().count("\n") == 0, started.err
    assert "--read-url 'nothing' on 127.0.0.1:1: cannot connect" in started.err


def test_stats_states_the_replica_lag(pair: tuple[LocalServer, LocalServer]) -> None:
    primary, standby = pair
    _caught_up(primary, standby)
    result = run(["stats", "--database-url", primary.url, "--read-url", standby.url])
    assert result.code == 0, result
    assert "read from a replica, " in result.out and " s behind the primary" in result.out


def test_metrics_from_the_replica_state_its_lag_and_read_replication_on_the_primary(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    """The gauges come from the standby with its lag; the replication gauges from the primary
    (read on the standby, the timeline would be 0 and the settings the standby's own)."""
    primary, standby = pair
    _caught_up(primary, standby)
    registry = CollectorRegistry()
    health.register_metrics(standby.url, registry, primary=primary.url)
    text = generate_latest(registry).decode()
    assert "tockwork_database_up 1.0" in text
    assert "tockwork_replica_streaming 1.0" in text
    assert "tockwork_replica_lag_seconds " in text
    assert "tockwork_server_timeline 1.0" in text
    assert "tockwork_replication_synchronous 0.0" in text

    on_primary = CollectorRegistry()
    health.register_metrics(primary.url, on_primary)
    text = generate_latest(on_primary).decode()
    assert "tockwork_replica_" not in text
    assert "tockwork_server_timeline 1.0" in text

    with health.serve(primary.url, 0, host="127.0.0.1", registry=CollectorRegistry(),
                      read_conninfo=standby.url) as server:  # fmt: skip
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{server.port}/healthz", timeout=10
            ) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
    assert body["checks"]["replica"]["ok"] is True, body


def test_a_replica_that_follows_no_primary_is_a_finding() -> None:
    """The primary stopped: the standby's WAL receiver stops streaming, and what it serves
    stops at what it replayed; its lag alone would say 0 (it replayed all it received)."""
    with migrated_primary_and_standby() as (primary, standby):
        _wait_for(standby.url, "SELECT EXISTS (SELECT FROM pg_stat_wal_receiver "
                  "WHERE status = 'streaming')", "streaming")  # fmt: skip
        primary.stop("fast")
        _wait_for(standby.url, "SELECT NOT EXISTS (SELECT FROM pg_stat_wal_receiver "
                  "WHERE status = 'streaming')", "the receiver to stop streaming")  # fmt: skip
        ok, details = health.Health(primary.url, read_conninfo=standby.url, timeout=1.0)()
    assert not ok
    checks = details["checks"]
    assert checks["database"]["ok"] is False
    assert checks["schema"]["ok"] is True  # read on the standby, which still answers
    replica = checks["replica"]
    assert replica["ok"] is False
    assert replica["detail"].startswith("the read URL reaches a replica ")
    assert "no WAL receiver runs" in replica["detail"] or "not streaming" in replica["detail"]


def test_a_synchronous_primary_with_no_synchronous_standby_fails_replication(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``synchronous_standby_names`` names a standby that is not attached: every commit waits
    until it attaches, so nothing can be written. The replication check fails and says so, and
    a service says it at start-up as a warning; with the standby attached, it passes."""
    with primary_and_standby() as (primary, standby):
        with psycopg.connect(primary.url, autocommit=True) as conn:
            jobs.migrate(conn, COMPONENTS)  # before: a commit would wait from now on
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'walreceiver'")
            conn.execute("SELECT pg_reload_conf()")
        _wait_for(primary.url, "SELECT current_setting('synchronous_standby_names') = %s",
                  "the reload", "walreceiver")  # fmt: skip
        ok, details = health.Health(primary.url, max_scheduler_lag=None)()
        replication = details["checks"]["replication"]
        assert not ok and replication["ok"] is False, details
        assert replication["value"] == 1.0
        assert replication["detail"] == (
            "synchronous (synchronous_standby_names 'walreceiver', 0 attached, synchronous_commit "
            "on): none attached, every commit waits until one is; timeline 1 (nothing can be "
            "written)"
        )
        caplog.set_level(logging.INFO, "tockwork.test")
        with psycopg.connect(primary.url, autocommit=True) as conn:
            PrimaryWatch("worker", logging.getLogger("tockwork.test")).observe(conn)
        (record,) = [r for r in caplog.records if r.name == "tockwork.test"]
        assert record.levelno == logging.WARNING and "every commit waits" in record.getMessage()

        standby.standby_of(primary).start()
        _wait_for(primary.url, "SELECT EXISTS (SELECT FROM pg_stat_replication "
                  "WHERE sync_state = 'sync')", "a synchronous standby")  # fmt: skip
        ok, details = health.Health(primary.url, max_scheduler_lag=None)()
        assert ok, details
        assert "1 attached" in details["checks"]["replication"]["detail"]


def test_the_scrapes_of_metrics_server_log_a_change_of_primary_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``tockwork metrics-server`` has no service of its own: its scrapes, through a multi-host
    URL, follow the primary and say once that it changed when the standby is promoted."""
    with migrated_primary_and_standby() as (primary, standby):
        hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
        url = f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"
        registry = CollectorRegistry()
        watch = PrimaryWatch("metrics-server", logging.getLogger("tockwork.test"))
        health.register_metrics(url, registry, watch=watch)
        caplog.set_level(logging.INFO, "tockwork.test")
        for _ in range(2):
            assert "tockwork_server_timeline 1.0" in generate_latest(registry).decode()
        primary.stop("fast")
        standby.promote()
        for _ in range(2):
            assert "tockwork_server_timeline 2.0" in generate_latest(registry).decode()
    lines = [r.getMessage() for r in caplog.records if r.name == "tockwork.test"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("metrics-server: primary system ")
    assert "the primary changed" in lines[1] and "timeline 1 -> system" in lines[1]
    assert watch.changes == 1


def test_the_dashboard_says_when_its_replica_follows_no_primary() -> None:
    """The standby's ``primary_conninfo`` emptied (its WAL receiver stops; the primary stays
    up): its lag alone would say 0 s behind, the banner says it follows no primary."""
    with migrated_primary_and_standby() as (primary, standby):
        _wait_for(standby.url, "SELECT EXISTS (SELECT FROM pg_stat_wal_receiver "
                  "WHERE status = 'streaming')", "streaming")  # fmt: skip
        app = create_app(primary.url, token=TOKEN, read_url=standby.url)
        with TestClient(app, follow_redirects=False) as client:
            sign_in(client)
            page = client.get("/schedules")
            assert page.status_code == 200
            assert '<p class="notice" id="replica">Read from a replica, ' in page.text
            with psycopg.connect(standby.url, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET primary_conninfo = ''")
                conn.execute("SELECT pg_reload_conf()")
            _wait_for(standby.url, "SELECT NOT EXISTS (SELECT FROM pg_stat_wal_receiver)",
                      "the WAL receiver to stop")  # fmt: skip
            page = client.get("/schedules")
            assert page.status_code == 200
            assert (
                '<p class="warning" id="replica">Read from --read-url, which reaches a replica '
                "where no WAL receiver runs"
            ) in page.text
