"""Quiet hours: the end of a window is a local wall time resolved through ``timezones``.

America/New_York 2026: clocks jump 02:00 EST -> 03:00 EDT at 2026-03-08T07:00Z (02:30 does
not exist) and go back 02:00 EDT -> 01:00 EST at 2026-11-01T06:00Z (01:30 happens twice). A
window end in the gap is shifted forward (03:30 EDT), one in the fold is the first 01:30 (EDT),
as docs/time-zones.md ("Quiet hours") states. Assertions compare UTC instants and offsets, never
aware local datetimes of one zone with ``==`` (Python ignores ``fold`` there).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from scheduler.model import QuietAction, QuietHours
from timezones import get_zone

NY = get_zone("America/New_York")


def _end(window: QuietHours, local: datetime) -> datetime:
    end = window.end_after(local.replace(tzinfo=NY), NY)
    assert end.utcoffset() == timedelta(0)
    return end


def test_a_window_ending_in_the_spring_gap_ends_at_the_shifted_instant() -> None:
    window = QuietHours(time(22, 0), time(2, 30), QuietAction.DEFER)
    end = _end(window, datetime(2026, 3, 7, 23, 0))  # the evening before the jump
    assert end.timestamp() == datetime(2026, 3, 8, 7, 30, tzinfo=UTC).timestamp()
    local = end.astimezone(NY)
    assert (local.hour, local.minute) == (3, 30)
    assert local.utcoffset() == timedelta(hours=-4)  # EDT: 02:30 EST does not exist


def test_a_window_ending_in_the_autumn_fold_ends_at_the_first_instant() -> None:
    window = QuietHours(time(22, 0), time(1, 30), QuietAction.DEFER)
    end = _end(window, datetime(2026, 10, 31, 23, 0))
    assert end.timestamp() == datetime(2026, 11, 1, 5, 30, tzinfo=UTC).timestamp()
    local = end.astimezone(NY)
    assert (local.hour, local.minute, local.fold) == (1, 30, 0)
    assert local.utcoffset() == timedelta(hours=-4)  # EDT, not the second 01:30 EST (06:30Z)
    # From inside the window after midnight (00:40 EDT), the same end.
    again = _end(window, datetime(2026, 11, 1, 0, 40))
    assert again.timestamp() == end.timestamp()


def test_from_the_second_pass_of_the_fold_the_window_ends_at_the_second_instant() -> None:
    """01:10 EST (the second 01:10, 06:10Z) is inside 22:00-01:30; the first 01:30 (05:30Z) has
    passed, so the window ends at the second 01:30 (06:30Z), never before the asking moment."""
    window = QuietHours(time(22, 0), time(1, 30), QuietAction.DEFER)
    local = datetime(2026, 11, 1, 1, 10, fold=1).replace(tzinfo=NY)
    assert local.utcoffset() == timedelta(hours=-5)
    assert window.contains(local)
    end = window.end_after(local, NY)
    assert end.timestamp() == datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp()
    assert end.astimezone(NY).utcoffset() == timedelta(hours=-5)
    # The first pass of 01:10 (EDT, 05:10Z) still ends at the first 01:30.
    first = window.end_after(datetime(2026, 11, 1, 1, 10).replace(tzinfo=NY), NY)
    assert first.timestamp() == datetime(2026, 11, 1, 5, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("start", "end", "local", "expected"),
    [
        (time(22, 0), time(7, 0), datetime(2026, 6, 1, 23, 0), datetime(2026, 6, 2, 11, 0)),
        (time(22, 0), time(7, 0), datetime(2026, 6, 2, 5, 0), datetime(2026, 6, 2, 11, 0)),
        (time(12, 0), time(14, 0), datetime(2026, 1, 5, 12, 30), datetime(2026, 1, 5, 19, 0)),
    ],
)
def test_ordinary_windows(start: time, end: time, local: datetime, expected: datetime) -> None:
    window = QuietHours(start, end)
    assert window.contains(local)
    assert _end(window, local).timestamp() == expected.replace(tzinfo=UTC).timestamp()


def test_ends_agree_with_pep_495_first_fold_on_every_quarter_hour_of_both_nights() -> None:
    """The previous implementation (``datetime.combine(..., tzinfo=zone)``, fold=0) and the
    policy path give the same instants, gaps and folds included."""
    for night in (datetime(2026, 3, 7, 23, 0), datetime(2026, 10, 31, 23, 0)):
        for quarter in range(4 * 6):
            end_time = (datetime(2000, 1, 1) + timedelta(minutes=15 * quarter)).time()
            window = QuietHours(time(22, 0), end_time)
            got = _end(window, night)
            day = night.date() + timedelta(days=1)
            pep495 = datetime.combine(day, end_time, tzinfo=NY).astimezone(UTC)
            assert got.timestamp() == pep495.timestamp(), end_time
