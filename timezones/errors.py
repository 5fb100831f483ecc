"""The error hierarchy of ``timezones``: one base class, one class per failure a caller can act on.

Every message names the field and the value, e.g. ``zone: unknown time zone 'America/Chicgo'
(did you mean 'America/Chicago'?)``. All errors derive from :class:`ValueError`, so code that
validates input with ``except ValueError`` keeps working.
"""

from __future__ import annotations


class TimezoneError(ValueError):
    """Base class of every error raised by ``timezones``."""


class InvalidRule(TimezoneError):
    """A recurrence rule is malformed, out of range, or can never fire (``0 0 31 2 *``)."""


class UnknownZone(TimezoneError):
    """A zone name is not in the time-zone database in use, or is a fixed UTC offset."""


class InvalidPolicy(TimezoneError):
    """A gap, fold or cron-wildcard policy is not one of the documented values."""


class NaiveDatetimeError(TimezoneError):
    """An instant was given without a time zone (``tzinfo`` is ``None``)."""
