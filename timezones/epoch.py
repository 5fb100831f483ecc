"""Epoch arithmetic: the integer clocks every other module of ``timezones`` computes on.

Two integer scales, never mixed:

* an **instant** ``u``: whole seconds since 1970-01-01T00:00Z (UTC);
* a **local slot** ``L``: whole seconds since 1970-01-01T00:00 *on the wall clock* of some zone,
  i.e. a naive local date-time read as if it were UTC. ``L // DAY`` is the local date (days
  since 1970-01-01) and ``L % DAY`` the local time of day.

An instant and a slot meet only through a UTC offset: ``L == u + offset(u)``. Going from ``u``
to ``L`` is a lookup (``timezones.zones.ZoneTable.offset_at``); going from ``L`` to ``u`` may
have no answer or two, and is done in one place only (``timezones.resolve``).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from timezones.errors import NaiveDatetimeError, TimezoneError, shown

__all__ = [
    "DAY",
    "EPOCH",
    "EPOCH_NAIVE",
    "EPOCH_ORDINAL",
    "FIRST_LOCAL",
    "LAST_LOCAL",
    "SECOND",
    "days_in_month",
    "epoch_seconds",
    "is_leap",
    "local_seconds",
    "seconds_of_day",
    "wall_time",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_NAIVE = datetime(1970, 1, 1)
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
SECOND = timedelta(seconds=1)
DAY = 86400
# The local slots a datetime can represent (the first day is kept free for negative offsets).
FIRST_LOCAL = (date(1, 1, 2).toordinal() - EPOCH_ORDINAL) * DAY
LAST_LOCAL = (date(9999, 12, 31).toordinal() - EPOCH_ORDINAL) * DAY


def epoch_seconds(value: datetime, field: str) -> int:
    """Whole UTC seconds since 1970 (floored) of an aware datetime; naive input is an error."""
    if not isinstance(value, datetime):
        raise TimezoneError(field, value, f"expected an aware datetime, got {shown(value)}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(
            field,
            value,
            f"naive datetime {value.isoformat()!r} has no time zone; pass an aware "
            "instant such as datetime(..., tzinfo=UTC)",
        )
    # timestamp() is exact to well under 0.5 s once the microseconds are taken off.
    return round(value.timestamp() - value.microsecond * 1e-6)


def local_seconds(value: datetime) -> int:
    """The local slot (see the module docstring) of a naive wall time, floored to the second."""
    return (value - EPOCH_NAIVE) // SECOND


def wall_time(slot: int) -> datetime:
    """The naive wall time of a local slot."""
    return EPOCH_NAIVE + timedelta(seconds=slot)


def seconds_of_day(value: time) -> int:
    """Seconds since local midnight of a time of day."""
    return value.hour * 3600 + value.minute * 60 + value.second


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31
