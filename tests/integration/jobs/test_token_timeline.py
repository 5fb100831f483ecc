"""Fencing survives a promotion that lost data (issue 25): a lease token is never issued twice.

A real primary and a standby made from it (tests/failover/servers.py): the standby is copied
while a job is pending, the primary then leases the job to worker A (a commit the standby never
receives, as with asynchronous replication and lag at the crash), the primary dies and the
standby is promoted (timeline 2). The new primary sees the job pending under its old token and
leases it to worker B. With the token bumped by one, B got A's token, and A's completion was
taken for B's; with the timeline in the token's high bits, B's token is above every token of
timeline 1, A is fenced, and each service notices the change of primary once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import jobs
from jobs.primary import PrimaryWatch, server_identity
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from tests.failover.servers import LocalServer, primary_and_standby

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


@pytest.fixture
def pair() -> Iterator[tuple[LocalServer, LocalServer]]:
    with primary_and_standby() as servers:
        yield servers


def test_a_token_issued_before_a_lossy_promotion_is_never_issued_again(
    pair: tuple[LocalServer, LocalServer], caplog: pytest.LogCaptureFixture
) -> None:
    primary, standby = pair
    watch = PrimaryWatch("worker a", logging.getLogger("tockwork.test"))
    with psycopg.connect(primary.url, autocommit=True) as conn:
        jobs.migrate(conn)
        job_id = jobs.enqueue(conn, "t", {}, now=T0).id
        first = watch.observe(conn)
    assert first.timeline == 1
    standby.standby_of(primary)  # has the pending job, and nothing after it

    with psycopg.connect(primary.url, autocommit=True) as conn_a:
        (job_a,) = PgJobStore(conn_a).claim({"default": 1}, "worker-a", LEASE, T0)
    primary.stop("immediate")  # the claim never reaches the standby
    standby.start().promote()

    caplog.set_level(logging.INFO, "tockwork.test")
    with (
        psycopg.connect(standby.url, autocommit=True) as conn_a,
        psycopg.connect(standby.url, autocommit=True) as conn_b,
    ):
        second = watch.observe(conn_a)
        watch.observe(conn_b)  # the same new primary again: nothing more to say
        assert second.timeline == 2
        assert second.system_identifier == first.system_identifier
        assert server_identity(conn_b).timeline == 2
        row = conn_b.execute("SELECT status, lease_token FROM jobs_all WHERE id = %s", (job_id,))
        assert row.fetchone() == ("pending", 0)  # the lease to A was lost with the primary

        (job_b,) = PgJobStore(conn_b).claim({"default": 1}, "worker-b", LEASE, T0)
        assert job_b.id == job_a.id == job_id
        assert job_a.lease_token >> 32 == 1 and job_b.lease_token >> 32 == 2
        assert job_b.lease_token != job_a.lease_token  # "+ 1" gave 1 both times

        # A comes back with its pre-failover lease: fenced, B's lease is untouched.
        store_a, store_b = PgJobStore(conn_a), PgJobStore(conn_b)
        assert store_a.heartbeat([(job_id, job_a.lease_token)], LEASE, T0) == set()
        done_a = Finished(job_a, SUCCEEDED, T0, 1.0)
        assert store_a.complete([done_a], "worker-a", T0) == {job_id: "fenced"}
        done_b = Finished(job_b, SUCCEEDED, T0, 1.0)
        assert store_b.complete([done_b], "worker-b", T0) == {job_id: "succeeded"}

    changed = [r.getMessage() for r in caplog.records if "the primary changed" in r.getMessage()]
    assert len(changed) == 1, changed
    assert "timeline 1 -> system" in changed[0] and "timeline 2" in changed[0]
    assert watch.changes == 1
