"""Global rate limits (jobs.limits): token buckets spent by the claim statement itself.

Time is pinned: every claim passes ``now``, so the refill is exact arithmetic. A window's bucket
holds 5% of its limit (at least one token): per_second=100 holds 5 tokens and refills 1 every
10 ms. A claim also starts no more than the limit minus what the claims of the last second
took (the one-second window).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
from jobs import JobSpec, RateLimit, RateLimited
from jobs.limits import clear_limit, list_limits, set_limit, sync_limits
from jobs.listener import POLICIES_CHANGED
from jobs.model import Job
from jobs.retry import SUCCEEDED, RetryPolicy, decide
from jobs.store import Finished, PgJobStore
from tests.processes import wait_for
from timezones.clock import FrozenClock

T0 = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
MS = timedelta(milliseconds=1)


@pytest.fixture
def stores(db_url: str) -> Iterator[Callable[[], PgJobStore]]:
    opened: list[psycopg.Connection[Any]] = []

    def make() -> PgJobStore:
        opened.append(psycopg.connect(db_url, autocommit=True))
        return PgJobStore(opened[-1])

    yield make
    for c in opened:
        c.close()


def enqueue(
    conn: psycopg.Connection[Any], n: int, job_type: str = "push", queue: str = "q"
) -> None:
    with conn.transaction():
        jobs.enqueue_many(
            conn, [JobSpec(job_type, {"i": i}, queue=queue) for i in range(n)], now=T0
        )


def limit(conn: psycopg.Connection[Any], **kw: Any) -> None:
    with conn.transaction():
        set_limit(conn, RateLimit(**kw), now=T0)


def counts(conn: psycopg.Connection[Any]) -> dict[tuple[str, int], int]:
    rows = conn.execute("SELECT status, attempts, count(*) FROM jobs_all GROUP BY 1, 2").fetchall()
    return {(s, a): n for s, a, n in rows}


def test_the_bucket_refills_by_elapsed_time_and_caps_at_its_burst(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 200)
    limit(conn, queue="q", per_second=100)  # 5 tokens, 1 per 10 ms
    s = stores()

    def claim(at: datetime, n: int = 50) -> int:
        return len(s.claim({"q": n}, "w", LEASE, at))

    assert claim(T0) == 5
    assert claim(T0) == 0  # spent: the same instant gives nothing
    assert claim(T0 + 10 * MS) == 1
    assert claim(T0 + 15 * MS) == 0  # half a token
    assert claim(T0 + 20 * MS) == 1  # the half was kept
    assert claim(T0 + timedelta(seconds=10)) == 5  # ten idle seconds hold only the burst
    assert claim(T0 + timedelta(seconds=10) + 25 * MS, n=1) == 1  # asks for less: 1.5 left
    (state,) = list_limits(conn, now=T0 + timedelta(seconds=10) + 25 * MS)
    assert state.second_tokens == pytest.approx(1.5)
    assert claim(T0 + timedelta(seconds=10) + 25 * MS) == 1
    # Held back jobs wait as they were: pending, no attempt used.
    assert counts(conn) == {("leased", 1): 14, ("pending", 0): 186}


def test_no_one_second_window_of_claims_exceeds_the_limit(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    """A claim every 10 ms against 100/s (bucket of 5, 1 token per 10 ms), with a stall: the
    bucket alone would start 104 in the first second (its 5, then one a claim); the window of
    the last second's claims stops it at 100, and after the stall the catch-up (the bucket's 5)
    stays within the second that held the stall. Every sliding second, at every claim instant,
    holds at most 100."""
    enqueue(conn, 400)
    limit(conn, queue="q", per_second=100)
    s = stores()
    got: list[tuple[int, int]] = []  # (ms after T0, jobs claimed)
    for ms in [*range(0, 1500, 10), *range(2000, 3000, 10)]:  # no claim from 1.5 s to 2 s
        got.append((ms, len(s.claim({"q": 50}, "w", LEASE, T0 + ms * MS))))
    assert sum(n for ms, n in got if ms < 1000) == 100
    assert dict(got)[2000] == 5  # the catch-up
    windows = [sum(n for ms, n in got if start <= ms < start + 1000) for start, _ in got]
    assert max(windows) == 100
    assert sum(n for _, n in got) >= 2 * 100 + 45  # ~the limit over the seconds with claims


def test_the_per_minute_window_applies_too(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 100)
    limit(conn, queue="q", per_second=100, per_minute=60)  # minute: 3 tokens, 1 per second
    s = stores()
    got = [len(s.claim({"q": 50}, "w", LEASE, T0 + timedelta(seconds=t))) for t in
           (0, 0.5, 1, 1.5, 2, 60)]  # fmt: skip
    assert got == [3, 0, 1, 0, 1, 3]


def test_no_limit_claims_as_before_and_another_queues_limit_does_not_apply(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 30, queue="free")
    enqueue(conn, 30, queue="q")
    limit(conn, queue="q", per_second=20)  # 1 token
    got = stores().claim({"free": 25, "q": 25}, "w", LEASE, T0)
    assert sorted(j.queue for j in got) == ["free"] * 25 + ["q"]


def test_a_job_type_limit_counts_across_queues_and_lets_other_types_pass(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 10, "push", "a")
    enqueue(conn, 10, "push", "b")
    enqueue(conn, 10, "email", "a")
    limit(conn, job_type="push", per_second=100)  # 5 tokens, 1 per 10 ms
    s = stores()
    got = s.claim({"a": 50, "b": 50}, "w", LEASE, T0, job_types=["push", "email"])
    assert sum(j.job_type == "push" for j in got) == 5
    assert sum(j.job_type == "email" for j in got) == 10
    # Out of tokens: push is held back in every queue, the email jobs are gone already.
    assert s.claim({"a": 50, "b": 50}, "w", LEASE, T0, job_types=["push", "email"]) == []
    more = s.claim({"a": 50, "b": 50}, "w", LEASE, T0 + 20 * MS, job_types=["push"])
    assert [j.job_type for j in more] == ["push", "push"]


def test_a_worker_without_the_handler_leaves_a_limited_job_type_alone(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 5, "push")
    enqueue(conn, 5, "email")
    limit(conn, job_type="push", per_second=1000)
    got = stores().claim({"q": 50}, "w", LEASE, T0, job_types=["email"])
    assert {j.job_type for j in got} == {"email"} and len(got) == 5


def test_two_concurrent_claimers_never_exceed_the_tokens(
    db_url: str, conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    """Two real connections claim at the same instants, released together by a barrier: the
    bucket row's lock makes them take turns, so each instant grants exactly the tokens."""
    enqueue(conn, 2000)
    limit(conn, queue="q", per_second=1000)  # 50 tokens, 1 per ms
    rounds = 20
    instants = [T0 + i * 20 * MS for i in range(rounds)]  # 20 ms apart: 20 tokens each
    barrier = threading.Barrier(2)
    got: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def claimer(k: int) -> None:
        s = stores()
        try:
            for at in instants:
                barrier.wait(timeout=10)
                got[k].append(len(s.claim({"q": 40}, f"w{k}", LEASE, at)))
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    per_round = [a + b for a, b in zip(got[0], got[1], strict=True)]
    assert per_round == [50] + [20] * (rounds - 1)
    assert all(min(a, b) == 0 or a + b <= 50 for a, b in zip(*got, strict=True))
    leased = conn.execute("SELECT count(*) FROM jobs_all WHERE status = 'leased'").fetchone()
    assert leased == (50 + 20 * (rounds - 1),)


