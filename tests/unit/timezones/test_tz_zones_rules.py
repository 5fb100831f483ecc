"""Zones (database choice, aliases, errors, tables) and rules (forms, round trips, errors)."""

from __future__ import annotations

import ast
import random
from datetime import UTC, datetime, time, timedelta
from pathlib import Path

import pytest

import timezones
from tests.oracle import brute
from timezones import (
    InvalidPolicy,
    InvalidRule,
    NaiveDatetimeError,
    TimezoneError,
    UnknownZone,
    get_zone,
    next_after,
    parse_rule,
    rule_to_json,
)
from timezones.zones import zone_entry

PACKAGE = Path(timezones.__file__).resolve().parent


def test_tzdb_version_is_the_pinned_tzdata_package() -> None:
    import importlib

    assert timezones.tzdb_version() == vars(importlib.import_module("tzdata"))["IANA_VERSION"]
    assert timezones.tz_database() == ("tzdata", None)


def test_vancouver_2026_uses_tzdata_not_the_older_system_files() -> None:
    after = datetime(2026, 11, 2, 17, 0, tzinfo=UTC)
    local = after.astimezone(get_zone("America/Vancouver"))
    assert local.utcoffset() == timedelta(hours=-7)


def test_system_database_is_explicit_configuration() -> None:
    try:
        timezones.use_tz_database("system")
        assert timezones.tz_database()[0] == "system"
        assert timezones.tzdb_version() != ""
        get_zone("America/New_York")
    finally:
        timezones.use_tz_database("tzdata")
    assert timezones.tz_database() == ("tzdata", None)
    with pytest.raises(UnknownZone, match="'nope'"):
        timezones.use_tz_database("nope")  # type: ignore[arg-type]


def test_aliases_keep_their_key_and_agree_with_canonical() -> None:
    for alias, canonical in (("Europe/Kiev", "Europe/Kyiv"), ("US/Eastern", "America/New_York")):
        zone = get_zone(alias)
        assert zone.key == alias
        a = datetime(2026, 6, 1, tzinfo=UTC)
        assert a.astimezone(zone).utcoffset() == a.astimezone(get_zone(canonical)).utcoffset()


def test_unknown_zone_names_value_and_suggests() -> None:
    with pytest.raises(UnknownZone, match=r"'America/Chicgo'.*'America/Chicago'"):
        get_zone("America/Chicgo")
    with pytest.raises(UnknownZone, match="'Mars/Olympus'"):
        get_zone("Mars/Olympus")
    with pytest.raises(UnknownZone, match=r"'\.\./\.\./etc/passwd'"):
        get_zone("../../etc/passwd")
    assert issubclass(UnknownZone, TimezoneError) and issubclass(TimezoneError, ValueError)


@pytest.mark.parametrize("name", ["+05:00", "UTC+5", "-0330", "GMT-3"])
def test_fixed_offsets_are_refused_with_zone_suggestions(name: str) -> None:
    with pytest.raises(UnknownZone, match=r"fixed UTC offset .* e\.g\. .*/"):
        get_zone(name)


def test_table_matches_zoneinfo_for_every_zone() -> None:
    """The integer transition tables agree with ZoneInfo.utcoffset at random instants and one
    second either side of every change, for every zone (1900-2100)."""
    rnd = random.Random(7)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for key in sorted(timezones.available_zones()):
        table = zone_entry(key).table
        tz = brute.zone(key)
        points = [rnd.randrange(-2_200_000_000, 4_100_000_000) for _ in range(40)]
        points += [
            t + d for t in table.trans if -2_200_000_000 < t < 4_100_000_000 for d in (-1, 0)
        ]
        for p in points:
            offset = (epoch + timedelta(seconds=p)).astimezone(tz).utcoffset()
            assert offset is not None
            assert table.offset_at(p) == offset.total_seconds(), (key, p)


def test_transitions_listing() -> None:
    got = timezones.transitions(
        "America/New_York", datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    )
    assert [(t.at.isoformat(), t.kind, t.length) for t in got] == [
        ("2026-03-08T07:00:00+00:00", "gap", timedelta(hours=1)),
        ("2026-11-01T06:00:00+00:00", "fold", timedelta(hours=1)),
    ]
    assert (
        timezones.transitions(
            "America/Vancouver", datetime(2026, 6, 1, tzinfo=UTC), datetime(2027, 6, 1, tzinfo=UTC)
        )
        == []
    )


def test_package_is_pure() -> None:
    """No clock reads outside clock.SystemClock, no imports of jobs/scheduler/psycopg."""
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                assert not any(n.split(".")[0] in ("jobs", "scheduler", "psycopg") for n in names)
            if isinstance(node, ast.Attribute) and node.attr in ("now", "utcnow", "time", "today"):
                if path.name == "clock.py":
                    continue
                assert not (
                    isinstance(node.value, ast.Name)
                    and node.value.id in ("datetime", "time", "date")
                ), (path, node.lineno)


