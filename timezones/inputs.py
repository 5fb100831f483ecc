"""Text inputs: the checks every string a caller passes goes through before it is used.

PostgreSQL stores neither the NUL character (in ``text`` or ``jsonb``) nor a lone UTF-16
surrogate (``"\\ud800"``, which has no UTF-8 encoding); a text of megabytes makes a parser or
an error message cost as much. So a text field is refused, with an :class:`InvalidInput` naming
it, when it is not a ``str``, is longer than its bound, or holds either character. The checks
cost one scan of the text (``str.isascii`` answers for most inputs at once).

Bounds on the texts ``timezones`` parses: a rule or a cron expression is at most
:data:`MAX_RULE_TEXT` characters, a zone name at most :data:`MAX_ZONE_NAME`.
"""

from __future__ import annotations

from typing import Any

from timezones.errors import InvalidInput, TimezoneError, shown

__all__ = ["MAX_RULE_TEXT", "MAX_ZONE_NAME", "check_text", "text_problem"]

MAX_RULE_TEXT = 4096
MAX_ZONE_NAME = 255


def text_problem(value: str, max_chars: int | None = None) -> str | None:
    """What makes ``value`` unusable as stored text, or ``None`` when it is fine."""
    if max_chars is not None and len(value) > max_chars:
        return f"longer than {max_chars} characters ({len(value)})"
    if "\x00" in value:
        return "contains the NUL character, which PostgreSQL cannot store"
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "contains a lone surrogate (not valid Unicode text)"
    return None


def check_text(
    field: str,
    value: Any,
    max_chars: int | None = None,
    error: type[InvalidInput] = InvalidInput,
) -> str:
    """``value`` if it is a ``str`` fit to store (see the module docstring); else ``error``."""
    if not isinstance(value, str):
        raise error(field, value, f"must be a string, got {type(value).__name__}")
    problem = text_problem(value, max_chars)
    if problem is not None:
        # A TimezoneError's message is "field: reason", so its reason names the value.
        raise error(
            field,
            value,
            f"{shown(value)} {problem}" if issubclass(error, TimezoneError) else problem,
        )
    return value
