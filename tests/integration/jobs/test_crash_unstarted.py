"""A worker that dies does not use the attempts of the jobs it had claimed ahead.

The worker reports the jobs its threads start (started_token, on its next claim or heartbeat);
the reaper gives the attempt back for a lease never so marked, up to UNSTARTED_EXPIRY_LIMIT
expiries in a row, so a job that kills its worker as it starts still ends dead ('crash_loop').
"""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs.model import Job, JobStatus
from jobs.retry import Decision
from jobs.store import UNSTARTED_EXPIRY_LIMIT, Finished, PgJobStore
from jobs.worker import MARK_AFTER_LEASE_SHARE, Worker
from tests.integration.jobs.crash_apps import CRASH_EXIT
from tests.processes import start_tockwork, wait_for

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def start_worker(db_url: str, *extra: str) -> subprocess.Popen[bytes]:
    return start_tockwork(
        db_url, "worker", "--app", "tests.integration.jobs.crash_apps:handlers", *extra
    )


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE runs (job_id bigint, attempt int, at timestamptz DEFAULT now())")
        yield c


def state(c: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = c.execute(
        "SELECT status, attempts, unstarted_expiries, last_error_code FROM jobs_all WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_reap_gives_back_unmarked_leases_and_counts_marked_ones(
    auto: psycopg.Connection[Any],
) -> None:
    ids = [jobs.enqueue(auto, "quick", {"i": i}, max_attempts=1, run_at=T0).id for i in range(4)]
    store = PgJobStore(auto)
    claimed = store.claim({"default": 4}, "w1", LEASE, T0)
    assert sorted(j.id for j in claimed) == ids
    by_id = {j.id: j for j in claimed}
    # Job 0 is marked by the next claim, job 1 by a heartbeat; 2 and 3 never start.
    store.claim({"default": 1}, "w1", LEASE, T0, started=[(ids[0], by_id[ids[0]].lease_token)])
    leases = [(j.id, j.lease_token) for j in claimed]
    assert store.heartbeat(leases, LEASE, T0, started=[ids[1]]) == set(ids)
    # A stale mark (an older token) marks nothing.
    store.claim({"default": 1}, "w1", LEASE, T0, started=[(ids[2], by_id[ids[2]].lease_token - 1)])

    reaped = store.reap(10, T0 + LEASE + timedelta(seconds=1))
    assert sorted(reaped) == [
        (ids[0], "default", "dead"),
        (ids[1], "default", "dead"),
        (ids[2], "default", "pending"),
        (ids[3], "default", "pending"),
    ]
    assert state(auto, ids[0]) == ("dead", 1, 0, "lease_expired")
    assert state(auto, ids[2]) == ("pending", 0, 1, None)
    assert [(a.attempt, a.outcome) for a in jobs.job_attempts(auto, ids[0])] == [
        (1, "lease_expired")
    ]
    assert jobs.job_attempts(auto, ids[2]) == []
    # Given back at the front, with its run_at kept.
    again = store.claim({"default": 1}, "w2", LEASE, T0 + LEASE * 2)
    assert [(j.id, j.attempt, j.run_at) for j in again] == [(ids[2], 1, T0)]


def test_a_mark_ends_a_run_of_unstarted_expiries(auto: psycopg.Connection[Any]) -> None:
    job_id = jobs.enqueue(auto, "quick", {}, max_attempts=1, run_at=T0).id
    store = PgJobStore(auto)
    now = T0
    for _ in range(UNSTARTED_EXPIRY_LIMIT):
        (job,) = store.claim({"default": 1}, "w", LEASE, now)
        now += LEASE + timedelta(seconds=1)
        assert store.reap(10, now) == [(job_id, "default", "pending")]
    assert state(auto, job_id) == ("pending", 0, UNSTARTED_EXPIRY_LIMIT, None)
    (job,) = store.claim({"default": 1}, "w", LEASE, now)
    assert store.heartbeat([(job.id, job.lease_token)], LEASE, now, started=[job.id]) == {job_id}
    assert state(auto, job_id)[2] == 0
    # Released unstarted by the worker afterwards: the count starts again from zero.
    assert store.release_unstarted([(job.id, job.lease_token)]) == [job_id]
    (job,) = store.claim({"default": 1}, "w", LEASE, now)
    now += LEASE + timedelta(seconds=1)
    assert store.reap(10, now) == [(job_id, "default", "pending")]
    assert state(auto, job_id) == ("pending", 0, 1, None)
    # An outcome (the job ran, within one cycle: never marked) ends the run too.
    (job,) = store.claim({"default": 1}, "w", LEASE, now)
    retry = Decision(JobStatus.RETRYING, "retry", timedelta(0), 0, "boom", "boom")
    assert store.complete([Finished(job, retry, now, 1.0)], "w", now) == {job_id: "retry"}
    assert state(auto, job_id) == ("retrying", 1, 0, "boom")


def test_sigkilled_worker_gives_back_the_jobs_it_claimed_ahead(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    # Quick jobs first (higher priority) teach the claim sizer to claim ahead; then the hang
    # jobs: one thread runs the first and hangs, the others wait claimed ahead of it.
    for i in range(30):
        jobs.enqueue(auto, "quick", {"i": i}, max_attempts=1, priority=10)
    hang_ids = [jobs.enqueue(auto, "hang", {"i": i}, max_attempts=1).id for i in range(10)]
    proc = start_worker(db_url, "--queue", "default=1", "--lease", "6", "--poll", "0.05")
    try:
        # The running job is reported started (by a claim or a heartbeat: an event in the
        # database), and jobs are held claimed ahead of it; then the worker dies.
        wait_for(
            auto,
            "SELECT count(*) FILTER (WHERE job_type = 'hang' AND started_token = lease_token"
            " AND id IN (SELECT job_id FROM runs)) = 1"
            " AND count(*) FILTER (WHERE id NOT IN (SELECT job_id FROM runs)) >= 1"
            " FROM jobs_all WHERE status = 'leased'",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    leased = auto.execute(
        "SELECT id, locked_until, id IN (SELECT job_id FROM runs) AS ran FROM jobs_all "
        "WHERE status = 'leased' ORDER BY id"
    ).fetchall()
    ran = [i for i, _, r in leased if r]
    unstarted = [i for i, _, r in leased if not r]
    assert len(ran) == 1 and ran[0] in hang_ids
    assert unstarted, "no job was claimed ahead: the test proves nothing"
    later = max(u for _, u, _ in leased) + timedelta(seconds=1)

    reaped = PgJobStore(auto).reap(100, later)
    assert sorted(reaped) == sorted(
        [(ran[0], "default", "dead")] + [(i, "default", "pending") for i in unstarted]
    )
    # The started one used its attempt; the others are pending, not dead, with none used.
    assert state(auto, ran[0]) == ("dead", 1, 0, "lease_expired")
    for i in unstarted:
        assert state(auto, i) == ("pending", 0, 1, None)
        assert jobs.job_attempts(auto, i) == []
    assert auto.execute(
        "SELECT count(*) FROM jobs WHERE status = 'dead' AND id NOT IN (SELECT job_id FROM runs)"
    ).fetchone() == (0,)


def test_a_job_that_kills_its_worker_goes_dead_after_the_bound(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    job_id = jobs.enqueue(auto, "crash", {}, max_attempts=1).id
    store = PgJobStore(auto)
    for n in range(UNSTARTED_EXPIRY_LIMIT + 1):
        # A long poll and no LISTEN: the worker makes no round trip between handing the job to
        # its thread and dying, so the job is never reported started.
        proc = start_worker(db_url, "--queue", "default=1", "--poll", "30", "--no-listen")
        try:
            assert proc.wait(60) == CRASH_EXIT
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        until = auto.execute("SELECT locked_until FROM jobs WHERE id = %s", (job_id,)).fetchone()
        assert until is not None and until[0] is not None
        reaped = store.reap(10, until[0] + timedelta(seconds=1))
        if n < UNSTARTED_EXPIRY_LIMIT:
            assert reaped == [(job_id, "default", "pending")]
            assert state(auto, job_id) == ("pending", 0, n + 1, None)
    assert reaped == [(job_id, "default", "dead")]
    assert state(auto, job_id) == ("dead", 1, UNSTARTED_EXPIRY_LIMIT, "crash_loop")
    history = [(a.attempt, a.outcome, a.error_code) for a in jobs.job_attempts(auto, job_id)]
    assert history == [(1, "lease_expired", "crash_loop")]


def test_a_job_is_marked_started_once_it_ran_for_a_share_of_the_lease(
    db_url: str, auto: psycopg.Connection[Any]
) -> None:
    # Short jobs finish before MARK_AFTER_LEASE_SHARE of the lease: their outcome ends the
    # lease, no mark is written (no second update of their row). A job still running after it
    # is marked by a cycle (the heartbeat is set too far off to do it), so a reaper would count
    # its attempt: what the mark is for (test_sigkilled_worker_gives_back_...).
    release = threading.Event()

    def quick(_job: Job) -> None:
        pass

    def slow(_job: Job) -> None:
        release.wait(30)

    quick_ids = [jobs.enqueue(auto, "quick", {"i": i}, priority=10).id for i in range(20)]
    slow_id = jobs.enqueue(auto, "slow", {}).id
    lease = timedelta(seconds=10)
    w = Worker(
        db_url,
        {"quick": quick, "slow": slow},
        lease=lease,
        heartbeat=timedelta(seconds=60),
        poll_interval=timedelta(seconds=0.05),
        listen=False,
    )
    assert w.mark_after == lease.total_seconds() * MARK_AFTER_LEASE_SHARE == 1.0
    runner = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    runner.start()
    try:
        wait_for(auto, f"SELECT started_token = lease_token FROM jobs WHERE id = {slow_id}")  # noqa: S608
        # Marked by a cycle, not before it had run for mark_after (its lease began at the claim).
        row = auto.execute(
            "SELECT status, clock_timestamp() - locked_at FROM jobs WHERE id = %s", (slow_id,)
        ).fetchone()
        assert row is not None and row[0] == "leased"
        assert row[1] >= timedelta(seconds=w.mark_after)
    finally:
        release.set()
        w.stop()
        runner.join(30)
    assert not runner.is_alive()
    done = auto.execute(
        "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
        " count(*) FILTER (WHERE started_token IS NOT NULL) FROM jobs_all WHERE id = ANY(%s)",
        (quick_ids,),
    ).fetchone()
    assert done == (len(quick_ids), 0)
