"""Per-key concurrency: at most K leased jobs per concurrency_key in a queue
(jobs.set_queue_policy(concurrency_per_key=K)), race-free across claimers, and every end of a
lease frees its slot."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec
from jobs.model import Job, JobStatus
from jobs.retry import SUCCEEDED, Decision
from jobs.store import Finished, PgJobStore
from tests.processes import wait_for

T0 = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


@pytest.fixture
def stores(db_url: str) -> Iterator[Callable[..., PgJobStore]]:
    opened: list[psycopg.Connection[Any]] = []

    def make(name: str = "claimer") -> PgJobStore:
        opened.append(psycopg.connect(db_url, autocommit=True, application_name=name))
        return PgJobStore(opened[-1])

    yield make
    for c in opened:
        c.close()


def setup(db_url: str, k: int, specs: list[JobSpec], *, fair: bool = False) -> None:
    with psycopg.connect(db_url) as c:
        jobs.set_queue_policy(c, "default", fair=fair, concurrency_per_key=k)
        jobs.enqueue_many(c, specs, now=T0)


def keyed(key: str | None, n: int, **kw: Any) -> list[JobSpec]:
    return [JobSpec("noop", {"i": i}, concurrency_key=key, **kw) for i in range(n)]


def leased_per_key(db_url: str) -> Counter[str | None]:
    with psycopg.connect(db_url) as c:
        rows = c.execute(
            "SELECT concurrency_key, count(*) FROM jobs WHERE status = 'leased' GROUP BY 1"
        ).fetchall()
    return Counter({key: n for key, n in rows})


def test_one_claim_takes_at_most_k_of_a_key(db_url: str, stores: Callable[..., PgJobStore]) -> None:
    setup(db_url, 2, [*keyed("user-1", 10), *keyed("user-2", 10), *keyed(None, 3)])
    store = stores()
    # The candidates are the first 20 in claim order (user-1's and user-2's): 2 of each.
    assert len(store.claim({"default": 20}, "w", LEASE, T0)) == 4
    assert leased_per_key(db_url) == {"user-1": 2, "user-2": 2}
    # Both keys full: the next claim goes past their backlog to the jobs without a key.
    assert len(store.claim({"default": 20}, "w", LEASE, T0)) == 3
    assert store.claim({"default": 20}, "w", LEASE, T0) == []
    assert leased_per_key(db_url) == {"user-1": 2, "user-2": 2, None: 3}


def test_a_full_key_does_not_block_the_others(
    db_url: str, stores: Callable[..., PgJobStore]
) -> None:
    """The full key's backlog is at the head of the queue: the next claim goes past it. (The
    first claim's candidates are the head, all of one key: it leases one of them.)"""
    early = T0 - timedelta(hours=1)
    setup(db_url, 1, [*keyed("busy", 500, run_at=early), *keyed("other", 1)])
    store = stores()
    assert [j.payload for j in store.claim({"default": 4}, "w", LEASE, T0)] == [{"i": 0}]
    assert len(store.claim({"default": 4}, "w", LEASE, T0)) == 1
    assert leased_per_key(db_url) == {"busy": 1, "other": 1}


def test_the_stored_key_is_the_enqueued_one(db_url: str) -> None:
    with psycopg.connect(db_url) as c:
        one = jobs.enqueue(c, "noop", concurrency_key="user-9", idempotency_key="a")
        again = jobs.enqueue(c, "noop", concurrency_key="user-8", idempotency_key="a")
        many = jobs.enqueue_many(
            c, [JobSpec("noop", concurrency_key="user-7"), JobSpec("noop", idempotency_key="a")]
        )
        rows = c.execute("SELECT id, concurrency_key FROM jobs ORDER BY id").fetchall()
    assert again.id == one.id and not again.created and not many[1].created
    assert rows == [(one.id, "user-9"), (many[0].id, "user-7")]  # a hit keeps its own key


def hold_claim_open(
    store: PgJobStore, n: int, entered: threading.Event, release: threading.Event
) -> list[Job]:
    """Claim inside a transaction that stays open until ``release``: the claim's own
    transaction becomes a savepoint of it, so its leases and its lock commit only then."""
    with store.conn.transaction():
        claimed = store.claim({"default": n}, "a", LEASE, T0)
        entered.set()
        release.wait(timeout=20)
    return claimed


