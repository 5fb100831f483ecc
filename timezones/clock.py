"""Injectable clocks: the one seam through which Tockwork code learns "now".

``timezones`` itself never reads the clock; ``jobs`` and ``scheduler`` take a :class:`Clock`.
:class:`SystemClock` is the only place in the code base allowed to read the wall clock;
tests pin time with :class:`FrozenClock` (also available as a pytest helper in
``timezones.testing``). Every clock returns aware UTC instants.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from timezones.errors import NaiveDatetimeError

__all__ = ["Clock", "FrozenClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of the current instant."""

    def now(self) -> datetime:
        """The current instant, aware, in UTC."""
        ...


class SystemClock:
    """The real wall clock (``datetime.now(UTC)``): the single sanctioned clock read."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class FrozenClock:
    """A clock that stands still until told to move; thread-safe.

    >>> clock = FrozenClock(datetime(2026, 3, 8, 6, 59, tzinfo=UTC))
    >>> clock.advance(minutes=2).isoformat()
    '2026-03-08T07:01:00+00:00'
    """

    def __init__(self, start: datetime) -> None:
        self._now = _utc(start, "start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> datetime:
        """Jump to ``instant`` (aware; may go backwards, like a corrected system clock)."""
        with self._lock:
            self._now = _utc(instant, "instant")
            return self._now

    def advance(
        self,
        delta: timedelta | None = None,
        *,
        days: float = 0,
        hours: float = 0,
        minutes: float = 0,
        seconds: float = 0,
    ) -> datetime:
        """Move forward by ``delta`` and/or the keyword amounts; return the new instant."""
        step = (delta or timedelta()) + timedelta(
            days=days, hours=hours, minutes=minutes, seconds=seconds
        )
        with self._lock:
            self._now = self._now + step
            return self._now

    def __repr__(self) -> str:
        return f"FrozenClock({self._now.isoformat()!r})"


def _utc(value: datetime, field: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(field, value, f"naive datetime {value.isoformat()!r} has no zone")
    return value.astimezone(UTC)
