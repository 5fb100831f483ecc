"""``tockwork preview`` and ``tockwork zones``: look at a rule's next fires before saving it.

This module may read the wall clock (``--after`` defaults to now); ``timezones`` never does.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

import timezones
from scheduler.cli.common import InputError, SubParsers, instant, positive_int
from timezones import FoldPolicy, GapPolicy, Occurrence, SystemClock

MAX_PREVIEW = 1000  # occurrences one preview prints: each costs a bounded computation


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add the ``preview`` and ``zones`` sub-commands."""
    preview = subparsers.add_parser(
        "preview",
        help="print the next occurrences of a rule in a zone (no database)",
        description="Print the next occurrences of RULE in ZONE, marking those a DST policy "
        "changed (shifted out of a gap, a repeated hour) and, with --gap skip, the slots "
        "skipped. RULE is the compact form (daily@08:00, weekly:mon,fri@18:30, "
        "monthly:last@09:00, once:2026-12-24T18:00, cron:30 2 * * *, rrule:FREQ=..., "
        "every:15m) or the JSON form.",
    )
    preview.add_argument("rule", metavar="RULE", help="the rule, compact or JSON")
    preview.add_argument("--zone", required=True, metavar="ZONE", help="IANA zone name (required)")
    preview.add_argument(
        "--after",
        type=instant,
        metavar="ISO",
        help="start after this instant, with Z or an offset (default: now)",
    )
    preview.add_argument(
        "--count",
        type=positive_int("--count", MAX_PREVIEW),
        default=10,
        metavar="N",
        help=f"how many occurrences (1 to {MAX_PREVIEW:,})",
    )
    preview.add_argument(
        "--gap",
        metavar="POLICY",
        help="for a local time the clocks skip: shift_forward, at_transition or skip "
        "(default: the rule kind's)",
    )
    preview.add_argument(
        "--fold",
        metavar="POLICY",
        help="for a local time that happens twice: first, second or both "
        "(default: the rule kind's)",
    )
    preview.add_argument("--json", action="store_true", help="print a JSON list")
    preview.set_defaults(func=run_preview)

    zones = subparsers.add_parser(
        "zones",
        help="list time-zone names (optionally filtered)",
        description="List the zone names of the tz database in use whose name contains "
        "SUBSTRING (case-insensitive). An old name (a link such as Europe/Kiev) is listed with "
        "the zone it points to (Europe/Kiev -> Europe/Kyiv), and a match on an old name lists "
        "the current one too.",
    )
    zones.add_argument(
        "substring",
        nargs="?",
        default="",
        metavar="SUBSTRING",
        help="only names containing it (default: every name)",
    )
    zones.set_defaults(func=run_zones)


def _offset(occ: Occurrence) -> str:
    offset = occ.local.utcoffset()
    minutes = 0 if offset is None else int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _clock(value: datetime) -> str:
    """``HH:MM``, or ``HH:MM:SS`` when the seconds are not zero (an every:2m anchored at :30)."""
    return f"{value:%H:%M:%S}" if value.second else f"{value:%H:%M}"


def _as_json(occ: Occurrence) -> dict[str, Any]:
    return {
        "utc": occ.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "local": occ.local.isoformat(),
        "nominal": occ.nominal.isoformat(),
        "adjusted": None if occ.adjusted is None else occ.adjusted.value,
        "key": occ.key,
    }


def _reason(exc: timezones.TimezoneError) -> str:
    """The error's reason without the ``"'x' is not a valid rule: "`` the message repeats."""
    reason = exc.reason
    head, sep, rest = reason.partition(" is not a valid rule: ")
    return rest if sep and head.startswith(("'", '"', "{")) else reason


