"""The built-in maintenance needs no extra process (issue 26): ``tockwork scheduler`` syncs its
definitions when it starts and every ``tockwork worker`` serves its queue, unless
``--no-maintenance``; the dashboard's hint names commands that exist."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import psycopg

import jobs
from scheduler import maintenance
from scheduler.cli import build_parser
from tests.processes import TRACEBACK, start_tockwork, wait_for

BUILTIN = "SELECT count(*) FROM schedules WHERE key LIKE 'tockwork.%%'"


def _first_line_then_stop(proc: subprocess.Popen[bytes]) -> tuple[str, str]:
    """The first line the service logs (its start line: waited for, no sleep), then SIGTERM;
    returns that line and the rest of stderr."""
    try:
        assert proc.stderr is not None
        # The start line: after the primary's line (its identity and replication mode).
        line = proc.stderr.readline().decode()
        while line and " started" not in line and "primary system" in line:
            line = proc.stderr.readline().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest.decode()
    return line, rest.decode()


def _until(
    conn: psycopg.Connection[Any], proc: subprocess.Popen[bytes], *conditions: str
) -> tuple[str, str]:
    """Run a service until each condition holds in the database, then SIGTERM: it exits 0
    without a traceback; its stdout and stderr."""
    try:
        for condition in conditions:
            wait_for(conn, condition)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert TRACEBACK not in err.decode()
    return out.decode(), err.decode()


def _count(conn: psycopg.Connection[Any], query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_the_scheduler_syncs_the_builtin_definitions_unless_told_not_to(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        line, _ = _first_line_then_stop(start_tockwork(db_url, "scheduler", "--no-maintenance"))
        assert "started" in line, line
        assert _count(conn, BUILTIN) == 0
        # The ages an operator set stay through every replica's start.
        with conn.transaction():
            maintenance.sync_maintenance(conn, retention={"succeeded_days": 3})
        conn.execute("DELETE FROM schedules WHERE key = 'tockwork.attempt_rollup'")
        assert len(maintenance.definitions()) == 5  # the count the condition below waits for
        # All back, on their own queue, each with its next occurrence (definitions are
        # overlap=skip: their jobs are enqueued when due, not ahead).
        out, _ = _until(
            conn,
            start_tockwork(db_url, "scheduler", "--interval", "0.2"),
            "SELECT count(*) = 5 FROM schedules WHERE key LIKE 'tockwork.%%' "
            "AND queue = 'tockwork.maintenance'",
            "SELECT bool_and(next_run_at IS NOT NULL) FROM schedules WHERE key LIKE 'tockwork.%%'",
        )
        assert "maintenance definitions: created 1, updated 0" in out, out
        row = conn.execute(
            "SELECT payload->>'succeeded_days' FROM schedules WHERE key = 'tockwork.retention'"
        ).fetchone()
        assert row == ("3",)


def test_every_worker_serves_the_maintenance_queue_unless_told_not_to(db_url: str) -> None:
    app = ["--app", "tests.integration.jobs.apps:handlers", "--queue", "other=1"]
    with psycopg.connect(db_url, autocommit=True) as conn:
        jobs.enqueue(conn, "tockwork.attempt_rollup", {}, queue=maintenance.QUEUE)
        line, _ = _first_line_then_stop(start_tockwork(db_url, "worker", *app, "--no-maintenance"))
        assert "queues other=1," in line, line
        _, err = _until(
            conn,
            start_tockwork(db_url, "worker", *app, "--poll", "0.05"),
            "SELECT bool_and(status = 'succeeded') FROM jobs_all "
            "WHERE job_type = 'tockwork.attempt_rollup'",
        )
        assert "queues other=1, tockwork.maintenance=1," in err


def test_an_explicit_maintenance_concurrency_is_kept() -> None:
    handlers = {"tockwork.retention": print}
    merged, queues = maintenance.with_maintenance(
        handlers, {"a": 2, maintenance.QUEUE: 3}, "dbname=x"
    )
    assert queues == {"a": 2, maintenance.QUEUE: 3}
    assert merged["tockwork.retention"] is print  # the application's own handler wins
    assert set(merged) == {d.job_type for d in maintenance.definitions()}


def test_the_commands_the_dashboard_hint_names_exist() -> None:
    """The overview's hint used to name ``tockwork schedules sync --maintenance``, which
    never existed."""
    from pathlib import Path

    import scheduler.dashboard

    template = Path(scheduler.dashboard.__file__).parent / "templates" / "overview.html"
    text = template.read_text()
    assert "schedules sync --maintenance" not in text
    parser = build_parser()
    for command in ("scheduler", "worker"):
        assert f"<code>tockwork {command}</code>" in text
        args, _ = parser.parse_known_args([command, "--app", "m:a", "--no-maintenance"])
        assert args.no_maintenance is True
