"""Dense RRULEs far from their DTSTART: the rebased expansion yields exactly dateutil's slots."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from dateutil import rrule as du_rrule

import timezones

# The reference expands from 2000 every time, which is slow for dense rules: the minutely ones
# are queried within two years of it (still thousands of periods away, so rebased).
FAR = [
    datetime(2026, 3, 28, 18, 0, tzinfo=UTC),
    datetime(2026, 3, 28, 23, 5, tzinfo=UTC),
    datetime(2031, 1, 1, 0, 0, tzinfo=UTC),
    datetime(2004, 2, 29, 12, 0, tzinfo=UTC),  # backwards: below the rebased memo
    datetime(2026, 3, 29, 0, 0, tzinfo=UTC),
]
NEAR = [
    datetime(2001, 6, 3, 18, 2, tzinfo=UTC),
    datetime(2001, 9, 1, 0, 0, tzinfo=UTC),
    datetime(2000, 3, 1, 7, 59, tzinfo=UTC),  # backwards
    datetime(2001, 12, 31, 23, 59, tzinfo=UTC),
]
CASES = [
    ("FREQ=MINUTELY;INTERVAL=15", NEAR),
    ("FREQ=MINUTELY;INTERVAL=7;BYHOUR=8", NEAR),
    ("FREQ=HOURLY;BYMINUTE=10", FAR),
    ("FREQ=HOURLY;INTERVAL=5", FAR),
    ("FREQ=DAILY;BYHOUR=0,3,6,9,12,15,18,21;BYMINUTE=0,30", FAR),
    ("FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH;BYHOUR=7,19", FAR),
]


@pytest.mark.parametrize(("text", "queries"), CASES, ids=[c[0] for c in CASES])
def test_rebased_slots_equal_dateutil_from_the_default_dtstart(
    text: str, queries: list[datetime]
) -> None:
    """Moving DTSTART by whole periods never changes the slots of a rule without COUNT."""
    rule = timezones.parse_rule(f"rrule:{text}")
    reference = du_rrule.rrulestr(text, dtstart=datetime(2000, 1, 1))
    for after in queries:
        got = list(timezones.occurrences(rule, "UTC", after, count=5))
        want = [
            d.replace(tzinfo=UTC)
            for d in reference.xafter(after.replace(tzinfo=None) + timedelta(seconds=1), count=5,
                                      inc=True)
        ]  # fmt: skip
        assert [o.at for o in got] == want, (text, after)


def test_count_rules_are_not_rebased() -> None:
    """COUNT numbers slots from DTSTART, so such a rule is expanded from its start."""
    rule = timezones.parse_rule("rrule:DTSTART=2026-01-01T00:00;FREQ=DAILY;COUNT=3")
    got = list(timezones.occurrences(rule, "UTC", datetime(2025, 12, 31, tzinfo=UTC)))
    assert [o.at.day for o in got] == [1, 2, 3]
    assert timezones.next_after(rule, "UTC", datetime(2026, 1, 3, 1, tzinfo=UTC)) is None


def test_a_dense_rule_in_2026_is_every_quarter_hour() -> None:
    """Far from DTSTART, without an expansion from 2000: the plain arithmetic answer."""
    rule = timezones.parse_rule("rrule:FREQ=MINUTELY;INTERVAL=15")
    after = datetime(2026, 11, 30, 21, 52, 30, tzinfo=UTC)
    got = [o.at for o in timezones.occurrences(rule, "Europe/Paris", after, count=3)]
    start = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
    assert got == [start, start + timedelta(minutes=15), start + timedelta(minutes=30)]
