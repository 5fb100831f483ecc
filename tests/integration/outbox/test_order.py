"""Per-aggregate order is the commit order, and one event per aggregate is in flight (issue 15).

Every interleaving here is forced with the database's own waits (a transaction blocked on a row
lock, seen in pg_stat_activity) or with threading.Event inside a projection, never with sleeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from jobs import JobSpec, outbox
from jobs.outbox import Event, Projection
from jobs.queries import query
from jobs.relay import Relay, RelayStats
from tests.processes import wait_for
from timezones.clock import FrozenClock

RELAYS = [1, 2, 4]


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("CREATE TABLE orders (id text PRIMARY KEY, version int NOT NULL DEFAULT 0)")
        yield c


def job(event: Event) -> list[JobSpec]:
    return [JobSpec("confirm", {"aggregate": event.aggregate_id, "v": event.payload["v"]})]


def projection(build: Callable[[Event], list[JobSpec]] = job) -> list[Projection]:
    return [Projection("p", frozenset({"order.changed"}), build)]


def record(conn: psycopg.Connection[Any], aggregate: str, v: int) -> UUID:
    """The documented pattern: change the aggregate's row, record the event (occurred_at: now())."""
    conn.execute("UPDATE orders SET version = %s WHERE id = %s", (v, aggregate))
    return outbox.record(
        conn,
        aggregate_type="order",
        aggregate_id=aggregate,
        event_type="order.changed",
        payload={"v": v},
    )


def one(conn: psycopg.Connection[Any], sql_text: str, *params: Any) -> Any:
    row = conn.execute(sql_text, params or None).fetchone()
    assert row is not None
    return row[0]


def lock_waiting(app: str) -> str:
    """A wait_for condition: the session named ``app`` waits on a lock (two known names)."""
    return {
        "t1-waiter": "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = 't1-waiter' AND wait_event_type = 'Lock'",
        "relay-y": "SELECT count(*) FROM pg_stat_activity"
        " WHERE application_name = 'relay-y' AND wait_event_type = 'Lock'",
    }[app]


def reversed_pair(db_url: str, auto: psycopg.Connection[Any], aggregate: str) -> None:
    """The issue's scenario, serialised on the aggregate's row by a real lock wait.

    T1 begins first (its now(), the default occurred_at, is fixed then); T2 locks the row; T1
    blocks on the row lock; T2 records v1 and commits; T1 gets the lock, records v2 and commits.
    v2 committed second but carries the earlier occurred_at.
    """
    auto.execute("INSERT INTO orders (id) VALUES (%s)", (aggregate,))
    app = "t1-waiter"
    with (
        psycopg.connect(db_url, application_name=app) as t1,
        psycopg.connect(db_url) as t2,
    ):
        t1.execute("SELECT now()")  # T1 has begun
        t2.execute("SELECT 1 FROM orders WHERE id = %s FOR UPDATE", (aggregate,))
        done: list[BaseException | None] = []

        def second() -> None:
            try:
                record(t1, aggregate, 2)  # blocks on T2's row lock
                t1.commit()
                done.append(None)
            except BaseException as exc:
                done.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        wait_for(auto, lock_waiting(app))
        record(t2, aggregate, 1)
        t2.commit()
        thread.join(20)
        assert done == [None]
    # The precondition of the bug: the later commit has the earlier occurred_at.
    rows = auto.execute(
        "SELECT (payload->>'v')::int FROM outbox_events WHERE aggregate_id = %s"
        " ORDER BY occurred_at",
        (aggregate,),
    ).fetchall()
    assert rows == [(2,), (1,)]


def run_concurrently(relays: list[Relay]) -> list[RelayStats]:
    barrier = threading.Barrier(len(relays))
    results: list[RelayStats] = []
    errors: list[BaseException] = []

    def run(relay: Relay) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(relay.run_until_idle())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in relays]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    return results


def job_order(auto: psycopg.Connection[Any]) -> dict[str, list[int]]:
    """Per aggregate, the event versions in the order their jobs were committed (job ids come
    from one sequence, drawn at insert)."""
    order: dict[str, list[int]] = {}
    for aggregate, v in auto.execute(
        "SELECT payload->>'aggregate', (payload->>'v')::int FROM jobs_all ORDER BY id"
    ).fetchall():
        order.setdefault(aggregate, []).append(v)
    return order


