"""The scheduler's errors: one class per failure a caller can act on.

Every error derives from :class:`timezones.errors.TockworkError`; bad input derives from
:class:`timezones.errors.InvalidInput` (``field``, ``value``), which ``scheduler`` re-exports.
"""

from __future__ import annotations

from typing import Any

from timezones.errors import InvalidInput, TockworkError


class SchedulerError(TockworkError):
    """Base class of every error raised by ``scheduler``."""


class InvalidSchedule(SchedulerError, InvalidInput):
    """A schedule argument is invalid (unknown zone, malformed rule, bad policy...).

    ``field`` names the argument and ``value`` holds what was given; nothing was written.
    """


class ScheduleNotFound(SchedulerError, LookupError):
    def __init__(self, what: Any) -> None:
        self.what = what
        super().__init__(f"no schedule {what}")


class ScheduleExists(SchedulerError, InvalidInput):
    """A named definition with this key already exists in the organization."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__("key", key, "a schedule with this key already exists")
