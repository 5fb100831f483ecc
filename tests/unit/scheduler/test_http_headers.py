"""``Retry-After`` as every outbound channel reads it (scheduler/http_headers.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from scheduler.http_headers import retry_after
from scheduler.webhooks.delivery import MAX_RETRY_AFTER
from scheduler.webhooks.delivery import retry_after as webhook_retry_after

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def test_seconds_and_dates_become_delays_from_now() -> None:
    assert retry_after("120", NOW) == timedelta(seconds=120)
    assert retry_after("Sun, 01 Mar 2026 08:05:00 GMT", NOW) == timedelta(minutes=5)
    assert retry_after("Sun, 01 Mar 2026 08:05:00 -0000", NOW) == timedelta(minutes=5)
    assert retry_after("Sun, 01 Mar 2026 07:00:00 GMT", NOW) == timedelta(0)


def test_what_cannot_be_read_is_none_and_nothing_overflows() -> None:
    for bad in (None, "", "soon", "-5", "1.5", "Sun, 99 Foo 2026"):
        assert retry_after(bad, NOW) is None, bad
    assert retry_after("9" * 40, NOW) == timedelta(seconds=10**9)
    assert retry_after("Fri, 31 Dec 9999 23:59:59 GMT", NOW) is not None


def test_the_webhooks_cap_the_delay() -> None:
    assert webhook_retry_after("9" * 40, NOW) == MAX_RETRY_AFTER
    assert webhook_retry_after("30", NOW) == timedelta(seconds=30)
    assert webhook_retry_after("soon", NOW) is None
