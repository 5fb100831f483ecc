"""What a push channel sends and what it answers: :class:`PushMessage` and :class:`PushResult`.

A message is one notification to one device: the token and channel it goes through, what the
phone shows (title, body), what the application receives (``data``), how the device collapses
stale ones (``collapse_key``: one per schedule, so a late reminder replaces an earlier one that
is still shown) and when it stops being worth showing (``expires_at``: FCM's ``ttl`` and APNs'
``apns-expiration`` are derived from it at send time, so a phone that comes online at noon does
not show the 08:00 reminder).

A message carries no job and no connection: a channel is network I/O only, and the delivery
handler (:mod:`scheduler.delivery`) maps results back to jobs, records the effect-once keys and
invalidates dead tokens. ``key`` is the message's idempotency key (the job's effect key for this
device): stable across retries of the job, unique per (occurrence, device).

Every result has one :class:`PushStatus` from one vocabulary, whatever the provider:

========================  ==========================================================
``delivered``             the provider accepted it now
``duplicate``             it was delivered before (same key): not sent again
``transient``             timeout, connection lost, 5xx, GOAWAY: retry with back-off
``rate_limited``          429 / quota: retry after ``retry_after`` (the provider's hint)
``rejected``              the device token is dead: invalidate it, never retry it
``permanent``             the request can never succeed as configured (wrong sender,
                          bad credentials, payload too large): dead-letter the job
========================  ==========================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from types import MappingProxyType


class PushStatus(StrEnum):
    """What the provider answered for one message (module docstring)."""

    DELIVERED = "delivered"
    DUPLICATE = "duplicate"
    TRANSIENT = "transient"
    RATE_LIMITED = "rate_limited"
    REJECTED = "rejected"
    PERMANENT = "permanent"


_NO_DATA: Mapping[str, str] = MappingProxyType({})


# PushMessage and PushResult are values that nothing changes after they are built, but not
# frozen dataclasses: a delivery builds one of each per device notified, and a frozen
# dataclass's constructor sets each field through object.__setattr__, three times the cost of a
# plain one's (1.3 against 0.4 us for PushMessage's 11 fields; docs/performance.md, issue 22's
# fourth pass). Neither was hashable anyway (``data`` is a mapping).


@dataclass(slots=True)
class PushMessage:
    """One notification to one device (module docstring). Treat it as a value: a channel
    never changes a message it was given."""

    key: str  # idempotency key, unique per (occurrence, device); stable across retries
    channel: str  # the channel's name: "fcm", "apns", "simulated", ...
    token: str  # the device's registration token (never logged in full: see redact_token)
    title: str
    body: str
    data: Mapping[str, str] = field(default_factory=lambda: _NO_DATA)
    collapse_key: str | None = None
    expires_at: datetime | None = None  # aware; None: the provider's own default
    priority: str = "high"  # "high" (shown now) or "normal" (may be batched by the OS)
    subject: str | None = None  # whose device (for records and logs, not sent)
    device_id: int | None = None  # the registry's row, None for a resolver's device

    def ttl(self, now: datetime) -> timedelta | None:
        """The time left to live at ``now`` (never negative), None when no expiry is set."""
        if self.expires_at is None:
            return None
        return max(self.expires_at - now, timedelta(0))


@dataclass(slots=True)
class PushResult:
    """The provider's answer for one :class:`PushMessage` (a value, like the message)."""

    message: PushMessage
    status: PushStatus
    error: str | None = None  # a short, redacted description (no token, no credential)
    code: str | None = None  # the provider's code: UNREGISTERED, BadDeviceToken, http_503...
    retry_after: timedelta | None = None  # RATE_LIMITED (and TRANSIENT when the server said)

    @property
    def key(self) -> str:
        return self.message.key

    @property
    def ok(self) -> bool:
        """Delivered, now or before: this device's notification has happened."""
        return self.status in (PushStatus.DELIVERED, PushStatus.DUPLICATE)


def redact_token(token: str) -> str:
    """A device token as it may appear in a log line or an error: its last 6 characters."""
    return "…" + token[-6:] if len(token) > 8 else "…"


__all__ = ["PushMessage", "PushResult", "PushStatus", "redact_token"]
