"""The device registry (scheduler.devices) on a real PostgreSQL.

Invariants, each checked below: a (channel, token) is one row, which a registration gives to
the latest subject and organization and makes valid again; registering it again unchanged
writes nothing; the delivery read returns exactly the valid devices of each asked (organization,
subject) pair, no organization being a value of its own, in one statement; an invalidation marks
a device once and records exactly one ``device.invalidated`` fact for it, whoever races, and the
fact holds no full token; ``last_success_at`` moves at most once an hour, and never makes the
delivery path wait for a lock; the async forms give what the sync ones give.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from jobs.internal import Steps, steps
from scheduler.devices import (
    Device,
    add_device,
    add_device_async,
    devices_for,
    devices_for_async,
    devices_for_steps,
    get_device,
    get_device_async,
    invalidate_devices,
    invalidate_devices_async,
    list_devices,
    list_devices_async,
    mark_succeeded,
    mark_succeeded_async,
    remove_device,
    remove_device_async,
)
from scheduler.queries import query

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
ORG_A = uuid.UUID("0193a8e4-0000-7000-8000-00000000000a")
ORG_B = uuid.UUID("0193a8e4-0000-7000-8000-00000000000b")
TOKEN = "fcm-token-" + "x" * 140 + "ABC123"  # FCM tokens are about 160 characters
R = TypeVar("R")
Conn = psycopg.Connection[Any]


def xmin(conn: Conn, device_id: int) -> int:
    """The row version's creating transaction: it changes with every write of the row."""
    row = conn.execute("SELECT xmin::text::bigint FROM devices WHERE id = %s", (device_id,))
    value = row.fetchone()
    assert value is not None
    result: int = value[0]
    return result


def facts(conn: Conn) -> list[tuple[str, str, str, Any, uuid.UUID | None]]:
    rows = conn.execute(
        "SELECT aggregate_type, aggregate_id, event_type, payload, organization_id "
        "FROM outbox_events ORDER BY seq"
    ).fetchall()
    return [tuple(r) for r in rows]


def tap(inner: Steps[R], seen: list[Any]) -> Steps[R]:
    """``inner``, each step it yields recorded in ``seen``."""
    try:
        step = next(inner)
        while True:
            seen.append(step)
            step = inner.send((yield step))
    except StopIteration as stop:
        result: R = stop.value
        return result


def test_add_returns_the_device_and_its_repr_hides_the_token(conn: Conn) -> None:
    device = add_device(conn, "user-1", "fcm", TOKEN, platform="android", now=T0)
    assert isinstance(device, Device)
    assert (device.subject, device.channel, device.token, device.platform) == (
        "user-1", "fcm", TOKEN, "android",
    )  # fmt: skip
    assert device.organization_id is None and device.valid
    assert device.created_at == T0 and device.updated_at == T0
    assert device.last_success_at is None and device.invalid_reason is None
    assert TOKEN not in repr(device) and TOKEN not in str(device)
    assert "…ABC123" in repr(device)
    assert get_device(conn, device.id) == device
    assert get_device(conn, device.id + 1000) is None


def test_a_registered_token_is_reassigned_and_made_valid_again(conn: Conn) -> None:
    first = add_device(conn, "user-1", "fcm", TOKEN, platform="android", now=T0)
    assert invalidate_devices(conn, [(first.id, "unregistered", "UNREGISTERED")], now=T0) == 1
    assert get_device(conn, first.id).valid is False  # type: ignore[union-attr]
    later = T0 + timedelta(days=1)
    again = add_device(conn, "user-2", "fcm", TOKEN, organization_id=str(ORG_A), now=later)
    assert again.id == first.id  # one row per (channel, token)
    assert (again.subject, again.organization_id) == ("user-2", ORG_A)
    assert again.valid and again.invalid_reason is None
    assert again.platform == "android"  # kept: none was given
    assert again.created_at == T0 and again.updated_at == later
    ios = add_device(conn, "user-2", "fcm", TOKEN, organization_id=ORG_A, platform="ios", now=later)
    assert ios.id == first.id and ios.platform == "ios"
    # The same token text on another channel is another device.
    other = add_device(conn, "user-2", "apns", TOKEN, now=later)
    assert other.id != first.id
    assert conn.execute("SELECT count(*) FROM devices").fetchone() == (2,)


