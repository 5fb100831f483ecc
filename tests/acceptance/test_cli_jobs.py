"""The ``tockwork`` queue commands in a subprocess: output and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

import jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def tockwork(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_migrate_on_an_empty_database_then_up_to_date(empty_db_url: str) -> None:
    first = tockwork("migrate", "--database-url", empty_db_url)
    assert first.returncode == 0, first.stderr
    assert "jobs/0001_jobs" in first.stdout
    again = tockwork("migrate", "--database-url", empty_db_url)
    assert (again.returncode, again.stdout.strip()) == (0, "schema is up to date")
    assert "scheduler.simulated" not in first.stdout
    opted = tockwork("migrate", "--with", "simulated", "--database-url", empty_db_url)
    assert opted.returncode == 0, opted.stderr
    assert opted.stdout.strip() == (
        "applied: scheduler.simulated/0001_simulated_pushes, "
        "scheduler.simulated/0002_simulated_channel"
    )
    bogus = tockwork("migrate", "--with", "bogus", "--database-url", empty_db_url)
    assert bogus.returncode == 2
    assert "--with" in bogus.stderr and "bogus" in bogus.stderr


def test_dead_show_requeue_round_trip(db_url: str, conn: psycopg.Connection[Any]) -> None:
    job_id = jobs.enqueue(conn, "send_push", {"u": 1}, queue="notifications").id
    conn.execute(
        "UPDATE jobs SET status = 'dead', attempts = 3, last_error_code = 'bad_token',"
        " last_error_summary = 'PermanentError: rejected', completed_at = now() WHERE id = %s",
        (job_id,),
    )
    conn.commit()
    listed = tockwork("jobs", "dead", "--database-url", db_url, "--json")
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)
    assert (item["id"], item["last_error_code"]) == (job_id, "bad_token")

    shown = tockwork("jobs", "show", str(job_id), "--database-url", db_url)
    assert shown.returncode == 0
    assert "bad_token" in shown.stdout and '"u": 1' in shown.stdout

    dry = tockwork(
        "jobs", "requeue", "--error-code", "bad_token", "--dry-run", "--database-url", db_url
    )
    assert "would requeue 1 job(s)" in dry.stdout
    assert jobs.get_job(conn, job_id).status == "dead"
    conn.commit()

    done = tockwork("jobs", "requeue", "--id", str(job_id), "--database-url", db_url)
    assert done.returncode == 0 and f"requeued 1 job(s): {job_id}" in done.stdout
    assert jobs.get_job(conn, job_id).status == "pending"

    stats = tockwork("stats", "--database-url", db_url, "--json")
    assert json.loads(stats.stdout)[0]["queue"] == "notifications"


def test_show_prints_the_unique_and_concurrency_keys(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    job_id = jobs.enqueue(
        conn, "recompute", {}, unique_key="stats:user-7", concurrency_key="user-7"
    ).id
    conn.commit()
    record = jobs.get_job(conn, job_id)
    assert (record.unique_key, record.concurrency_key) == ("stats:user-7", "user-7")
    shown = tockwork("jobs", "show", str(job_id), "--database-url", db_url)
    assert shown.returncode == 0, shown.stderr
    assert "unique_key: stats:user-7" in shown.stdout
    assert "concurrency_key: user-7" in shown.stdout
    as_json = tockwork("jobs", "show", str(job_id), "--database-url", db_url, "--json")
    assert json.loads(as_json.stdout)["job"]["unique_key"] == "stats:user-7"
    # The batch path keeps both keys too.
    (many,) = jobs.enqueue_many(
        conn, [jobs.JobSpec("recompute", {}, unique_key="stats:user-8", concurrency_key="user-8")]
    )
    record = jobs.get_job(conn, many.id)
    assert (record.unique_key, record.concurrency_key) == ("stats:user-8", "user-8")


def test_bad_input_exits_2_with_the_field_named(db_url: str) -> None:
    no_filter = tockwork("jobs", "requeue", "--database-url", db_url)
    assert no_filter.returncode == 2 and "filter" in no_filter.stderr
    bad_queue = tockwork("worker", "--app", "x:y", "--queue", "Bad Queue=2")
    assert bad_queue.returncode == 2 and "Bad Queue" in bad_queue.stderr
    bad_flag = tockwork("jobs", "dead", "--no-such-flag")
    assert bad_flag.returncode == 2
    missing = tockwork("jobs", "show", "999999", "--database-url", db_url)
    assert missing.returncode == 2 and "no job with id 999999" in missing.stderr
    bad_app = tockwork("worker", "--app", "nomodule_here:handlers", "--database-url", db_url)
    assert bad_app.returncode == 2 and "nomodule_here" in bad_app.stderr
    bad_since = tockwork("jobs", "requeue", "--queue", "q", "--since", "yesterday")
    assert bad_since.returncode == 2 and "yesterday" in bad_since.stderr


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        ("tests.acceptance.apps_failing_factory:app", "the factory 'app' failed: KeyError"),
        ("tests.acceptance.apps_failing_import:app", "failed: RuntimeError: settings.toml"),
    ],
)
def test_an_app_that_fails_to_load_is_one_line_and_exit_2(
    db_url: str, app: str, expected: str
) -> None:
    result = tockwork("worker", "--app", app, "--database-url", db_url)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_expired_jobs_are_listed_and_requeued(db_url: str, conn: psycopg.Connection[Any]) -> None:
    """Issue 24: a job claimed after its max_lateness ends 'expired'; the CLI lists it, with
    its expires_at, and requeues it like a dead letter."""
    job_id = jobs.enqueue(conn, "pill", {}, queue="reminders", max_lateness=60).id
    conn.execute(
        "UPDATE jobs SET status = 'expired', last_error_code = 'expired', completed_at = now()"
        " WHERE id = %s",
        (job_id,),
    )
    conn.commit()
    listed = tockwork("jobs", "list", "--status", "expired", "--json", "--database-url", db_url)
    assert listed.returncode == 0, listed.stderr
    (item,) = json.loads(listed.stdout)
    assert (item["id"], item["status"]) == (job_id, "expired")
    assert item["expires_at"] is not None
    done = tockwork(
        "jobs", "requeue", "--id", str(job_id), "--status", "expired", "--database-url", db_url
    )
    assert done.returncode == 0 and f"requeued 1 job(s): {job_id}" in done.stdout, done.stderr
    record = jobs.get_job(conn, job_id)
    assert (record.status, record.expires_at) == ("pending", None)
