"""Lost replies (issue 13 §1): a write that committed although its reply was lost with the
connection leaves no job orphaned, uses no attempt, and is not logged as a lost lease.

Every test puts tests/faultproxy.py between the worker and the server: the proxy lets the
server commit, drops the reply and cuts the connection, so the worker sees OperationalError
for a transaction that happened. Nothing waits on time: the proxy fires on the server's own
ReadyForQuery, the worker runs until idle under a frozen clock.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import Job, RetryPolicy, Worker
from jobs.limits import RateLimit, set_limit
from jobs.service import Reconnect
from jobs.store import PgJobStore
from tests.faultproxy import FaultProxy, is_commit, sql_contains
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
# The first line of each statement's text (the comments travel with the SQL).
CLAIM = sql_contains("-- Lease up to n ready jobs")
HEARTBEAT = sql_contains("-- Extend the leases the caller still holds")
REAP = sql_contains("-- Return expired leases to the queue")
FAST_RECONNECT = Reconnect(backoff=RetryPolicy(base=timedelta(milliseconds=1), jitter=0.0))


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(db_url) as p:
        yield p


class Ran:
    """A handler that counts its runs per job (thread-safe)."""

    def __init__(self) -> None:
        self.runs: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self._lock:
            self.runs[job.id] += 1


def enqueue(db_url: str, n: int, *, max_attempts: int = 10) -> list[int]:
    with psycopg.connect(db_url) as c:
        return [
            jobs.enqueue(c, "t", {"i": i}, max_attempts=max_attempts, now=T0).id for i in range(n)
        ]


def worker(url: str, handler: Any, **kw: Any) -> Worker:
    options: dict[str, Any] = {
        "queues": {"default": 2},
        "prefetch": 0,
        "listen": False,
        "clock": FrozenClock(T0),
        "name": "w-lost",
        "reconnect": FAST_RECONNECT,
    }
    options.update(kw)
    return Worker(url, {"t": handler}, **options)


def table(db_url: str) -> tuple[dict[str, int], Counter[str]]:
    """Jobs by status, and attempt rows by outcome."""
    with psycopg.connect(db_url) as c:
        statuses: dict[str, int] = {
            status: n
            for status, n in c.execute("SELECT status, count(*) FROM jobs_all GROUP BY status")
        }
        outcomes: Counter[str] = Counter(
            {
                outcome: n
                for outcome, n in c.execute(
                    "SELECT outcome, count(*) FROM job_attempts GROUP BY outcome"
                )
            }
        )
    return statuses, outcomes


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def assert_every_job_ran_once(db_url: str, ids: list[int], ran: Ran) -> None:
    statuses, outcomes = table(db_url)
    assert statuses == {"succeeded": len(ids)}, "a job is still leased, waiting or dead"
    assert ran.runs == dict.fromkeys(ids, 1)
    assert outcomes == {"succeeded": len(ids)}, "an attempt was used up or an outcome fenced"
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT max(attempts) FROM jobs_all").fetchone() == (1,)


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
def test_a_claim_whose_reply_is_lost_runs_the_jobs_it_leased(
    db_url: str, proxy: FaultProxy, caplog: pytest.LogCaptureFixture, fair: bool, limited: bool
) -> None:
    """The claim alone (nothing finished yet): its jobs run here, once; whichever variant of
    the claim (a fair queue, a rate limit, both) the worker sends. A plain claim commits on
    its own (autocommit); a fair one in a transaction after its policy lock, whose COMMIT's
    reply is the one lost."""
    caplog.set_level(logging.INFO, logger="tockwork")
    ids = enqueue(db_url, 6, max_attempts=1)
    with psycopg.connect(db_url) as c:
        if fair:
            jobs.set_queue_policy(c, "default", fair=True, now=T0)
        if limited:
            set_limit(c, RateLimit(queue="default", per_second=1000), now=T0)
    if fair:
        proxy.drop_next_commit_reply()
    else:
        proxy.drop_reply(CLAIM)
    ran = Ran()
    w = worker(proxy.url, ran)
    stats = w.run_until_idle()
    assert proxy.counts.faults == 1
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.recovered_claims == 1 and stats.recovered == 2
    assert stats.fenced == 0 and stats.reaped == 0
    found = [m for m in messages(caplog) if "reply to a claim was lost" in m]
    assert len(found) == 1 and "2 job(s) leased and now run here" in found[0]


def test_a_fair_claim_whose_reply_is_lost_before_its_commit_leased_nothing(
    db_url: str, proxy: FaultProxy
) -> None:
    """A fair claim's statement runs inside its transaction: losing its reply cuts the
    connection before the COMMIT, so nothing was leased and there is nothing to recover."""
    ids = enqueue(db_url, 6, max_attempts=1)
    with psycopg.connect(db_url) as c:
        jobs.set_queue_policy(c, "default", fair=True, now=T0)
    proxy.drop_reply(CLAIM)
    ran = Ran()
    stats = worker(proxy.url, ran).run_until_idle()
    assert proxy.counts.faults == 1
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.recovered_claims == 0 and stats.fenced == 0


def test_a_completion_and_claim_whose_commit_reply_is_lost(
    db_url: str, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Outcomes and a claim in one transaction: the outcomes count as written (not fenced, no
    'lease lost' warning, no second attempt row) and the jobs it leased run here."""
    caplog.set_level(logging.INFO, logger="tockwork")
    ids = enqueue(db_url, 8, max_attempts=1)
    proxy.drop_next_commit_reply()
    ran = Ran()
    stats = worker(proxy.url, ran, queues={"default": 1}).run_until_idle()
    assert proxy.counts.faults == 1
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.recovered_claims == 1 and stats.recovered == 1
    assert stats.fenced == 0 and stats.outcomes == {"succeeded": 8}
    logged = messages(caplog)
    assert not [m for m in logged if "lease" in m and "ended" in m]
    assert [m for m in logged if "reply to a completion+claim was lost" in m]


