"""Tables of bad (and of valid edge) inputs, and the runner that checks how the API refuses them.

Shared by ``tests/unit/test_bad_inputs.py`` (the pure API) and
``tests/integration/test_bad_inputs_api.py`` (the calls that touch the database). A case is a
call and the field its error must name; :func:`check_refused` runs it in a thread with a
deadline (a hang detector, not a speed assertion) and asserts the contract of issue 13: a
typed error (:class:`timezones.errors.InvalidInput`, a ``TockworkError``), whose ``field`` is
the one expected and appears in the message, and whose message is bounded.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest

from timezones.errors import MAX_MESSAGE, InvalidInput, TockworkError

# A call that has not returned by then is reported as a hang. Generous: the machine is shared.
DEADLINE_SECONDS = 20.0

MEGABYTE = "x" * 1_000_000
NUL = "a\x00b"
SURROGATE = "\ud800"

# Text any text field must refuse (name, value).
BAD_TEXTS: list[tuple[str, Any]] = [
    ("nul", NUL),
    ("surrogate", SURROGATE),
    ("surrogate-pair-halves", "x\udc00y"),
    ("megabyte", MEGABYTE),
]
# Values of the wrong type for a text field.
NOT_TEXT: list[tuple[str, Any]] = [
    ("int", 5),
    ("float", 2.5),
    ("bytes", b"daily@08:00"),
    ("list", ["a"]),
    ("object", object()),
]
# Instants that are not aware datetimes.
BAD_INSTANTS: list[tuple[str, Any]] = [
    ("str", "2026-01-01T00:00:00Z"),
    ("date", date(2026, 1, 1)),
    ("naive", datetime(2026, 1, 1)),
    ("int", 1_767_225_600),
    ("float", 1.5),
    ("time", time(8, 0)),
]
BAD_ZONES: list[tuple[str, Any]] = [
    ("typo", "America/Chicgo"),
    ("empty", ""),
    ("offset", "+05:00"),
    ("utc-offset", "UTC+5"),
    ("gmt-offset", "GMT-03:00"),
    ("path", "../etc/passwd"),
    ("trailing-slash", "America/"),
    ("leading-slash", "/UTC"),
    ("spaces", " UTC"),
    ("newline", "UTC\n"),
    ("lowercase", "europe/paris"),
    ("mars", "Mars/Base"),
    ("long-name", "A" * 300),
    *BAD_TEXTS,
    *NOT_TEXT,
]
# Rules that are malformed, out of range, or can never fire, in their text form.
BAD_RULE_TEXTS: list[str] = [
    # RRULE: intervals and counts that loop forever or mean nothing.
    "rrule:FREQ=DAILY;INTERVAL=0",
    "rrule:FREQ=MINUTELY;INTERVAL=0",
    "rrule:FREQ=DAILY;INTERVAL=-1",
    "rrule:FREQ=DAILY;INTERVAL=1.5",
    "rrule:FREQ=DAILY;INTERVAL=",
    "rrule:FREQ=DAILY;INTERVAL=99999999999999999999",
    "rrule:FREQ=DAILY;INTERVAL=\u0663",
    "rrule:FREQ=DAILY;COUNT=0",
    "rrule:FREQ=DAILY;COUNT=-3",
    "rrule:FREQ=DAILY;COUNT=" + "9" * 5000,
    "rrule:FREQ=DAILY;COUNT=\u00b2",
    # RRULE: dates that never occur.
    "rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
    "rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31",
    "rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=-30",
    "rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=-31",
    "rrule:FREQ=MONTHLY;BYMONTH=4,6,9,11;BYMONTHDAY=31",
    "rrule:FREQ=MONTHLY;BYMONTH=4;BYMONTHDAY=-31",
    "rrule:FREQ=YEARLY;BYYEARDAY=366;BYMONTH=1",
    "rrule:FREQ=YEARLY;BYYEARDAY=-366;BYMONTH=12",
    "rrule:FREQ=YEARLY;BYYEARDAY=1;BYMONTH=2",
    "rrule:FREQ=DAILY;BYMONTHDAY=31;BYYEARDAY=1",
    "rrule:FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=-30",
    "rrule:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
    "rrule:FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=-31",
    "rrule:FREQ=MONTHLY;BYDAY=6MO",
    "rrule:FREQ=YEARLY;BYMONTH=2;BYDAY=5MO;BYMONTHDAY=1",
    # RRULE: an interval that never meets its filters.
    "rrule:FREQ=DAILY;INTERVAL=7;BYDAY=TU",
    "rrule:FREQ=DAILY;INTERVAL=14;BYDAY=SU",
    "rrule:FREQ=MONTHLY;INTERVAL=12;BYMONTH=3",
    "rrule:FREQ=MONTHLY;INTERVAL=2;BYMONTH=2,4,6,8,10,12",
    "rrule:FREQ=HOURLY;INTERVAL=168;BYDAY=TU",
    "rrule:FREQ=HOURLY;INTERVAL=24;BYHOUR=5",
    "rrule:FREQ=MINUTELY;INTERVAL=1440;BYHOUR=5",
    "rrule:FREQ=MINUTELY;INTERVAL=60;BYMINUTE=30",
    "rrule:FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;BYYEARDAY=1",
    "rrule:DTSTART=2001-01-01T00:00;FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29",
    # RRULE: too costly to expand (a minute-by-minute walk to a date decades away).
    "rrule:FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;BYHOUR=8;BYMINUTE=0",
    "rrule:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO;BYHOUR=8",
    "rrule:FREQ=SECONDLY;BYHOUR=8;BYMONTH=2",
    # RRULE: text dateutil refuses, or that is not an RRULE.
    "rrule:FREQ=FORTNIGHTLY",
    "rrule:",
    "rrule:BYDAY=MO",
    "rrule:FREQ=DAILY;BYHOUR=24",
    "rrule:FREQ=DAILY;BYMINUTE=60",
    "rrule:FREQ=DAILY;BYDAY=XX",
    "rrule:FREQ=DAILY;BYSETPOS=0",
    "rrule:FREQ=DAILY;UNTIL=notadate",
    "rrule:FREQ=DAILY;UNTIL=2026-01-01Z",
    "rrule:FREQ=DAILY;FOO=1",
    "rrule:FREQ=DAILY\nRRULE:FREQ=WEEKLY",
    "rrule:DTSTART=2026-02-30T00:00;FREQ=DAILY",
    "rrule:DTSTART=2026-01-01T00:00Z;FREQ=DAILY",
    "rrule:FREQ=DAILY;BYMONTHDAY=\u0663",
    # Weekly: exact day names only.
    "weekly:monkey@08:00",
    "weekly:mo@08:00",
    "weekly:mondays@08:00",
    "weekly:lundi@08:00",
    "weekly:@08:00",
    "weekly:mon,@08:00",
    "weekly:mon,,tue@08:00",
    "weekly:mon@25:00",
    "weekly:" + ",".join(["mon"] * 40) + "@08:00",
    "weekly:funday@08:00",
    # Monthly: ASCII day numbers 1-31 or "last".
    "monthly:\u0663@08:00",
    "monthly:\u00b2@08:00",
    "monthly:0@08:00",
    "monthly:32@08:00",
    "monthly:-1@08:00",
    "monthly:1.0@08:00",
    "monthly:01a@08:00",
    "monthly:first@08:00",
    "monthly:" + "1" * 5000 + "@08:00",
    "monthly:15",
    # Times of day.
    "daily@24:00",
    "daily@8:00",
    "daily@08:60",
    "daily@08:00:60",
    "daily@\u0660\u0668:00",
    "daily@08:00Z",
    "daily@08:00+05:00",
    "daily@08:00.5",
    "daily@",
    "weekdays@noon",
    # Once: real local date-times only.
    "once:2026-02-30T08:00",
    "once:2026-13-01T00:00",
    "once:10000-01-01T00:00",
    "once:2026-01-01T08:00Z",
    "once:2026-01-01T08:00+01:00",
    "once:2026-01-01",
    "once:\u0662026-01-01T08:00",
    "once:",
    # Cron.
    "cron:* * * *",
    "cron:* * * * * *",
    "cron:60 * * * *",
    "cron:* 24 * * *",
    "cron:* * 0 * *",
    "cron:* * 32 * *",
    "cron:* * * 13 *",
    "cron:* * * * 8",
    "cron:*/0 * * * *",
    "cron:*/100 * * * *",
    "cron:\u00b2 * * * *",
    "cron:\u0663 * * * *",
    "cron:5-1 * * * *",
    "cron:0 0 31 2 *",
    "cron:0 0 30 2 *",
    "cron:0 0 31 4,6,9,11 *",
    "cron:@reboot",
    "cron:a b c d e",
    "cron:1,,2 * * * *",
    "cron:" + "1," * 300_000 + "1 * * * *",
    "cron:" + "9" * 5000 + " * * * *",
    # Non-ASCII white space between fields (cronie and croniter refuse it).
    "cron:0\u00a00 * * *",
    "cron:0 0\u3000* * *",
    "cron:0 0 *\u2003* *",
    "cron:0 0 * *\u0085*",
    "cron:0\x1c0 * * *",
    # Backwards ranges other than a day-of-week range ending on Sunday.
    "cron:0 9 * * SAT-FRI",
    "cron:0 9 * * 6-1",
    "cron:0 9 * DEC-JAN *",
    # Intervals.
    "every:0s",
    "every:-1s",
    "every:1.5s",
    "every:1d",
    "every:",
    "every:1\u0663s",
    "every:99999999999999h",
    "every:87841h",
    "every:1s@notadate",
    "every:1s@2026-01-01T00:00:00",
    "every:1s@0001-01-01T00:00:00+05:00",
    # Nothing parseable.
    "",
    "   ",
    "daily",
    "hourly@08:00",
    "{",
    "[1, 2]",
    '{"kind": "daily"}',
    '{"kind": "daily", "at": "08:00", "version": 2}',
    "x" * 1_000_000,
]
# Rules in their mapping (JSON) form.
BAD_RULE_MAPPINGS: list[Any] = [
    {},
    {"kind": []},
    {"kind": {"a": 1}},
    {"kind": "daily"},
    {"kind": "daily", "at": "08:00", "extra": 1},
    {"kind": "daily", "at": 800},
    {"kind": "daily", "at": "08:00", "version": 2},
    {"kind": "daily", "at": "08:00", "version": True},
    {"kind": "daily", "at": "08:00", "version": "1"},
    {1: "daily"},
    {"kind": "monthly", "day": True, "at": "08:00"},
    {"kind": "monthly", "day": "3", "at": "08:00"},
    {"kind": "monthly", "day": 3.0, "at": "08:00"},
    {"kind": "monthly", "day": 0, "at": "08:00"},
    {"kind": "weekly", "days": ["monkey"], "at": "08:00"},
    {"kind": "weekly", "days": [1], "at": "08:00"},
    {"kind": "weekly", "days": [], "at": "08:00"},
    {"kind": "interval", "every": 2**100},
    {"kind": "interval", "every": True},
    {"kind": "interval", "every": 0},
    {"kind": "interval", "every": "1s", "anchor": "2026-01-01T00:00:00"},
    {"kind": "interval", "every": "1s", "anchor": 5},
    {"kind": "rrule", "rrule": "FREQ=DAILY;INTERVAL=0"},
    {"kind": "rrule", "rrule": "FREQ=DAILY", "dtstart": "2026-01-01T00:00Z"},
    {"kind": "rrule", "rrule": 5},
    {"kind": "cron", "expr": 5},
    {"kind": "cron", "expr": "* * * * *", "wildcard": "sometimes"},
    {"kind": "once", "at": "2026-02-30T08:00"},
    {"kind": "daily", "at": NUL},
    {"kind": "cron", "expr": SURROGATE},
    {"kind": "rrule", "rrule": MEGABYTE},
]
# Values of other types where a rule is expected.
BAD_RULE_OBJECTS: list[Any] = [5, 2.5, None, b"daily@08:00", ["daily@08:00"], object(), True]
# Prefixes of each text form, to which the bad texts are appended.
RULE_PREFIXES = ["daily@08:00", "weekly:mon@", "monthly:", "once:", "cron:", "rrule:", "every:"]

BAD_DELAYS: list[tuple[str, Any]] = [
    ("negative", -1),
    ("inf", math.inf),
    ("minus-inf", -math.inf),
    ("nan", math.nan),
    ("text", "5"),
    ("bool", True),
    ("huge", 10**30),
    ("negative-timedelta", timedelta(seconds=-1)),
    ("huge-timedelta", timedelta(days=999_999_999)),
]
BAD_INT4: list[tuple[str, Any]] = [
    ("int4-overflow", 2**31),
    ("int8-overflow", 2**63),
    ("negative-int8", -(2**63) - 1),
    ("float", 1.5),
    ("text", "5"),
    ("bool", True),
    ("none", None),
    ("nan", math.nan),
]


@dataclass(frozen=True)
class Case:
    """One call that must be refused with an error naming ``field``."""

    id: str
    call: Callable[[], object]
    field: str

    def __repr__(self) -> str:  # pytest's ids: short
        return self.id


def cases_of(
    prefix: str,
    field: str,
    values: Iterable[tuple[str, Any]],
    make: Callable[[Any], Callable[[], object]],
) -> list[Case]:
    """A case per value: ``make(value)`` is the call."""
    return [Case(f"{prefix}-{name}", make(value), field) for name, value in values]


def run_bounded(call: Callable[[], object]) -> tuple[object, BaseException | None]:
    """``call()`` in a daemon thread; fails the test if it has not returned by the deadline."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE_SECONDS)
    if thread.is_alive():
        pytest.fail(f"the call did not return within {DEADLINE_SECONDS} s (a hang)")
    return box.get("result"), box.get("error")


def check_refused(case: Case) -> InvalidInput:
    """Run ``case`` and assert the bad-input contract; return the error."""
    result, error = run_bounded(case.call)
    if error is None:
        pytest.fail(f"accepted silently: returned {str(result)[:200]}")
    if not isinstance(error, InvalidInput):
        raise AssertionError(f"untyped error {type(error).__name__}: {str(error)[:300]}") from error
    assert isinstance(error, TockworkError)
    message = str(error)
    assert len(message) <= MAX_MESSAGE, f"message of {len(message)} characters"
    assert case.field in error.field, (error.field, message[:300])
    assert error.field in message, (error.field, message[:300])
    return error


def check_accepted(call: Callable[[], object]) -> object:
    """Run a valid edge input: it must return within the deadline."""
    result, error = run_bounded(call)
    if error is not None:
        raise AssertionError(f"valid input refused: {type(error).__name__}: {error}") from error
    return result


def deep(levels: int) -> Any:
    """A payload nested ``levels`` lists deep."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
