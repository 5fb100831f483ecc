"""Webhook endpoints: where an organization's outbox facts are POSTed, in the caller's transaction.

An endpoint is a URL of one organization (``None``: no organization, a value of its own, as
for schedules and devices) with a description, an event-type filter (``None``: every event
type; else exact names or ``prefix.*`` patterns), an optional rate limit (deliveries a second),
and its state: enabled, or disabled with the reason and when. Its health is kept beside it:
the consecutive failed deliveries since ``failing_since``, the last success and failure.

Each endpoint has one or more signing secrets (``whsec_`` + base64, :mod:`.signing`). One is
made with the endpoint and returned once, in :class:`NewEndpoint` (``add_endpoint``) or by
``rotate_secret``; nothing else returns a secret (``Endpoint`` holds none, and ``list``, ``show``
and the logs never show one). A rotation adds a new secret and lets the others sign on for an
overlap (default :data:`DEFAULT_OVERLAP`), so a receiver can switch to the new one without
refusing a request meanwhile.

Registration runs the SSRF guard (:mod:`.ssrf`): the URL's host is resolved and every address
checked; delivery checks again, at each connection. The resolution is bounded by the guard's
``resolve_timeout``; ``add_endpoint_async`` resolves on the event loop (``loop.getaddrinfo``),
so it never blocks the loop.

Disabling an endpoint (an operator, a 410 Gone, or too many consecutive failures: see
:mod:`.delivery`) records the outbox fact ``endpoint.disabled`` in the same transaction, and its
deliveries that come up while it is disabled are *held* (their jobs cancelled, recorded as
``held``); :func:`enable_endpoint` requeues them. Every operation checks its input first and
raises :class:`scheduler.errors.InvalidWebhook` naming the field, before any statement; each is
written once, as steps (:mod:`jobs.steps`), run by its sync and its ``_async`` form.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs.internal import Steps, forms, steps
from jobs.internal import validate as job_validate
from jobs.outbox import record_steps
from scheduler.devices import EVERY_ORGANIZATION
from scheduler.errors import InvalidWebhook, WebhookEndpointNotFound
from scheduler.queries import database_now_steps, query
from scheduler.webhooks.signing import check_secret, generate_secret
from scheduler.webhooks.ssrf import Guard
from timezones.inputs import text_problem

MAX_DESCRIPTION = 500
MAX_EVENT_TYPES = 100
MAX_RATE_LIMIT = 100_000
MAX_LIST = 10_000
MAX_REASON = 500
DEFAULT_OVERLAP = timedelta(hours=24)
MAX_OVERLAP = timedelta(days=30)
DISABLED = "endpoint.disabled"  # the outbox fact's event type
AGGREGATE = "webhook_endpoint"  # its aggregate type; the aggregate id is the endpoint's id
_ID_MAX = 2**63 - 1
EVENT_TYPE = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*(\.\*)?$")


_UNSET: Any = EVERY_ORGANIZATION


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One webhook endpoint (a row of ``webhook_endpoints``); it holds no secret."""

    id: int
    organization_id: uuid.UUID | None
    url: str
    description: str | None
    event_types: list[str] | None
    rate_limit: int | None
    enabled: bool
    disabled_at: datetime | None
    disabled_reason: str | None
    consecutive_failures: int
    failing_since: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    created_at: datetime
    updated_at: datetime

    def subscribes(self, event_type: str) -> bool:
        """Whether the filter takes ``event_type``."""
        return matches(self.event_types, event_type)


