"""The device registry: which devices a subject's reminders go to, in the caller's transaction.

A device is one push token of one channel (``fcm``, ``apns``, ``simulated``, or a channel the
application registers), owned by one subject (the user a schedule belongs to:
``schedules.subject``) of one organization (``None``: no organization, which is a value of its
own, as for schedules). ``(channel, token)`` is unique: registering a token that exists gives
it to the new subject and organization, and makes it valid again if it was invalidated (the
application registered it anew, so the app on the phone holds it: it is alive).

The delivery path reads and writes little, per batch, whatever its size:

- :func:`devices_for` reads the valid devices of a batch of (organization, subject) pairs in one
  statement (a probe of a partial index per pair);
- :func:`mark_succeeded` writes ``last_success_at`` at most once an hour per device (a WHERE
  clause: in the common case the statement writes no row), and skips a row another
  transaction holds rather than wait for it;
- :func:`invalidate_devices` marks dead tokens (the provider said so: never send to them again)
  and records one outbox fact ``device.invalidated`` per device it newly marks, in the same
  transaction. A device already invalid is left alone and emits nothing, so a second
  invalidation, or two deliveries racing on one token, emit one fact in all.

The fact carries the device's id, organization, subject, channel and platform, the provider's
reason and code, and only the last six characters of the token (``token_suffix``): the outbox
is a table operators inspect (``tockwork outbox dead``, the dashboard) and that relays copy into
job payloads and logs, and a token is a credential to push to someone's phone. The application
looks the device up by id if it needs more.

Every function checks its input first and raises :class:`scheduler.errors.InvalidDevice`
naming the field, before any statement; a token never appears in full in an error, a log line
or a ``repr`` (:func:`scheduler.push.redact_token`). Each operation is written once, as steps
(:mod:`jobs.steps`), which its sync form and its ``_async`` form run on their connection.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.internal import Steps, forms
from jobs.internal import validate as job_validate
from jobs.outbox import record_steps
from scheduler.errors import InvalidDevice
from scheduler.push import redact_token
from scheduler.queries import query
from timezones.inputs import text_problem

CHANNEL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_SUBJECT = 200  # characters, as a schedule's subject
MAX_TOKEN_BYTES = 2048  # a btree key (devices_channel_token_key): see scheduler/sql/schema.sql
MAX_PLATFORM = 32
MAX_REASON = 500  # characters of an invalidation's reason kept (a provider's text is cut)
MAX_CODE = 100
MAX_LIST = 10_000
MAX_BATCH = 10_000  # pairs or ids in one call of a batch operation
SUCCESS_EVERY = timedelta(hours=1)  # last_success_at is written at most this often per device
INVALIDATED = "device.invalidated"  # the outbox fact's event type
AGGREGATE = "device"  # its aggregate type; the aggregate id is the device's id
_ID_MAX = 2**63 - 1


class _AllOrganizations:
    """The default of ``list_devices(organization_id=...)``: no filter (None is a value)."""

    def __repr__(self) -> str:
        return "<every organization>"


_UNSET: Any = _AllOrganizations()
# The same default for the other registries' list filters (scheduler.webhooks.endpoints).
EVERY_ORGANIZATION: Any = _UNSET


@dataclass(frozen=True, slots=True)
class Device:
    """One registered device (a row of ``devices``); its ``repr`` shows the token redacted."""

    id: int
    organization_id: uuid.UUID | None
    subject: str
    channel: str
    token: str
    platform: str | None
    created_at: datetime
    last_success_at: datetime | None
    invalidated_at: datetime | None
    invalid_reason: str | None
    updated_at: datetime

    @property
    def valid(self) -> bool:
        """Not invalidated: reminders are sent to it."""
        return self.invalidated_at is None

    def __repr__(self) -> str:
        return (
            f"Device(id={self.id}, organization_id={self.organization_id!r}, "
            f"subject={self.subject!r}, channel={self.channel!r}, "
            f"token={redact_token(self.token)!r}, platform={self.platform!r}, "
            f"valid={self.valid})"
        )

    __str__ = __repr__


def _device(row: Sequence[Any]) -> Device:
    """A ``device_columns`` row as a Device (pure)."""
    return Device(*row)


# -- input checks (pure) -----------------------------------------------------------------------


def _text(field: str, value: Any, maximum: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= maximum:
        raise InvalidDevice(field, value, f"must be a string of 1-{maximum} characters")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidDevice(field, value, problem)
    return value


def check_subject(value: Any) -> str:
    """A subject: a string of 1-200 characters (an integer id becomes its text)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(10**MAX_SUBJECT) < value < 10**MAX_SUBJECT:
            raise InvalidDevice("subject", value, f"must be a string of 1-{MAX_SUBJECT} characters")
        value = str(value)
    return _text("subject", value, MAX_SUBJECT)