@pytest.mark.parametrize("relays", RELAYS)
def test_order_is_the_commit_order_not_the_start_order(
    auto: psycopg.Connection[Any], db_url: str, relays: int
) -> None:
    aggregates = [f"o-{i}" for i in range(6)]
    for aggregate in aggregates:
        reversed_pair(db_url, auto, aggregate)
    stats = run_concurrently(
        [Relay(db_url, projection(), name=f"r{i}", listen=False) for i in range(relays)]
    )
    assert sum(s.processed for s in stats) == 2 * len(aggregates)
    assert job_order(auto) == {a: [1, 2] for a in aggregates}


@pytest.mark.parametrize("relays", RELAYS)
def test_an_event_committed_while_its_predecessor_is_in_flight_waits_for_it(
    auto: psycopg.Connection[Any], db_url: str, relays: int
) -> None:
    """v1 is claimed by a slow projection; v2 commits with the earlier occurred_at meanwhile.
    No relay may claim v2 until v1 is projected."""
    auto.execute("INSERT INTO orders (id) VALUES ('o-1')")
    entered, release = threading.Event(), threading.Event()

    def slow(event: Event) -> list[JobSpec]:
        if event.payload["v"] == 1:
            entered.set()
            assert release.wait(30)
        return job(event)

    with psycopg.connect(db_url) as t1, psycopg.connect(db_url) as t2:
        t1.execute("SELECT now()")  # T1 begins before v1 commits: the earlier occurred_at
        record(t2, "o-1", 1)
        t2.commit()
        first = Relay(db_url, projection(slow), name="first", listen=False)
        stats: list[RelayStats] = []
        thread = threading.Thread(target=lambda: stats.append(first.run_until_idle()))
        thread.start()
        try:
            assert entered.wait(20)
            record(t1, "o-1", 2)
            t1.commit()
            assert one(
                auto,
                "SELECT array_agg((payload->>'v')::int ORDER BY occurred_at) FROM outbox_events",
            ) == [2, 1]  # v2 began first: the earlier occurred_at
            others = [
                Relay(db_url, projection(), name=f"other{i}", listen=False)
                for i in range(relays - 1)
            ]
            if others:
                assert [s.claimed for s in run_concurrently(others)] == [0] * len(others)
            assert (
                one(
                    auto,
                    "SELECT count(*) FROM outbox_events"
                    " WHERE claimed_at IS NOT NULL AND (payload->>'v')::int = 2",
                )
                == 0
            )
        finally:
            release.set()
            thread.join(30)
    # v1, then v2: by the next round's general claim (v1 had no successor when it was claimed,
    # so its settling probed for none)
    assert stats[0].processed == 2
    assert job_order(auto) == {"o-1": [1, 2]}


