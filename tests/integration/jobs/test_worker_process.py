"""Worker processes under SIGKILL and SIGTERM: nothing is lost, nothing stays leased."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import Worker
from jobs.store import PgJobStore
from tests.processes import start_tockwork, wait_for
from timezones.clock import FrozenClock


def start_worker(db_url: str, *extra: str) -> subprocess.Popen[bytes]:
    return start_tockwork(
        db_url, "worker", "--app", "tests.integration.jobs.apps:handlers", "--poll", "0.05", *extra
    )


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE runs (job_id bigint, attempt int, at timestamptz DEFAULT now())")
        yield c


def test_sigkill_mid_job_runs_again_after_lease_expiry(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    job_id = jobs.enqueue(auto, "hang", {}).id
    proc = start_worker(db_url, "--lease", "30", "--no-listen")
    try:
        wait_for(auto, "SELECT count(*) FROM runs")
        # ... and for the worker to report it started (its next claim does): a job killed
        # before that gets its attempt back instead (test_crash_unstarted.py).
        wait_for(auto, f"SELECT started_token = lease_token FROM jobs_all WHERE id = {job_id}")  # noqa: S608
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    record = jobs.get_job(auto, job_id)
    assert (record.status, record.attempts) == ("leased", 1)
    assert record.locked_until is not None

    # Pin time past the lease instead of waiting for it.
    later = record.locked_until + timedelta(seconds=1)
    with psycopg.connect(db_url, autocommit=True) as c:
        assert PgJobStore(c).reap(100, later) == [(job_id, "default", "retrying")]
    from tests.integration.jobs.apps import handlers

    os.environ["TOCKWORK_TEST_DB"] = db_url
    Worker(db_url, handlers, clock=FrozenClock(later), listen=False).run_until_idle()
    record = jobs.get_job(auto, job_id)
    assert (record.status, record.attempts) == ("succeeded", 2)
    history = [(a.attempt, a.outcome) for a in jobs.job_attempts(auto, job_id)]
    assert history == [(1, "lease_expired"), (2, "succeeded")]
    assert auto.execute("SELECT count(*) FROM runs").fetchone() == (2,)


def test_sigterm_leaves_no_job_leased(db_url: str, auto: psycopg.Connection[Any]) -> None:
    hang_id = jobs.enqueue(auto, "hang", {}, queue="slow").id
    quick_ids = [jobs.enqueue(auto, "quick", {"i": i}).id for i in range(20)]
    proc = start_worker(db_url, "--queue", "slow=1", "--queue", "default=2", "--grace", "0.5")
    try:
        wait_for(auto, f"SELECT count(*) FROM runs WHERE job_id = {hang_id}")  # noqa: S608
        wait_for(auto, "SELECT count(*) = 20 FROM jobs_all WHERE status = 'succeeded'")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        _out, err = proc.communicate()
    assert auto.execute("SELECT count(*) FROM jobs_all WHERE status = 'leased'").fetchone() == (0,)
    assert jobs.get_job(auto, hang_id).status == "retrying"
    assert [a.outcome for a in jobs.job_attempts(auto, hang_id)] == ["interrupted"]
    assert all(jobs.get_job(auto, i).status == "succeeded" for i in quick_ids)
    assert b"SIGTERM received" in err