def test_registering_again_unchanged_writes_nothing(conn: Conn) -> None:
    device = add_device(conn, "user-1", "fcm", TOKEN, platform="android", now=T0)
    conn.commit()
    before = xmin(conn, device.id)
    conn.commit()
    same = add_device(conn, "user-1", "fcm", TOKEN, platform="android", now=T0 + timedelta(days=1))
    conn.commit()
    assert same == device  # updated_at did not move either
    assert xmin(conn, device.id) == before
    same = add_device(conn, "user-1", "fcm", TOKEN, now=T0 + timedelta(days=1))  # platform kept
    conn.commit()
    assert xmin(conn, device.id) == before
    moved = add_device(conn, "user-9", "fcm", TOKEN, now=T0 + timedelta(days=1))
    conn.commit()
    assert moved.subject == "user-9" and xmin(conn, device.id) != before  # the check can fail


def test_list_pages_by_id_and_filters(conn: Conn) -> None:
    made = [
        add_device(conn, "u1", "fcm", f"token-{i:04d}-abcdef", organization_id=org, now=T0)
        for i, org in enumerate([None, ORG_A, ORG_A, None, ORG_B, ORG_A])
    ]
    invalidate_devices(conn, [(made[2].id, "gone", "UNREGISTERED")], now=T0)
    valid_ids = [m.id for m in made if m.id != made[2].id]
    pages: list[list[int]] = []
    after = None
    while True:
        page = list_devices(conn, after=after, limit=2)
        if not page:
            break
        pages.append([p.id for p in page])
        after = page[-1].id
    assert pages == [valid_ids[0:2], valid_ids[2:4], valid_ids[4:5]]
    everything = list_devices(conn, include_invalid=True)
    assert [x.id for x in everything] == [m.id for m in made]
    assert [x.id for x in list_devices(conn, organization_id=ORG_A, include_invalid=True)] == [
        made[1].id, made[2].id, made[5].id,
    ]  # fmt: skip
    # None is a value: the devices of no organization; leaving the filter out lists all.
    assert [x.id for x in list_devices(conn, organization_id=None)] == [made[0].id, made[3].id]
    add_device(conn, "u2", "apns", "another-token-123456", now=T0)
    assert [x.subject for x in list_devices(conn, subject="u2")] == ["u2"]
    assert len(list_devices(conn, subject="u1", include_invalid=True)) == 6


def test_remove(conn: Conn) -> None:
    device = add_device(conn, "u1", "fcm", TOKEN, now=T0)
    assert remove_device(conn, device.id) is True
    assert remove_device(conn, device.id) is False
    assert get_device(conn, device.id) is None


def test_devices_for_a_batch_in_one_statement(conn: Conn) -> None:
    a1 = add_device(conn, "alice", "fcm", "alice-phone-token-1", organization_id=ORG_A, now=T0)
    a2 = add_device(conn, "alice", "apns", "alice-tablet-token-2", organization_id=ORG_A, now=T0)
    b1 = add_device(conn, "alice", "fcm", "alice-other-org-tok", organization_id=ORG_B, now=T0)
    n1 = add_device(conn, "alice", "fcm", "alice-no-org-token", now=T0)
    dead = add_device(conn, "bob", "fcm", "bob-dead-token-0001", organization_id=ORG_A, now=T0)
    invalidate_devices(conn, [(dead.id, "unregistered", "UNREGISTERED")], now=T0)
    many = [(ORG_A, f"user-{i}") for i in range(500)]
    asked = [(ORG_A, "alice"), (ORG_B, "alice"), (None, "alice"), (ORG_A, "bob"), *many]
    seen: list[Any] = []
    found = steps.on(conn, tap(devices_for_steps(asked), seen))
    assert len(seen) == 1  # one statement for 504 pairs
    assert [x.id for x in found[(ORG_A, "alice")]] == [a1.id, a2.id]
    assert [x.id for x in found[(ORG_B, "alice")]] == [b1.id]
    assert [x.id for x in found[(None, "alice")]] == [n1.id]
    assert found[(ORG_A, "bob")] == []  # its only device is invalid
    assert set(found) == set(asked) and all(found[p] == [] for p in many)
    # An organization given as text is keyed by its UUID; an empty batch sends nothing.
    assert devices_for(conn, [(str(ORG_B), "alice")]) == {(ORG_B, "alice"): [b1]}
    seen.clear()
    assert steps.on(conn, tap(devices_for_steps([]), seen)) == {} and seen == []


