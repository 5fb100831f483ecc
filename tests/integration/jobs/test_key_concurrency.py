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
from jobs.enqueue import enqueue_columns
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
            "SELECT concurrency_key, count(*) FROM jobs_all WHERE status = 'leased' GROUP BY 1"
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
        rows = c.execute("SELECT id, concurrency_key FROM jobs_all ORDER BY id").fetchall()
    assert again.id == one.id and not again.created and not many[1].created
    assert rows == [(one.id, "user-9"), (many[0].id, "user-7")]  # a hit keeps its own key


def test_the_key_goes_in_with_the_row_on_every_insert_path(db_url: str) -> None:
    """One INSERT or COPY per path, the key a column of it: single enqueues (plain, unique),
    enqueue_many's COPY (and its idempotency-key savepoint), its INSERT fallback (a repeated
    key), its unique path, enqueue_columns with and without the column, a typed definition's
    options. No second statement: the test counts the UPDATEs of the jobs table."""
    org = "6f1c2d58-0c1b-4b6e-9a39-9f1d2b3c4d5e"

    @jobs.job("typed_noop")
    def typed_noop(n: int) -> None: ...

    with psycopg.connect(db_url) as c:
        updates = c.execute(
            "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"
        ).fetchone()
        assert updates == (0,)
        jobs.enqueue(c, "noop", {"n": 1}, concurrency_key="k1")
        jobs.enqueue(c, "noop", {"n": 2}, concurrency_key="k2", unique_key="u2")
        jobs.enqueue_many(c, [JobSpec("noop", {"n": 3}, concurrency_key="k3")])  # defaults
        copied = [
            JobSpec("noop", {"n": 4}, concurrency_key="k4", priority=2),
            JobSpec("noop", {"n": 5}, organization_id=org),
        ]
        jobs.enqueue_many(c, copied)  # binary COPY
        jobs.enqueue_many(
            c, [JobSpec("noop", {"n": 6}, concurrency_key="k6", idempotency_key="i6")]
        )
        repeated = [  # a key repeated in the batch: INSERT ... ON CONFLICT
            JobSpec("noop", {"n": 7}, concurrency_key="k7", idempotency_key="i7"),
            JobSpec("noop", {"n": 7}, concurrency_key="x", idempotency_key="i7"),
        ]
        jobs.enqueue_many(c, repeated)
        unique = [
            JobSpec("noop", {"n": 8}, concurrency_key="k8", unique_key="u8"),
            JobSpec("noop", {"n": 9}, concurrency_key="k9"),
        ]
        jobs.enqueue_many(c, unique)
        base: dict[str, list[Any]] = {
            "organization_ids": [None], "queues": ["default"], "job_types": ["noop"],
            "idempotency_keys": [None], "priorities": [0], "run_ats": [None], "max_attempts": [5],
        }  # fmt: skip
        enqueue_columns(c, {**base, "payloads": ['{"n": 10}'], "concurrency_keys": ["k10"]})
        enqueue_columns(c, {**base, "payloads": ['{"n": 11}']})
        typed_noop.with_options(concurrency_key="k12").enqueue(c, n=12)
        jobs.enqueue_many(c, [typed_noop.with_options(concurrency_key="k13").spec(n=13)])
        updates = c.execute(
            "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = 'jobs'"
        ).fetchone()
        rows = c.execute(
            "SELECT (payload->>'n')::int, concurrency_key FROM jobs_all ORDER BY 1, 2"
        ).fetchall()
    assert updates == (0,)
    assert rows == [(1, "k1"), (2, "k2"), (3, "k3"), (4, "k4"), (5, None), (6, "k6"),
                    (7, "k7"), (8, "k8"), (9, "k9"), (10, "k10"), (11, None), (12, "k12"),
                    (13, "k13")]  # fmt: skip