COMPACT = [
    "daily@08:00",
    "weekdays@08:00",
    "weekly:mon,wed,fri@18:30",
    "monthly:15@09:00",
    "monthly:last@09:00",
    "once:2026-12-24T18:00",
    "cron:30 2 * * *",
    "cron+anchored:*/15 2 * * *",
    "rrule:FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=8;BYMINUTE=0",
    "rrule:DTSTART=2026-01-05T08:00;FREQ=DAILY;COUNT=3",
    "every:15m",
    "every:90s@2026-01-01T00:00:00Z",
]


@pytest.mark.parametrize("text", COMPACT)
def test_compact_json_and_model_round_trip(text: str) -> None:
    rule = parse_rule(text)
    assert str(rule) == text
    stored = rule_to_json(rule)
    assert stored["version"] == 1 and stored["kind"] == rule.kind
    assert parse_rule(stored) == rule
    import json

    assert parse_rule(json.loads(json.dumps(stored))) == rule
    assert parse_rule(json.dumps(stored)) == rule
    assert parse_rule(rule) is rule


def test_json_forms_from_the_issue() -> None:
    assert parse_rule({"kind": "daily", "at": "08:00"}) == parse_rule("daily@08:00")
    assert parse_rule({"kind": "cron", "expr": "30 2 * * *"}) == parse_rule("cron:30 2 * * *")
    rr = parse_rule({"kind": "rrule", "rrule": "FREQ=WEEKLY;BYDAY=MO,WE;BYHOUR=8;BYMINUTE=0"})
    assert isinstance(rr, timezones.RRuleRule)
    daily = parse_rule("daily@08:00")
    assert isinstance(daily, timezones.DailyRule) and daily.at == time(8, 0)
    with pytest.raises(Exception):  # noqa: B017 - frozen model: any mutation error will do
        daily.at = time(9, 0)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("daily@25:00", "at: expected a local time"),
        ("weekly:funday@08:00", "unknown day 'funday'"),
        ("monthly:32@09:00", "day"),
        ("once:2026-12-24T18:00+01:00", "without offset"),
        ("cron:0 0 31 2 *", "never meet"),
        ("cron:61 * * * *", "minute: value 61 out of range"),
        ("cron:* * * *", "expected 5 fields"),
        ("cron:*/0 * * * *", "invalid step"),
        ("rrule:FREQ=SOMETIMES", "invalid RRULE"),
        ("rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30", "never occurs"),
        ("every:0m", "positive duration"),
        ("hourly@08:00", "unknown rule kind"),
        ("08:00", "unknown rule kind"),
        ("daily", "cannot parse"),
        ("fortnightly:x", "unknown rule kind 'fortnightly'"),
        ({"kind": "daily", "at": "08:00", "version": 2}, "unsupported rule version 2"),
        ({"kind": "bogus"}, "unknown rule kind 'bogus'"),
        ({"kind": "daily", "at": "08:00", "extra": 1}, "extra"),
    ],
)
def test_invalid_rules_fail_at_parse_time_naming_the_value(value: object, needle: str) -> None:
    with pytest.raises(InvalidRule, match=None) as info:
        parse_rule(value)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_policy_and_naive_errors() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidPolicy, match="gap: unknown policy 'later'"):
        next_after("daily@08:00", "UTC", after, gap="later")
    with pytest.raises(InvalidPolicy, match="fold: unknown policy 'last'"):
        next_after("daily@08:00", "UTC", after, fold="last")
    with pytest.raises(NaiveDatetimeError, match="after: naive datetime '2026-01-01T00:00:00'"):
        next_after("daily@08:00", "UTC", datetime(2026, 1, 1))


def test_once_interval_and_exhausted_rules() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert next_after("once:2025-12-24T18:00", "Europe/Paris", after) is None
    occ = next_after("once:2026-12-24T18:00", "Europe/Paris", after)
    assert occ is not None and occ.at == datetime(2026, 12, 24, 17, 0, tzinfo=UTC)
    assert occ.key == "2026-12-24T18:00"
    every = list(
        timezones.occurrences("every:90s@2026-01-01T00:00:00Z", "Asia/Tokyo", after, count=2)
    )
    assert [o.at for o in every] == [after + timedelta(seconds=90), after + timedelta(seconds=180)]
    assert every[0].key == "2026-01-01T00:01:30Z"
    done = timezones.occurrences("rrule:DTSTART=2026-01-05T08:00;FREQ=DAILY;COUNT=3", "UTC", after)
    assert len(list(done)) == 3
    until = "rrule:DTSTART=2026-01-05T08:00;FREQ=DAILY;UNTIL=20260107T070000Z"
    assert len(list(timezones.occurrences(until, "Europe/Paris", after))) == 3  # inclusive
    until = "rrule:DTSTART=2026-01-05T08:00;FREQ=DAILY;UNTIL=20260107T065959Z"
    assert len(list(timezones.occurrences(until, "Europe/Paris", after))) == 2