@dataclass(frozen=True, slots=True)
class NewEndpoint:
    """What :func:`add_endpoint` returns: the endpoint and its signing secret, shown once."""

    endpoint: Endpoint
    secret: str

    def __repr__(self) -> str:
        return f"NewEndpoint(endpoint={self.endpoint!r}, secret='<secret>')"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class Rotated:
    """What :func:`rotate_secret` returns: the new secret (shown once) and when the others
    stop signing."""

    endpoint_id: int
    secret: str
    others_expire_at: datetime

    def __repr__(self) -> str:
        return (
            f"Rotated(endpoint_id={self.endpoint_id}, secret='<secret>', "
            f"others_expire_at={self.others_expire_at!r})"
        )

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What an operator sees of a secret that signs: never the secret itself."""

    id: int
    created_at: datetime
    expires_at: datetime | None


def matches(filters: Sequence[str] | None, event_type: str) -> bool:
    """Whether an event-type filter takes ``event_type`` (None takes every type)."""
    if filters is None:
        return True
    for pattern in filters:
        if pattern.endswith(".*"):
            if event_type.startswith(pattern[:-1]):
                return True
        elif pattern == event_type:
            return True
    return False


# -- input checks (pure) -----------------------------------------------------------------------


def check_endpoint_id(value: Any, field: str = "endpoint_id") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _ID_MAX:
        raise InvalidWebhook(field, value, f"must be an integer from 1 to {_ID_MAX}")
    return value


def check_organization_id(value: Any) -> uuid.UUID | None:
    try:
        return job_validate.organization_id(value)
    except ValueError:
        raise InvalidWebhook("organization_id", value, "must be None or a UUID") from None


def check_description(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_DESCRIPTION:
        raise InvalidWebhook(
            "description", value, f"must be text of at most {MAX_DESCRIPTION} characters"
        )
    problem = text_problem(value)
    if problem is not None:
        raise InvalidWebhook("description", value, problem)
    return value or None


def check_event_types(value: Any) -> list[str] | None:
    """An event-type filter: None (every type) or 1-100 names, each exact (``order.paid``) or a
    prefix pattern (``order.*``)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset):
        raise InvalidWebhook("event_types", value, "must be a list of event types, or None")
    items = list(value)
    if not 1 <= len(items) <= MAX_EVENT_TYPES:
        raise InvalidWebhook(
            "event_types", value, f"must name 1 to {MAX_EVENT_TYPES} event types (None: all)"
        )
    for item in items:
        if not isinstance(item, str) or len(item) > 200 or not EVENT_TYPE.match(item):
            raise InvalidWebhook(
                "event_types",
                item,
                "each must be an event type (letters, digits, '_', '-' in dot-separated "
                "parts, such as order.paid) or a prefix pattern such as order.*",
            )
    return sorted(set(items))