def _rate_limited(job: Job, seconds: float) -> Finished:
    return Finished(job, decide(job, RateLimited(seconds), RetryPolicy()), T0, 1.0)


@pytest.mark.parametrize("opt_in", [True, False])
def test_rate_limited_pauses_the_limit_when_it_opts_in(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore], opt_in: bool
) -> None:
    enqueue(conn, 20)
    limit(conn, queue="q", per_second=100, pause_on_rate_limited=opt_in)  # 5 tokens
    s = stores()
    first, *rest = s.claim({"q": 5}, "w", LEASE, T0)
    written, again = s.complete_and_claim(
        [_rate_limited(first, 30)] + [Finished(j, SUCCEEDED, T0, 1.0) for j in rest],
        {"q": 5},
        "w",
        LEASE,
        T0 + timedelta(seconds=1),
    )
    assert written[first.id] == "rate_limited"
    paused = {True: (0, 0), False: (5, 5)}[opt_in]
    assert len(again) == paused[0]  # the pause applies to the claim of the same transaction
    assert len(s.claim({"q": 5}, "w", LEASE, T0 + timedelta(seconds=20))) == paused[1]
    assert len(s.claim({"q": 5}, "w", LEASE, T0 + timedelta(seconds=31))) == 5
    (state,) = list_limits(conn, now=T0 + timedelta(seconds=2))
    assert (state.paused_until is not None) == opt_in