@pytest.mark.parametrize("k", [1, 2])
def test_two_claimers_at_the_same_instant_lease_at_most_k(
    db_url: str, stores: Callable[..., PgJobStore], k: int
) -> None:
    """A leases k - 1 jobs of the key and keeps its transaction open; B claims while A's claim
    has not committed (a real lock wait, seen in pg_stat_activity); then A commits. B's claim
    must see A's leases: without the policy row lock, B's snapshot would predate A's commit,
    SKIP LOCKED would hand it other jobs of the key, and it would lease k + 1."""
    setup(db_url, k, keyed("user-1", 6))
    a, b = stores("claimer-a"), stores("claimer-b")
    a.claim({"default": 0}, "a", LEASE, T0)  # warm both policy caches outside the race
    b.claim({"default": 0}, "b", LEASE, T0)
    entered, release = threading.Event(), threading.Event()
    got_a: list[Job] = []
    got_b: list[Job] = []
    ta = threading.Thread(
        target=lambda: got_a.extend(hold_claim_open(a, max(k - 1, 1), entered, release))
    )
    ta.start()
    assert entered.wait(timeout=20)
    tb = threading.Thread(target=lambda: got_b.extend(b.claim({"default": 6}, "b", LEASE, T0)))
    tb.start()
    with psycopg.connect(db_url, autocommit=True) as watcher:
        wait_for(
            watcher,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'claimer-b' AND wait_event_type = 'Lock'",
        )
    release.set()
    ta.join()
    tb.join()
    assert len(got_a) + len(got_b) == k
    assert leased_per_key(db_url) == {"user-1": k}


def test_many_concurrent_claimers_never_exceed_k(
    db_url: str, stores: Callable[..., PgJobStore]
) -> None:
    """Four claimers start together and claim, check and complete until the queue is empty:
    after every claim, no key has more than K leased jobs."""
    k = 2
    setup(db_url, k, [s for u in range(6) for s in keyed(f"user-{u}", 20)], fair=True)
    barrier = threading.Barrier(4)
    over: list[Counter[str | None]] = []
    done: list[int] = []

    def claimer(n: int) -> None:
        store = stores(f"c{n}")
        barrier.wait(timeout=20)
        while batch := store.claim({"default": 5}, f"w{n}", LEASE, T0):
            counts = leased_per_key(db_url)
            if max(counts.values()) > k:
                over.append(counts)
            store.complete([Finished(j, SUCCEEDED, T0, 1.0) for j in batch], f"w{n}", T0)
            done.extend(j.id for j in batch)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert over == []
    assert len(done) == len(set(done)) == 120


def end_by(how: str, store: PgJobStore, job: Job) -> None:
    later = T0 + LEASE * 2
    match how:
        case "complete":
            store.complete([Finished(job, SUCCEEDED, T0, 1.0)], "w", T0)
        case "retry":
            retry = Decision(JobStatus.RETRYING, "retry", timedelta(0), 0, "boom", "boom")
            store.complete([Finished(job, retry, T0, 1.0)], "w", T0)
        case "reap":
            assert [r[0] for r in store.reap(100, later)] == [job.id]
        case "release":
            assert store.release([(job.id, job.lease_token)], "w", T0) == [job.id]
        case "release_unstarted":
            assert store.release_unstarted([(job.id, job.lease_token)]) == [job.id]


@pytest.mark.parametrize("how", ["complete", "retry", "reap", "release", "release_unstarted"])
def test_every_end_of_a_lease_frees_the_slot(
    db_url: str, stores: Callable[..., PgJobStore], how: str
) -> None:
    setup(db_url, 1, keyed("user-1", 2))
    store = stores()
    now = T0 + LEASE * 2 if how == "reap" else T0
    first = store.claim({"default": 5}, "w", LEASE, T0)
    assert len(first) == 1
    assert store.claim({"default": 5}, "w", LEASE, now) == []  # the key is full
    end_by(how, store, first[0])
    second = store.claim({"default": 5}, "w", LEASE, now)
    assert len(second) == 1
    assert leased_per_key(db_url) == {"user-1": 1}


