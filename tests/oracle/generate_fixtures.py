"""Generate fixtures/*.json golden cases from the brute-force oracle (never from the engine).

Run from the repository root: ``python tests/oracle/generate_fixtures.py``. Writes
``fixtures/notorious.json`` (hand-picked DST cases) and ``fixtures/transitions_2024_2030.json``
(every offset change of 2024-2030 in 30 of the most populous zones: a slot inside the gap or
fold under every policy, plus the hourly wildcard cron job across it).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.oracle import brute

ROOT = Path(__file__).resolve().parents[2]
POPULOUS = [
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Asia/Shanghai",
    "America/Sao_Paulo",
    "America/Mexico_City",
    "Africa/Cairo",
    "Asia/Dhaka",
    "Asia/Karachi",
    "America/New_York",
    "Asia/Manila",
    "Europe/Istanbul",
    "Africa/Lagos",
    "America/Argentina/Buenos_Aires",
    "Africa/Kinshasa",
    "Europe/Moscow",
    "America/Los_Angeles",
    "Asia/Jakarta",
    "America/Lima",
    "America/Bogota",
    "Asia/Seoul",
    "Europe/London",
    "Asia/Bangkok",
    "Asia/Tehran",
    "Asia/Ho_Chi_Minh",
    "America/Chicago",
    "Asia/Kuala_Lumpur",
    "Asia/Riyadh",
    "Europe/Paris",
    "Asia/Baghdad",
    "Europe/Madrid",
]
_DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]


def spec_for(rule: str) -> tuple[brute.Spec, int]:
    """The oracle's reading of a compact rule, and how many days a window needs per fire."""
    if rule.startswith(("daily@", "weekdays@")):
        kind, _, at = rule.partition("@")
        hh, mm = (int(x) for x in at.split(":"))
        if kind == "weekdays":
            return brute.Spec("weekly", at=time(hh, mm), weekdays=frozenset(range(5))), 2
        return brute.Spec("daily", at=time(hh, mm)), 1
    if rule.startswith("weekly:"):
        days, _, at = rule.removeprefix("weekly:").partition("@")
        hh, mm = (int(x) for x in at.split(":"))
        wd = frozenset(_DAYS.index(d) for d in days.split(","))
        return brute.Spec("weekly", at=time(hh, mm), weekdays=wd), 7
    if rule.startswith("cron:"):
        expr = rule.removeprefix("cron:")
        return brute.Spec("cron", expr=expr), 1
    raise ValueError(rule)


def key_of(fire: brute.Fire) -> str:
    text: str = fire.nominal.isoformat(timespec="seconds" if fire.nominal.second else "minutes")
    return text + ("#1" if fire.second else "")


