"""A relay whose reply is lost after the server committed (issue 13, section 1, the relay's part).

tests/faultproxy.py forwards the relay's connection and loses the reply to one committed request:
the relay sees a dead connection although its claim (or the transaction that settled a batch and
claimed the next events) committed. With a one-hour lease, nothing but the relay finding its own
claim again can finish those events; it must do so under the claim it holds (attempts stays 1),
each event projected once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from jobs import JobSpec, outbox
from jobs.outbox import Event, Projection
from jobs.relay import Relay
from tests.faultproxy import FaultProxy, sql_contains

APP = "relay-behind-proxy"


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        yield c


@pytest.fixture
def proxy(db_url: str) -> Iterator[FaultProxy]:
    with FaultProxy(db_url) as p:
        yield p


def build(event: Event) -> list[JobSpec]:
    return [JobSpec("confirm", {"aggregate": event.aggregate_id, "v": event.payload["v"]})]


def relay(proxy: FaultProxy) -> Relay:
    r = Relay(
        proxy.url,
        [Projection("p", frozenset({"order.changed"}), build)],
        lease=timedelta(hours=1),
        listen=False,
        name="behind-proxy",
        connect_kwargs={"application_name": APP},
    )
    r._pause = lambda seconds: None  # type: ignore[method-assign]  # reconnect at once
    return r


def record(auto: psycopg.Connection[Any], events: list[tuple[str, int]]) -> None:
    with auto.transaction():
        for aggregate, v in events:
            outbox.record(
                auto,
                aggregate_type="order",
                aggregate_id=aggregate,
                event_type="order.changed",
                payload={"v": v},
            )


def settled(auto: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = auto.execute(
        "SELECT count(*) FILTER (WHERE processed_at IS NULL),"
        "       count(*) FILTER (WHERE claimed_at IS NOT NULL),"
        "       array_agg(DISTINCT attempts),"
        "       (SELECT count(*)"
        " FROM jobs_all), (SELECT count(DISTINCT idempotency_key) FROM jobs_all)"
        " FROM outbox_events"
    ).fetchone()
    assert row is not None
    return tuple(row)


def job_order(auto: psycopg.Connection[Any]) -> dict[str, list[int]]:
    order: dict[str, list[int]] = {}
    for aggregate, v in auto.execute(
        "SELECT payload->>'aggregate', (payload->>'v')::int FROM jobs_all ORDER BY id"
    ).fetchall():
        order.setdefault(aggregate, []).append(v)
    return order


def test_a_claim_whose_reply_is_lost_is_finished_not_orphaned(
    auto: psycopg.Connection[Any], proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tockwork")
    record(auto, [("o-1", 1), ("o-2", 1), ("o-3", 1), ("o-1", 2)])
    proxy.drop_reply(sql_contains("pending events for the relay run"), application_name=APP)
    stats = relay(proxy).run_until_idle()
    assert proxy.counts.faults == 1  # the claim committed; its reply was lost
    assert settled(auto) == (0, 0, [1], 4, 4)  # nothing left, one claim each, jobs once
    assert stats.processed == 4
    assert job_order(auto) == {"o-1": [1, 2], "o-2": [1], "o-3": [1]}
    messages = [r.getMessage() for r in caplog.records]
    assert any("3 event(s) of the interrupted batch were still leased" in m for m in messages)


def test_a_settling_commit_whose_reply_is_lost_finishes_the_next_events(
    auto: psycopg.Connection[Any], proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The transaction that marked v1 processed also claimed v2; its reply is lost. After the
    reconnect v1 is not projected again (it is processed) and v2 is found under the claim."""
    caplog.set_level(logging.INFO, logger="tockwork")
    record(auto, [("hot", 1), ("hot", 2), ("hot", 3)])
    proxy.drop_next_commit_reply(application_name=APP)
    stats = relay(proxy).run_until_idle()
    assert proxy.counts.faults == 1
    assert settled(auto) == (0, 0, [1], 3, 3)
    assert job_order(auto) == {"hot": [1, 2, 3]}
    assert stats.processed == 2  # v1's marking was committed, but this relay never saw it
    messages = [r.getMessage() for r in caplog.records]
    assert any("1 event(s) of the interrupted batch were still leased" in m for m in messages)


def test_a_request_lost_before_the_server_saw_it_is_simply_claimed_again(
    auto: psycopg.Connection[Any], proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The other half: the claim never reached the server. The relay finds nothing under its
    claim, says so, and claims afresh."""
    caplog.set_level(logging.INFO, logger="tockwork")
    record(auto, [("o-1", 1), ("o-2", 1)])
    proxy.drop_reply(
        sql_contains("pending events for the relay run"), mode="before", application_name=APP
    )
    stats = relay(proxy).run_until_idle()
    assert proxy.counts.faults == 1
    assert settled(auto) == (0, 0, [1], 2, 2)
    assert stats.processed == 2
    messages = [r.getMessage() for r in caplog.records]
    assert any("no event is still leased to the interrupted batch" in m for m in messages)


def test_a_lost_reply_to_recording_failures_keeps_the_next_events_once(
    auto: psycopg.Connection[Any], proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's settling committed (and claimed hot v2); the reply to the statement that
    records its failure is lost. v2 is finished once, from the lookup, and not again from the
    events the relay had in hand (which would be fenced and logged as a lost lease)."""
    caplog.set_level(logging.INFO, logger="tockwork")
    record(auto, [("hot", 1), ("poison", -1), ("hot", 2)])

    def fussy(event: Event) -> list[JobSpec]:
        if event.payload["v"] < 0:
            raise ValueError("poison")
        return build(event)

    r = relay(proxy)
    r.projections = type(r.projections)([Projection("p", frozenset({"order.changed"}), fussy)])
    proxy.drop_reply(sql_contains("Record failed projections"), application_name=APP)
    stats = r.run_until_idle()
    assert proxy.counts.faults == 1
    assert (stats.processed, stats.fenced) == (2, 0)
    assert job_order(auto) == {"hot": [1, 2]}
    row = auto.execute(
        "SELECT attempts, claimed_at IS NULL, last_error FROM outbox_events"
        " WHERE aggregate_id = 'poison'"
    ).fetchone()
    assert row == (1, True, "ValueError: poison")
    assert not any("lost their lease" in r.getMessage() for r in caplog.records)