def test_rate_limited_pauses_a_job_type_limit_through_complete(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 5, "push", "a")
    enqueue(conn, 5, "push", "b")
    limit(conn, job_type="push", per_second=100)  # 5 tokens
    s = stores()
    (job,) = s.claim({"a": 1}, "w", LEASE, T0)
    s.complete([_rate_limited(job, 10)], "w", T0)
    assert s.claim({"a": 5, "b": 5}, "w", LEASE, T0 + timedelta(seconds=9)) == []
    assert len(s.claim({"a": 5, "b": 5}, "w", LEASE, T0 + timedelta(seconds=10))) == 5


def test_next_due_wakes_a_worker_when_the_bucket_has_refilled(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    enqueue(conn, 100)
    limit(conn, queue="q", per_second=1000)  # 50 tokens, 1 per ms; a wake-up waits for 25
    s = stores()
    assert s.next_due(["q"], T0) == 0.0  # tokens and ready jobs: claim now
    assert len(s.claim({"q": 100}, "w", LEASE, T0)) == 50
    assert s.next_due(["q"], T0) == pytest.approx(0.025)
    assert s.next_due(["q"], T0 + 10 * MS) == pytest.approx(0.015)
    # Half a bucket back, not yet claimed (another worker's claim came first, say): claim now,
    # not at the next poll (the bucket would fill and overflow meanwhile).
    assert s.next_due(["q"], T0 + 30 * MS) == 0.0
    # No claim spent from the bucket for a second (its ready jobs may be unclaimable for a
    # reason no limit shows): the poll interval, not "claim now" every few milliseconds.
    assert s.next_due(["q"], T0 + 1100 * MS) is None
    with conn.transaction():
        clear_limit(conn, queue="q")
    assert s.next_due(["q"], T0) is None
    with conn.transaction():
        conn.execute("UPDATE jobs SET status = 'succeeded' WHERE status = 'pending'")
    limit(conn, queue="q", per_second=1000)
    assert s.next_due(["q"], T0) is None  # no ready job: no limit applies


def test_next_due_waits_for_the_limit_that_holds_the_ready_jobs_back(
    conn: psycopg.Connection[Any], stores: Callable[[], PgJobStore]
) -> None:
    """A queue limit with tokens whose ready jobs are all of a paused job type (a provider's
    429): the wake-up is the pause's end, not "claim now" (a spin of idle claims); likewise a
    job type limit with tokens whose jobs are all in a queue that waits."""
    enqueue(conn, 10, "push", "q")
    limit(conn, queue="q", per_second=5000)  # 50 tokens
    limit(conn, job_type="push", per_second=500)
    with conn.transaction():
        conn.execute(
            "UPDATE job_rate_limits SET paused_until = %s WHERE scope = 'job_type'",
            (T0 + timedelta(seconds=30),),
        )
    s = stores()
    assert s.next_due(["q"], T0) == pytest.approx(30.0)
    with conn.transaction():
        conn.execute("UPDATE job_rate_limits SET paused_until = NULL")
        conn.execute(
            "UPDATE job_rate_limits SET paused_until = %s WHERE scope = 'queue'",
            (T0 + timedelta(seconds=20),),
        )
    assert s.next_due(["q"], T0) == pytest.approx(20.0)
    enqueue(conn, 1, "email", "q")  # not held back by the job type's limit, only by q's
    assert s.next_due(["q"], T0) == pytest.approx(20.0)
    with conn.transaction():
        conn.execute("UPDATE job_rate_limits SET paused_until = NULL")
    assert s.next_due(["q"], T0) == 0.0


def _worker(db_url: str, handlers: dict[str, Any], **kw: Any) -> jobs.Worker:
    kw.setdefault("clock", FrozenClock(T0))
    return jobs.Worker(db_url, handlers, {"q": 4}, listen=False, **kw)


def test_a_worker_and_a_batch_worker_start_at_most_the_tokens(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Time stands still: the worker runs what the bucket holds and leaves the rest pending."""
    enqueue(conn, 40, "push")
    enqueue(conn, 40, "bulk")
    limit(conn, job_type="push", per_second=100)  # 5
    limit(conn, job_type="bulk", per_second=200)  # 10
    batches: list[int] = []

    @jobs.batch_handler(max_batch=100)
    def bulk(batch: jobs.Batch) -> None:
        batches.append(len(batch.jobs))

    stats = _worker(db_url, {"push": lambda job: None, "bulk": bulk}).run_until_idle()
    assert stats.outcomes == {"succeeded": 15}
    assert sum(batches) == 10
    assert counts(conn) == {("succeeded", 1): 15, ("pending", 0): 65}


def test_a_running_worker_sees_a_cleared_limit_at_its_next_claim(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    enqueue(conn, 3, "push")
    enqueue(conn, 1, "tick", queue="free")
    limit(conn, queue="q", per_second=100)
    with conn.transaction():  # a provider's pause for a day: nothing of q may start
        conn.execute("UPDATE job_rate_limits SET paused_until = %s", (T0 + timedelta(days=1),))
    ran: dict[str, threading.Event] = {"push": threading.Event(), "tick": threading.Event()}
    worker = jobs.Worker(
        db_url,
        {"push": lambda job: ran["push"].set(), "tick": lambda job: ran["tick"].set()},
        {"q": 2, "free": 1},
        listen=False,
        clock=FrozenClock(T0),
        poll_interval=timedelta(seconds=0.2),
    )
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        # The tick was claimed in the same statement that read q's paused limit.
        assert ran["tick"].wait(10)
        assert not ran["push"].is_set()
        with conn.transaction():  # committed: an open transaction would hold the row lock
            waiting = conn.execute(
                "SELECT count(*) FROM jobs_all WHERE job_type = 'push' AND status = 'pending' "
                "AND attempts = 0"
            ).fetchone()
        assert waiting == (3,)
        with conn.transaction():
            assert clear_limit(conn, queue="q")
        assert ran["push"].wait(10)
    finally:
        worker.stop()
        thread.join(30)


def test_a_first_limit_reaches_a_running_worker_by_its_notification(
    db_url: str, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While no limit exists the worker claims without buckets (job_claim_unlimited). Its
    store's fallback re-read is pushed out of reach here, so only the notification set_limit
    sends at commit can make the worker use the limit: with time frozen, the bucket's one
    token lets exactly one of the three jobs enqueued with it start."""
    monkeypatch.setattr(jobs.store, "POLICY_REFRESH", 3600.0)
    ran: queue.SimpleQueue[int] = queue.SimpleQueue()
    worker = jobs.Worker(
        db_url,
        {"push": lambda job: ran.put(job.payload["i"])},
        {"q": 4},
        clock=FrozenClock(T0),
        # Nothing but a notification wakes it within the test (no poll, reap or heartbeat).
        poll_interval=timedelta(minutes=10),
        reap_interval=timedelta(minutes=10),
        lease=timedelta(minutes=30),
    )
    worker.start()
    try:
        assert worker.wait_started(10) and worker.wait_listening(10)
        with conn.transaction():
            jobs.enqueue(conn, "push", {"i": 0}, queue="q", now=T0)
        assert ran.get(timeout=10) == 0  # claimed: the worker has read that no limit exists
        with psycopg.connect(db_url, autocommit=True) as watch:
            wait_for(watch, "SELECT count(*) = 1 FROM jobs_all WHERE status = 'succeeded'")
            with conn.transaction():
                set_limit(conn, RateLimit(queue="q", per_second=1), now=T0)  # 1 token at T0
                jobs.enqueue_many(
                    conn, [JobSpec("push", {"i": i}, queue="q") for i in (1, 2, 3)], now=T0
                )
            assert ran.get(timeout=10) in (1, 2, 3)
            wait_for(watch, "SELECT count(*) = 2 FROM jobs_all WHERE status = 'succeeded'")
            rows = watch.execute(
                "SELECT status, attempts, count(*) FROM jobs_all GROUP BY 1, 2 ORDER BY 1"
            ).fetchall()
        assert rows == [("pending", 0, 2), ("succeeded", 1, 2)]
    finally:
        worker.stop()
        worker.wait(30)


def test_setting_or_clearing_a_limit_or_a_policy_notifies_the_workers(db_url: str) -> None:
    """Each change sends '~policies' at commit (none before, none for a clear that removed
    nothing); a store told of a change re-reads before its next claim, however recent its
    last read."""
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN tockwork_jobs")

        def heard() -> list[str]:
            return sorted({n.payload for n in listener.notifies(timeout=0.3)})

        with psycopg.connect(db_url) as c:
            set_limit(c, RateLimit(job_type="push", per_second=5))
            assert heard() == []  # not before the commit
            c.commit()
            assert heard() == [POLICIES_CHANGED]
            assert clear_limit(c, job_type="push")
            assert not clear_limit(c, queue="q")
            c.commit()
            assert heard() == [POLICIES_CHANGED]
            jobs.set_queue_policy(c, "q", fair=True)
            c.commit()
            assert heard() == [POLICIES_CHANGED]
            assert not jobs.clear_queue_policy(c, "other")
            c.commit()
            assert heard() == []
            with c.transaction():
                sync_limits(c, [RateLimit(queue="q", per_second=5)])
            assert heard() == ["q", POLICIES_CHANGED]  # the queue limit also wakes q
    with psycopg.connect(db_url, autocommit=True) as a, psycopg.connect(db_url) as c:
        store = PgJobStore(a, policy_refresh=3600.0)
        store.claim({"q": 1}, "w", LEASE, T0)  # reads the policies and limits now
        assert jobs.clear_queue_policy(c, "q")
        c.commit()
        assert store._policies == {"q"}  # cached
        store.policies_changed()
        store.claim({"q": 1}, "w", LEASE, T0)
        assert store._policies == set()


def test_sync_limits_sets_changes_and_clears_only_its_own(conn: psycopg.Connection[Any]) -> None:
    limit(conn, queue="by-hand", per_second=5)
    with conn.transaction():
        declared = [
            RateLimit(queue="q", per_second=10),
            RateLimit(job_type="push", per_second=3, per_minute=100),
        ]
        first = sync_limits(conn, declared)
    assert first.set == ["job_type:push", "queue:q"]  # in lock order
    with conn.transaction():
        again = sync_limits(conn, [RateLimit(queue="q", per_second=10),
                                   RateLimit(job_type="push", per_second=4)])  # fmt: skip
    assert (again.unchanged, again.set, again.cleared) == (["queue:q"], ["job_type:push"], [])
    with conn.transaction():
        last = sync_limits(conn, [])
    assert sorted(last.cleared) == ["job_type:push", "queue:q"]
    assert [(s.limit.name, s.source) for s in list_limits(conn)] == [("by-hand", "api")]


BAD: list[tuple[dict[str, Any], str]] = [
    ({"queue": "q", "per_second": 0}, "per_second"),
    ({"queue": "q", "per_second": -5}, "per_second"),
    ({"queue": "q", "per_second": "10"}, "per_second"),
    ({"queue": "q", "per_second": 1.5}, "per_second"),
    ({"queue": "q", "per_second": True}, "per_second"),
    ({"queue": "q", "per_second": 10**7}, "per_second"),
    ({"queue": "q", "per_second": 10, "per_minute": 0}, "per_minute"),
    ({"queue": "q", "per_second": 10, "per_minute": "x"}, "per_minute"),
    ({"queue": "q", "job_type": "push", "per_second": 10}, "queue"),
    ({"per_second": 10}, "queue"),
    ({"queue": "Bad Queue", "per_second": 10}, "queue"),
    ({"queue": "q\n", "per_second": 10}, "queue"),
    ({"job_type": "", "per_second": 10}, "job_type"),
    ({"job_type": "x" * 201, "per_second": 10}, "job_type"),
    ({"queue": "q", "per_second": 10, "pause_on_rate_limited": "yes"}, "pause_on_rate_limited"),
]


@pytest.mark.parametrize(("kw", "field"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_limits_are_typed_errors_and_write_nothing(
    conn: psycopg.Connection[Any], kw: dict[str, Any], field: str
) -> None:
    with pytest.raises(jobs.InvalidJob) as raised:
        RateLimit(**kw)
    assert raised.value.field == field
    assert isinstance(raised.value, jobs.InvalidInput)
    with pytest.raises(jobs.InvalidJob):
        set_limit(conn, kw)  # type: ignore[arg-type]
    if field in ("queue", "job_type"):
        with pytest.raises(jobs.InvalidJob) as raised:
            clear_limit(conn, queue=kw.get("queue"), job_type=kw.get("job_type"))
        assert raised.value.field == field
    assert list_limits(conn) == []