POLICY_BAD: list[tuple[str, dict[str, Any], str]] = [
    ("zero", {"concurrency_per_key": 0}, "concurrency_per_key"),
    ("negative", {"concurrency_per_key": -1}, "concurrency_per_key"),
    ("float", {"concurrency_per_key": 1.5}, "concurrency_per_key"),
    ("text", {"concurrency_per_key": "2"}, "concurrency_per_key"),
    ("bool", {"concurrency_per_key": True}, "concurrency_per_key"),
    ("huge", {"concurrency_per_key": 2**40}, "concurrency_per_key"),
    ("fair-text", {"fair": "yes"}, "fair"),
    ("fair-int", {"fair": 1}, "fair"),
    ("queue", {"queue": "Not A Queue"}, "queue"),
    ("queue-int", {"queue": 5}, "queue"),
    ("now", {"now": datetime(2026, 1, 1)}, "now"),  # naive on purpose
]


@pytest.mark.parametrize(("name", "args", "field"), POLICY_BAD, ids=[c[0] for c in POLICY_BAD])
def test_bad_policies_are_refused_and_nothing_is_written(
    conn: psycopg.Connection[Any], name: str, args: dict[str, Any], field: str
) -> None:
    queue = args.pop("queue", "default")
    with pytest.raises(jobs.InvalidInput) as caught:
        jobs.set_queue_policy(conn, queue, **args)
    assert caught.value.field == field
    assert field in str(caught.value)
    assert jobs.queue_policies(conn) == []
    assert conn.info.transaction_status.name in ("IDLE", "INTRANS")  # no statement failed


@pytest.mark.parametrize("value", ["not-a-uuid", 5, "6f1c2d58"])
def test_an_organization_that_is_not_a_uuid_is_refused(
    conn: psycopg.Connection[Any], value: Any
) -> None:
    with pytest.raises(jobs.InvalidInput) as caught:
        jobs.enqueue(conn, "noop", organization_id=value, concurrency_key="user-1")
    assert caught.value.field == "organization_id"
    with pytest.raises(jobs.InvalidInput) as many:
        jobs.enqueue_many(conn, [JobSpec("noop", organization_id=value)])
    assert many.value.field == "specs[0].organization_id"
    assert conn.execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_the_policy_is_read_back(conn: psycopg.Connection[Any]) -> None:
    set_ = jobs.set_queue_policy(conn, "pushes", concurrency_per_key=3)
    jobs.set_queue_policy(conn, "reminders", fair=True)
    jobs.set_queue_policy(conn, "pushes", fair=True, concurrency_per_key=1)  # replaces
    assert set_ == jobs.QueuePolicy("pushes", fair=False, concurrency_per_key=3)
    assert jobs.queue_policies(conn) == [
        jobs.QueuePolicy("pushes", fair=True, concurrency_per_key=1),
        jobs.QueuePolicy("reminders", fair=True),
    ]


def test_a_worker_runs_one_job_per_key_at_a_time(db_url: str) -> None:
    """Four threads, K = 1: jobs of one key never run at the same time, jobs of different
    keys do (the handlers of two keys meet at a barrier)."""
    setup(db_url, 1, [*keyed("user-1", 6), *keyed("user-2", 6)])
    lock = threading.Lock()
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    meet = threading.Barrier(2)

    def noop(job: Job) -> None:
        with psycopg.connect(db_url) as c:
            row = c.execute("SELECT concurrency_key FROM jobs WHERE id = %s", (job.id,)).fetchone()
        assert row is not None
        key: str = row[0]
        with lock:
            running[key] += 1
            most[key] = max(most[key], running[key])
        if job.payload["i"] == 0:
            meet.wait(timeout=20)  # the first job of each key: both run at once
        with lock:
            running[key] -= 1

    worker = jobs.Worker(db_url, {"noop": noop}, {"default": 4})
    worker.run_until_idle()
    assert most == {"user-1": 1, "user-2": 1}
    with psycopg.connect(db_url) as c:
        assert c.execute("SELECT count(*) FROM jobs WHERE status = 'succeeded'").fetchone() == (12,)


def test_the_async_enqueues_store_the_key(db_url: str) -> None:
    async def enqueue() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            one = await jobs.enqueue_async(aconn, "noop", concurrency_key="user-5")
            many = await jobs.enqueue_many_async(
                aconn, [JobSpec("noop", concurrency_key="user-6"), JobSpec("noop")]
            )
            await aconn.commit()
        return [one.id, *(e.id for e in many)]

    ids = asyncio.run(enqueue())
    with psycopg.connect(db_url) as c:
        rows = c.execute("SELECT id, concurrency_key FROM jobs ORDER BY id").fetchall()
    assert rows == [(ids[0], "user-5"), (ids[1], "user-6"), (ids[2], None)]