def test_a_commit_that_never_reached_the_server_runs_again(db_url: str, proxy: FaultProxy) -> None:
    """The other half: the COMMIT is lost on the way (rolled back): no trace, run it again."""
    ids = enqueue(db_url, 5, max_attempts=1)
    proxy.drop_reply(is_commit, mode="before")
    ran = Ran()
    stats = worker(proxy.url, ran, queues={"default": 1}).run_until_idle()
    assert proxy.counts.faults == 1
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.recovered_claims == 0


def test_a_reply_lost_again_while_recovering(db_url: str, proxy: FaultProxy) -> None:
    """The recovery's own statements lose their replies too (the lookup, then the re-run):
    the same claim id resolves whichever attempt committed."""
    ids = enqueue(db_url, 6, max_attempts=1)
    proxy.drop_reply(is_commit, mode="before")  # the first cycle's COMMIT: rolled back
    proxy.drop_reply(sql_contains("After a lost reply"))  # the lookup's reply
    proxy.drop_next_commit_reply()  # the re-run commits, its reply lost
    ran = Ran()
    stats = worker(proxy.url, ran, queues={"default": 1}).run_until_idle()
    assert proxy.counts.faults == 3
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.recovered_claims == 1


def test_a_completion_effect_commits_once_when_its_reply_is_lost(
    db_url: str, proxy: FaultProxy
) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE effects (job_id bigint)")
    ids = enqueue(db_url, 3, max_attempts=1)

    def handler(job: Job) -> None:
        def effect(conn: psycopg.Connection[Any]) -> None:
            conn.execute("INSERT INTO effects VALUES (%s)", (job.id,))

        jobs.in_completion(effect)

    proxy.drop_next_commit_reply(times=2)
    stats = worker(proxy.url, handler, queues={"default": 1}).run_until_idle()
    assert proxy.counts.faults == 2
    with psycopg.connect(db_url) as c:
        effects = [r[0] for r in c.execute("SELECT job_id FROM effects ORDER BY 1")]
    assert effects == ids
    assert table(db_url) == ({"succeeded": 3}, Counter({"succeeded": 3}))
    assert stats.recovered_claims == 2


def test_max_attempts_one_no_job_dead_without_running(
    db_url: str, proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's reproduction: with max_attempts=1, six lost commit replies and six lost
    claim replies left 21 jobs dead that never ran. Now: none dead, none leased, each ran once."""
    caplog.set_level(logging.INFO, logger="tockwork")
    ids = enqueue(db_url, 60, max_attempts=1)
    proxy.drop_next_commit_reply(times=6)
    proxy.drop_reply(CLAIM, times=6)
    ran = Ran()
    stats = worker(proxy.url, ran, queues={"default": 3}).run_until_idle()
    assert proxy.counts.faults == 12
    assert_every_job_ran_once(db_url, ids, ran)
    assert stats.fenced == 0
    assert not [m for m in messages(caplog) if "not recorded" in m]


def test_a_heartbeat_whose_reply_is_lost_keeps_the_lease(db_url: str, proxy: FaultProxy) -> None:
    """A heartbeat is repeated on the new connection: the lease is not reported lost and the
    outcome is written under the same token."""
    (job_id,) = enqueue(db_url, 1)
    heartbeats = threading.Semaphore(0)
    proxy.on_request = lambda sql: heartbeats.release() if HEARTBEAT(sql) else None
    proxy.drop_reply(HEARTBEAT)
    ran = Ran()

    def handler(job: Job) -> None:
        # Runs until the worker sent the heartbeat whose reply is lost and the one after.
        assert heartbeats.acquire(timeout=30) and heartbeats.acquire(timeout=30)
        ran(job)

    every = timedelta(milliseconds=20)
    stats = worker(proxy.url, handler, heartbeat=every, poll_interval=every).run_until_idle()
    assert proxy.counts.faults == 1
    assert stats.lost_leases == 0 and stats.fenced == 0
    assert_every_job_ran_once(db_url, [job_id], ran)


def test_a_reap_whose_reply_is_lost_recovers_each_lease_once(
    db_url: str, proxy: FaultProxy
) -> None:
    """A reap is repeated: it finds only leases still expired, so each orphan gets one
    'lease_expired' attempt, and then runs once."""
    ids = enqueue(db_url, 4)
    with psycopg.connect(db_url, autocommit=True) as c:
        store = PgJobStore(c)
        claimed = store.claim({"default": 4}, "crashed", LEASE, T0)
        assert len(claimed) == 4
        leases = [(j.id, j.lease_token) for j in claimed]
        store.heartbeat(leases, LEASE, T0, started=[j.id for j in claimed])  # they started
    proxy.drop_reply(REAP)
    ran = Ran()
    later = FrozenClock(T0 + timedelta(minutes=5))
    stats = worker(proxy.url, ran, clock=later, reap_limit=10).run_until_idle()
    assert proxy.counts.faults == 1
    statuses, outcomes = table(db_url)
    assert statuses == {"succeeded": 4}
    assert outcomes == {"lease_expired": 4, "succeeded": 4}
    assert ran.runs == dict.fromkeys(ids, 1)
    assert stats.reaped == 0  # the reap that recovered them lost its reply: not counted here