def test_a_relayed_event_keeps_the_key_of_its_jobs(db_url: str) -> None:
    """An outbox projection's JobSpec carries concurrency_key through the relay, on its
    one-INSERT path (a few jobs) and its enqueue_many path (more)."""
    from jobs import outbox
    from jobs.outbox import Event, Projection
    from jobs.relay import Relay
    from timezones.clock import FrozenClock

    def build(event: Event) -> list[JobSpec]:
        n = event.payload["n"]
        return [JobSpec("noop", {"n": n, "i": i}, concurrency_key=f"user-{n}") for i in range(n)]

    with psycopg.connect(db_url) as c:
        for n in (1, 6):  # 1 job: the single-INSERT path; 6: enqueue_many
            outbox.record(c, aggregate_type="user", aggregate_id=str(n), event_type="signed_up",
                          payload={"n": n}, occurred_at=T0)  # fmt: skip
    projections = [Projection("keyed", frozenset({"signed_up"}), build)]
    stats = Relay(db_url, projections, clock=FrozenClock(T0), listen=False).run_until_idle()
    assert stats.jobs_created == 7
    with psycopg.connect(db_url) as c:
        rows = c.execute(
            "SELECT concurrency_key, count(*) FROM jobs_all GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert rows == [("user-1", 1), ("user-6", 6)]


@pytest.mark.parametrize("value", ["", "x" * 513, 5])
def test_a_bad_key_is_refused_wherever_a_job_is_described(
    conn: psycopg.Connection[Any], value: Any
) -> None:
    @jobs.job("typed_noop")
    def typed_noop() -> None: ...

    with pytest.raises(jobs.InvalidInput) as one:
        jobs.enqueue(conn, "noop", concurrency_key=value)
    assert one.value.field == "concurrency_key"
    with pytest.raises(jobs.InvalidInput) as many:
        jobs.enqueue_many(conn, [JobSpec("noop"), JobSpec("noop", concurrency_key=value)])
    assert many.value.field == "specs[1].concurrency_key"
    with pytest.raises(jobs.InvalidInput) as typed:
        typed_noop.with_options(concurrency_key=value)
    assert typed.value.field == "concurrency_key"
    with pytest.raises(jobs.InvalidInput) as declared:
        jobs.job("other", concurrency_key=value)
    assert declared.value.field == "concurrency_key"
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


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

    @jobs.job("typed_noop")
    def typed_noop() -> None: ...

    with pytest.raises(jobs.InvalidInput) as typed:
        typed_noop.with_options(organization_id=value)
    assert typed.value.field == "organization_id"
    assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)


@pytest.mark.parametrize("value", ["not-a-uuid", 5])
def test_an_async_enqueue_refuses_an_organization_that_is_not_a_uuid(
    db_url: str, value: Any
) -> None:
    async def enqueue() -> tuple[str, str, int]:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            with pytest.raises(jobs.InvalidInput) as one:
                await jobs.enqueue_async(aconn, "noop", organization_id=value)
            with pytest.raises(jobs.InvalidInput) as many:
                await jobs.enqueue_many_async(
                    aconn, [JobSpec("noop"), JobSpec("noop", organization_id=value)]
                )
            await aconn.commit()
            row = await (await aconn.execute("SELECT count(*) FROM jobs_all")).fetchone()
            assert row is not None
            return one.value.field, many.value.field, row[0]

    assert asyncio.run(enqueue()) == ("organization_id", "specs[1].organization_id", 0)


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
            row = c.execute(
                "SELECT concurrency_key FROM jobs_all WHERE id = %s", (job.id,)
            ).fetchone()
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
        assert c.execute("SELECT count(*) FROM jobs_all WHERE status = 'succeeded'").fetchone() == (
            12,
        )


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
        rows = c.execute("SELECT id, concurrency_key FROM jobs_all ORDER BY id").fetchall()
    assert rows == [(ids[0], "user-5"), (ids[1], "user-6"), (ids[2], None)]
