"""``tockwork preview`` and ``tockwork zones``: look at a rule's next fires before saving it.

This module may read the wall clock (``--after`` defaults to now); ``timezones`` never does.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

import timezones
from scheduler.cli.common import InputError, SubParsers
from timezones import FoldPolicy, GapPolicy, Occurrence, SystemClock


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add the ``preview`` and ``zones`` sub-commands."""
    preview = subparsers.add_parser(
        "preview",
        help="print the next occurrences of a rule in a zone",
        description="Print the next occurrences of RULE in ZONE, marking those a DST policy "
        "changed. RULE is the compact form (daily@08:00, weekly:mon,fri@18:30, "
        "monthly:last@09:00, once:2026-12-24T18:00, cron:30 2 * * *, rrule:FREQ=..., "
        "every:15m) or the JSON form.",
    )
    preview.add_argument("rule", metavar="RULE")
    preview.add_argument("--zone", required=True, metavar="ZONE", help="IANA zone name")
    preview.add_argument("--after", metavar="ISO", help="instant with offset (default: now)")
    preview.add_argument("--count", type=int, default=10, metavar="N", help="how many (10)")
    preview.add_argument("--gap", metavar="P", help="shift_forward, at_transition or skip")
    preview.add_argument("--fold", metavar="P", help="first, second or both")
    preview.add_argument("--json", action="store_true", help="print a JSON list")
    preview.set_defaults(func=run_preview)

    zones = subparsers.add_parser("zones", help="list time-zone names (optionally filtered)")
    zones.add_argument("substring", nargs="?", default="", metavar="SUBSTRING")
    zones.set_defaults(func=run_zones)


def _parse_after(text: str | None) -> datetime:
    if text is None:
        return SystemClock().now()
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"--after: invalid ISO 8601 instant {text!r}") from None
    if value.tzinfo is None:
        raise InputError(f"--after: {text!r} has no offset; add Z or +HH:MM")
    return value


def _offset(occ: Occurrence) -> str:
    offset = occ.local.utcoffset()
    minutes = 0 if offset is None else int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _as_json(occ: Occurrence) -> dict[str, Any]:
    return {
        "utc": occ.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "local": occ.local.isoformat(),
        "nominal": occ.nominal.isoformat(),
        "adjusted": None if occ.adjusted is None else occ.adjusted.value,
        "key": occ.key,
    }


def run_preview(args: argparse.Namespace) -> int:
    if args.count < 1:
        raise InputError(f"--count: must be at least 1, got {args.count}")
    try:
        rule = timezones.parse_rule(args.rule)
    except timezones.TimezoneError as exc:
        raise InputError(f"RULE: {exc}") from None
    try:
        timezones.get_zone(args.zone)
    except timezones.TimezoneError as exc:
        raise InputError(f"--zone: {exc}") from None
    gap: str | None = args.gap
    fold: str | None = args.fold
    if gap is not None and gap not in {p.value for p in GapPolicy}:
        raise InputError(f"--gap: unknown policy {gap!r} (shift_forward, at_transition, skip)")
    if fold is not None and fold not in {p.value for p in FoldPolicy}:
        raise InputError(f"--fold: unknown policy {fold!r} (first, second, both)")
    after = _parse_after(args.after)
    found = list(
        timezones.occurrences(rule, args.zone, after, count=args.count, gap=gap, fold=fold)
    )
    if args.json:
        print(json.dumps([_as_json(o) for o in found], indent=2))
        return 0
    print(f"{rule} in {args.zone} after {after.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}")
    print(f"(tz database {timezones.tzdb_version()})")
    for occ in found:
        mark = f"  * {occ.adjusted.value}" if occ.adjusted is not None else ""
        if occ.fold_index:
            mark += "  (repeated hour)"
        local = occ.local.strftime("%a %Y-%m-%d %H:%M")
        print(f"{local} {_offset(occ)}  {occ.at:%Y-%m-%dT%H:%MZ}  {occ.key}{mark}")
    if not found:
        print("no further occurrences")
    return 0


def run_zones(args: argparse.Namespace) -> int:
    needle = args.substring.lower()
    for name in sorted(timezones.available_zones()):
        if needle in name.lower():
            print(name)
    return 0
