"""The HTTP response headers the outbound channels read, parsed once for all of them (the push
providers' channels, the webhook deliveries): ``Retry-After``."""

from __future__ import annotations

from contextlib import suppress
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

# A delay-seconds value longer than this is read as this (timedelta overflows near 8.6e13 s).
_MAX_SECONDS = 10**9


def retry_after(value: str | None, now: datetime) -> timedelta | None:
    """A ``Retry-After`` header (delay-seconds or an HTTP date) as a delay from ``now``, never
    negative; None when absent or malformed. Callers bound it as their protocol requires."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return timedelta(seconds=int(text) if len(text) <= 9 else _MAX_SECONDS)
    with suppress(TypeError, ValueError, IndexError, OverflowError):
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # '-0000': UTC (RFC 5322)
            when = when.replace(tzinfo=UTC)
        return max(when - now, timedelta(0))
    return None