def _skipped(
    rule: timezones.Rule, zone: str, after: datetime, found: list[Occurrence], args: Any
) -> list[Occurrence]:
    """With ``--gap skip``: the slots that fell in a gap and so do not fire, found as the gap
    occurrences of the same rule under ``shift_forward`` that the skip run does not have."""
    shadow = timezones.occurrences(
        rule, zone, after, count=args.count, gap="shift_forward", fold=args.fold
    )
    fired = {o.nominal for o in found}
    complete = len(found) == args.count
    return [
        o
        for o in shadow
        if o.adjusted is not None
        and o.adjusted.value.startswith("gap")
        and o.nominal not in fired
        and (not complete or o.at <= found[-1].at)
    ]


def run_preview(args: argparse.Namespace) -> int:
    try:
        rule = timezones.parse_rule(args.rule)
    except timezones.TimezoneError as exc:
        raise InputError("RULE", args.rule, _reason(exc)) from None
    try:
        timezones.get_zone(args.zone)
    except timezones.TimezoneError as exc:
        raise InputError("--zone", args.zone, exc.reason) from None
    gap: str | None = args.gap
    fold: str | None = args.fold
    if gap is not None and gap not in {p.value for p in GapPolicy}:
        raise InputError(f"--gap: unknown policy {gap!r} (shift_forward, at_transition, skip)")
    if fold is not None and fold not in {p.value for p in FoldPolicy}:
        raise InputError(f"--fold: unknown policy {fold!r} (first, second, both)")
    after: datetime = args.after or SystemClock().now()  # the composition root reads the clock
    found = list(
        timezones.occurrences(rule, args.zone, after, count=args.count, gap=gap, fold=fold)
    )
    skipped = _skipped(rule, args.zone, after, found, args) if gap == "skip" else []
    if args.json:
        rows = [(o.at, _as_json(o)) for o in found]
        rows += [
            (o.at, {**_as_json(o), "utc": None, "local": None, "adjusted": "gap_skipped"})
            for o in skipped
        ]
        print(json.dumps([row for _, row in sorted(rows, key=lambda r: r[0])], indent=2))
        return 0
    print(f"{rule} in {args.zone} after {after.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}")
    print(f"(tz database {timezones.tzdb_version()})")
    lines: list[tuple[datetime, str]] = []
    for occ in found:
        mark = f"  * {occ.adjusted.value}" if occ.adjusted is not None else ""
        if occ.fold_index:
            mark += "  (repeated hour)"
        local = f"{occ.local:%a %Y-%m-%d} {_clock(occ.local)}"
        utc = f"{occ.at:%Y-%m-%dT}{_clock(occ.at)}Z"
        lines.append((occ.at, f"{local} {_offset(occ)}  {utc}  {occ.key}{mark}"))
    for occ in skipped:
        nominal = f"{occ.nominal:%a %Y-%m-%d} {_clock(occ.nominal)}"
        lines.append(
            (occ.at, f"{nominal} {'':6}  {'-':<17}  {occ.key}  * skipped: the clocks jump over it")
        )
    for _, line in sorted(lines, key=lambda item: item[0]):
        print(line)
    if not found:
        print("no further occurrences")
    return 0


@cache
def _links() -> dict[str, str]:
    """Old zone name -> current one, from the pinned ``tzdata`` package's ``tzdata.zi``
    (``L Europe/Kyiv Europe/Kiev`` lines: tzdata's ``backward`` file)."""
    try:
        text = (importlib.resources.files("tzdata") / "zoneinfo" / "tzdata.zi").read_text()
    except (ModuleNotFoundError, FileNotFoundError):  # pragma: no cover - tzdata is pinned
        return {}
    links: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("L "):
            _, target, alias = line.split()[:3]
            links[alias] = target
    return links


def run_zones(args: argparse.Namespace) -> int:
    needle = args.substring.lower()
    names = timezones.available_zones()
    links = _links()
    matched = {name for name in names if needle in name.lower()}
    # A match on an old name shows where it went (kiev -> Europe/Kyiv).
    matched |= {links[name] for name in matched if links.get(name) in names}
    for name in sorted(matched):
        target = links.get(name)
        print(f"{name} -> {target}" if target in names and target != name else name)
    return 0
