"""The fan-out: a built-in outbox projection from each fact to one delivery job per endpoint.

:func:`projection` returns a :class:`jobs.outbox.Projection` for the relay: for an event of one
of its types, one ``webhook.deliver`` job (queue ``webhooks``) per enabled endpoint of the
event's organization whose filter takes the event's type. The relay enqueues an event's jobs in
the transaction that marks it processed, in the order it projects the events (an aggregate's
events in their commit order, :mod:`jobs.relay`); each job's idempotency key is
``webhook:<event id>:<endpoint id>``, so a relay that crashes mid-batch and replays it, or two
relays that race on an event, create each delivery once.

Which endpoints: those enabled and subscribed when the relay projects the event, read through
the projection's own connection and kept per organization for ``refresh`` (default one second,
so that a burst of facts costs one read per organization, not one per fact): an endpoint added,
changed or disabled takes effect for the facts projected from at most ``refresh`` after its
commit. A delivery created for an endpoint disabled meanwhile is held, not sent
(:mod:`.delivery`).

The job's payload is the message: the event's id, type, time and data, and the endpoint's id. A
delivery job may run up to :data:`MAX_ATTEMPTS` times and has the concurrency key
``webhook:<endpoint id>``, which the queue's per-key concurrency bounds (the worker app sets it,
:mod:`.delivery`).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, timedelta
from typing import Any

import psycopg

import jobs
from jobs import JobSpec
from jobs.outbox import Event, Projection
from scheduler.errors import InvalidWebhook
from scheduler.queries import query
from scheduler.webhooks.endpoints import matches

QUEUE = "webhooks"
JOB_TYPE = "webhook.deliver"
MAX_ATTEMPTS = 20
DEFAULT_REFRESH = timedelta(seconds=1)


def idempotency_key(event_id: uuid.UUID | str, endpoint_id: int) -> str:
    """The delivery job's idempotency key: one delivery per (event, endpoint)."""
    return f"webhook:{event_id}:{endpoint_id}"


def concurrency_key(endpoint_id: int) -> str:
    """The delivery job's concurrency key: the per-key limit bounds each endpoint."""
    return f"webhook:{endpoint_id}"


def message_payload(event: Event, endpoint_id: int) -> dict[str, Any]:
    """A delivery job's payload (one writer: this; one reader: the delivery handler)."""
    return {
        "event_id": str(event.id),
        "endpoint_id": endpoint_id,
        "type": event.event_type,
        "timestamp": event.occurred_at.astimezone(UTC).isoformat(),
        "data": event.payload,
    }


class Fanout:
    """The projection's ``build``: an event -> its delivery jobs (module docstring).

    ``conninfo`` defaults to ``DATABASE_URL``; ``monotonic`` is the clock of the cache (tests
    pass their own).
    """

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        refresh: timedelta = DEFAULT_REFRESH,
        max_attempts: int = MAX_ATTEMPTS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(refresh, timedelta) or refresh < timedelta(0):
            raise InvalidWebhook("refresh", refresh, "must be a timedelta of at least 0")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidWebhook("max_attempts", max_attempts, "must be a positive integer")
        self.conninfo = conninfo
        self.refresh = refresh.total_seconds()
        self.max_attempts = max_attempts
        self.monotonic = monotonic
        self._conn: psycopg.Connection[Any] | None = None
        self._cache: dict[uuid.UUID | None, tuple[float, list[tuple[int, list[str] | None]]]] = {}

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            url = self.conninfo or os.environ.get("DATABASE_URL", "")
            if not url:
                raise InvalidWebhook("DATABASE_URL", None, "the webhook fan-out needs a database")
            self._conn = jobs.connect(url, autocommit=True)
        return self._conn

    def subscribed(self, organization_id: uuid.UUID | None) -> list[tuple[int, list[str] | None]]:
        """The enabled endpoints of an organization with their filters (cached)."""
        now = self.monotonic()
        cached = self._cache.get(organization_id)
        if cached is not None and now - cached[0] < self.refresh:
            return cached[1]
        try:
            rows = (
                self._connection()
                .execute(query("webhook_endpoint_subscribed"), {"organization_id": organization_id})
                .fetchall()
            )
        except psycopg.OperationalError:
            self.close()  # the relay retries the event; the next read reconnects
            raise
        endpoints = [(row[0], row[1]) for row in rows]
        self._cache[organization_id] = (now, endpoints)
        return endpoints

    def __call__(self, event: Event) -> list[JobSpec]:
        return [
            JobSpec(
                JOB_TYPE,
                message_payload(event, endpoint_id),
                queue=QUEUE,
                idempotency_key=idempotency_key(event.id, endpoint_id),
                organization_id=event.organization_id,
                max_attempts=self.max_attempts,
                concurrency_key=concurrency_key(endpoint_id),
            )
            for endpoint_id, filters in self.subscribed(event.organization_id)
            if matches(filters, event.event_type)
        ]


def projection(
    event_types: Iterable[str],
    *,
    conninfo: str | None = None,
    name: str = "webhooks",
    refresh: timedelta = DEFAULT_REFRESH,
    max_attempts: int = MAX_ATTEMPTS,
) -> Projection:
    """The fan-out of ``event_types`` (the facts an application offers as webhooks) for
    ``tockwork relay --app`` (module docstring)."""
    build = Fanout(conninfo, refresh=refresh, max_attempts=max_attempts)
    return Projection(name, frozenset(event_types), build)
