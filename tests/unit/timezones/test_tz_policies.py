"""Every policy on the notorious zones of issue 3, against hand-checked instants.

Assertions compare UTC instants (``.at``) and offsets, never aware local datetimes with ``==``
(Python ignores ``fold`` in same-zone comparisons, so such an assertion could not fail).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from timezones import Adjustment, next_after, occurrences


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def fires(
    rule: str,
    zone: str,
    after: str,
    count: int = 3,
    *,
    gap: str | None = None,
    fold: str | None = None,
) -> list[tuple[str, str, str | None, str]]:
    """(UTC, local offset, adjustment, key) of the first ``count`` fires."""
    out = []
    for occ in occurrences(rule, zone, utc(after), count=count, gap=gap, fold=fold):
        offset = occ.local.utcoffset()
        assert offset is not None
        minutes = int(offset.total_seconds() // 60)
        sign = "+" if minutes >= 0 else "-"
        out.append(
            (
                occ.at.strftime("%Y-%m-%dT%H:%MZ"),
                f"{occ.local:%H:%M}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}",
                None if occ.adjusted is None else occ.adjusted.value,
                occ.key,
            )
        )
    return out


NY_GAP = "2026-03-07T12:00Z"
NY_FOLD = "2026-10-31T12:00Z"


@pytest.mark.parametrize(
    ("gap", "expected"),
    [
        ("shift_forward", ("2026-03-08T07:30Z", "03:30-04:00", "gap_shifted", "2026-03-08T02:30")),
        (
            "at_transition",
            ("2026-03-08T07:00Z", "03:00-04:00", "gap_at_transition", "2026-03-08T02:30"),
        ),
        ("skip", ("2026-03-09T06:30Z", "02:30-04:00", None, "2026-03-09T02:30")),
    ],
)
def test_new_york_0230_on_spring_forward_night(gap: str, expected: tuple[str, ...]) -> None:
    assert fires("daily@02:30", "America/New_York", NY_GAP, 1, gap=gap) == [expected]


@pytest.mark.parametrize(
    ("fold", "expected"),
    [
        ("first", [("2026-11-01T05:30Z", "01:30-04:00", "fold_first", "2026-11-01T01:30")]),
        ("second", [("2026-11-01T06:30Z", "01:30-05:00", "fold_second", "2026-11-01T01:30")]),
        (
            "both",
            [
                ("2026-11-01T05:30Z", "01:30-04:00", "fold_first", "2026-11-01T01:30"),
                ("2026-11-01T06:30Z", "01:30-05:00", "fold_second", "2026-11-01T01:30#1"),
            ],
        ),
    ],
)
def test_new_york_0130_on_fall_back_night(fold: str, expected: list[tuple[str, ...]]) -> None:
    got = fires("daily@01:30", "America/New_York", NY_FOLD, 3, fold=fold)
    assert got[: len(expected)] == expected
    assert got[len(expected)][0] == "2026-11-02T06:30Z"


def test_new_york_0230_on_fall_back_night_is_plain() -> None:
    assert fires("daily@02:30", "America/New_York", NY_FOLD, 1) == [
        ("2026-11-01T07:30Z", "02:30-05:00", None, "2026-11-01T02:30")
    ]


@pytest.mark.parametrize("after", ["2026-11-01T05:40Z", "2026-11-01T06:10Z", "2026-11-01T05:30Z"])
def test_fold_slot_is_consumed_by_its_first_instant(after: str) -> None:
    """01:40 EDT or 01:10 EST (between the two 01:30s): the next fire is the next day."""
    occ = next_after("daily@01:30", "America/New_York", utc(after))
    assert occ is not None
    assert occ.at == utc("2026-11-02T06:30Z")


def test_cron_fixed_time_defaults_to_at_transition_and_fires_once_in_fold() -> None:
    assert fires("cron:30 2 * * *", "America/New_York", NY_GAP, 1)[0][:3] == (
        "2026-03-08T07:00Z",
        "03:00-04:00",
        "gap_at_transition",
    )
    fold = fires("cron:30 1 * * *", "America/New_York", NY_FOLD, 2)
    assert [f[0] for f in fold] == ["2026-11-01T05:30Z", "2026-11-02T06:30Z"]


def test_cron_wildcard_follows_the_wall_clock_through_both_transitions() -> None:
    spring = [f[0] for f in fires("cron:0 * * * *", "America/New_York", "2026-03-08T05:30Z", 3)]
    assert spring == ["2026-03-08T06:00Z", "2026-03-08T07:00Z", "2026-03-08T08:00Z"]
    fall = fires("cron:0 * * * *", "America/New_York", "2026-11-01T04:30Z", 3)
    assert [f[0] for f in fall] == ["2026-11-01T05:00Z", "2026-11-01T06:00Z", "2026-11-01T07:00Z"]
    assert [f[3] for f in fall] == ["2026-11-01T01:00", "2026-11-01T01:00#1", "2026-11-01T02:00"]


def test_cron_wildcard_minute_with_fixed_hour_is_skipped_on_gap_day_unless_anchored() -> None:
    wild = fires("cron:*/15 2 * * *", "America/New_York", NY_GAP, 1)
    assert wild[0][0] == "2026-03-09T06:00Z"
    anchored = fires("cron+anchored:*/15 2 * * *", "America/New_York", NY_GAP, 2)
    assert [f[0] for f in anchored] == ["2026-03-08T07:00Z", "2026-03-09T06:00Z"]
    folded = fires("cron:*/15 1 * * *", "America/New_York", NY_FOLD, 9)
    assert len([f for f in folded if f[0].startswith("2026-11-01")]) == 8


def test_lord_howe_half_hour_dst() -> None:
    gap = fires("daily@02:15", "Australia/Lord_Howe", "2026-10-03T00:00Z", 1)
    assert gap == [("2026-10-03T15:45Z", "02:45+11:00", "gap_shifted", "2026-10-04T02:15")]
    at = fires("daily@02:15", "Australia/Lord_Howe", "2026-10-03T00:00Z", 1, gap="at_transition")
    assert at[0][:3] == ("2026-10-03T15:30Z", "02:30+11:00", "gap_at_transition")
    fold = fires("daily@01:45", "Australia/Lord_Howe", "2026-04-04T00:00Z", 2, fold="both")
    assert [f[0] for f in fold] == ["2026-04-04T14:45Z", "2026-04-04T15:15Z"]
    hourly = [f[0] for f in fires("cron:0 * * * *", "Australia/Lord_Howe", "2026-10-03T13:10Z", 3)]
    assert hourly == ["2026-10-03T13:30Z", "2026-10-03T14:30Z", "2026-10-03T16:00Z"]


def test_sao_paulo_2018_midnight_gap_does_not_skip_the_day() -> None:
    got = fires("daily@00:00", "America/Sao_Paulo", "2018-11-03T12:00Z", 2)
    assert got[0][:3] == ("2018-11-04T03:00Z", "01:00-02:00", "gap_shifted")
    assert got[1][0] == "2018-11-05T02:00Z"
    assert fires("cron:0 0 * * *", "America/Sao_Paulo", "2018-11-03T12:00Z", 1)[0][0] == (
        "2018-11-04T03:00Z"
    )


def test_santiago_midnight_gap_and_2300_fold() -> None:
    assert fires("daily@00:30", "America/Santiago", "2026-09-05T12:00Z", 1)[0][:3] == (
        "2026-09-06T04:30Z",
        "01:30-03:00",
        "gap_shifted",
    )
    fold = fires("daily@23:30", "America/Santiago", "2026-04-04T12:00Z", 2, fold="both")
    assert [f[0] for f in fold] == ["2026-04-05T02:30Z", "2026-04-05T03:30Z"]


def test_havana_midnight_gap() -> None:
    got = fires("daily@00:30", "America/Havana", "2026-03-07T12:00Z", 1, gap="at_transition")
    assert got[0][:3] == ("2026-03-08T05:00Z", "01:00-04:00", "gap_at_transition")
    skip = fires("daily@00:30", "America/Havana", "2026-03-07T12:00Z", 1, gap="skip")
    assert skip[0][0] == "2026-03-09T04:30Z"


def test_casablanca_negative_dst_fold_and_2026_permanent_change() -> None:
    fold = fires("daily@02:30", "Africa/Casablanca", "2026-02-14T12:00Z", 2, fold="second")
    assert fold[0][:3] == ("2026-02-15T02:30Z", "02:30+00:00", "fold_second")
    sept = fires("daily@01:30", "Africa/Casablanca", "2026-09-19T12:00Z", 1, fold="both")
    assert sept[0][0] == "2026-09-20T00:30Z"


def test_troll_two_hour_dst() -> None:
    got = fires("daily@02:00", "Antarctica/Troll", "2026-03-28T12:00Z", 1)
    assert got[0][:3] == ("2026-03-29T02:00Z", "04:00+02:00", "gap_shifted")
    fold = fires("daily@01:30", "Antarctica/Troll", "2026-10-24T12:00Z", 2, fold="both")
    assert [f[0] for f in fold] == ["2026-10-24T23:30Z", "2026-10-25T01:30Z"]


def test_apia_2011_missing_friday_produces_no_fire() -> None:
    """2011-12-30 does not exist in Pacific/Apia: no fire, and never a Saturday for FR."""
    for gap in ("shift_forward", "at_transition", "skip"):
        daily = fires("daily@12:00", "Pacific/Apia", "2011-12-29T00:00Z", 2, gap=gap)
        assert [f[3] for f in daily] == ["2011-12-29T12:00", "2011-12-31T12:00"]
        weekly = fires("weekly:fri@12:00", "Pacific/Apia", "2011-12-25T00:00Z", 2, gap=gap)
        assert [f[3] for f in weekly] == ["2012-01-06T12:00", "2012-01-13T12:00"]
        for occ in occurrences(
            "weekly:fri@12:00", "Pacific/Apia", utc("2011-12-01T00:00Z"), count=8
        ):
            assert occ.local.weekday() == 4


def test_kiritimati_1994_missing_date_and_local_dates() -> None:
    """1994-12-31 does not exist in Pacific/Kiritimati (-10 -> +14): no fire that date."""
    got = fires("daily@12:00", "Pacific/Kiritimati", "1994-12-29T00:00Z", 3)
    assert [f[3] for f in got] == ["1994-12-29T12:00", "1994-12-30T12:00", "1995-01-01T12:00"]
    monthly = fires("monthly:1@00:30", "Pacific/Kiritimati", "2026-01-30T00:00Z", 1)
    assert monthly[0][:2] == ("2026-01-31T10:30Z", "00:30+14:00")


def test_kathmandu_fixed_offset_quarter_hour() -> None:
    got = fires("cron:*/20 * * * *", "Asia/Kathmandu", "2026-01-01T00:00Z", 2)
    assert [f[0] for f in got] == ["2026-01-01T00:15Z", "2026-01-01T00:35Z"]
    assert fires("daily@09:00", "Asia/Kathmandu", "2026-06-01T00:00Z", 1)[0][:2] == (
        "2026-06-01T03:15Z",
        "09:00+05:45",
    )


def test_dublin_negative_dst_behaves_like_london() -> None:
    for zone in ("Europe/Dublin", "Europe/London"):
        fold = fires("daily@01:30", zone, "2026-10-24T12:00Z", 2, fold="both")
        assert [f[0] for f in fold] == ["2026-10-25T00:30Z", "2026-10-25T01:30Z"]
        gap = fires("daily@01:30", zone, "2026-03-28T12:00Z", 1)
        assert gap[0][:3] == ("2026-03-29T01:30Z", "02:30+01:00", "gap_shifted")


def test_vancouver_2026_no_fall_back_under_tzdata_2026() -> None:
    got = fires("daily@09:00", "America/Vancouver", "2026-10-31T12:00Z", 3)
    assert [f[0] for f in got] == ["2026-10-31T16:00Z", "2026-11-01T16:00Z", "2026-11-02T16:00Z"]
    assert all(f[2] is None for f in got)
    occ = next_after("daily@01:30", "America/Vancouver", utc("2026-10-31T12:00Z"), fold="both")
    assert occ is not None and occ.adjusted is None


def test_adjustment_enum_values() -> None:
    assert {a.value for a in Adjustment} == {
        "gap_shifted",
        "gap_at_transition",
        "fold_first",
        "fold_second",
    }


def test_sub_minute_after_and_exact_hit() -> None:
    occ = next_after("daily@08:00", "UTC", utc("2026-01-01T08:00Z"))
    assert occ is not None and occ.at == utc("2026-01-02T08:00Z")
    just_before = utc("2026-01-01T08:00Z") - timedelta(microseconds=1)
    occ = next_after("daily@08:00", "UTC", just_before)
    assert occ is not None and occ.at == utc("2026-01-01T08:00Z")
