"""Local wall time -> instant in one place (``timezones.resolve``), and typed errors.

America/New_York 2026: the clocks jump 02:00 EST -> 03:00 EDT at 2026-03-08T07:00Z (02:30 does
not exist) and go back 02:00 EDT -> 01:00 EST at 2026-11-01T06:00Z (01:30 happens twice).
Assertions compare UTC instants and offsets, never aware local datetimes with ``==``
(docs/dst-semantics.md, invariants 13-16).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

import pytest

import timezones
from timezones import InvalidPolicy, InvalidRule, NaiveDatetimeError, TimezoneError, UnknownZone
from timezones.epoch import local_seconds
from timezones.resolve import Fold, Gap, Unambiguous, classify, resolve
from timezones.zones import zone_entry

NY = "America/New_York"
NOT_A_DATETIME: Any = "2026-01-01"
EST, EDT = -5 * 3600, -4 * 3600


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def test_classify_names_the_three_kinds() -> None:
    table = zone_entry(NY).table
    noon = classify(table, local_seconds(datetime(2026, 3, 8, 12, 0)))
    assert isinstance(noon, Unambiguous)
    assert noon.instant == _utc(2026, 3, 8, 16, 0).timestamp()
    gap = classify(table, local_seconds(datetime(2026, 3, 8, 2, 30)))
    assert isinstance(gap, Gap)
    assert (gap.transition, gap.offset_before, gap.offset_after) == (
        _utc(2026, 3, 8, 7, 0).timestamp(),
        EST,
        EDT,
    )
    fold = classify(table, local_seconds(datetime(2026, 11, 1, 1, 30)))
    assert isinstance(fold, Fold)
    assert (fold.earlier, fold.later) == (
        _utc(2026, 11, 1, 5, 30).timestamp(),
        _utc(2026, 11, 1, 6, 30).timestamp(),
    )
    # Close to a transition but on one side of it: still unambiguous.
    near = classify(table, local_seconds(datetime(2026, 3, 8, 3, 0)))
    assert isinstance(near, Unambiguous)
    assert near.instant == _utc(2026, 3, 8, 7, 0).timestamp()


def test_resolve_matches_on_the_policy() -> None:
    table = zone_entry(NY).table
    slot = local_seconds(datetime(2026, 3, 8, 2, 30))
    gap = classify(table, slot)
    policies = timezones.GapPolicy
    shifted = resolve(gap, slot, policies.SHIFT_FORWARD, timezones.FoldPolicy.FIRST)
    assert shifted == [
        (int(_utc(2026, 3, 8, 7, 30).timestamp()), timezones.Adjustment.GAP_SHIFTED, 0)
    ]
    at = resolve(gap, slot, policies.AT_TRANSITION, timezones.FoldPolicy.FIRST)
    assert at == [
        (int(_utc(2026, 3, 8, 7, 0).timestamp()), timezones.Adjustment.GAP_AT_TRANSITION, 0)
    ]
    assert resolve(gap, slot, policies.SKIP, timezones.FoldPolicy.FIRST) == []
    slot = local_seconds(datetime(2026, 11, 1, 1, 30))
    fold = classify(table, slot)
    both = resolve(fold, slot, policies.SHIFT_FORWARD, timezones.FoldPolicy.BOTH)
    assert [(u - int(_utc(2026, 11, 1).timestamp()), index) for u, _, index in both] == [
        (5 * 3600 + 1800, 0),
        (6 * 3600 + 1800, 1),
    ]


@pytest.mark.parametrize(
    ("local", "gap", "fold", "utc", "offset_hours"),
    [
        (datetime(2026, 3, 8, 2, 30), "shift_forward", "first", _utc(2026, 3, 8, 7, 30), -4),
        (datetime(2026, 3, 8, 2, 30), "at_transition", "first", _utc(2026, 3, 8, 7, 0), -4),
        (datetime(2026, 11, 1, 1, 30), "shift_forward", "first", _utc(2026, 11, 1, 5, 30), -4),
        (datetime(2026, 11, 1, 1, 30), "shift_forward", "second", _utc(2026, 11, 1, 6, 30), -5),
        (datetime(2026, 6, 1, 9, 15, 30), "skip", "second", _utc(2026, 6, 1, 13, 15, 30), -4),
    ],
)
def test_resolve_local(
    local: datetime, gap: str, fold: str, utc: datetime, offset_hours: int
) -> None:
    got = timezones.resolve_local(local, NY, gap=gap, fold=fold)
    assert got is not None
    assert got.utcoffset() == timedelta(0)
    assert got.timestamp() == utc.timestamp()
    assert got.astimezone(timezones.get_zone(NY)).utcoffset() == timedelta(hours=offset_hours)


def test_resolve_local_defaults_and_refusals() -> None:
    # Defaults: shift_forward and first (PEP 495 fold=0 gives the same instants).
    for local in (datetime(2026, 3, 8, 2, 30), datetime(2026, 11, 1, 1, 30)):
        got = timezones.resolve_local(local, timezones.get_zone(NY))
        pep495 = local.replace(tzinfo=timezones.get_zone(NY)).astimezone(UTC)
        assert got is not None and got.timestamp() == pep495.timestamp()
    assert timezones.resolve_local(datetime(2026, 3, 8, 2, 30), NY, gap="skip") is None
    with pytest.raises(InvalidPolicy) as policy:
        timezones.resolve_local(datetime(2026, 11, 1, 1, 30), NY, fold="both")
    assert (policy.value.field, policy.value.value) == ("fold", "both")
    aware = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(TimezoneError) as error:
        timezones.resolve_local(aware, NY)
    assert (error.value.field, error.value.value) == ("local", aware)
    with pytest.raises(UnknownZone):
        timezones.resolve_local(datetime(2026, 1, 1), "Mars/Olympus")


def _raised(fn: Any) -> TimezoneError:
    with pytest.raises(TimezoneError) as info:
        fn()
    return info.value


def test_errors_carry_field_value_and_a_message_naming_both() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    cases: list[tuple[Any, type[TimezoneError], str, object, str]] = [
        (
            lambda: timezones.get_zone("America/Chicgo"),
            UnknownZone,
            "zone",
            "America/Chicgo",
            "zone: unknown time zone 'America/Chicgo'",
        ),
        (
            lambda: timezones.get_zone("+05:00"),
            UnknownZone,
            "zone",
            "+05:00",
            "zone: fixed UTC offset '+05:00'",
        ),
        (
            lambda: timezones.next_after("daily@08:00", "UTC", after, gap="later"),
            InvalidPolicy,
            "gap",
            "later",
            "gap: unknown policy 'later'",
        ),
        (
            lambda: timezones.next_after("daily@08:00", "UTC", datetime(2026, 1, 1)),
            NaiveDatetimeError,
            "after",
            datetime(2026, 1, 1),
            "after: naive datetime",
        ),
        (
            lambda: timezones.parse_rule("cron:61 * * * *"),
            InvalidRule,
            "rule",
            "cron:61 * * * *",
            "minute: value 61 out of range",
        ),
        (
            lambda: timezones.parse_rule("fortnightly:x"),
            InvalidRule,
            "kind",
            "fortnightly",
            "kind: unknown rule kind 'fortnightly'",
        ),
        (
            lambda: timezones.parse_rule({"kind": "daily", "at": "08:00", "version": 2}),
            InvalidRule,
            "version",
            2,
            "version: unsupported rule version 2",
        ),
        (
            lambda: list(timezones.occurrences("daily@08:00", "UTC", after, count=-1)),
            TimezoneError,
            "count",
            -1,
            "count: must be an integer >= 0",
        ),
        (
            lambda: timezones.FrozenClock(datetime(2026, 1, 1)),
            NaiveDatetimeError,
            "start",
            datetime(2026, 1, 1),
            "start: naive datetime",
        ),
        (
            lambda: timezones.next_after("daily@08:00", "UTC", NOT_A_DATETIME),
            TimezoneError,
            "after",
            "2026-01-01",
            "after: expected an aware datetime",
        ),
    ]
    for fn, cls, field, value, text in cases:
        error = _raised(fn)
        assert type(error) is cls, (text, error)
        assert (error.field, error.value) == (field, value), str(error)
        assert text in str(error)
        assert str(error) == f"{field}: {error.reason}"


def test_rule_time_names() -> None:
    """The three kinds of time: a time of day, a naive wall time, an aware instant."""
    daily = timezones.parse_rule("daily@08:00")
    assert isinstance(daily, timezones.DailyRule)
    assert daily.time_of_day == daily.at == time(8, 0)
    once = timezones.parse_rule("once:2026-12-24T18:00")
    assert isinstance(once, timezones.OnceRule)
    assert once.wall_time == once.at == datetime(2026, 12, 24, 18, 0)
    assert once.wall_time.tzinfo is None
    occ = timezones.next_after(once, "Europe/Paris", datetime(2026, 1, 1, tzinfo=UTC))
    assert occ is not None and occ.instant is occ.at
    assert occ.instant.utcoffset() == timedelta(0)
    assert occ.instant.timestamp() == _utc(2026, 12, 24, 17, 0).timestamp()
    # The persisted forms keep the original field name.
    assert timezones.rule_to_json(daily) == {"version": 1, "kind": "daily", "at": "08:00"}
    assert timezones.rule_to_json(once) == {"version": 1, "kind": "once", "at": "2026-12-24T18:00"}
    change = timezones.transitions(NY, _utc(2026, 3, 1), _utc(2026, 3, 31))[0]
    assert change.instant is change.at
