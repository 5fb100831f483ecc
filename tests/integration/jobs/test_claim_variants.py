"""Every variant of the one claim statement (``job_claim`` in jobs/sql/job.sql, composed from
fragments into one query per (fair, limited, skip scan)): the store sends the variant its
state calls for, and each returns Job's columns in Job's field order and leases what it
should. The skip-scan variants run on any server (the planner reads them as a single ordered
scan); CI runs this file on PostgreSQL 15 and 18.

The scenario tells the variants apart: organization A has old ready jobs of type 'a' and one
of priority 5, organization B two newer ready jobs of type 'b', and a future job waits. A
claim of 4 in plain order takes the priority-5 job and A's oldest; the fair round gives each
organization two; a limit of one 'a' a second leaves the rest of A's jobs waiting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Self
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

import jobs
from jobs import Job, JobSpec, RateLimit
from jobs.limits import set_limit
from jobs.queries import load, variants
from jobs.store import PgJobStore

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
ORG_A, ORG_B = UUID(int=1), UUID(int=2)
TABLE = variants("jobs", "job_claim")
CLAIMS = {load("jobs")[name]: name for name in TABLE.values()}


class Recording(psycopg.Cursor[Any]):
    """Remembers the names of the claim statements sent through it."""

    sent: list[str]

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Self:
        name = CLAIMS.get(query) if isinstance(query, str) else None
        if name is not None:
            Recording.sent.append(name)
        return super().execute(query, params, **kwargs)


def scenario(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The jobs of the module doc, by label."""
    specs = {
        **{
            f"A{i}": JobSpec("a", {"i": i}, queue="q", organization_id=ORG_A,
                             run_at=T0 - timedelta(minutes=10 - i), idempotency_key=f"A{i}")
            for i in range(1, 5)
        },
        "P": JobSpec("a", {"p": 5}, queue="q", organization_id=ORG_A, priority=5,
                     run_at=T0 - timedelta(seconds=5), max_attempts=3),
        "B1": JobSpec("b", {"b": 1}, queue="q", organization_id=ORG_B,
                      run_at=T0 - timedelta(minutes=1)),
        "B2": JobSpec("b", {"b": 2}, queue="q", organization_id=ORG_B,
                      run_at=T0 - timedelta(seconds=50)),
        "F": JobSpec("a", {"f": 1}, queue="q", organization_id=ORG_B, priority=9,
                     run_at=T0 + timedelta(hours=1)),
    }  # fmt: skip
    done = jobs.enqueue_many(conn, list(specs.values()), now=T0)
    return {label: e.id for label, e in zip(specs, done, strict=True)}


# (fair, limited) -> the jobs a claim of 4 leases.
EXPECTED = {
    (False, False): {"P", "A1", "A2", "A3"},
    (False, True): {"P"},
    (True, False): {"P", "A1", "B1", "B2"},
    (True, True): {"P", "B1", "B2"},
}


@pytest.fixture
def recorded() -> Iterator[list[str]]:
    Recording.sent = []
    yield Recording.sent


def test_the_variant_table_has_every_combination() -> None:
    """No hole: each (fair, limited, skip scan) has its own statement."""
    flags = ("fair", "limited", "skip_scan")
    assert len(TABLE) == 8 == len(set(TABLE.values()))
    assert {frozenset(f for f in flags if f in on) for on in TABLE} == set(TABLE)


@pytest.mark.parametrize("skip_scan", [False, True], ids=["loose_scan", "skip_scan"])
@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_each_variant_leases_what_it_should_with_the_columns_of_job(
    db_url: str, recorded: list[str], fair: bool, limited: bool, skip_scan: bool
) -> None:
    with psycopg.connect(db_url) as c:
        ids = scenario(c)
        if fair:
            jobs.set_queue_policy(c, "q", fair=True, now=T0)
        if limited:
            set_limit(c, RateLimit(job_type="a", per_second=1), now=T0)
    label = {job_id: name for name, job_id in ids.items()}
    with psycopg.connect(db_url, autocommit=True, cursor_factory=Recording) as conn:
        store = PgJobStore(conn)
        store.skip_scan = skip_scan
        claimed = store.claim({"q": 4}, "w1", LEASE, T0)
    on = frozenset(
        f for f, v in (("fair", fair), ("limited", limited), ("skip_scan", skip_scan)) if v
    )
    assert recorded == [TABLE[on]]
    assert {label[j.id] for j in claimed} == EXPECTED[fair, limited]

    # Job(*row) is positional: a column out of Job's order would put a value in the wrong
    # field. Each claimed Job equals the row read back by name.
    fields = [f.name for f in dataclasses.fields(Job)]
    columns = sql.SQL(", ").join(
        sql.Identifier("attempts" if f == "attempt" else f) for f in fields
    )
    by_name = sql.SQL("SELECT {} FROM jobs_all WHERE id = %s").format(columns)
    with psycopg.connect(db_url) as c:
        for job in claimed:
            row = c.execute(by_name, (job.id,)).fetchone()
            assert row is not None
            assert job == Job(*row)
            status, locked_by, attempts = c.execute(
                "SELECT status, locked_by, attempts FROM jobs_all WHERE id = %s", (job.id,)
            ).fetchone() or (None, None, None)
            assert (status, locked_by, attempts) == ("leased", "w1", 1)
        waiting = c.execute("SELECT count(*) FROM jobs_all WHERE status = 'pending'").fetchone()
        assert waiting == (len(ids) - len(claimed),)
    if limited:
        # The token the claim took is spent in the same statement: a second claim in the same
        # second leaves every 'a' waiting and takes the rest.
        with psycopg.connect(db_url, autocommit=True) as conn:
            again = PgJobStore(conn)
            again.skip_scan = skip_scan
            taken = {label[j.id] for j in again.claim({"q": 4}, "w2", LEASE, T0)}
        assert taken == ({"B1", "B2"} if not fair else set())