def solve(
    case_id: str,
    zone: str,
    rule: str,
    after: datetime,
    count: int,
    gap: str | None = None,
    fold: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    spec, days = spec_for(rule)
    default_gap = "at_transition" if rule.startswith("cron:") else "shift_forward"
    walk = brute.Walk(
        zone, after - timedelta(days=2), after + timedelta(days=days * (count + 1) + 3)
    )
    fires = [f for f in walk.fires(spec, gap or default_gap, fold or "first") if f.at > after]
    tz = brute.zone(zone)
    expected = [
        {
            "utc": f.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "local": f.at.astimezone(tz).isoformat(),
            "key": key_of(f),
        }
        for f in fires[:count]
    ]
    assert len(expected) == count, (case_id, zone, rule)
    return {
        "id": case_id,
        "zone": zone,
        "rule": rule,
        "gap": gap,
        "fold": fold,
        "after": after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "expected": expected,
        "tzdata_sensitive": False,
        **extra,
    }


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def notorious() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    ny_gap, ny_fold = utc("2026-03-07T12:00Z"), utc("2026-10-31T12:00Z")
    for gap in ("shift_forward", "at_transition", "skip"):
        cases.append(
            solve(f"daily-ny-0230-gap-{gap}", "America/New_York", "daily@02:30", ny_gap, 2, gap=gap)
        )
        cases.append(
            solve(
                f"cron-ny-0230-gap-{gap}", "America/New_York", "cron:30 2 * * *", ny_gap, 2, gap=gap
            )
        )
    for fold in ("first", "second", "both"):
        cases.append(
            solve(
                f"daily-ny-0130-fold-{fold}",
                "America/New_York",
                "daily@01:30",
                ny_fold,
                3,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"cron-ny-0130-fold-{fold}",
                "America/New_York",
                "cron:30 1 * * *",
                ny_fold,
                2,
                fold=fold,
            )
        )
    cases.append(
        solve(
            "daily-ny-after-inside-fold",
            "America/New_York",
            "daily@01:30",
            utc("2026-11-01T05:40Z"),
            2,
        )
    )
    cases.append(
        solve(
            "daily-ny-after-between-occurrences",
            "America/New_York",
            "daily@01:30",
            utc("2026-11-01T06:10Z"),
            2,
        )
    )
    cases.append(
        solve("hourly-ny-spring", "America/New_York", "cron:0 * * * *", utc("2026-03-08T04:40Z"), 6)
    )
    cases.append(
        solve("hourly-ny-fall", "America/New_York", "cron:0 * * * *", utc("2026-11-01T03:40Z"), 6)
    )
    cases.append(
        solve(
            "quarter-hour-ny-fall",
            "America/New_York",
            "cron:*/15 * * * *",
            utc("2026-11-01T04:40Z"),
            10,
        )
    )
    cases.append(
        solve("wild-minute-fixed-hour-ny-gap", "America/New_York", "cron:*/15 2 * * *", ny_gap, 2)
    )
    for gap in ("shift_forward", "at_transition", "skip"):
        cases.append(
            solve(
                f"lord-howe-0215-gap-{gap}",
                "Australia/Lord_Howe",
                "daily@02:15",
                utc("2026-10-03T00:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"sao-paulo-2018-midnight-{gap}",
                "America/Sao_Paulo",
                "daily@00:00",
                utc("2018-11-03T12:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"santiago-0030-gap-{gap}",
                "America/Santiago",
                "daily@00:30",
                utc("2026-09-05T12:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"havana-0030-gap-{gap}",
                "America/Havana",
                "daily@00:30",
                utc("2026-03-07T12:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"troll-0200-gap-{gap}",
                "Antarctica/Troll",
                "daily@02:00",
                utc("2026-03-28T12:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"apia-2011-daily-{gap}",
                "Pacific/Apia",
                "daily@12:00",
                utc("2011-12-29T00:00Z"),
                3,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"apia-2011-friday-{gap}",
                "Pacific/Apia",
                "weekly:fri@12:00",
                utc("2011-12-25T00:00Z"),
                2,
                gap=gap,
            )
        )
        cases.append(
            solve(
                f"kiritimati-1994-{gap}",
                "Pacific/Kiritimati",
                "daily@12:00",
                utc("1994-12-29T00:00Z"),
                3,
                gap=gap,
            )
        )
    for fold in ("first", "second", "both"):
        cases.append(
            solve(
                f"lord-howe-0145-fold-{fold}",
                "Australia/Lord_Howe",
                "daily@01:45",
                utc("2026-04-04T00:00Z"),
                2,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"santiago-2330-fold-{fold}",
                "America/Santiago",
                "daily@23:30",
                utc("2026-04-04T12:00Z"),
                2,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"havana-0030-fold-{fold}",
                "America/Havana",
                "daily@00:30",
                utc("2025-11-01T12:00Z"),
                2,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"casablanca-0230-fold-{fold}",
                "Africa/Casablanca",
                "daily@02:30",
                utc("2026-02-14T12:00Z"),
                2,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"troll-0130-fold-{fold}",
                "Antarctica/Troll",
                "daily@01:30",
                utc("2026-10-24T12:00Z"),
                2,
                fold=fold,
            )
        )
        cases.append(
            solve(
                f"dublin-0130-fold-{fold}",
                "Europe/Dublin",
                "daily@01:30",
                utc("2026-10-24T12:00Z"),
                2,
                fold=fold,
            )
        )
    cases.append(
        solve(
            "kathmandu-every-20", "Asia/Kathmandu", "cron:*/20 * * * *", utc("2026-01-01T00:00Z"), 3
        )
    )
    cases.append(
        solve(
            "lord-howe-hourly-spring",
            "Australia/Lord_Howe",
            "cron:0 * * * *",
            utc("2026-10-03T13:10Z"),
            4,
        )
    )
    cases.append(
        solve(
            "daily-vancouver-2026-tzdata-sensitive",
            "America/Vancouver",
            "daily@09:00",
            utc("2026-10-31T12:00Z"),
            3,
            tzdata_sensitive=True,
        )
    )
    return cases


def transitions_2024_2030() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    start, end = datetime(2024, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC)
    for zone in POPULOUS:
        tz = brute.zone(zone)
        changes = brute.find_transitions(zone, start, end)
        if not changes:
            cases.append(solve(f"{zone}-plain", zone, "daily@08:00", utc("2026-06-01T00:00Z"), 2))
            continue
        for change in changes:
            before = (change - timedelta(seconds=1)).astimezone(tz).utcoffset()
            after = change.astimezone(tz).utcoffset()
            assert before is not None and after is not None
            wall = (
                change.astimezone(tz).replace(tzinfo=None)
                if after > before
                else (change - timedelta(seconds=1)).astimezone(tz).replace(tzinfo=None)
            )
            # A slot in the middle of the skipped or repeated wall-clock range.
            length = abs(after - before)
            slot = wall - length / 2 if after > before else wall - length / 2 + timedelta(seconds=1)
            slot = slot.replace(second=0, microsecond=0)
            rule = f"daily@{slot:%H:%M}"
            when = change - timedelta(days=1)
            tag = f"{zone}-{change:%Y-%m-%dT%H%MZ}"
            policies = (
                ("shift_forward", "at_transition", "skip")
                if after > before
                else ("first", "second", "both")
            )
            for p in policies:
                kw = {"gap": p} if after > before else {"fold": p}
                cases.append(solve(f"{tag}-{rule}-{p}", zone, rule, when, 2, **kw))
            cases.append(
                solve(f"{tag}-hourly", zone, "cron:0 * * * *", change - timedelta(hours=3), 6)
            )
    return cases


def _tzdata_version() -> str:
    import importlib

    return str(vars(importlib.import_module("tzdata"))["IANA_VERSION"])


def main() -> None:
    meta = {
        "generator": "tests/oracle/generate_fixtures.py (brute-force oracle)",
        "tzdb_version": _tzdata_version(),
    }
    for name, cases in (
        ("notorious", notorious()),
        ("transitions_2024_2030", transitions_2024_2030()),
    ):
        path = ROOT / "fixtures" / f"{name}.json"
        path.write_text(json.dumps({**meta, "cases": cases}, indent=1) + "\n")
        print(f"{path.relative_to(ROOT)}: {len(cases)} cases")


if __name__ == "__main__":
    main()
