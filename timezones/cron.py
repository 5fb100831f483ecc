"""Vixie cron expressions (5 fields) parsed into sets of integers.

Semantics follow Vixie/cronie: ``0`` and ``7`` are Sunday; names (``jan``, ``mon``) are accepted;
a day-of-week range that ends on Sunday (``MON-SUN``, ``5-0``) runs to 7, as croniter reads it
(every other backwards range is refused). Fields are separated by ASCII white space only: a
no-break or ideographic space (U+00A0, U+3000, ...) is refused, naming the character, as cronie
refuses it, rather than read as a separator.
when both day-of-month and day-of-week are restricted (neither field starts with ``*``) a day
matches if *either* matches, otherwise both must match. A job is a *wildcard* job when its minute
or its hour field starts with ``*`` (Vixie's ``MIN_STAR``/``HR_STAR``): such jobs follow the
observed wall clock through DST transitions unless ``anchored`` is asked for.
"""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date

from timezones.epoch import days_in_month as _days_in_month
from timezones.errors import InvalidRule, shown
from timezones.inputs import MAX_RULE_TEXT, check_text

__all__ = ["CronSpec", "parse_cron"]

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_LAST_YEAR = 9999
# The separators cronie accepts between fields (and str.split() would split on far more:
# U+00A0, U+3000, U+0085, the ASCII information separators U+001C-U+001F, ...).
_ASCII_SPACE = frozenset(" \t\n\r\x0b\x0c")


@dataclass(frozen=True)
class CronSpec:
    minutes: frozenset[int]
    hours: frozenset[int]
    doms: frozenset[int]
    months: frozenset[int]
    dows: frozenset[int]  # 0 = Sunday
    either_day: bool  # True: DOM or DOW (both restricted); False: DOM and DOW
    wildcard: bool  # minute or hour field starts with "*"
    times: tuple[int, ...]  # sorted seconds of day that match hour and minute

    def day_matches(self, year: int, month: int, dom: int, dow: int) -> bool:
        if month not in self.months:
            return False
        if self.either_day:
            return dom in self.doms or dow in self.dows
        return dom in self.doms and dow in self.dows

    def days_from(self, day: int) -> Iterator[int]:
        """Matching local dates (days since 1970-01-01) from ``day`` on, ascending."""
        first = date.fromordinal(day + _EPOCH_ORDINAL)
        year, month, dom = first.year, first.month, first.day
        while year <= _LAST_YEAR:
            if month in self.months:
                start = date(year, month, 1).toordinal()
                dow_first = (date(year, month, 1).weekday() + 1) % 7
                last = _days_in_month(year, month)
                for d in range(dom, last + 1):
                    dow = (dow_first + d - 1) % 7
                    if self.either_day:
                        if d in self.doms or dow in self.dows:
                            yield start + d - 1 - _EPOCH_ORDINAL
                    elif d in self.doms and dow in self.dows:
                        yield start + d - 1 - _EPOCH_ORDINAL
            dom = 1
            month += 1
            if month == 13:
                month, year = 1, year + 1

    def slots_from(self, local: int) -> Iterator[int]:
        """Matching local wall times (seconds since 1970-01-01 local) ``>= local``, ascending."""
        day, second = divmod(local, 86400)
        times = self.times
        for d in self.days_from(day):
            base = d * 86400
            i = bisect.bisect_left(times, second) if d == day else 0
            for t in times[i:]:
                yield base + t

    def next_match(self, local: int) -> int | None:
        """The first matching whole local minute ``>= local`` (local epoch seconds)."""
        for slot in self.slots_from(local):
            return slot
        return None


def _value(text: str, names: list[str] | None, offset: int, field: str, expr: str) -> int:
    lowered = text.lower()
    if names is not None and lowered in names:
        return names.index(lowered) + offset
    if not (text.isascii() and text.isdigit()) or len(text) > 2:
        raise InvalidRule(f"cron {field}", text, f"invalid value {shown(text)} in {shown(expr)}")
    return int(text)


def _field(
    text: str, low: int, high: int, field: str, expr: str, names: list[str] | None = None
) -> frozenset[int]:
    offset = low if field != "day of week" else 0
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise InvalidRule(
                f"cron {field}", text, f"empty list item in {shown(text)} of {shown(expr)}"
            )
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or not 0 < int(step_text) < 100:
                raise InvalidRule(
                    f"cron {field}",
                    step_text,
                    f"invalid step {shown(step_text)} in {shown(expr)}",
                )
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            first = _value(a, names, offset, field, expr)
            last = _value(b, names, offset, field, expr)
        else:
            first = _value(base, names, offset, field, expr)
            last = high if slash else first
        for v in (first, last):
            if not low <= v <= high:
                raise InvalidRule(
                    f"cron {field}", v, f"value {v} out of range {low}-{high} in {shown(expr)}"
                )
        if first > last and field == "day of week" and last == 0:
            last = 7  # MON-SUN: a week written Monday first ends on Sunday, 7
        if first > last:
            raise InvalidRule(
                f"cron {field}", base, f"range {shown(base)} runs backwards in {shown(expr)}"
            )
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _check_separators(expr: str) -> None:
    for i, ch in enumerate(expr):
        if ch.isspace() and ch not in _ASCII_SPACE:
            name = unicodedata.name(ch, "a white-space control character")
            raise InvalidRule(
                "cron expr",
                expr,
                f"white space U+{ord(ch):04X} ({name}) at position {i} of {shown(expr)} "
                "is not a field separator: separate the fields with ASCII spaces",
            )


def parse_cron(expr: str) -> CronSpec:
    """Parse a 5-field Vixie expression or a macro (``@daily``); raise :class:`InvalidRule`."""
    if not isinstance(expr, str):
        raise InvalidRule("cron expr", expr, f"expected text, got {shown(expr)}")
    check_text("cron expr", expr, MAX_RULE_TEXT, InvalidRule)
    if not expr.isascii() or not expr.isprintable():
        _check_separators(expr)
    text = " ".join(expr.split())
    if text.startswith("@"):
        if text.lower() not in _MACROS:
            raise InvalidRule("cron expr", expr, f"unsupported macro {shown(expr)}")
        text = _MACROS[text.lower()]
    fields = text.split(" ")
    if len(fields) != 5:
        raise InvalidRule(
            "cron expr", expr, f"expected 5 fields, got {len(fields)} in {shown(expr)}"
        )
    minute, hour, dom, month, dow = fields
    minutes = _field(minute, 0, 59, "minute", expr)
    hours = _field(hour, 0, 23, "hour", expr)
    doms = _field(dom, 1, 31, "day of month", expr)
    months = _field(month, 1, 12, "month", expr, _MONTHS)
    dows_raw = _field(dow, 0, 7, "day of week", expr, _DAYS)
    dows = frozenset(d % 7 for d in dows_raw)
    dom_star, dow_star = dom.startswith("*"), dow.startswith("*")
    either = not dom_star and not dow_star
    if not either and not any(d <= _MAX_DAYS[m - 1] for m in months for d in doms):
        raise InvalidRule("cron expr", expr, f"day of month and month never meet in {shown(expr)}")
    times = tuple(sorted(h * 3600 + m * 60 for h in hours for m in minutes))
    return CronSpec(
        minutes=minutes,
        hours=hours,
        doms=doms,
        months=months,
        dows=dows,
        either_day=either,
        wildcard=minute.startswith("*") or hour.startswith("*"),
        times=times,
    )
