"""The relay against a real PostgreSQL: exactly once, fencing, poison events, parallel relays."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

import jobs
from jobs import JobSpec, outbox
from jobs.outbox import Event, Projection, Projections
from jobs.queries import query
from jobs.relay import Relay
from jobs.retry import RetryPolicy
from jobs.service import Reconnect
from tests.integration.outbox.apps import projections as app
from tests.processes import wait_for
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


def record(conn: psycopg.Connection[Any], aggregate: str, event_type: str, n: int = 0) -> UUID:
    return outbox.record(
        conn,
        aggregate_type="order",
        aggregate_id=aggregate,
        event_type=event_type,
        payload={"n": n},
        occurred_at=T0,
    )


def one(conn: psycopg.Connection[Any], sql_text: str, *params: Any) -> Any:
    row = conn.execute(sql_text, params or None).fetchone()
    assert row is not None
    return row[0]


def test_each_event_becomes_its_jobs_once(auto: psycopg.Connection[Any], db_url: str) -> None:
    org = UUID(int=1)
    ids = [record(auto, f"o-{i}", "order.placed", i) for i in range(5)]
    outbox.record(
        auto,
        aggregate_type="order",
        aggregate_id="o-x",
        event_type="nobody.listens",
        payload={},
        organization_id=org,
        occurred_at=T0,
    )
    relay = Relay(db_url, app, clock=FrozenClock(T0), listen=False)
    stats = relay.run_until_idle()
    assert (stats.claimed, stats.processed, stats.jobs_created) == (6, 6, 5)
    assert one(auto, "SELECT count(*) FROM outbox_events WHERE processed_at = %s", T0) == 6
    keys = [
        r[0]
        for r in auto.execute(
            "SELECT idempotency_key FROM jobs_all ORDER BY (payload->>'n')::int"
        ).fetchall()
    ]
    assert keys == [f"outbox:{i}:confirm:0" for i in ids]
    # A second pass finds nothing to do.
    assert Relay(db_url, app, clock=FrozenClock(T0), listen=False).run_until_idle().claimed == 0


def test_a_relay_that_lost_its_lease_cannot_mark_or_enqueue(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """Relay A claims and stalls past its lease; B takes over and finishes; A is fenced."""
    event_id = record(auto, "o-1", "order.placed")
    late = FrozenClock(T0 + timedelta(minutes=5))
    calls: list[int] = []

    def slow(event: Event) -> list[JobSpec]:
        calls.append(event.attempt)
        if event.attempt == 1:
            # While A is "stuck" here, its lease expires and B takes the event over.
            taken = Relay(db_url, projections, clock=late, listen=False).run_until_idle()
            assert taken.processed == 1
        return [JobSpec("confirm", {"n": 1})]

    projections = Projections([Projection("slow", frozenset({"order.placed"}), slow)])
    stale = Relay(db_url, projections, clock=FrozenClock(T0), lease=timedelta(minutes=1))
    stale.listen = False
    stats = stale.run_until_idle()
    assert calls == [1, 2]
    assert (stats.processed, stats.fenced, stats.jobs_created) == (0, 1, 0)
    assert one(auto, "SELECT count(*) FROM jobs_all") == 1
    assert one(auto, "SELECT attempts FROM outbox_events WHERE id = %s", event_id) == 2


def _rows_read(node: dict[str, Any]) -> int:
    """Rows an EXPLAIN ANALYZE plan read from outbox_events and compared in joins (its scans'
    rows, kept and filtered out, and its joins' rows filtered out, over all their loops)."""
    loops = node.get("Actual Loops", 1)
    read = 0
    if node.get("Relation Name") == "outbox_events":
        read += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    read += node.get("Rows Removed by Join Filter", 0) * loops
    return int(read) + sum(_rows_read(child) for child in node.get("Plans", []))


def test_marking_a_batch_reads_its_own_events_whatever_the_statistics(
    auto: psycopg.Connection[Any],
) -> None:
    """The relay's mark, prepared (the generic plan psycopg's prepared statements come to),
    on a table a burst has just filled while its statistics still say empty: it reads the
    batch's events, not every pending event once per event of the batch (the join it
    replaced read 2,000 x 100 rows here, 370 us of server CPU a fact in bench/webhooks.py)."""
    auto.execute("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
    auto.execute("VACUUM ANALYZE outbox_events")  # the statistics of the empty table
    with auto.transaction():
        for i in range(2000):
            record(auto, f"o-{i}", "order.placed", i)
    claimed = auto.execute(
        query("outbox_event_claim"),
        {"limit": 100, "lease": timedelta(minutes=1), "relay": "r", "claim": UUID(int=7),
         "now": None},
    ).fetchall()  # fmt: skip
    assert len(claimed) == 100
    mark = query("outbox_event_mark_processed")
    for name, number in (("now", 1), ("ids", 2), ("tokens", 3)):
        mark = mark.replace(f"%({name})s", f"${number}").replace(f"%({name})b", f"${number}")
    auto.execute("SET plan_cache_mode = force_generic_plan")
    auto.execute(f"PREPARE mark AS {mark}")
    explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE mark(NULL, {}::uuid[], {}::int[])")
    ids, tokens = [str(r[0]) for r in claimed], [r[8] for r in claimed]
    row = auto.execute(explain.format(sql.Literal(ids), sql.Literal(tokens))).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    assert plan["Actual Rows"] == 100
    assert _rows_read(plan) <= 300, plan  # a probe and an update per event


def test_the_claims_read_the_head_of_the_stream_when_the_statistics_say_all_is_processed(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    """The general claim and the next-event claim, with statistics taken after a relay
    processed every event (a table that retention keeps is mostly processed events) and 5,000
    events recorded since: each reads what it claims, not every pending event. Before jobs
    migration 0022 the general claim read 505,000 rows here (every pending event probed for
    every one claimed), 26-100 ms a claim of 100."""
    auto.execute("ALTER TABLE outbox_events SET (autovacuum_enabled = off)")
    for burst in range(2):
        with auto.transaction():
            for i in range(5000):
                record(auto, f"o-{i}", "order.placed", i)
        if burst == 0:
            assert Relay(db_url, [], listen=False).run_until_idle().processed == 5000
            auto.execute("ANALYZE outbox_events")
            auto.execute("DELETE FROM outbox_events")
    params = {"limit": 100, "lease": timedelta(minutes=1), "relay": "r", "claim": UUID(int=7),
              "now": None}  # fmt: skip
    explain = "EXPLAIN (ANALYZE, FORMAT JSON) "
    with auto.transaction():
        row = auto.execute(explain + query("outbox_event_claim"), params).fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        assert plan["Actual Rows"] == 100
        # Per event claimed: a step of the walk, its row, its aggregate's pending events (for
        # the claimed one and for the head: its own row twice), the row leased.
        assert _rows_read(plan) <= 700, plan
        # The next events of 100 aggregates settled (none has one): a probe each.
        aggregates = [f"o-{i}" for i in range(4000, 4100)]
        auto.execute(
            "UPDATE outbox_events SET processed_at = now() WHERE aggregate_id = ANY(%s)",
            (aggregates,),
        )
        row = auto.execute(
            explain + query("outbox_event_claim_next"),
            {**params, "types": ["order"] * 100, "ids": aggregates},
        ).fetchone()
        assert row is not None
        plan = row[0][0]["Plan"]
        assert plan["Actual Rows"] == 0
        assert _rows_read(plan) <= 300, plan


def test_a_claim_says_which_aggregates_have_a_later_event_waiting(
    auto: psycopg.Connection[Any],
) -> None:
    """The lease's last column ("more"): whether the claimed event's aggregate had a later
    pending event. The relay probes for a next event, when it settles, only where it is true;
    a later event committed after the claim is left to the next general claim."""
    record(auto, "deep", "order.placed", 1)
    record(auto, "deep", "order.placed", 2)
    record(auto, "single", "order.placed", 1)
    done = record(auto, "done", "order.placed", 1)
    record(auto, "done", "order.placed", 2)
    auto.execute("UPDATE outbox_events SET processed_at = %s WHERE id = %s", (T0, done))
    params = {"limit": 10, "lease": timedelta(minutes=1), "relay": "r", "claim": UUID(int=7),
              "now": T0}  # fmt: skip
    rows = auto.execute(query("outbox_event_claim"), params).fetchall()
    assert {(r[3], r[6]["n"], r[10]) for r in rows} == {
        ("deep", 1, True),
        ("single", 1, False),
        ("done", 2, False),  # the processed event before it is no later event
    }


def test_a_poison_event_retries_then_is_set_aside_without_stalling_the_stream(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    poison = record(auto, "o-1", "order.poison")
    after_poison = record(auto, "o-1", "order.placed", 1)  # same aggregate: waits its turn
    others = [record(auto, f"o-{i}", "order.placed", i) for i in range(2, 6)]
    clock = FrozenClock(T0)

    def relay() -> Relay:
        return Relay(db_url, app, clock=clock, listen=False, max_attempts=3)

    stats = relay().run_until_idle()
    assert (stats.processed, stats.retried, stats.dead) == (4, 1, 0)
    assert one(auto, "SELECT count(*) FROM jobs_all") == 4  # the other aggregates flowed past
    row = auto.execute(
        "SELECT attempts, available_at, last_error FROM outbox_events WHERE id = %s", (poison,)
    ).fetchone()
    assert row is not None
    attempts: int = row[0]
    available_at: datetime = row[1]
    error: str = row[2]
    assert attempts == 1
    assert available_at > T0
    assert error.startswith("ValueError: cannot project order o-1")
    assert len(error.encode()) <= 1024

    # Retried after its backoff; the third failure sets it aside.
    for expected_dead in (0, 1):
        clock.advance(hours=1)
        stats = relay().run_until_idle()
        assert stats.dead == expected_dead
    dead = outbox.dead_events(auto)
    assert [(d.id, d.attempts) for d in dead] == [(poison, 3)]
    assert dead[0].last_error is not None and "cannot project" in dead[0].last_error
    # Set aside, it no longer holds back the later event of its aggregate (same last run).
    assert one(auto, "SELECT processed_at FROM outbox_events WHERE id = %s", after_poison)
    assert one(auto, "SELECT count(*) FROM jobs_all") == 5
    assert all(one(auto, "SELECT processed_at FROM outbox_events WHERE id=%s", i) for i in others)
    assert outbox.stats(auto, now=clock.now()).pending == 0

    # An operator puts it back after a fix; here the fix is a projection that now succeeds.
    assert outbox.retry_dead(auto, [str(poison)], now=clock.now()) == [poison]
    fixed = Projections([Projection("poison", frozenset({"order.poison"}), lambda e: [])])
    assert Relay(db_url, fixed, clock=clock, listen=False).run_until_idle().processed == 1
    assert outbox.dead_events(auto) == []


def test_a_bad_job_spec_fails_only_its_event(auto: psycopg.Connection[Any], db_url: str) -> None:
    bad = record(auto, "o-1", "order.placed", -1)
    good = record(auto, "o-2", "order.placed", 2)

    def build(event: Event) -> list[Any]:
        if event.payload["n"] < 0:
            return [JobSpec("confirm", queue="Not A Queue")]
        return [JobSpec("confirm", {"n": event.payload["n"]})]

    projections = [Projection("p", frozenset({"order.placed"}), build)]
    stats = Relay(db_url, projections, clock=FrozenClock(T0), listen=False).run_until_idle()
    assert (stats.processed, stats.retried) == (1, 1)
    assert one(auto, "SELECT processed_at IS NOT NULL FROM outbox_events WHERE id=%s", good)
    error = one(auto, "SELECT last_error FROM outbox_events WHERE id = %s", bad)
    assert "queue" in error


def test_four_relays_over_ten_thousand_events_project_each_once_in_aggregate_order(
    auto: psycopg.Connection[Any], db_url: str
) -> None:
    # 1,000 aggregates of 10 events; n orders the events of one aggregate.
    auto.execute(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload,"
        " occurred_at, available_at)"
        " SELECT gen_random_uuid(), 'order', (g %% 1000)::text, 'order.placed',"
        "        jsonb_build_object('n', g / 1000), %s, %s"
        " FROM generate_series(0, 9999) AS g ORDER BY g",
        (T0, T0),
    )
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    results: list[jobs.relay.RelayStats] = []

    def run(i: int) -> None:
        try:
            relay = Relay(
                db_url, app, batch_size=100, clock=FrozenClock(T0), name=f"r{i}", listen=False
            )
            barrier.wait(timeout=10)
            results.append(relay.run_until_idle())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert one(auto, "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL") == 0
    assert sum(r.processed for r in results) == 10_000
    assert sum(r.jobs_created for r in results) == 10_000
    assert sum(1 for r in results if r.processed) >= 2  # the work really was shared
    assert one(auto, "SELECT count(*) FROM jobs_all") == 10_000
    assert one(auto, "SELECT count(DISTINCT idempotency_key) FROM jobs_all") == 10_000
    assert one(auto, "SELECT count(DISTINCT payload->>'event') FROM jobs_all") == 10_000
    # Per aggregate, jobs were created in event order (job ids come from one sequence).
    out_of_order = one(
        auto,
        "SELECT count(*) FROM ("
        " SELECT id < lag(id) OVER (PARTITION BY payload->>'aggregate'"
        "                          ORDER BY (payload->>'n')::int) AS back FROM jobs_all"
        ") AS t WHERE back",
    )
    assert out_of_order == 0


def test_a_listening_relay_wakes_on_commit(auto: psycopg.Connection[Any], db_url: str) -> None:
    relay = Relay(db_url, app, poll_interval=timedelta(seconds=60))
    thread = threading.Thread(target=relay.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert relay.wait_listening(10)
        # The relay's first claim ran (empty) and it now sleeps for 60 s unless woken.
        record(auto, "o-1", "order.placed")
        deadline = threading.Event()
        for _ in range(500):
            if one(auto, "SELECT count(*) FROM jobs_all"):
                break
            deadline.wait(0.02)
        assert one(auto, "SELECT count(*) FROM jobs_all") == 1
    finally:
        relay.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_relay_arguments_are_validated(db_url: str) -> None:
    with pytest.raises(jobs.InvalidJob, match="batch_size"):
        Relay(db_url, app, batch_size=0)
    with pytest.raises(jobs.InvalidJob, match="lease"):
        Relay(db_url, app, lease=timedelta(0))
    with pytest.raises(jobs.InvalidJob, match="max_attempts"):
        Relay(db_url, app, max_attempts=0)


def test_a_running_relay_rides_out_a_lost_connection(
    auto: psycopg.Connection[Any], db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    relay = Relay(
        db_url,
        app,
        listen=False,
        poll_interval=timedelta(seconds=0.02),
        connect_kwargs={"application_name": "tockwork-test-relay"},
        name="r1",
        reconnect=Reconnect(backoff=RetryPolicy(base=timedelta(seconds=0.01), jitter=0.0)),
    )
    relay.start()
    try:
        assert relay.wait_started(10)
        wait_for(
            auto,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tockwork-test-relay'",
        )
        auto.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'tockwork-test-relay'"
        )
        record(auto, "o-1", "order.placed")  # reaches the relay on its new connection only
        wait_for(auto, "SELECT count(*) FROM jobs_all")
    finally:
        relay.stop()
        assert relay.wait(10)
    assert (relay.stats.processed, relay.stats.jobs_created) == (1, 1)
    lost = [r.getMessage() for r in caplog.records if "connection lost" in r.getMessage()]
    restored = [r.getMessage() for r in caplog.records if "connection restored" in r.getMessage()]
    assert [m.split(":")[0] for m in lost] == ["relay r1"]
    assert len(restored) == 1
