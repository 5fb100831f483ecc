"""Cron text as users write it: the separators cronie accepts, day-of-week ranges ending on SUN."""

from __future__ import annotations

import re

import pytest

from timezones import InvalidRule, parse_rule
from timezones.cron import parse_cron

ALL_DAYS = frozenset(range(7))


@pytest.mark.parametrize(
    ("expr", "code", "name"),
    [
        ("0\u00a00 * * *", "U+00A0", "NO-BREAK SPACE"),
        ("0 0\u3000* * *", "U+3000", "IDEOGRAPHIC SPACE"),
        ("0 0 *\u2003* *", "U+2003", "EM SPACE"),
        ("0 0 * *\u0085*", "U+0085", "white-space control character"),
        ("0\u00a0 0 * * *", "U+00A0", "NO-BREAK SPACE"),
    ],
)
def test_non_ascii_white_space_is_refused_naming_the_character(
    expr: str, code: str, name: str
) -> None:
    with pytest.raises(InvalidRule, match=re.escape(code)) as raised:
        parse_cron(expr)
    assert name in str(raised.value)
    assert raised.value.field == "cron expr"
    # The rule text goes through the same check (it used to normalise the spaces first).
    with pytest.raises(InvalidRule, match=re.escape(code)):
        parse_rule(f"cron:{expr}")


def test_ascii_white_space_still_separates_fields() -> None:
    assert parse_cron("0\t0  * *\t*") == parse_cron("0 0 * * *")
    assert str(parse_rule("cron:0\t0  * * *")) == "cron:0 0 * * *"


@pytest.mark.parametrize("dow", ["MON-SUN", "Mon-Sun", "mon-sun", "1-0", "1-7", "0-6", "SUN-SAT"])
def test_a_week_written_monday_first_is_every_day(dow: str) -> None:
    assert parse_cron(f"0 9 * * {dow}").dows == ALL_DAYS


def test_a_range_ending_on_sunday_runs_to_seven() -> None:
    assert parse_cron("0 9 * * FRI-SUN").dows == frozenset({5, 6, 0})
    assert parse_cron("0 9 * * 5-0").dows == frozenset({5, 6, 0})
    assert parse_cron("0 9 * * MON-SUN/2").dows == frozenset({1, 3, 5, 0})
    assert parse_cron("0 9 * * SUN-SUN").dows == frozenset({0})


@pytest.mark.parametrize(
    ("expr", "field"),
    [
        ("0 9 * * SAT-FRI", "cron day of week"),
        ("0 9 * * 6-1", "cron day of week"),
        ("0 9 * * 7-1", "cron day of week"),
        ("0 9 * DEC-JAN *", "cron month"),
        ("30-0 9 * * *", "cron minute"),
        ("0 23-0 * * *", "cron hour"),
    ],
)
def test_other_backwards_ranges_are_refused(expr: str, field: str) -> None:
    with pytest.raises(InvalidRule, match="runs backwards") as raised:
        parse_cron(expr)
    assert raised.value.field == field
