"""The error hierarchy: one root for all of Tockwork, one class per failure a caller can act on.

``timezones`` is the bottom layer (``timezones`` <- ``jobs`` <- ``scheduler``), so the roots that
every package shares live here and are re-exported by ``jobs`` and ``scheduler``:

- :class:`TockworkError`: every error any Tockwork package raises on purpose.
- :class:`InvalidInput`: bad input (an unknown zone, a malformed rule, a bad payload or flag).
  It carries ``field`` (the argument's name) and ``value`` (what was given), and its message
  names both, bounded in length. Nothing was written when it is raised. It derives from
  :class:`ValueError`, so ``except ValueError`` keeps working. The CLI maps it to exit code 2;
  any other :class:`TockworkError` is an operational failure (exit code 1).

Messages name the field and the value, e.g. ``invalid zone 'America/Chicgo': unknown time zone
(did you mean 'America/Chicago'?)``.
"""

from __future__ import annotations

import reprlib
from typing import Any

# A value embedded in a message is cut to this many characters: a 1 MB rule must not yield a
# 1 MB error message.
MAX_SHOWN = 160
# A whole message is cut to this many characters: a reason may quote several values (a rule,
# the part that failed, what a library said about it), each bounded, and the sum is bounded too.
MAX_MESSAGE = 1000


# Containers are shown to a bounded depth and width: the repr of a payload nested 10,000 deep
# would overflow the stack, and that of a million-item list costs megabytes before the cut.
_REPR = reprlib.Repr()
_REPR.maxlevel = 6
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 20
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = MAX_SHOWN


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """``repr(value)``, cut to ``limit`` characters with an ellipsis (containers: bounded)."""
    try:
        if isinstance(value, int) and value.bit_length() > 1000:
            text = f"<an integer of {value.bit_length()} bits>"  # repr() refuses > 4300 digits
        elif isinstance(value, list | tuple | dict | set | frozenset) and len(value) > 100:
            text = _REPR.repr(value)
        else:
            try:
                text = repr(value)
            except RecursionError:
                text = _REPR.repr(value)
    except Exception:  # a __repr__ that fails: say what it is instead
        text = f"<{type(value).__name__} object>"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def bounded(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` cut to ``limit`` characters with an ellipsis."""
    if len(message) > limit:
        return message[: limit - 3] + "..."
    return message


class TockworkError(Exception):
    """Root of every error raised by ``timezones``, ``jobs`` and ``scheduler``."""


class InvalidInput(TockworkError, ValueError):
    """An argument is invalid; nothing was written.

    ``field`` names the argument, ``value`` holds what was given and ``reason`` says what is
    wrong with it. Built with only a message (``InvalidRule("cron expr: ...")``), the field is
    the text before the first colon and ``value`` is ``None``.
    """

    field: str
    value: Any
    reason: str

    def __init__(self, field: str, value: Any = None, reason: str | None = None) -> None:
        if reason is None:
            # A preformatted message ("field: reason").
            message = bounded(field)
            head, sep, _ = message.partition(":")
            self.field = head if sep else ""
            self.value = value
            self.reason = message
            super().__init__(message)
            return
        self.field = bounded(field, MAX_SHOWN)
        self.value = value
        self.reason = bounded(reason)
        super().__init__(bounded(f"invalid {self.field} {shown(value)}: {self.reason}"))


class TimezoneError(InvalidInput):
    """Base class of every error raised by ``timezones``.

    Built as ``TimezoneError(field, value, reason)`` like every :class:`InvalidInput`; the
    message reads ``"{field}: {reason}"`` and the reason names the value (bounded with
    :func:`shown`), e.g. ``zone: unknown time zone 'America/Chicgo' in tz database 2026f (did
    you mean 'America/Chicago'?)``. That is the wording ``timezones`` has always used, and what
    docs and callers quote.
    """

    def __init__(self, field: str, value: Any = None, reason: str | None = None) -> None:
        super().__init__(field, value, reason)
        if reason is not None:
            self.args = (bounded(f"{self.field}: {self.reason}"),)


class InvalidRule(TimezoneError):
    """A recurrence rule is malformed, out of range, or can never fire (``0 0 31 2 *``)."""


class UnknownZone(TimezoneError):
    """A zone name is not in the time-zone database in use, or is a fixed UTC offset."""


class InvalidPolicy(TimezoneError):
    """A gap, fold or cron-wildcard policy is not one of the documented values."""


class NaiveDatetimeError(TimezoneError):
    """An instant was given without a time zone (``tzinfo`` is ``None``)."""
