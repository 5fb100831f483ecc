"""The scheduler's errors: one class per failure a caller can act on.

Every error derives from :class:`timezones.errors.TockworkError`; bad input derives from
:class:`timezones.errors.InvalidInput` (``field``, ``value``), which ``scheduler`` re-exports.
"""

from __future__ import annotations

from typing import Any

from timezones.errors import InvalidInput, TockworkError, shown


class SchedulerError(TockworkError):
    """Base class of every error raised by ``scheduler``."""


class InvalidSchedule(SchedulerError, InvalidInput):
    """A schedule argument is invalid (unknown zone, malformed rule, bad policy...).

    ``field`` names the argument and ``value`` holds what was given; nothing was written.
    A reason taken from a wrapped error does not repeat what the message already says: the
    prefixes ``"rule: "``, ``"invalid rule '...': "`` and ``"'...' is not a valid rule: "`` are
    dropped (else: ``invalid rule 'x': invalid rule 'x': rule: 'x' is not a valid rule: ...``).
    """

    def __init__(self, field: str, value: Any = None, reason: str | None = None) -> None:
        if reason is not None:
            prefixes = (
                f"{field}: ",
                f"invalid {field} {shown(value)}: ",
                f"{shown(value)} is not a valid {field}: ",
            )
            before = None
            while before != reason:
                before = reason
                for prefix in prefixes:
                    reason = reason.removeprefix(prefix)
        super().__init__(field, value, reason)


class ScheduleNotFound(SchedulerError, LookupError):
    def __init__(self, what: Any) -> None:
        self.what = what
        super().__init__(f"no schedule {what}")


class ScheduleExists(SchedulerError, InvalidInput):
    """A named definition with this key already exists in the organization."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__("key", key, "a schedule with this key already exists")


class InvalidPushConfig(SchedulerError, InvalidInput):
    """A push channel's configuration is missing or malformed (a setting, a credentials file).

    ``field`` names the setting (``TOCKWORK_FCM_CREDENTIALS``, ``key_id``...); ``value`` is what
    was given, never key material: a path, a name, or a redacted form.
    """