def test_devices_for_uses_the_partial_index(conn: Conn) -> None:
    """The delivery read probes devices_subject_idx (with enough rows that a scan would lose)."""
    conn.execute(
        "INSERT INTO devices (organization_id, subject, channel, token) "
        "SELECT NULL, 'user-' || g, 'fcm', 'token-' || g FROM generate_series(1, 20000) AS g"
    )
    conn.execute("ANALYZE devices")
    plan = conn.execute(
        "EXPLAIN (FORMAT TEXT) " + query("device_valid_for_subjects"),
        {"organization_ids": [None, ORG_A], "subjects": ["user-5", "user-7"]},
    ).fetchall()
    text = "\n".join(r[0] for r in plan)
    assert "devices_subject_idx" in text, text


def test_invalidate_once_emits_one_fact_without_the_token(conn: Conn) -> None:
    device = add_device(
        conn, "alice", "fcm", TOKEN, platform="android", organization_id=ORG_A, now=T0
    )
    at = T0 + timedelta(hours=2)
    reason = f"Requested entity was not found ({TOKEN})"
    assert invalidate_devices(conn, [(device.id, reason, "UNREGISTERED")], now=at) == 1
    marked = get_device(conn, device.id)
    assert marked is not None and not marked.valid and marked.invalidated_at == at
    assert marked.invalid_reason == "Requested entity was not found (<token>)"
    [(aggregate_type, aggregate_id, event_type, payload, org)] = facts(conn)
    assert (aggregate_type, aggregate_id, event_type, org) == (
        "device", str(device.id), "device.invalidated", ORG_A,
    )  # fmt: skip
    assert payload == {
        "device_id": device.id,
        "organization_id": str(ORG_A),
        "subject": "alice",
        "channel": "fcm",
        "platform": "android",
        "token_suffix": "ABC123",
        "reason": "Requested entity was not found (<token>)",
        "code": "UNREGISTERED",
        "invalidated_at": at.isoformat(),
    }
    assert TOKEN not in str(payload)
    # Again, and twice in one call: nothing more.
    assert invalidate_devices(conn, [(device.id, "again", "UNREGISTERED")] * 2, now=at) == 0
    assert len(facts(conn)) == 1
    assert get_device(conn, device.id).invalid_reason.startswith("Requested")  # type: ignore[union-attr]
    # Re-registered, it is alive; a later invalidation is a new fact.
    add_device(conn, "alice", "fcm", TOKEN, organization_id=ORG_A, now=at)
    assert invalidate_devices(conn, [(device.id, "dead again", None)], now=at) == 1
    assert [f[3]["code"] for f in facts(conn)] == ["UNREGISTERED", None]
    assert invalidate_devices(conn, [(device.id + 99, "never was", "x")], now=at) == 0
    assert invalidate_devices(conn, [], now=at) == 0


