"""The registry of running processes (jobs/processes.py): kept by the services' heartbeats,
deleted at stop, stale after three missed heartbeats, pruned 15 minutes later."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import Job, Relay, Worker, processes
from jobs.processes import ProcessFacts
from tests.processes import wait_for

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Autocommit: the services in these tests must see what the test writes, and it theirs."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def test_a_running_worker_is_registered_with_its_queues_and_jobs_in_hand(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    release = threading.Event()

    def slow(_job: Job) -> None:
        release.wait(10)

    jobs.enqueue(conn, "slow", {}, queue="mail")
    worker = Worker(
        db_url,
        {"slow": slow},
        {"mail": 3, "reports": 1},
        name="w-one",
        heartbeat=timedelta(seconds=0.2),
    )
    worker.start()
    try:
        wait_for(conn, "SELECT count(*) = 1 FROM jobs_all WHERE status = 'leased'")
        # The job is in hand: the next heartbeat (lease / 3) records it; wait for it.
        wait_for(conn, "SELECT jobs_in_hand = 1 FROM processes WHERE name = 'w-one'")
        [p] = processes.list_processes(conn)
        assert (p.kind, p.name, p.host, p.pid) == (
            "worker",
            "w-one",
            socket.gethostname(),
            os.getpid(),
        )
        assert p.queues == {"mail": 3, "reports": 1}
        assert p.live and p.started_at <= p.last_seen_at
        assert p.as_json()["jobs_in_hand"] == 1
        assert processes.queue_workers(conn) == [
            processes.QueueWorkers("mail", 1, 3),
            processes.QueueWorkers("reports", 1, 1),
        ]
    finally:
        release.set()
        worker.stop()
        assert worker.wait(10)
    # Stopped: its row is gone, not left to go stale.
    assert processes.list_processes(conn, include_stale=True) == []


def test_the_relay_and_a_run_until_idle_register_then_forget(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    seen: list[list[str]] = []

    def handler(_job: Job) -> None:
        seen.append([p.kind for p in processes.list_processes(conn)])

    jobs.enqueue(conn, "t", {})
    Worker(db_url, {"t": handler}, name="idle").run_until_idle()
    assert seen == [["worker"]]
    relay = Relay(db_url, {}, name="relay-a")
    relay.start()
    try:
        wait_for(conn, "SELECT count(*) = 1 FROM processes WHERE kind = 'relay'")
        [p] = processes.list_processes(conn, kind="relay")
        assert (p.name, p.queues, p.jobs_in_hand) == ("relay-a", {}, 0)
    finally:
        relay.stop()
        assert relay.wait(10)
    assert processes.list_processes(conn, include_stale=True) == []


def test_a_process_not_seen_for_three_heartbeats_is_stale_then_pruned(
    conn: psycopg.Connection[Any],
) -> None:
    every = timedelta(seconds=10)
    dead = ProcessFacts(kind="worker", name="gone", queues={"q": 2})
    processes.beat(conn, dead, beat_every=every, now=T0)
    at = T0 + timedelta(seconds=29)
    assert [p.live for p in processes.list_processes(conn, now=at)] == [True]
    at = T0 + timedelta(seconds=31)
    assert processes.list_processes(conn, now=at) == []
    [stale] = processes.list_processes(conn, now=at, include_stale=True)
    assert not stale.live and stale.seen_age == 31.0
    assert processes.queue_workers(conn, now=at) == []
    # Another process's heartbeat prunes it once it has been stale for 15 minutes, not before.
    alive = ProcessFacts(kind="scheduler", name="s")
    processes.beat(conn, alive, now=T0 + timedelta(seconds=30, minutes=15))
    assert len(processes.list_processes(conn, now=at, include_stale=True)) == 2
    processes.beat(conn, alive, now=T0 + timedelta(seconds=31, minutes=15))
    assert [p.name for p in processes.list_processes(conn, now=at, include_stale=True)] == ["s"]


def test_a_restart_under_the_same_name_starts_again(conn: psycopg.Connection[Any]) -> None:
    processes.beat(conn, ProcessFacts(kind="worker", name="n", pid=1), now=T0)
    later = T0 + timedelta(seconds=5)
    processes.beat(conn, ProcessFacts(kind="worker", name="n", pid=1), now=later)
    [p] = processes.list_processes(conn, now=later)
    assert (p.started_at, p.last_seen_at) == (T0, later)
    processes.beat(conn, ProcessFacts(kind="worker", name="n", pid=2), now=later)
    [p] = processes.list_processes(conn, now=later)
    assert (p.pid, p.started_at) == (2, later)


def test_the_async_twins_read_the_same_rows(conn: psycopg.Connection[Any], db_url: str) -> None:
    processes.beat(conn, ProcessFacts(kind="dashboard", name="d"), now=T0)

    async def read() -> list[processes.ProcessInfo]:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            return await processes.list_processes_async(aconn, kind="dashboard", now=T0)

    assert asyncio.run(read()) == processes.list_processes(conn, kind="dashboard", now=T0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"kind": "wroker"}, "kind"), ({"now": datetime(2026, 1, 1)}, "now")],
)
def test_bad_filters_name_the_field(
    conn: psycopg.Connection[Any], kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(jobs.InvalidJob) as err:
        processes.list_processes(conn, **kwargs)
    assert err.value.field == field


def test_a_database_without_the_registry_warns_once_and_serves(
    conn: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn.execute("DROP TABLE processes")
    done: list[int] = []
    jobs.enqueue(conn, "t", {})
    with caplog.at_level(logging.WARNING, logger="tockwork"):
        Worker(db_url, {"t": lambda j: done.append(j.id)}).run_until_idle()
    assert len(done) == 1
    warned = [r.getMessage() for r in caplog.records if "registry of processes" in r.getMessage()]
    assert len(warned) == 1 and "tockwork migrate" in warned[0]