def check_rate_limit(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RATE_LIMIT:
        raise InvalidWebhook(
            "rate_limit", value, f"must be None or deliveries a second from 1 to {MAX_RATE_LIMIT}"
        )
    return value


def check_reason(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_REASON:
        raise InvalidWebhook("reason", value, f"must be text of 1-{MAX_REASON} characters")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidWebhook("reason", value, problem)
    return value


def _aware(field: str, value: Any) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidWebhook(field, value, "must be an aware datetime")
    return value.astimezone(UTC)


def _overlap(value: Any) -> timedelta:
    if not isinstance(value, timedelta) or not timedelta(0) <= value <= MAX_OVERLAP:
        raise InvalidWebhook("overlap", value, f"must be a timedelta from 0 to {MAX_OVERLAP}")
    return value


def _endpoint(row: Sequence[Any]) -> Endpoint:
    return Endpoint(*row)


# -- operations, each written once as steps --------------------------------------------------


def _add(
    url: str,
    *,
    organization_id: uuid.UUID | str | None = None,
    description: str | None = None,
    event_types: Sequence[str] | None = None,
    rate_limit: int | None = None,
    secret: str | None = None,
    guard: Guard | None = None,
    now: datetime | None = None,
) -> Steps[NewEndpoint]:
    """Register an endpoint; returns it with its signing secret (shown this once).

    ``url`` is checked by ``guard`` (default: :meth:`Guard.from_env`): http or https, no
    credentials, and a host none of whose addresses is internal (:mod:`.ssrf`); a refused URL
    raises :class:`scheduler.errors.UnsafeWebhookUrl`, a host that does not resolve within the
    guard's ``resolve_timeout`` :class:`scheduler.errors.InvalidWebhook` on ``url``. ``secret``
    (``whsec_`` + base64 of 24 to 64 bytes) is made when not given. Runs in the caller's
    transaction. The async form resolves on the event loop (``loop.getaddrinfo``), without
    blocking it.
    """
    params = {
        "organization_id": check_organization_id(organization_id),
        "description": check_description(description),
        "event_types": check_event_types(event_types),
        "rate_limit": check_rate_limit(rate_limit),
        "now": _aware("now", now),
    }
    chosen = generate_secret() if secret is None else check_secret(secret)
    params["url"] = (guard if guard is not None else Guard.from_env()).check_url(url).url
    rows = yield query("webhook_endpoint_insert"), params
    endpoint = _endpoint(rows[0])
    yield (
        query("webhook_secret_insert"),
        {
            "endpoint_id": endpoint.id,
            "secret": chosen,
            "now": params["now"],
        },
    )
    return NewEndpoint(endpoint, chosen)


def _get(endpoint_id: int) -> Steps[Endpoint | None]:
    """One endpoint by id, enabled or not; None if there is none."""
    rows = yield query("webhook_endpoint_get"), {"id": check_endpoint_id(endpoint_id)}
    return _endpoint(rows[0]) if rows else None


def _list(
    *,
    organization_id: Any = _UNSET,
    include_disabled: bool = True,
    after: int | None = None,
    limit: int = 100,
) -> Steps[list[Endpoint]]:
    """Endpoints in id order, the page after the endpoint ``after``; only ``organization_id``'s
    when it is given (None then means: of no organization); disabled ones unless
    ``include_disabled`` is False."""
    if not isinstance(include_disabled, bool):
        raise InvalidWebhook("include_disabled", include_disabled, "must be True or False")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidWebhook("limit", limit, f"must be an integer from 1 to {MAX_LIST}")
    if after is not None and (
        isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= _ID_MAX
    ):
        raise InvalidWebhook("after", after, f"must be an endpoint id from 0 to {_ID_MAX}")
    by_organization = organization_id is not _UNSET
    rows = yield (
        query("webhook_endpoint_list"),
        {
            "by_organization": by_organization,
            "organization_id": check_organization_id(organization_id) if by_organization else None,
            "include_disabled": include_disabled,
            "after": after or 0,
            "limit": limit,
        },
    )
    return [_endpoint(r) for r in rows]


def _remove(endpoint_id: int) -> Steps[bool]:
    """Delete an endpoint, its secrets and its attempts; False if there was none."""
    rows = yield query("webhook_endpoint_delete"), {"id": check_endpoint_id(endpoint_id)}
    return bool(rows)


def _set_rate_limit(
    endpoint_id: int, rate_limit: int | None, *, now: datetime | None = None
) -> Steps[Endpoint]:
    """Set an endpoint's rate limit (deliveries a second, 1 to 100,000; None lifts it), in the
    caller's transaction. Every worker process applies it at the endpoint's next delivery (the
    limit is read with each reservation of a send slot, :mod:`.delivery`)."""
    params = {
        "id": check_endpoint_id(endpoint_id),
        "rate_limit": check_rate_limit(rate_limit),
        "now": _aware("now", now),
    }
    rows = yield query("webhook_endpoint_set_rate_limit"), params
    if not rows:
        raise WebhookEndpointNotFound(endpoint_id)
    return _endpoint(rows[0])


def disabled_fact_steps(
    endpoint_id: int,
    organization_id: uuid.UUID | None,
    url: str,
    reason: str,
    disabled_at: datetime,
) -> Steps[uuid.UUID]:
    """The ``endpoint.disabled`` outbox fact of an endpoint just disabled. It names the URL's
    host, not the URL (a URL's path or query may hold the receiver's token)."""
    from scheduler.webhooks.ssrf import parse_url

    return (
        yield from record_steps(
            aggregate_type=AGGREGATE,
            aggregate_id=endpoint_id,
            event_type=DISABLED,
            organization_id=organization_id,
            occurred_at=disabled_at,
            payload={
                "endpoint_id": endpoint_id,
                "organization_id": None if organization_id is None else str(organization_id),
                "host": parse_url(url).host,
                "reason": reason,
                "disabled_at": disabled_at.astimezone(UTC).isoformat(),
            },
        )
    )


def _disable(
    endpoint_id: int, *, reason: str = "disabled by an operator", now: datetime | None = None
) -> Steps[Endpoint]:
    """Disable an endpoint with ``reason``: nothing more is sent to it, its deliveries are held
    until it is enabled again, and an ``endpoint.disabled`` fact is recorded in the caller's
    transaction. Disabling a disabled endpoint changes nothing (and records nothing)."""
    params = {
        "id": check_endpoint_id(endpoint_id),
        "reason": check_reason(reason),
        "now": _aware("now", now),
    }
    rows = yield query("webhook_endpoint_disable"), params
    if not rows:
        current = yield from _get(endpoint_id)
        if current is None:
            raise WebhookEndpointNotFound(endpoint_id)
        return current
    endpoint = _endpoint(rows[0])
    assert endpoint.disabled_at is not None and endpoint.disabled_reason is not None
    yield from disabled_fact_steps(
        endpoint.id, endpoint.organization_id, endpoint.url, endpoint.disabled_reason,
        endpoint.disabled_at,
    )  # fmt: skip
    return endpoint


def _enable_steps(endpoint_id: int, now: datetime | None) -> Steps[tuple[Endpoint, list[int]]]:
    """Enable an endpoint; its held delivery jobs, released (for the caller to requeue)."""
    params = {"id": check_endpoint_id(endpoint_id), "now": _aware("now", now)}
    rows = yield query("webhook_endpoint_enable"), params
    if not rows:
        raise WebhookEndpointNotFound(endpoint_id)
    held = yield query("webhook_attempt_release_held"), {"endpoint_id": params["id"]}
    return _endpoint(rows[0]), sorted({row[0] for row in held})


@dataclass(frozen=True, slots=True)
class Enabled:
    """What :func:`enable_endpoint` returns: the endpoint and the held deliveries requeued."""

    endpoint: Endpoint
    requeued: list[int]


def enable_endpoint(
    conn: psycopg.Connection[Any], endpoint_id: int, *, now: datetime | None = None
) -> Enabled:
    """Enable an endpoint again (its failure streak starts over) and requeue the deliveries held
    while it was disabled, in the caller's transaction."""
    endpoint, held = steps.on(conn, _enable_steps(endpoint_id, now))
    requeued = jobs.requeue(conn, ids=held, statuses=("cancelled",), now=now) if held else []
    return Enabled(endpoint, list(requeued))


async def enable_endpoint_async(
    conn: psycopg.AsyncConnection[Any], endpoint_id: int, *, now: datetime | None = None
) -> Enabled:
    """:func:`enable_endpoint` on an ``AsyncConnection``."""
    endpoint, held = await steps.on_async(conn, _enable_steps(endpoint_id, now))
    requeued = (
        await jobs.requeue_async(conn, ids=held, statuses=("cancelled",), now=now) if held else []
    )
    return Enabled(endpoint, list(requeued))


def _rotate(
    endpoint_id: int,
    *,
    overlap: timedelta = DEFAULT_OVERLAP,
    secret: str | None = None,
    now: datetime | None = None,
) -> Steps[Rotated]:
    """Add a new signing secret (returned once); the endpoint's other secrets sign on for
    ``overlap`` (default a day; 0 stops them at once), then stop."""
    eid = check_endpoint_id(endpoint_id)
    span = _overlap(overlap)
    chosen = generate_secret() if secret is None else check_secret(secret)
    at = yield from database_now_steps(_aware("now", now))
    found = yield query("webhook_endpoint_get"), {"id": eid}
    if not found:
        raise WebhookEndpointNotFound(endpoint_id)
    rows = yield query("webhook_secret_insert"), {"endpoint_id": eid, "secret": chosen, "now": at}
    expires = at + span
    yield (
        query("webhook_secret_expire_others"),
        {
            "endpoint_id": eid,
            "keep": rows[0][0],
            "expires_at": expires,
            "now": at,
        },
    )
    return Rotated(eid, chosen, expires)


def _secrets(endpoint_id: int, *, now: datetime | None = None) -> Steps[list[SecretInfo]]:
    """The endpoint's secrets that sign now: when each was made and when it stops."""
    rows = yield (
        query("webhook_secret_list"),
        {
            "endpoint_id": check_endpoint_id(endpoint_id),
            "now": _aware("now", now),
        },
    )
    return [SecretInfo(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    """One delivery attempt to an endpoint (a row of ``webhook_attempts``): ``outcome`` is
    ``delivered``, ``failed``, ``held`` (the endpoint was disabled) or ``released`` (held, then
    requeued when it was enabled); ``response`` a bounded summary of the response's body."""

    id: int
    endpoint_id: int
    event_id: uuid.UUID
    job_id: int
    attempt: int
    attempted_at: datetime
    outcome: str
    status: int | None
    duration_ms: float | None
    error: str | None
    response: str | None


def _attempts(endpoint_id: int, *, limit: int = 20) -> Steps[list[DeliveryAttempt]]:
    """An endpoint's most recent delivery attempts, newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidWebhook("limit", limit, f"must be an integer from 1 to {MAX_LIST}")
    rows = yield (
        query("webhook_attempt_recent"),
        {
            "endpoint_id": check_endpoint_id(endpoint_id),
            "limit": limit,
        },
    )
    return [DeliveryAttempt(*row) for row in rows]


add_endpoint, _add_endpoint_async = forms(_add, "add_endpoint")


async def add_endpoint_async(
    conn: psycopg.AsyncConnection[Any],
    url: str,
    *,
    organization_id: uuid.UUID | str | None = None,
    description: str | None = None,
    event_types: Sequence[str] | None = None,
    rate_limit: int | None = None,
    secret: str | None = None,
    guard: Guard | None = None,
    now: datetime | None = None,
) -> NewEndpoint:
    """:func:`add_endpoint` on an ``AsyncConnection``: the same parameters and steps, the host
    resolved first on the running loop (``loop.getaddrinfo``, within the guard's
    ``resolve_timeout``), then checked by the steps against those answers (no second lookup)."""
    checked, answering = await (guard if guard is not None else Guard.from_env()).check_url_async(
        url
    )
    return await _add_endpoint_async(
        conn,
        checked.url,
        organization_id=organization_id,
        description=description,
        event_types=event_types,
        rate_limit=rate_limit,
        secret=secret,
        guard=answering,
        now=now,
    )


recent_attempts, recent_attempts_async = forms(_attempts, "recent_attempts")
get_endpoint, get_endpoint_async = forms(_get, "get_endpoint")
list_endpoints, list_endpoints_async = forms(_list, "list_endpoints")
remove_endpoint, remove_endpoint_async = forms(_remove, "remove_endpoint")
set_rate_limit, set_rate_limit_async = forms(_set_rate_limit, "set_rate_limit")
disable_endpoint, disable_endpoint_async = forms(_disable, "disable_endpoint")
rotate_secret, rotate_secret_async = forms(_rotate, "rotate_secret")
endpoint_secrets, endpoint_secrets_async = forms(_secrets, "endpoint_secrets")
