"""/healthz for orchestrators, ``tockwork healthz``, and ``tockwork worker --metrics-port``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

import scheduler
from scheduler import health
from scheduler.cli import main

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
DUE = datetime(2026, 3, 6, 14, 0, tzinfo=UTC)  # daily@08:00 America/Chicago
DOWN = "postgresql://nobody@127.0.0.1:1/nothing"


def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def serve(db_url: str, check: health.Health) -> Any:
    return health.serve(db_url, 0, host="127.0.0.1", registry=CollectorRegistry(), health=check)


def test_healthz_reports_each_check(conn: psycopg.Connection[Any], db_url: str) -> None:
    scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="America/Chicago", now=T0
    )
    conn.commit()
    on_time = health.Health(db_url, listening=lambda: True, now=lambda: DUE + timedelta(minutes=1))
    with serve(db_url, on_time) as server:
        status, body = get(server.port, "/healthz")
    assert status == 200
    assert body["ok"] is True
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["listen"]["detail"] == "listening"
    assert body["checks"]["scheduler_lag"]["value"] == 60.0

    late = health.Health(
        db_url,
        listening=lambda: False,
        max_scheduler_lag=timedelta(minutes=5),
        now=lambda: DUE + timedelta(minutes=10),
    )
    with serve(db_url, late) as server:
        status, body = get(server.port, "/healthz")
    assert status == 503
    assert body["ok"] is False
    assert body["checks"]["database"]["ok"] is True
    assert body["checks"]["listen"]["ok"] is False
    assert body["checks"]["scheduler_lag"] == {
        "ok": False, "detail": "600.0s > 300s: is a scheduler running?", "value": 600.0,
    }  # fmt: skip

    poll_only = health.Health(
        db_url,
        listening=lambda: False,
        poll_only=True,
        max_scheduler_lag=None,
        now=lambda: DUE + timedelta(hours=1),
    )
    ok, details = poll_only()
    assert ok, details
    assert details["checks"]["listen"]["detail"] == "poll-only declared"


def test_healthz_with_the_database_down_is_503_not_an_error() -> None:
    with serve(DOWN, health.Health(DOWN, timeout=1.0)) as server:
        status, body = get(server.port, "/healthz")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            text = r.read().decode()
    assert status == 503
    assert body["checks"]["database"]["ok"] is False
    assert "tockwork_database_up 0.0" in text


def test_the_healthz_command_exits_0_or_1(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["healthz", "--database-url", db_url, "--compact", "--max-scheduler-lag", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["checks"]["listen"]["ok"] is True
    assert main(["healthz", "--database-url", DOWN, "--timeout", "1"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_healthz_fails_on_a_database_without_the_schema_and_says_what_to_run(
    empty_db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A readiness probe against an empty database must not pass: the schema check fails with
    the first missing migration and the command to run; migrated, it passes."""
    assert main(["healthz", "--database-url", empty_db_url, "--compact",
                 "--max-scheduler-lag", "0"]) == 1  # fmt: skip
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False
    schema = body["checks"]["schema"]
    assert schema["ok"] is False
    assert schema["detail"].endswith("run 'tockwork migrate'")
    assert "jobs/0001_" in schema["detail"]
    assert main(["migrate", "--database-url", empty_db_url]) == 0
    capsys.readouterr()
    assert main(["healthz", "--database-url", empty_db_url, "--compact",
                 "--max-scheduler-lag", "0"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["checks"]["schema"] == {
        "ok": True, "detail": "up to date", "value": None,
    }  # fmt: skip


def test_worker_serves_metrics_and_healthz(db_url: str) -> None:
    env = {**os.environ, "TOCKWORK_TEST_DB": db_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", "worker", "--database-url", db_url,
         "--app", "tests.integration.jobs.apps:handlers", "--metrics-port", "0",
         "--metrics-host", "127.0.0.1", "--max-scheduler-lag", "0", "--no-listen"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        port = None
        for line in proc.stderr:  # wait for the event, not for time
            found = re.search(r"serving /metrics and /healthz on 127\.0\.0\.1:(\d+)", line)
            if found:
                port = int(found.group(1))
                break
        assert port is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert "tockwork_database_up 1.0" in text
        assert "tockwork_claim_duration_seconds" in text
        status, body = get(port, "/healthz")
        assert status == 200
        assert body["checks"]["listen"]["detail"] == "poll-only declared"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0
