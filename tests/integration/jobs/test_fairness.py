"""Fairness across organizations: a fair queue's claim goes round robin over the organizations
with ready work (jobs.set_queue_policy(fair=True)), decided in SQL at claim time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

import jobs
from jobs import JobSpec
from jobs.store import PgJobStore

T0 = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
FLOOD = UUID(int=0xF100D)


def org(i: int) -> UUID:
    return UUID(int=(i + 1) << 64)


@pytest.fixture(params=[True, False], ids=["skip_scan", "loose_scan"])
def stores(db_url: str, request: pytest.FixtureRequest) -> Iterator[Callable[[], PgJobStore]]:
    """Stores that claim with the statements of PostgreSQL 18 (skip_scan: one ordered scan per
    organization) and with those of 15-17 (loose_scan: one priority at a time), whichever
    server runs the tests."""
    opened: list[psycopg.Connection[Any]] = []

    def make() -> PgJobStore:
        opened.append(psycopg.connect(db_url, autocommit=True))
        store = PgJobStore(opened[-1])
        store.skip_scan = request.param
        return store

    yield make
    for c in opened:
        c.close()


def fill(db_url: str, specs: list[JobSpec], *, fair: bool = True, queue: str = "default") -> None:
    with psycopg.connect(db_url) as c:
        jobs.enqueue_many(c, specs, now=T0)
        if fair:
            jobs.set_queue_policy(c, queue, fair=True)


def flood(n: int, organization: UUID | None = FLOOD, queue: str = "default") -> list[JobSpec]:
    # Older than everything else: in plain order the flood comes first.
    return [
        JobSpec("noop", {"i": i}, queue=queue, organization_id=organization,
                run_at=T0 - timedelta(hours=1) + timedelta(milliseconds=i))
        for i in range(n)
    ]  # fmt: skip


def orgs_of(claimed: list[jobs.Job]) -> Counter[UUID | None]:
    return Counter(j.organization_id for j in claimed)


def test_one_claim_takes_round_robin_across_organizations(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    fill(db_url, [JobSpec("noop", organization_id=org(i % 3)) for i in range(30)])
    claimed = stores().claim({"default": 6}, "w", LEASE, T0)
    assert orgs_of(claimed) == {org(0): 2, org(1): 2, org(2): 2}


def test_future_jobs_are_passed_over_and_priorities_kept_within_an_organization(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    """A herd enqueued ahead (future jobs at several priorities) beside a few due ones: a claim
    takes the due ones only, each organization's by priority, then run_at (the loose scan reads
    them one priority at a time, the skip scan in one pass: the same jobs)."""
    later = T0 + timedelta(days=1)
    herd = [JobSpec("noop", {"herd": i}, organization_id=org(1), priority=i % 3, run_at=later)
            for i in range(300)]  # fmt: skip
    due = [
        JobSpec("noop", {"n": "a0"}, organization_id=org(1), priority=0),
        JobSpec("noop", {"n": "a9"}, organization_id=org(1), priority=9),
        JobSpec("noop", {"n": "a2"}, organization_id=org(1), priority=2),
        JobSpec("noop", {"n": "b1"}, organization_id=org(2), priority=1),
        JobSpec("noop", {"n": "c0"}, organization_id=None),
    ]
    fill(db_url, [*herd, *due])
    store = stores()
    first = store.claim({"default": 3}, "w", LEASE, T0)
    assert orgs_of(first) == {org(1): 1, org(2): 1, None: 1}
    assert [j.payload["n"] for j in first if j.organization_id == org(1)] == ["a9"]
    rest = store.claim({"default": 10}, "w", LEASE, T0)
    assert sorted(j.payload["n"] for j in rest) == ["a0", "a2"]
    assert store.claim({"default": 10}, "w", LEASE, T0) == []


def test_without_the_policy_the_flood_comes_first(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    """The control of the next test: the same rows, claimed in plain order."""
    fill(db_url, [*flood(1000), JobSpec("noop", organization_id=org(1))], fair=False)
    claimed = stores().claim({"default": 8}, "w", LEASE, T0)
    assert orgs_of(claimed) == {FLOOD: 8}


def test_a_flood_does_not_delay_another_organizations_job(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    fill(db_url, [*flood(1000), JobSpec("noop", organization_id=org(1))])
    claimed = stores().claim({"default": 8}, "w", LEASE, T0)
    assert orgs_of(claimed) == {FLOOD: 7, org(1): 1}  # the rest refilled from the flood
    # One job a claim: the other organization's job within two cycles, whatever the start.
    fill(db_url, [JobSpec("noop", organization_id=org(2))])
    store = stores()
    first_two = store.claim({"default": 1}, "w", LEASE, T0) + store.claim(
        {"default": 1}, "w", LEASE, T0
    )
    assert orgs_of(first_two) == {FLOOD: 1, org(2): 1}


def test_jobs_without_an_organization_count_as_one(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    fill(db_url, [*flood(50, organization=None), *flood(50, organization=org(7))])
    claimed = stores().claim({"default": 4}, "w", LEASE, T0)
    assert orgs_of(claimed) == {None: 2, org(7): 2}


def test_claims_go_round_every_organization_in_turn(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    """More organizations than one claim serves: one store's successive claims of 5 serve 5
    new organizations each, so 10 claims serve each of 50 organizations exactly once."""
    fill(db_url, [*flood(2000), *(JobSpec("noop", organization_id=org(i)) for i in range(49))])
    store = stores()
    served: Counter[UUID | None] = Counter()
    for _ in range(10):
        claimed = store.claim({"default": 5}, "w", LEASE, T0)
        assert len(claimed) == 5
        served.update(orgs_of(claimed))
    assert len(served) == 50
    assert set(served.values()) == {1}


def test_ready_work_only_and_priority_within_an_organization(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    later = T0 + timedelta(hours=1)
    fill(
        db_url,
        [
            JobSpec("later", organization_id=org(1), run_at=later),  # not ready: not claimed
            JobSpec("low", organization_id=org(2)),
            JobSpec("high", organization_id=org(2), priority=5),
            *flood(20),
        ],
    )
    claimed = stores().claim({"default": 4}, "w", LEASE, T0)
    assert "later" not in {j.job_type for j in claimed}
    assert next(j.job_type for j in claimed if j.organization_id == org(2)) == "high"
    assert len(claimed) == 4


def test_fair_and_plain_queues_in_one_claim(db_url: str, stores: Callable[[], PgJobStore]) -> None:
    fill(db_url, [*flood(100, queue="a"), JobSpec("noop", queue="a", organization_id=org(1))],
         queue="a")  # fmt: skip
    fill(db_url, [*flood(100, queue="b"), JobSpec("noop", queue="b", organization_id=org(1))],
         fair=False)  # fmt: skip
    claimed = stores().claim({"a": 4, "b": 4}, "w", LEASE, T0)
    assert orgs_of([j for j in claimed if j.queue == "a"]) == {FLOOD: 3, org(1): 1}
    assert orgs_of([j for j in claimed if j.queue == "b"]) == {FLOOD: 4}


def test_concurrent_fair_claimers_claim_each_job_once(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    fill(db_url, [JobSpec("noop", organization_id=org(i % 7)) for i in range(700)])
    a, b = stores(), stores()
    seen: list[int] = []
    while batch := a.claim({"default": 9}, "a", LEASE, T0) + b.claim(
        {"default": 9}, "b", LEASE, T0
    ):
        seen.extend(j.id for j in batch)
    assert len(seen) == len(set(seen)) == 700


def test_a_cleared_policy_claims_in_plain_order_again(
    db_url: str, stores: Callable[[], PgJobStore]
) -> None:
    fill(db_url, [*flood(100), JobSpec("noop", organization_id=org(1))])
    store = stores()
    store.policy_refresh = 0.0  # see every change at once
    with psycopg.connect(db_url) as c:
        assert jobs.queue_policies(c) == [jobs.QueuePolicy("default", fair=True)]
        assert jobs.clear_queue_policy(c, "default") is True
        assert jobs.clear_queue_policy(c, "default") is False
    assert orgs_of(store.claim({"default": 4}, "w", LEASE, T0)) == {FLOOD: 4}
    with psycopg.connect(db_url) as c:
        jobs.set_queue_policy(c, "default", fair=True)
    assert orgs_of(store.claim({"default": 4}, "w", LEASE, T0)) == {FLOOD: 3, org(1): 1}


def test_the_worker_runs_a_fair_queue(db_url: str) -> None:
    fill(db_url, [*flood(40), JobSpec("noop", organization_id=org(1))])
    order: list[UUID | None] = []

    def noop(job: jobs.Job) -> None:
        order.append(job.organization_id)

    worker = jobs.Worker(db_url, {"noop": noop}, {"default": 1})
    worker.run_until_idle()
    assert len(order) == 41
    assert org(1) in order[:2]


def test_a_fair_queue_keeps_its_rate_limits(db_url: str, stores: Callable[[], PgJobStore]) -> None:
    """A queue with a policy is claimed by job_claim_fair, which spends the same buckets as
    job_claim: a queue limit caps the claim, and a job-type limit holds its type back."""
    specs = [JobSpec("noop", organization_id=org(i % 3)) for i in range(30)]
    specs += [JobSpec("push", organization_id=org(i % 3)) for i in range(30)]
    fill(db_url, specs)
    with psycopg.connect(db_url) as c:
        jobs.limits.set_limit(c, jobs.RateLimit(queue="default", per_second=100), now=T0)
        jobs.limits.set_limit(c, jobs.RateLimit(job_type="push", per_second=20), now=T0)
    store = stores()
    # Buckets hold 5% of a second's limit: 5 starts for the queue, 1 for push.
    first = store.claim({"default": 50}, "w", LEASE, T0)
    assert len(first) == 5
    assert Counter(j.job_type for j in first)["push"] <= 1
    assert len(store.claim({"default": 50}, "w", LEASE, T0)) == 0  # no tokens left at T0
    later = store.claim({"default": 50}, "w", LEASE, T0 + timedelta(seconds=1))
    assert len(later) == 5
    assert Counter(j.job_type for j in later)["push"] <= 1
    with psycopg.connect(db_url) as c:
        jobs.limits.clear_limit(c, queue="default")
        jobs.limits.clear_limit(c, job_type="push")
    rest = store.claim({"default": 100}, "w", LEASE, T0 + timedelta(seconds=2))
    assert len(rest) == 50
