"""Batch worker processes under SIGKILL: no delivery twice, none lost, all succeed in the end.

A delivery is a row the batch handler writes in the completion transaction
(``tests/integration/jobs/batch_apps.py``), so it commits exactly when its job's outcome does.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec, Worker
from jobs.store import PgJobStore
from tests.processes import start_tockwork, wait_for
from timezones.clock import FrozenClock


def start_worker(db_url: str) -> subprocess.Popen[bytes]:
    return start_tockwork(
        db_url,
        "worker",
        "--app",
        "tests.integration.jobs.batch_apps:handlers",
        "--poll",
        "0.05",
        "--lease",
        "30",
        "--no-listen",
    )


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE runs (job_id bigint, attempt int, stage text)")
        c.execute("CREATE TABLE deliveries (job_id bigint, attempt int)")
        yield c


def kill(proc: subprocess.Popen[bytes], auto: psycopg.Connection[Any]) -> None:
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    # The server ends the dead worker's sessions (and rolls back an open transaction, which
    # holds row locks the reaper would skip) when it notices; wait for that event.
    wait_for(
        auto,
        "SELECT count(*) = 0 FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )


def expire_and_rerun(
    db_url: str, auto: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pin time past the leases, reap them, and run a worker at that time until idle."""
    row = auto.execute("SELECT max(locked_until) FROM jobs_all WHERE status = 'leased'").fetchone()
    assert row is not None and isinstance(row[0], datetime)
    later: datetime = row[0] + timedelta(seconds=1)
    # The handlers ran (the runs table says so), but the worker may have died before it
    # reported them started, and the reaper would then give their attempt back
    # (test_crash_unstarted.py): mark them, as its next claim would have.
    auto.execute("UPDATE jobs SET started_token = lease_token WHERE status = 'leased'")
    with psycopg.connect(db_url, autocommit=True) as c:
        assert PgJobStore(c).reap(1000, later)
    from tests.integration.jobs.batch_apps import handlers

    monkeypatch.setenv("TOCKWORK_TEST_DB", db_url)
    Worker(db_url, handlers, clock=FrozenClock(later), listen=False).run_until_idle()


def deliveries(auto: psycopg.Connection[Any]) -> list[tuple[int, int]]:
    return [
        (r[0], r[1])
        for r in auto.execute("SELECT job_id, attempt FROM deliveries ORDER BY job_id, attempt")
    ]


@pytest.mark.parametrize("stage", ["handler", "completion"])
def test_sigkill_mid_batch_before_its_completion_commit(
    db_url: str, auto: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """Killed while the handler runs, or inside the open completion transaction (deliveries
    written, not committed): nothing was delivered; after the leases expire every job is
    delivered once, on its second attempt."""
    # 4 jobs, 4 threads: the first claim takes them all, one batch.
    ids = [
        e.id
        for e in jobs.enqueue_many(auto, [JobSpec("deliver", {"hang": stage}) for _ in range(4)])
    ]
    proc = start_worker(db_url)
    try:
        wait_for(auto, f"SELECT count(*) = 4 FROM runs WHERE stage = '{stage}'")  # noqa: S608
    finally:
        kill(proc, auto)
    assert deliveries(auto) == []
    for i in ids:
        record = jobs.get_job(auto, i)
        assert (record.status, record.attempts) == ("leased", 1)

    expire_and_rerun(db_url, auto, monkeypatch)
    assert deliveries(auto) == [(i, 2) for i in ids]
    for i in ids:
        assert jobs.get_job(auto, i).status == "succeeded"
        history = [(a.attempt, a.outcome) for a in jobs.job_attempts(auto, i)]
        assert history == [(1, "lease_expired"), (2, "succeeded")]


def test_sigkill_mid_batch_after_a_completion_commit(
    db_url: str, auto: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch committed, the next one is running when the worker dies: the committed batch is
    neither delivered again nor run again; the running one is delivered once after expiry."""
    first = [e.id for e in jobs.enqueue_many(auto, [JobSpec("deliver", {}) for _ in range(6)])]
    proc = start_worker(db_url)
    try:
        wait_for(auto, "SELECT count(*) = 6 FROM jobs_all WHERE status = 'succeeded'")
        second = [
            e.id
            for e in jobs.enqueue_many(
                auto, [JobSpec("deliver", {"hang": "handler"}) for _ in range(4)]
            )
        ]
        # The first batch ran once; wait for the 4 new jobs to be running too.
        wait_for(auto, "SELECT count(*) = 10 FROM runs")
    finally:
        kill(proc, auto)
    assert deliveries(auto) == [(i, 1) for i in first]

    expire_and_rerun(db_url, auto, monkeypatch)
    assert deliveries(auto) == [(i, 1) for i in first] + [(i, 2) for i in second]
    assert all(jobs.get_job(auto, i).status == "succeeded" for i in first + second)
    runs = auto.execute(
        "SELECT job_id, count(*) FROM runs WHERE job_id = ANY(%s) GROUP BY 1", (first,)
    ).fetchall()
    assert sorted(runs) == [(i, 1) for i in first]  # the committed batch never ran again
    duplicates = auto.execute(
        "SELECT job_id FROM deliveries GROUP BY job_id HAVING count(*) > 1"
    ).fetchall()
    assert duplicates == []
