"""Acceptance tests of ``tockwork preview`` / ``tockwork zones`` (subprocess) and the clocks."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from timezones import Clock, FrozenClock, NaiveDatetimeError, SystemClock
from timezones.testing import Schedule, ZonedRule, dst_report, frozen_clock

ROOT = Path(__file__).resolve().parents[3]


def tockwork(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )


def test_preview_json_keys_and_values() -> None:
    result = tockwork(
        "preview",
        "daily@02:30",
        "--zone",
        "America/New_York",
        "--after",
        "2026-03-07T12:00Z",
        "--count",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [set(r) >= {"utc", "local", "nominal", "adjusted"} for r in rows] == [True] * 3
    assert rows[0] == {
        "utc": "2026-03-08T07:30:00Z",
        "local": "2026-03-08T03:30:00-04:00",
        "nominal": "2026-03-08T02:30:00",
        "adjusted": "gap_shifted",
        "key": "2026-03-08T02:30",
    }
    assert rows[1]["adjusted"] is None


def test_preview_text_marks_policy_touched_rows() -> None:
    result = tockwork(
        "preview",
        "daily@01:30",
        "--zone",
        "America/New_York",
        "--after",
        "2026-10-31T12:00Z",
        "--count",
        "3",
        "--fold",
        "both",
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("Sun", "Mon"))]
    assert "fold_first" in lines[0] and "-04:00" in lines[0] and "2026-11-01T05:30Z" in lines[0]
    assert "fold_second" in lines[1] and "-05:00" in lines[1]
    assert "fold" not in lines[2]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["preview", "daily@25:00", "--zone", "UTC"], "'daily@25:00'"),
        (["preview", "daily@08:00", "--zone", "Europe/Pariss"], "'Europe/Pariss'"),
        (["preview", "daily@08:00", "--zone", "+05:00"], "fixed UTC offset"),
        (["preview", "daily@08:00", "--zone", "UTC", "--gap", "later"], "--gap: unknown policy"),
        (["preview", "daily@08:00", "--zone", "UTC", "--fold", "x"], "--fold: unknown policy"),
        (["preview", "daily@08:00", "--zone", "UTC", "--after", "2026-01-01T00:00"], "--after"),
        (["preview", "daily@08:00", "--zone", "UTC", "--count", "0"], "--count"),
    ],
)
def test_bad_input_exits_2_naming_the_value(args: list[str], needle: str) -> None:
    result = tockwork(*args)
    assert result.returncode == 2
    assert needle in result.stderr


def test_preview_defaults_after_to_now_and_zones_lists_names() -> None:
    result = tockwork("preview", "every:1h", "--zone", "UTC", "--count", "1", "--json")
    assert result.returncode == 0, result.stderr
    when = datetime.fromisoformat(json.loads(result.stdout)[0]["utc"].replace("Z", "+00:00"))
    assert timedelta(0) < when - datetime.now(UTC) <= timedelta(hours=1)
    zones = tockwork("zones", "kiev")
    # The old name shows where it went, and the current name is listed too.
    assert zones.returncode == 0
    assert zones.stdout.splitlines() == ["Europe/Kiev -> Europe/Kyiv", "Europe/Kyiv"]


def test_frozen_clock_is_a_clock_and_moves_only_when_told() -> None:
    clock = frozen_clock("2026-03-08T06:59Z")
    assert isinstance(clock, Clock) and isinstance(SystemClock(), Clock)
    assert clock.now() == datetime(2026, 3, 8, 6, 59, tzinfo=UTC)
    assert clock.now() == clock.now()
    assert clock.advance(minutes=2) == datetime(2026, 3, 8, 7, 1, tzinfo=UTC)
    assert clock.set(datetime(2026, 1, 1, tzinfo=UTC)).utcoffset() == timedelta(0)
    with pytest.raises(NaiveDatetimeError):
        FrozenClock(datetime(2026, 1, 1))
    now = SystemClock().now()
    assert now.utcoffset() == timedelta(0)


def test_dst_report_lists_shifted_skipped_and_folded() -> None:
    report = dst_report(
        [
            ZonedRule("reminder", "daily@02:30", "America/New_York"),
            ZonedRule("backup", "daily@01:30", "America/New_York", fold="both"),
            ZonedRule("standup", "weekdays@09:00", "Europe/Berlin"),
            ("weekly:fri@12:00", "Pacific/Apia"),
        ],
        datetime(2011, 1, 1, tzinfo=UTC),
        datetime(2012, 1, 1, tzinfo=UTC),
    )
    summary = [(i.schedule, i.nominal.isoformat(), i.kind, len(i.fires)) for i in report]
    assert summary == [
        ("reminder", "2011-03-13T02:30:00", "shifted", 1),
        ("backup", "2011-11-06T01:30:00", "folded", 2),
        ("#3", "2011-12-30T12:00:00", "skipped", 0),
    ]
    assert "no fire" in str(report[-1])


def test_the_former_name_of_zoned_rule_still_works() -> None:
    """``timezones.testing.Schedule`` was documented: it stays, as the same class."""
    assert Schedule is ZonedRule
