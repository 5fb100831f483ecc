"""The transactional outbox: durable facts recorded in the business transaction.

:func:`record` inserts an event on the caller's connection, inside whatever transaction it has
open, so the event exists exactly when the business change commits. It also sends
``NOTIFY outbox_ready`` with a constant payload: PostgreSQL folds identical notifications of one
transaction into one, so a transaction that records many events wakes the relays once.

A :class:`Projection` turns one event into zero or more jobs (:class:`jobs.JobSpec`). The relay
(:mod:`jobs.relay`) enqueues those jobs in the same transaction that marks the event processed,
each with an idempotency key derived from (event id, projection name, index): a relay that
crashes anywhere leaves either both or neither, and a replay after a lost lease finds the keys
taken. ``build`` must therefore be deterministic and free of side effects; effects belong in
the jobs it returns.

Ordering: events of one aggregate ``(aggregate_type, aggregate_id)`` are projected one at a
time in ``seq`` order, and ``seq`` is drawn when :func:`record` inserts the event. A
transaction that holds a lock on the aggregate (its row, ``SELECT ... FOR UPDATE`` or an
``UPDATE``) from before :func:`record` until it commits draws its ``seq`` after every earlier
holder has committed, so for transactions that serialise on the aggregate, ``seq`` order is
their commit order. ``occurred_at`` is the caller's timestamp and plays no part in the order
(it defaults to ``now()``, the transaction's *start*, which is not its commit order). Events of
different aggregates have no mutual order. docs/outbox.md states the guarantee in full.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from jobs import validate
from jobs.errors import InvalidJob
from jobs.model import JobSpec
from jobs.queries import query
from jobs.steps import Steps, forms

CHANNEL = "outbox_ready"
MAX_EVENT_PAYLOAD_BYTES = 256 * 1024
MAX_NAME = 200
PROJECTION_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")


@dataclass(frozen=True, slots=True)
class Event:
    """An outbox event as a projection sees it.

    ``attempt`` is 1 on the first claim and counts every claim since (a crashed relay's claim
    included).
    """

    id: uuid.UUID
    organization_id: uuid.UUID | None
    aggregate_type: str
    aggregate_id: str
    event_type: str
    schema_version: int
    payload: Any
    occurred_at: datetime
    attempt: int = 1


Build = Callable[[Event], Iterable[JobSpec]]


@dataclass(frozen=True)
class Projection:
    """Maps events of ``event_types`` to jobs.

    ``name`` (1-100 characters of a-z, 0-9, '_', '.', '-') is part of every idempotency key the
    projection produces: renaming a projection makes its replays enqueue again.
    """

    name: str
    event_types: frozenset[str]
    build: Build

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not PROJECTION_NAME.match(self.name):
            raise InvalidJob(
                "projection.name",
                self.name,
                "1-100 characters of a-z, 0-9, '_', '.' or '-', starting with a letter or digit",
            )
        types = (
            frozenset([self.event_types])
            if isinstance(self.event_types, str)
            else frozenset(self.event_types)
        )
        if not types:
            raise InvalidJob("projection.event_types", self.event_types, "name at least one")
        for event_type in types:
            _name("projection.event_types", event_type)
        object.__setattr__(self, "event_types", types)
        if not callable(self.build):
            raise InvalidJob("projection.build", self.build, "must be callable")


class Projections:
    """A registry of projections: what ``tockwork relay --app module:attr`` names.

    >>> projections = Projections()
    >>> @projections.on("trip.completed", name="trip-receipt")
    ... def receipt(event: Event) -> list[JobSpec]:
    ...     return [JobSpec("send_receipt", {"trip": event.aggregate_id})]
    """

    def __init__(self, projections: Iterable[Projection] = ()) -> None:
        self._by_name: dict[str, Projection] = {}
        for projection in projections:
            self.add(projection)

    def add(self, projection: Projection) -> Projection:
        if not isinstance(projection, Projection):
            raise InvalidJob("projections", projection, "must be a jobs.outbox.Projection")
        if projection.name in self._by_name:
            raise InvalidJob("projection.name", projection.name, "is registered twice")
        self._by_name[projection.name] = projection
        return projection

    def on(self, *event_types: str, name: str | None = None) -> Callable[[Build], Build]:
        """Decorator: register ``build`` for ``event_types`` (name defaults to its __name__)."""

        def register(build: Build) -> Build:
            self.add(Projection(name or build.__name__, frozenset(event_types), build))
            return build

        return register

    def for_event(self, event_type: str) -> list[Projection]:
        """The projections of ``event_type``, in registration order."""
        return [p for p in self._by_name.values() if event_type in p.event_types]

    def __iter__(self) -> Iterator[Projection]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)


def _name(field: str, value: Any) -> str:
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= MAX_NAME
        or value != value.strip()
        or "\x00" in value
    ):
        raise InvalidJob(
            field, value, f"must be a non-empty string of at most {MAX_NAME} characters"
        )
    return value


def _aggregate_id(value: Any) -> str:
    if isinstance(value, uuid.UUID) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    return _name("aggregate_id", value)


def _schema_version(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
        raise InvalidJob("schema_version", value, "must be a positive integer")
    return value


def _payload(value: Any) -> str:
    text = validate.payload(value)
    size = len(text.encode())
    if size > MAX_EVENT_PAYLOAD_BYTES:
        raise InvalidJob(
            "payload",
            f"<{size} bytes>",
            f"larger than {MAX_EVENT_PAYLOAD_BYTES // 1024} KiB (an event records a fact; "
            "store bulky data elsewhere and reference it)",
        )
    return text


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7): new ids land at the right of the index."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | (rand >> 68) << 64
    value |= 0b10 << 62 | (rand & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def record(
    conn: psycopg.Connection[Any],
    *,
    aggregate_type: str,
    aggregate_id: str | uuid.UUID | int,
    event_type: str,
    payload: Any,
    schema_version: int = 1,
    organization_id: uuid.UUID | str | None = None,
    occurred_at: datetime | None = None,
) -> uuid.UUID:
    """Record an event in the caller's transaction; return its id.

    Never commits: the event becomes visible (and the relays are woken) when the caller's
    transaction commits, and vanishes with it on rollback. ``payload`` is any JSON-serialisable
    value of at most 256 KiB once encoded. ``occurred_at`` (aware) defaults to the transaction's
    start (``now()``); it is recorded, not used for ordering (see the module docstring: lock the
    aggregate before recording to make its events' order the commit order). Raises
    :class:`jobs.InvalidJob` naming the field, before anything is written.
    """
    params = _record_params(
        aggregate_type, aggregate_id, event_type, payload, schema_version, organization_id,
        occurred_at,
    )  # fmt: skip
    with conn.cursor() as cur:
        cur.execute(query("outbox_event_record"), params)
        row = cur.fetchone()
    assert row is not None
    event_id: uuid.UUID = row[0]
    return event_id


def record_steps(
    *,
    aggregate_type: str,
    aggregate_id: str | uuid.UUID | int,
    event_type: str,
    payload: Any,
    schema_version: int = 1,
    organization_id: uuid.UUID | str | None = None,
    occurred_at: datetime | None = None,
) -> Steps[uuid.UUID]:
    """:func:`record` as steps (:mod:`jobs.steps`): for an operation written once for a
    ``Connection`` and an ``AsyncConnection`` that records a fact in its own transaction (the
    scheduler's device invalidation). The same checks, before the one statement."""
    params = _record_params(
        aggregate_type, aggregate_id, event_type, payload, schema_version, organization_id,
        occurred_at,
    )  # fmt: skip
    rows = yield query("outbox_event_record"), params
    event_id: uuid.UUID = rows[0][0]
    return event_id


def _record_params(
    aggregate_type: Any,
    aggregate_id: Any,
    event_type: Any,
    payload: Any,
    schema_version: Any,
    organization_id: Any,
    occurred_at: Any,
) -> dict[str, Any]:
    """The parameters of ``outbox_event_record``, every field checked (raises InvalidJob)."""
    return {
        "id": uuid7(),
        "aggregate_type": _name("aggregate_type", aggregate_type),
        "aggregate_id": _aggregate_id(aggregate_id),
        "event_type": _name("event_type", event_type),
        "payload": _payload(payload),
        "schema_version": _schema_version(schema_version),
        "organization_id": validate.organization_id(organization_id),
        "occurred_at": validate.aware(occurred_at, "occurred_at"),
    }


@dataclass(frozen=True, slots=True)
class DeadEvent:
    """An event set aside after its projections failed too often."""

    id: uuid.UUID
    organization_id: uuid.UUID | None
    aggregate_type: str
    aggregate_id: str
    event_type: str
    schema_version: int
    payload: Any
    occurred_at: datetime
    attempts: int
    last_error: str | None
    dead_at: datetime


@dataclass(frozen=True, slots=True)
class OutboxStats:
    pending: int
    dead: int
    oldest_pending_age: float


def _dead_events(
    *, limit: int = 100, after: uuid.UUID | str | None = None
) -> Steps[list[DeadEvent]]:
    """One page of dead events, oldest first: at most ``limit``, after the event ``after``
    (the last id of the previous page; a keyset on when each died). Page through any number
    until a page comes back short."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidJob("limit", limit, "must be a positive integer")
    cursor = None
    if after is not None:
        try:
            cursor = after if isinstance(after, uuid.UUID) else uuid.UUID(str(after))
        except ValueError:
            raise InvalidJob("after", after, "must be None or an event id (a UUID)") from None
    rows = yield query("outbox_event_list_dead"), {"limit": limit, "after": cursor}
    return [DeadEvent(*row) for row in rows]


# Written once as steps; the sync and async forms (paging with ``after=``, issue 24):
dead_events, dead_events_async = forms(_dead_events, "dead_events")


def retry_dead(
    conn: psycopg.Connection[Any],
    ids: Iterable[uuid.UUID | str] | None = None,
    *,
    now: datetime | None = None,
) -> list[uuid.UUID]:
    """Put dead events (the given ones, or all) back in the stream with a fresh attempt budget.

    Runs in the caller's transaction. Returns the ids that were dead and are pending again.
    """
    wanted: list[uuid.UUID] | None = None
    if ids is not None:
        wanted = []
        for value in ids:
            try:
                wanted.append(value if isinstance(value, uuid.UUID) else uuid.UUID(value))
            except (ValueError, TypeError, AttributeError):
                raise InvalidJob("ids", value, "must be event ids (UUIDs)") from None
    with conn.cursor() as cur:
        cur.execute(
            query("outbox_event_retry_dead"), {"ids": wanted, "now": validate.aware(now, "now")}
        )
        return [row[0] for row in cur.fetchall()]


def stats(conn: psycopg.Connection[Any], *, now: datetime | None = None) -> OutboxStats:
    """Pending and dead counts and the age in seconds of the oldest pending event."""
    with conn.cursor() as cur:
        cur.execute(query("outbox_event_stats"), {"now": validate.aware(now, "now")})
        row = cur.fetchone()
    assert row is not None
    return OutboxStats(pending=row[0], dead=row[1], oldest_pending_age=row[2])