def check_channel(value: Any) -> str:
    """A channel name: a lower-case letter, then up to 31 of a-z, 0-9 and '_'."""
    if not isinstance(value, str) or not CHANNEL_NAME.match(value):
        raise InvalidDevice(
            "channel",
            value,
            "must be a lower-case name of 1-32 characters (a-z, 0-9, '_', starting with a "
            "letter), such as 'fcm' or 'apns'",
        )
    return value


def check_token(value: Any) -> str:
    """A token: 1-2048 bytes of printable text without spaces. An error shows it redacted."""
    if not isinstance(value, str):
        raise InvalidDevice("token", f"<{type(value).__name__}>", "must be a string")
    shown = redact_token(value)
    if not value:
        raise InvalidDevice("token", value, "must not be empty")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidDevice("token", shown, "is not valid Unicode text") from None
    if size > MAX_TOKEN_BYTES:
        raise InvalidDevice("token", shown, f"longer than {MAX_TOKEN_BYTES} bytes ({size})")
    if not value.isprintable() or any(c.isspace() for c in value):
        # A token is opaque printable text: a space, a newline or a control character is a
        # copy-paste accident (and would make a log line lie).
        raise InvalidDevice("token", shown, "must be printable text without spaces")
    return value


def check_platform(value: Any) -> str | None:
    if value is None:
        return None
    text = _text("platform", value, MAX_PLATFORM)
    if not text.isprintable() or text != text.strip():
        raise InvalidDevice("platform", value, "must be printable, without surrounding spaces")
    return text


def check_organization_id(value: Any) -> uuid.UUID | None:
    try:
        return job_validate.organization_id(value)
    except ValueError:
        raise InvalidDevice("organization_id", value, "must be None or a UUID") from None