def test_one_event_in_flight_per_aggregate_after_lease_expiry_and_takeover(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    with auto.transaction():
        auto.execute("INSERT INTO orders (id) VALUES ('o-1')")
        record(auto, "o-1", 1)
        record(auto, "o-1", 2)
    now: datetime = one(auto, "SELECT now()")
    early, late = FrozenClock(now), FrozenClock(now + timedelta(minutes=5))
    entered = {1: threading.Event(), 2: threading.Event()}
    release = {1: threading.Event(), 2: threading.Event()}

    def slow(event: Event) -> list[JobSpec]:
        if event.payload["v"] == 1:
            entered[event.attempt].set()
            assert release[event.attempt].wait(30)
        return job(event)

    lease = timedelta(minutes=1)
    stale = Relay(db_url, projection(slow), clock=early, lease=lease, name="a", listen=False)
    taker = Relay(db_url, projection(slow), clock=late, lease=lease, name="b", listen=False)
    results: dict[str, RelayStats] = {}
    threads = [
        threading.Thread(target=lambda: results.update(a=stale.run_until_idle())),
        threading.Thread(target=lambda: results.update(b=taker.run_until_idle())),
    ]
    threads[0].start()
    try:
        assert entered[1].wait(20)  # A holds v1 (attempt 1) and stalls past its lease
        threads[1].start()
        assert entered[2].wait(20)  # B took v1 over (attempt 2) and stalls too
        claimed = "SELECT count(*) FROM outbox_events WHERE claimed_at IS NOT NULL"
        assert one(auto, claimed) == 1
        # A third relay, past A's lease and inside B's: nothing of o-1 is claimable.
        third = Relay(db_url, projection(), clock=late, lease=timedelta(minutes=1), listen=False)
        assert third.run_until_idle().claimed == 0
        assert one(auto, claimed) == 1
        release[2].set()
        threads[1].join(30)
        assert (results["b"].processed, results["b"].fenced) == (2, 0)  # v1, then v2
    finally:
        release[1].set()
        release[2].set()
        for t in threads:
            if t.ident is not None:
                t.join(30)
    assert (results["a"].processed, results["a"].fenced) == (0, 1)
    assert job_order(auto) == {"o-1": [1, 2]}
    assert one(auto, "SELECT count(*) FROM jobs_all") == 2


def test_a_retried_dead_event_waits_for_the_event_in_flight(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """The aggregate's current event is the claimed one: a dead event put back by an operator
    while a later event is in flight is not claimed beside it; it goes next, before v3."""
    with auto.transaction():
        auto.execute("INSERT INTO orders (id) VALUES ('o-1')")
        dead = record(auto, "o-1", 1)
        record(auto, "o-1", 2)
        record(auto, "o-1", 3)
    fixed = threading.Event()
    entered, release = threading.Event(), threading.Event()

    def build(event: Event) -> list[JobSpec]:
        v = event.payload["v"]
        if v == 1 and not fixed.is_set():
            raise ValueError("poison")
        if v == 2:
            entered.set()
            assert release.wait(30)
        return job(event)

    relay = Relay(db_url, projection(build), max_attempts=1, name="r", listen=False)
    stats: list[RelayStats] = []
    thread = threading.Thread(target=lambda: stats.append(relay.run_until_idle()))
    thread.start()
    try:
        assert entered.wait(20)  # v1 is dead; v2 is in flight
        fixed.set()
        assert outbox.retry_dead(auto, [dead]) == [dead]
        other = Relay(db_url, projection(build), name="other", listen=False)
        assert other.run_until_idle().claimed == 0
    finally:
        release.set()
        thread.join(30)
    assert stats[0].dead == 1
    assert job_order(auto) == {"o-1": [2, 1, 3]}


def test_two_claims_racing_on_one_aggregate_let_one_win(
    auto: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Without serialisation on the aggregate, two claims can pick two events of it from
    snapshots a commit apart; the unique index makes the second fail, and the relay claims
    again instead of failing."""
    caplog.set_level(logging.DEBUG, logger="tockwork.relay")
    auto.execute("INSERT INTO orders (id) VALUES ('o-1')")
    with psycopg.connect(db_url) as ta, psycopg.connect(db_url) as claimer:
        outbox.record(
            ta,
            aggregate_type="order",
            aggregate_id="o-1",
            event_type="order.changed",
            payload={"v": 1},
        )  # drawn first (lower seq), committed last: not serialised with v2
        with auto.transaction():
            record(auto, "o-1", 2)
        # Relay X's claim, still uncommitted: it sees only v2, so v2 is the head it takes.
        x = claimer.execute(
            query("outbox_event_claim"),
            {
                "limit": 10,
                "lease": timedelta(minutes=1),
                "relay": "x",
                "claim": uuid4(),
                "now": None,
            },
        ).fetchall()
        assert [r[6]["v"] for r in x] == [2]
        ta.commit()  # v1 (lower seq) is visible now and is the head in a new snapshot
        y = Relay(
            db_url,
            projection(),
            name="y",
            listen=False,
            connect_kwargs={"application_name": "relay-y"},
        )
        results: list[RelayStats] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                results.append(y.run_until_idle())
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        wait_for(auto, lock_waiting("relay-y"))  # Y waits on X's index entry
        claimer.commit()
        thread.join(30)
    assert errors == []
    assert results[0].claimed == 0
    assert any("raced" in r.getMessage() for r in caplog.records)
    assert one(auto, "SELECT count(*) FROM outbox_events WHERE claimed_at IS NOT NULL") == 1


def test_the_unique_index_refuses_a_second_claim_on_an_aggregate(
    auto: psycopg.Connection[Any],
) -> None:
    with auto.transaction():
        auto.execute("INSERT INTO orders (id) VALUES ('o-1')")
        record(auto, "o-1", 1)
        record(auto, "o-1", 2)
    auto.execute("UPDATE outbox_events SET claimed_at = now() WHERE (payload->>'v')::int = 1")
    with pytest.raises(psycopg.errors.UniqueViolation) as info:
        auto.execute("UPDATE outbox_events SET claimed_at = now() WHERE (payload->>'v')::int = 2")
    assert info.value.diag.constraint_name == "outbox_aggregate_claimed_idx"


def test_a_hot_aggregate_drains_without_waiting_for_a_poll(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """300 events on one aggregate, a running relay that polls once an hour and does not
    LISTEN: only claiming each next event at once can drain them."""
    with auto.transaction():
        auto.execute("INSERT INTO orders (id) VALUES ('hot')")
        for v in range(300):
            record(auto, "hot", v)
    relay = Relay(db_url, projection(), poll_interval=timedelta(hours=1), listen=False)
    relay.start()
    try:
        assert relay.wait_started(10)
        wait_for(auto, "SELECT count(*) = 300 FROM jobs_all", timeout=60)
    finally:
        relay.stop()
        assert relay.wait(30)
    assert job_order(auto) == {"hot": list(range(300))}
    assert relay.stats.batches == 300  # one event per round: never two of one aggregate


def test_deep_aggregates_in_hand_do_not_starve_the_others(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """A relay whose batch is full of the next events of deep aggregates still takes events of
    other aggregates each round (a quarter batch, at least one), not only at the next poll."""
    with auto.transaction():
        for aggregate in ("a", "b", "c"):
            auto.execute("INSERT INTO orders (id) VALUES (%s)", (aggregate,))
        for v in range(40):
            record(auto, "a", v)
            record(auto, "b", v)
        record(auto, "c", 0)  # the last seq: behind 80 events of a and b
    relay = Relay(
        db_url, projection(), batch_size=2, poll_interval=timedelta(hours=1), listen=False
    )
    relay.start()
    try:
        assert relay.wait_started(10)
        wait_for(auto, "SELECT count(*) = 81 FROM jobs_all", timeout=60)
    finally:
        relay.stop()
        assert relay.wait(30)
    aggregates = [
        r[0] for r in auto.execute("SELECT payload->>'aggregate' FROM jobs_all ORDER BY id")
    ]
    # Round 1 claims a0 and b0 (full); round 2 holds a1, b1 and claims c0 beside them.
    assert aggregates.index("c") < 5
    assert job_order(auto) == {"a": list(range(40)), "b": list(range(40)), "c": [0]}


class StopAfterSettling(Relay):
    """Asks to stop right after the settling of event ``v`` (which claimed ``v + 1``)."""

    stop_after = 10

    def _settle(self, conn: psycopg.Connection[Any], events: list[Event], *args: Any) -> None:
        super()._settle(conn, events, *args)
        if any(e.payload["v"] == self.stop_after for e in events):
            self.stop()


def test_a_relay_stopped_mid_drain_leaves_nothing_claimed(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """Each round's settling claims the next event; a stop between rounds finishes that event
    (its settling claims no more) instead of leaving it leased until the lease expires."""
    with auto.transaction():
        auto.execute("INSERT INTO orders (id) VALUES ('hot')")
        for v in range(50):
            record(auto, "hot", v)
    relay = StopAfterSettling(db_url, projection(), poll_interval=timedelta(hours=1), listen=False)
    relay.start()
    assert relay.wait(30)
    assert one(auto, "SELECT count(*) FROM outbox_events WHERE claimed_at IS NOT NULL") == 0
    assert job_order(auto) == {"hot": list(range(12))}  # v11 was in hand when it stopped


def test_after_a_lost_connection_the_relay_finishes_what_its_claim_leased(
    auto: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection dies after the claim committed (here: its backend is terminated inside
    the projection). With a one-hour lease, only finding its own claim again lets the relay
    finish the events: under the same claim (attempts stays 1), not a new one."""
    caplog.set_level(logging.INFO, logger="tockwork")
    with auto.transaction():
        for i in range(3):
            auto.execute("INSERT INTO orders (id) VALUES (%s)", (f"o-{i}",))
            record(auto, f"o-{i}", 1)
    killed: list[bool] = []

    def build(event: Event) -> list[JobSpec]:
        if not killed:
            killed.append(True)
            auto.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'relay-lost'"
            )
        return job(event)

    relay = Relay(
        db_url,
        projection(build),
        lease=timedelta(hours=1),
        listen=False,
        name="lost",
        connect_kwargs={"application_name": "relay-lost"},
    )
    relay._pause = lambda seconds: None  # type: ignore[method-assign]
    stats = relay.run_until_idle()
    assert killed == [True]
    assert stats.processed == 3
    assert one(auto, "SELECT array_agg(DISTINCT attempts) FROM outbox_events") == [1]
    assert one(auto, "SELECT count(*) FROM jobs_all") == 3
    messages = [r.getMessage() for r in caplog.records]
    assert any("3 event(s) of the interrupted batch were still leased" in m for m in messages)
