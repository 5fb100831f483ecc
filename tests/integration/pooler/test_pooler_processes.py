"""``tockwork scheduler``, ``worker`` and ``relay`` as real processes through a transaction-mode
PgBouncer, with ``TOCKWORK_POOLER=transaction``, until every job ran; then stopped with SIGTERM.
(One test: each process takes seconds to start on a busy machine.)

All of them, their handlers' connections and the test's producer share the pooler's one server
connection for the test database (tests/integration/pooler/conftest.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import JobSpec, outbox
from tests.processes import ROOT, wait_for

POLL_ONLY = "transaction-mode pooler and LISTEN needs a session"


class Processes:
    """``tockwork`` processes of one test; stderr goes to files (a pipe nobody reads could
    fill up and block a process that logs every job)."""

    def __init__(self, db_url: str, pooler_url: str) -> None:
        self.db_url = db_url
        self.pooler_url = pooler_url
        self.running: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop_all or the fixture
        environ = {
            **os.environ,
            "PYTHONPATH": ROOT,
            "TOCKWORK_TEST_DB": self.db_url,
            "TOCKWORK_POOLER": "transaction",
            **(env or {}),
        }
        if "TOCKWORK_LISTEN_URL" not in (env or {}):
            environ.pop("TOCKWORK_LISTEN_URL", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", *args, "--database-url", self.pooler_url],
            env=environ,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        self.running.append((proc, err))
        return proc

    def stop_all(self) -> list[tuple[int, str]]:
        """SIGTERM each, wait; returns (exit code, stderr) in start order."""
        for proc, _ in self.running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        results = []
        for proc, err in self.running:
            try:
                code = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            err.seek(0)
            results.append((code, err.read().decode(errors="replace")))
            err.close()
        self.running.clear()
        return results


@pytest.fixture
def processes(db_url: str, pooler_url: str) -> Iterator[Processes]:
    group = Processes(db_url, pooler_url)
    try:
        yield group
    finally:
        for proc, err in group.running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            err.close()


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """The test's own direct connection: it watches, it never goes through the pooler."""
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def test_scheduler_workers_and_relay_through_the_pooler(
    pooler_url: str, db_url: str, auto: psycopg.Connection[Any], processes: Processes
) -> None:
    auto.execute("CREATE TABLE runs (job_id bigint, at timestamptz DEFAULT now())")
    with jobs.connect(pooler_url, pooler="transaction") as producer:
        with producer.transaction():
            scheduler.create_schedules(
                producer,
                [
                    {"job_type": "scheduled", "rule": "every:1s", "zone": "UTC",
                     "subject": f"s{n}"}
                    for n in range(10)
                ],
            )  # fmt: skip
        with producer.transaction():
            jobs.enqueue_many(producer, [JobSpec("tick", {"n": n}) for n in range(150)])
        for n in range(20):
            jobs.enqueue(producer, "tick", {"single": n})
            producer.commit()
        for i in range(25):
            outbox.record(
                producer, aggregate_type="order", aggregate_id=f"o-{i}",
                event_type="order.placed", payload={"n": i},
            )  # fmt: skip
            producer.commit()

    app = ("--app", "tests.integration.pooler.apps:handlers", "--poll", "0.05")
    processes.start("scheduler", "--lookahead", "1", "--interval", "0.1")
    processes.start("worker", *app)  # no listen URL: poll-only, said once
    processes.start("worker", *app, "--no-listen")
    processes.start("worker", *app, env={"TOCKWORK_LISTEN_URL": db_url})  # listens directly
    processes.start(
        "relay", "--app", "tests.integration.outbox.apps:projections", "--poll", "0.05",
        "--batch-size", "3", "--pooler", "transaction",
        env={"TOCKWORK_POOLER": "session"},  # the flag wins over the environment
    )  # fmt: skip
    # The producer's 170 jobs, the relay's 25, and at least 20 the scheduler enqueued, ran.
    wait_for(
        auto,
        "SELECT count(*) FILTER (WHERE j.job_type = 'tick') = 170"
        " AND count(*) FILTER (WHERE j.job_type = 'send_confirmation') = 25"
        " AND count(*) FILTER (WHERE j.job_type = 'scheduled') >= 20"
        " FROM runs r JOIN jobs_all j ON j.id = r.job_id",
        timeout=40,
    )
    results = processes.stop_all()

    assert [code for code, _ in results] == [0] * 5, results
    for _code, err in results:
        assert "Traceback" not in err and "prepared statement" not in err, err
    _sched, polling, no_listen, listening, relay = (err for _code, err in results)
    assert polling.count(POLL_ONLY) == 1, polling
    assert relay.count(POLL_ONLY) == 1, relay
    assert "poll-only" in no_listen and POLL_ONLY not in no_listen
    assert "listening" in listening and POLL_ONLY not in listening
    # Nothing left leased after a graceful stop, nothing dead; every run was of a distinct job,
    # each occurrence was enqueued once, each event projected once.
    states = dict(auto.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert "leased" not in states and "dead" not in states, states
    row = auto.execute("SELECT count(*), count(DISTINCT job_id) FROM runs").fetchone()
    assert row is not None and row[0] == row[1]
    keys = auto.execute(
        "SELECT count(*), count(DISTINCT idempotency_key)"
        " FROM jobs_all WHERE job_type = 'scheduled'"
    ).fetchone()
    assert keys is not None and keys[0] == keys[1] >= 20
    assert auto.execute(
        "SELECT count(*) FROM jobs_all WHERE job_type = 'send_confirmation'"
    ).fetchone() == (25,)