def check_device_id(value: Any, field: str = "device_id") -> int:
    """A device id is a positive bigint; checked before any statement."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _ID_MAX:
        raise InvalidDevice(field, value, f"must be an integer from 1 to {_ID_MAX}")
    return value


def _aware(field: str, value: Any) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidDevice(field, value, "must be an aware datetime")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidDevice(field, value, "is outside the years 1-9999 in UTC") from None


def _batch(field: str, value: Any) -> list[Any]:
    if isinstance(value, str | bytes | dict) or not isinstance(value, Sequence):
        raise InvalidDevice(field, value, "must be a list")
    if len(value) > MAX_BATCH:
        raise InvalidDevice(field, f"<{len(value)} items>", f"at most {MAX_BATCH} in one call")
    return list(value)


def _provider_text(field: str, value: Any, maximum: int) -> str:
    """A provider's reason or code, kept as stored text: cut to ``maximum`` characters, with
    what PostgreSQL cannot store removed. A dead token must be marked whatever the provider
    said, so its words are cleaned, not refused."""
    if not isinstance(value, str):
        raise InvalidDevice(field, value, "must be a string")
    text: str = value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return text[:maximum]


# -- operations, each written once as steps --------------------------------------------------


def _add(
    subject: str | int,
    channel: str,
    token: str,
    *,
    platform: str | None = None,
    organization_id: uuid.UUID | str | None = None,
    now: datetime | None = None,
) -> Steps[Device]:
    """Register ``token`` of ``channel`` for ``subject`` (of ``organization_id``); the device.

    Runs in the caller's transaction (an application calls it from the API handler that
    receives the token, in that handler's transaction). A token already registered is given to
    this subject and organization, made valid again if it was invalidated, and takes
    ``platform`` if one is given; registering it again unchanged writes nothing.
    """
    params = {
        "subject": check_subject(subject),
        "channel": check_channel(channel),
        "token": check_token(token),
        "platform": check_platform(platform),
        "organization_id": check_organization_id(organization_id),
        "now": None if now is None else _aware("now", now),
    }
    rows = yield query("device_upsert"), params
    if not rows:
        # A concurrent first registration of this token committed after this statement's
        # snapshot was taken (see device_upsert): a new statement sees it.
        rows = yield query("device_upsert"), params
    return _device(rows[0])


def _remove(device_id: int) -> Steps[bool]:
    """Delete a device; False if there was none with this id."""
    rows = yield query("device_delete"), {"id": check_device_id(device_id)}
    return bool(rows)


def _get(device_id: int) -> Steps[Device | None]:
    """One device by id, valid or not; None if there is none."""
    rows = yield query("device_get"), {"id": check_device_id(device_id)}
    return _device(rows[0]) if rows else None


def _list(
    *,
    subject: str | None = None,
    organization_id: Any = _UNSET,
    include_invalid: bool = False,
    after: int | None = None,
    limit: int = 100,
) -> Steps[list[Device]]:
    """Devices in id order: the page after the device ``after`` (a keyset cursor: pass the last
    id of the previous page). Only valid ones unless ``include_invalid``; only those of
    ``subject`` when given; only those of ``organization_id`` when it is given (``None`` then
    means the devices of no organization; leaving it out lists every organization's)."""
    if not isinstance(include_invalid, bool):
        raise InvalidDevice("include_invalid", include_invalid, "must be True or False")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
        raise InvalidDevice("limit", limit, f"must be an integer from 1 to {MAX_LIST}")
    by_organization = organization_id is not _UNSET
    params = {
        "subject": None if subject is None else check_subject(subject),
        "by_organization": by_organization,
        "organization_id": check_organization_id(organization_id) if by_organization else None,
        "include_invalid": include_invalid,
        "after": 0 if after is None else _cursor(after),
        "limit": limit,
    }
    rows = yield query("device_list"), params
    return [_device(r) for r in rows]


def _cursor(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _ID_MAX:
        raise InvalidDevice("after", value, f"must be a device id from 0 to {_ID_MAX}")
    return value


Pair = tuple[uuid.UUID | None, str]


def devices_for_steps(
    subjects: Sequence[tuple[uuid.UUID | str | None, str]],
) -> Steps[dict[Pair, list[Device]]]:
    """The valid devices of each ``(organization_id, subject)`` pair, read in one statement.

    The result has every pair asked for (an organization given as text is keyed by its UUID),
    each with its devices in id order, or ``[]``. For the delivery of a batch of reminders.
    """
    wanted: dict[Pair, list[Device]] = {}
    for index, pair in enumerate(_batch("subjects", subjects)):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidDevice(
                f"subjects[{index}]", pair, "must be a pair (organization_id, subject)"
            )
        wanted[(check_organization_id(pair[0]), check_subject(pair[1]))] = []
    if not wanted:
        return wanted
    params = {
        "organization_ids": [org for org, _ in wanted],
        "subjects": [subject for _, subject in wanted],
    }
    rows = yield query("device_valid_for_subjects"), params
    for row in rows:
        device = _device(row)
        wanted[(device.organization_id, device.subject)].append(device)
    return wanted


def invalidate_devices_steps(
    items: Sequence[tuple[int, str, str | None]], *, now: datetime
) -> Steps[int]:
    """Mark dead the devices ``items`` name, as ``(device id, reason, provider code)`` (the
    code, such as ``"UNREGISTERED"`` or ``"BadDeviceToken"``, may be None); how many were
    newly marked.

    A device not yet invalid is marked (never sent to again until the application registers
    its token anew), and one outbox fact ``device.invalidated`` is recorded for it in the
    caller's transaction. A device already invalid, or gone, is left alone and emits nothing.
    The reason is cut to 500 characters (and quotes of the token in it are replaced by
    ``<token>``); an id named twice counts once, with its first reason.
    """
    at = _aware("now", now)
    reasons: dict[int, tuple[str, str | None]] = {}
    for index, item in enumerate(_batch("items", items)):
        if not isinstance(item, tuple) or len(item) != 3:
            raise InvalidDevice(f"items[{index}]", item, "must be (device id, reason, code)")
        device_id = check_device_id(item[0], f"items[{index}].device_id")
        reason = _provider_text(f"items[{index}].reason", item[1], MAX_REASON)
        code = (
            None if item[2] is None else _provider_text(f"items[{index}].code", item[2], MAX_CODE)
        )
        reasons.setdefault(device_id, (reason, code))
    if not reasons:
        return 0
    params = {
        "ids": list(reasons),
        "reasons": [reason for reason, _ in reasons.values()],
        "now": at,
    }
    rows = yield query("device_invalidate"), params
    for device_id, organization_id, subject, channel, platform, token, reason, when in rows:
        yield from record_steps(
            aggregate_type=AGGREGATE,
            aggregate_id=device_id,
            event_type=INVALIDATED,
            organization_id=organization_id,
            occurred_at=when,
            payload={
                "device_id": device_id,
                "organization_id": None if organization_id is None else str(organization_id),
                "subject": subject,
                "channel": channel,
                "platform": platform,
                "token_suffix": token_suffix(token),
                "reason": reason,
                "code": reasons[device_id][1],
                "invalidated_at": when.astimezone(UTC).isoformat(),
            },
        )
    return len(rows)


def token_suffix(token: str) -> str:
    """What of a token the outbox fact keeps: its last 6 characters (none of a token of 8 or
    fewer, as :func:`scheduler.push.redact_token` shows it)."""
    return redact_token(token).removeprefix("…")


def mark_succeeded_steps(device_ids: Sequence[int], *, now: datetime) -> Steps[None]:
    """Record that a delivery to each device succeeded at ``now``: ``last_success_at`` moves
    only when it is unset or at least an hour older, so a delivery costs no write in the common
    case; a row another transaction holds is skipped."""
    params = mark_succeeded_params(device_ids, now=now)
    if params["ids"]:
        yield query("device_mark_succeeded"), params


def mark_succeeded_params(device_ids: Sequence[int], *, now: datetime) -> dict[str, Any]:
    """The checked parameters of :func:`mark_succeeded`'s statement (``ids`` sorted and
    distinct, ``now``, ``every``), for the delivery's record (``device_delivery_record``)."""
    at = _aware("now", now)
    ids = sorted(
        {
            check_device_id(value, f"device_ids[{index}]")
            for index, value in enumerate(_batch("device_ids", device_ids))
        }
    )
    return {"ids": ids, "now": at, "every": SUCCESS_EVERY}


# Each operation above is written once, as steps (jobs/steps.py); its forms on a psycopg
# Connection and on an AsyncConnection, in the caller's transaction:
add_device, add_device_async = forms(_add, "add_device")
remove_device, remove_device_async = forms(_remove, "remove_device")
get_device, get_device_async = forms(_get, "get_device")
list_devices, list_devices_async = forms(_list, "list_devices")
devices_for, devices_for_async = forms(devices_for_steps, "devices_for")
invalidate_devices, invalidate_devices_async = forms(invalidate_devices_steps, "invalidate_devices")
mark_succeeded, mark_succeeded_async = forms(mark_succeeded_steps, "mark_succeeded")
