"""The dashboard's query parameters, checked: a bad one is an :class:`InvalidInput` naming it.

Every route declares the parameters it accepts; an unknown name is refused too (a typo in a
filter would otherwise silently show everything). An empty value means "not given", so that a
filter form can submit its empty fields.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from jobs import JobStatus
from timezones.errors import InvalidInput

MAX_TEXT = 512
_QUEUE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Params:
    """Typed access to one request's query (or form) parameters."""

    def __init__(self, values: Mapping[str, str], allowed: Iterable[str]) -> None:
        self._values = {k: v for k, v in values.items()}
        names = set(allowed)
        for name in self._values:
            if name not in names:
                raise InvalidInput(
                    name, self._values[name][:100], f"unknown parameter (known: {sorted(names)})"
                )

    def text(self, name: str, *, max_length: int = MAX_TEXT) -> str | None:
        value = self._values.get(name, "").strip()
        if not value:
            return None
        if len(value) > max_length:
            raise InvalidInput(name, value[:100] + "...", f"longer than {max_length} characters")
        if not value.isprintable():
            raise InvalidInput(name, value, "must be printable text")
        return value

    def queue(self, name: str = "queue") -> str | None:
        value = self.text(name)
        if value is not None and not _QUEUE.match(value):
            raise InvalidInput(name, value, "not a queue name (lower case, digits, _ . -)")
        return value

    def statuses(self, name: str = "status") -> list[str] | None:
        value = self.text(name)
        if value is None:
            return None
        known = [s.value for s in JobStatus]
        result = []
        for part in value.split(","):
            status = part.strip()
            if status not in known:
                raise InvalidInput(name, value, f"each status must be one of {known}")
            result.append(status)
        return result

    def integer(self, name: str, *, low: int = 1, high: int = 2**63 - 1) -> int | None:
        value = self.text(name, max_length=20)
        if value is None:
            return None
        try:
            number = int(value)
        except ValueError:
            raise InvalidInput(name, value, "must be an integer") from None
        if not low <= number <= high:
            raise InvalidInput(name, value, f"must be from {low} to {high}")
        return number

    def instant(self, name: str) -> datetime | None:
        value = self.text(name, max_length=40)
        if value is None:
            return None
        try:
            result = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidInput(name, value, "must be an ISO 8601 instant") from None
        if result.tzinfo is None:
            raise InvalidInput(name, value, "has no offset; add Z or +HH:MM")
        return result

    def uuid(self, name: str) -> uuid.UUID | None:
        value = self.text(name, max_length=40)
        if value is None:
            return None
        try:
            return uuid.UUID(value)
        except ValueError:
            raise InvalidInput(name, value, "must be a UUID") from None

    def duration(self, name: str, *, default: str, maximum: timedelta) -> timedelta:
        value = self.text(name, max_length=10) or default
        match = _DURATION.match(value)
        if match is None:
            raise InvalidInput(name, value, "must be a number and a unit: 90s, 15m, 1h or 2d")
        result = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
        if not timedelta(seconds=1) <= result <= maximum:
            raise InvalidInput(name, value, f"must be from 1s to {maximum}")
        return result

    def choice(self, name: str, choices: Iterable[str], default: str | None = None) -> str | None:
        value = self.text(name)
        if value is None:
            return default
        options = list(choices)
        if value not in options:
            raise InvalidInput(name, value, f"must be one of {options}")
        return value


def id_list(name: str, value: str, *, maximum: int = 10_000) -> list[int]:
    """Job ids from a form: comma- or space-separated positive integers."""
    parts = [p for p in re.split(r"[\s,]+", value.strip()) if p]
    if not parts:
        raise InvalidInput(name, value[:100], "select at least one job")
    if len(parts) > maximum:
        raise InvalidInput(name, f"{len(parts)} ids", f"at most {maximum} per action")
    result = []
    for part in parts:
        if not part.isdigit() or int(part) < 1 or len(part) > 19:
            raise InvalidInput(name, part[:40], "job ids are positive integers")
        result.append(int(part))
    return result