def _wait_until_blocked(watcher: Conn, pid: int) -> None:
    """Until backend ``pid`` waits for a lock (polling the server's view of it, bounded)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = watcher.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row is not None and row[0] == "Lock":
            return
        time.sleep(0.01)
    pytest.fail(f"backend {pid} never waited for a lock")


def test_concurrent_invalidations_emit_exactly_one_fact(db_url: str, conn: Conn) -> None:
    """Two deliveries invalidate the same devices (in opposite orders) from two connections:
    the second waits for the first, sees the rows already invalid, and emits nothing."""
    one = add_device(conn, "alice", "fcm", "token-one-000001", now=T0)
    two = add_device(conn, "alice", "apns", "token-two-000002", now=T0)
    conn.commit()
    results: dict[str, int] = {}
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        second_pid = second.info.backend_pid
        results["first"] = invalidate_devices(
            first, [(one.id, "dead", "UNREGISTERED"), (two.id, "dead", "BadDeviceToken")], now=T0
        )

        def race() -> None:
            results["second"] = invalidate_devices(
                second,
                [(two.id, "dead", "BadDeviceToken"), (one.id, "dead", "UNREGISTERED")],
                now=T0,
            )
            second.commit()

        thread = threading.Thread(target=race)
        thread.start()
        _wait_until_blocked(conn, second_pid)
        conn.rollback()
        first.commit()
        thread.join(30)
        assert not thread.is_alive()
    assert results == {"first": 2, "second": 0}
    assert sorted(f[1] for f in facts(conn)) == sorted([str(one.id), str(two.id)])


def test_mark_succeeded_writes_at_most_once_an_hour(conn: Conn) -> None:
    device = add_device(conn, "alice", "fcm", TOKEN, now=T0)
    conn.commit()
    mark_succeeded(conn, [device.id], now=T0)
    conn.commit()
    assert get_device(conn, device.id).last_success_at == T0  # type: ignore[union-attr]
    written = xmin(conn, device.id)
    conn.commit()
    for minutes in (1, 30, 59):
        mark_succeeded(conn, [device.id, device.id], now=T0 + timedelta(minutes=minutes))
        conn.commit()
        assert xmin(conn, device.id) == written  # no write
        conn.commit()
    mark_succeeded(conn, [device.id], now=T0 - timedelta(days=1))  # never moves back
    conn.commit()
    assert xmin(conn, device.id) == written
    conn.commit()
    mark_succeeded(conn, [device.id], now=T0 + timedelta(minutes=60))
    conn.commit()
    assert get_device(conn, device.id).last_success_at == T0 + timedelta(hours=1)  # type: ignore[union-attr]
    assert xmin(conn, device.id) != written
    mark_succeeded(conn, [], now=T0)


def test_mark_succeeded_skips_a_row_another_transaction_holds(db_url: str, conn: Conn) -> None:
    device = add_device(conn, "alice", "fcm", TOKEN, now=T0)
    free = add_device(conn, "alice", "apns", "other-token-000000", now=T0)
    conn.commit()
    conn.execute("SELECT 1 FROM devices WHERE id = %s FOR UPDATE", (device.id,))
    with psycopg.connect(db_url) as other:
        other.execute("SET lock_timeout = '5s'")  # a wait would fail the test, not hang it
        mark_succeeded(other, [device.id, free.id], now=T0)
        other.commit()
    conn.rollback()
    assert get_device(conn, device.id).last_success_at is None  # type: ignore[union-attr]
    assert get_device(conn, free.id).last_success_at == T0  # type: ignore[union-attr]


def run_async(db_url: str, fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[R]]) -> R:
    """``fn`` on a fresh AsyncConnection inside one transaction, committed at the end."""

    async def scenario() -> R:
        async with await psycopg.AsyncConnection.connect(db_url) as c, c.transaction():
            return await fn(c)

    return asyncio.run(scenario())


def test_the_async_forms_do_what_the_sync_ones_do(db_url: str, conn: Conn) -> None:
    async def scenario(c: psycopg.AsyncConnection[Any]) -> dict[str, Any]:
        added = await add_device_async(c, "alice", "fcm", TOKEN, organization_id=ORG_A, now=T0)
        other = await add_device_async(c, "alice", "apns", "apns-token-00000001", now=T0)
        gone = await add_device_async(c, "bob", "fcm", "bob-token-0000001", now=T0)
        await mark_succeeded_async(c, [added.id], now=T0)
        return {
            "added": added,
            "got": await get_device_async(c, added.id),
            "for": await devices_for_async(c, [(ORG_A, "alice"), (None, "alice")]),
            "invalidated": await invalidate_devices_async(c, [(other.id, "dead", "x")], now=T0),
            "again": await invalidate_devices_async(c, [(other.id, "dead", "x")], now=T0),
            "removed": await remove_device_async(c, gone.id),
            "list": await list_devices_async(c, include_invalid=True),
        }

    out = run_async(db_url, scenario)
    added = out["added"]
    assert out["got"].last_success_at == T0
    assert [x.id for x in out["for"][(ORG_A, "alice")]] == [added.id]
    assert len(out["for"][(None, "alice")]) == 1
    assert (out["invalidated"], out["again"], out["removed"]) == (1, 0, True)
    assert out["list"] == list_devices(conn, include_invalid=True)
    assert len(out["list"]) == 2 and len(facts(conn)) == 1
    assert devices_for(conn, [(ORG_A, "alice")]) == {(ORG_A, "alice"): [out["got"]]}


def test_a_rolled_back_invalidation_leaves_no_fact(conn: Conn) -> None:
    device = add_device(conn, "alice", "fcm", TOKEN, now=T0)
    conn.commit()
    invalidate_devices(conn, [(device.id, "dead", "UNREGISTERED")], now=T0)
    conn.rollback()
    assert get_device(conn, device.id).valid  # type: ignore[union-attr]
    assert facts(conn) == []


def test_the_delivery_handlers_registry_resolver_reads_and_writes_the_registry(
    db_url: str, conn: Conn
) -> None:
    """scheduler.delivery.RegistryResolver (the seam the delivery handler calls) against the
    registry: the valid devices per recipient, one fact per dead token, the last success."""
    from scheduler.delivery import RegistryResolver

    alive = add_device(conn, "alice", "fcm", "alice-token-000001", organization_id=ORG_A, now=T0)
    dead = add_device(conn, "alice", "apns", "alice-token-000002", organization_id=ORG_A, now=T0)
    conn.commit()
    resolver = RegistryResolver()

    async def scenario(c: psycopg.AsyncConnection[Any]) -> Any:
        found = await resolver.resolve(c, [(ORG_A, "alice"), (None, "alice")])
        targets = {t.id: t for t in found[(ORG_A, "alice")]}
        await resolver.invalidate(c, [(targets[dead.id], "unregistered", "UNREGISTERED")], T0)
        await resolver.invalidate(c, [(targets[dead.id], "unregistered", "UNREGISTERED")], T0)
        await resolver.succeeded(c, [targets[alive.id]], T0)
        return found

    found = run_async(db_url, scenario)
    assert [t.id for t in found[(ORG_A, "alice")]] == [alive.id, dead.id]
    assert list(found[(None, "alice")]) == []
    assert [f[1] for f in facts(conn)] == [str(dead.id)]
    assert get_device(conn, alive.id).last_success_at == T0  # type: ignore[union-attr]
    assert [x.id for x in devices_for(conn, [(ORG_A, "alice")])[(ORG_A, "alice")]] == [alive.id]


def test_two_first_registrations_of_one_token_race(db_url: str, conn: Conn) -> None:
    """The second registration waits on the first's unique-index entry; when it commits, the
    second finds the row unchanged, which its statement's snapshot cannot read: it runs the
    statement again and returns the row (one row, both callers get it)."""
    results: dict[str, Device] = {}
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        results["first"] = add_device(first, "alice", "fcm", TOKEN, platform="ios", now=T0)

        def race() -> None:
            results["second"] = add_device(second, "alice", "fcm", TOKEN, now=T0)
            second.commit()

        thread = threading.Thread(target=race)
        thread.start()
        _wait_until_blocked(conn, second.info.backend_pid)
        conn.rollback()
        first.commit()
        thread.join(30)
        assert not thread.is_alive()
    assert results["second"] == results["first"]
    assert conn.execute("SELECT count(*) FROM devices").fetchone() == (1,)
