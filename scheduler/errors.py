"""The scheduler's errors: one class per failure a caller can act on."""

from __future__ import annotations

from typing import Any


class SchedulerError(Exception):
    """Base class of every error raised by ``scheduler``."""


class InvalidSchedule(SchedulerError, ValueError):
    """A schedule argument is invalid (unknown zone, malformed rule, bad policy...).

    ``field`` names the argument and ``value`` holds what was given; nothing was written.
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 160:
            shown = shown[:157] + "..."
        super().__init__(f"invalid {field} {shown}: {reason}")


class ScheduleNotFound(SchedulerError, LookupError):
    def __init__(self, what: Any) -> None:
        self.what = what
        super().__init__(f"no schedule {what}")


class ScheduleExists(SchedulerError, ValueError):
    """A named definition with this key already exists in the organization."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"a schedule with key {key!r} already exists")
