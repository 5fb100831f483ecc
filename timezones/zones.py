"""Zones: which tz database answers, zone lookup, and per-zone transition tables.

Two decisions live here.

**Which database.** ``zoneinfo.ZoneInfo(key)`` reads the operating system's files first and falls
back to the ``tzdata`` package, so the answer depends on the host: here the system files are an
older release that disagrees with tzdata 2026 about America/Vancouver after 2026-11-01. We never
call ``ZoneInfo(key)``: zones are built with ``ZoneInfo.from_file`` from the database chosen by
:func:`use_tz_database` (default: the pinned ``tzdata`` package), cached per key, and
:func:`tzdb_version` reports the IANA release in use. No global state of ``zoneinfo`` is touched.

**Transition tables.** Every engine question is "which UTC offset is in force at instant *u*"
or "which instants have wall clock *L*". We answer both with integer arithmetic over a per-zone
table parsed from the same TZif bytes as the ``ZoneInfo``: ``trans[i]`` is the UTC epoch second
of the i-th offset change and ``offs[i]`` the offset (seconds east of UTC) in force before it,
``offs[i + 1]`` after it. Changes that only rename the zone or flip ``dst()`` (Vancouver
2026-11-01 under 2026f, Dublin's negative DST) are dropped: only ``utcoffset()`` matters. Years
after the last explicit transition come from the TZif footer (a POSIX TZ string), expanded
lazily. A test checks the table against ``ZoneInfo.utcoffset`` for every zone.
"""

from __future__ import annotations

import bisect
import difflib
import importlib
import importlib.resources
import os
import re
import struct
import threading
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Literal

from timezones.epoch import DAY as _DAY
from timezones.epoch import EPOCH as _EPOCH
from timezones.epoch import EPOCH_ORDINAL as _EPOCH_ORDINAL
from timezones.epoch import days_in_month as _days_in_month
from timezones.epoch import epoch_seconds
from timezones.epoch import is_leap as _is_leap
from timezones.errors import TimezoneError, UnknownZone, shown
from timezones.inputs import MAX_ZONE_NAME, check_text

__all__ = [
    "Transition",
    "ZoneTable",
    "available_zones",
    "get_zone",
    "transitions",
    "tz_database",
    "tzdb_version",
    "use_tz_database",
]

TzDatabase = Literal["tzdata", "system"]

# |UTC offset| never exceeds 26 hours in any tzdb zone (LMT included); used to bound searches.
MAX_OFFSET = 26 * 3600
_FOOTER_CHUNK_YEARS = 100
_LAST_YEAR = 9999
_NO_HORIZON = 2**62
_KEY_RE = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")
_FIXED_OFFSET_RE = re.compile(r"^(?:UTC|GMT|Z)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# POSIX TZ strings (TZif footers), e.g. "EST5EDT,M3.2.0,M11.1.0" or "<+1030>-10:30<+11>-11,...".

_NAME = r"(?:<[^>]*>|[A-Za-z]+)"
_OFFSET = r"[+-]?\d{1,3}(?::\d{1,2}(?::\d{1,2})?)?"
_POSIX_RE = re.compile(
    rf"^(?P<std>{_NAME})(?P<stdoff>{_OFFSET})"
    rf"(?:(?P<dst>{_NAME})(?P<dstoff>{_OFFSET})?(?:,(?P<start>[^,]+),(?P<end>[^,]+))?)?$"
)


def _hms(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    parts = [int(p) for p in text.lstrip("+-").split(":")]
    while len(parts) < 3:
        parts.append(0)
    return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2])


@dataclass(frozen=True)
class _PosixRule:
    """One date rule of a POSIX TZ string: ``Jn``, ``n`` or ``Mm.w.d``, plus a local time."""

    form: str  # "J", "N" or "M"
    a: int
    b: int
    c: int
    seconds: int  # local time of day of the change (may be negative or > 24 h)

    @classmethod
    def parse(cls, text: str) -> _PosixRule:
        spec, _, at = text.partition("/")
        seconds = _hms(at) if at else 7200
        if spec.startswith("J"):
            return cls("J", int(spec[1:]), 0, 0, seconds)
        if spec.startswith("M"):
            m, w, d = (int(x) for x in spec[1:].split("."))
            return cls("M", m, w, d, seconds)
        return cls("N", int(spec), 0, 0, seconds)

    def local_seconds(self, year: int) -> int:
        """Local epoch seconds (wall clock read as UTC) of the change in ``year``."""
        jan1 = date(year, 1, 1).toordinal()
        if self.form == "J":
            day = jan1 + self.a - 1
            if self.a >= 60 and _is_leap(year):
                day += 1
        elif self.form == "N":
            day = jan1 + self.a
        else:
            first = date(year, self.a, 1)
            weekday_sun0 = (first.weekday() + 1) % 7
            dom = 1 + (self.c - weekday_sun0) % 7 + (self.b - 1) * 7
            last = _days_in_month(year, self.a)
            while dom > last:
                dom -= 7
            day = first.toordinal() + dom - 1
        return (day - _EPOCH_ORDINAL) * _DAY + self.seconds


@dataclass(frozen=True)
class _Footer:
    std: int
    dst: int | None
    start: _PosixRule | None
    end: _PosixRule | None

    @classmethod
    def parse(cls, text: str) -> _Footer | None:
        match = _POSIX_RE.match(text.strip())
        if match is None:
            return None
        std = -_hms(match["stdoff"])
        if match["dst"] is None:
            return cls(std, None, None, None)
        dst = -_hms(match["dstoff"]) if match["dstoff"] else std + 3600
        start = _PosixRule.parse(match["start"] or "M3.2.0")
        end = _PosixRule.parse(match["end"] or "M11.1.0")
        return cls(std, dst, start, end)

    def events(self, first_year: int, last_year: int) -> list[tuple[int, int, int]]:
        """(UTC instant, order, offset after) of every change in the years, sorted."""
        if self.dst is None or self.start is None or self.end is None:
            return []
        out: list[tuple[int, int, int]] = []
        for year in range(first_year, last_year + 1):
            out.append((self.start.local_seconds(year) - self.std, 2 * year, self.dst))
            out.append((self.end.local_seconds(year) - self.dst, 2 * year + 1, self.std))
        out.sort()
        return out


# --------------------------------------------------------------------------------------------
# TZif parsing and the table.


def _parse_tzif(data: bytes) -> tuple[list[int], list[int], _Footer | None, int]:
    """Return (changes, offsets with len = len(changes) + 1, footer, last raw transition)."""
    if data[:4] != b"TZif":
        raise TimezoneError("tzif", data[:4], f"not a TZif file (starts {data[:4]!r})")
    version = data[4:5]
    header = struct.Struct(">6l")
    isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt = header.unpack_from(data, 20)
    pos = 44
    time_size = 4
    if version >= b"2":
        pos += timecnt * 5 + typecnt * 6 + charcnt + leapcnt * 8 + isstdcnt + isutcnt
        isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt = header.unpack_from(data, pos + 20)
        pos += 44
        time_size = 8
    fmt = ">" + ("q" if time_size == 8 else "l") * timecnt
    times = list(struct.unpack_from(fmt, data, pos))
    pos += timecnt * time_size
    indices = list(data[pos : pos + timecnt])
    pos += timecnt
    utoffs = [struct.unpack_from(">lBB", data, pos + 6 * i)[0] for i in range(typecnt)]
    pos += typecnt * 6 + charcnt + leapcnt * (time_size + 4) + isstdcnt + isutcnt
    footer: _Footer | None = None
    if version >= b"2":
        text = data[pos:].decode("ascii", "replace").strip("\n")
        footer = _Footer.parse(text.split("\n")[0]) if text else None
    trans: list[int] = []
    offs: list[int] = [utoffs[0] if utoffs else 0]
    for instant, index in zip(times, indices, strict=True):
        offset = utoffs[index]
        if offset != offs[-1]:
            trans.append(instant)
            offs.append(offset)
    return trans, offs, footer, times[-1] if times else 0


class ZoneTable:
    """Offset changes of one zone as integers (see the module docstring).

    ``trans`` and ``offs`` grow (footer years are appended) but never change what they already
    say, so readers that took a snapshot stay correct.
    """

    __slots__ = ("_footer", "_lock", "backward_midnight", "horizon", "offs", "trans")

    def __init__(self, data: bytes) -> None:
        trans, offs, footer, last = _parse_tzif(data)
        self.trans = trans
        self.offs = offs
        self._footer = footer if footer is not None and footer.dst is not None else None
        self._lock = threading.Lock()
        # Instants of offset decreases whose repeated wall-clock range contains a midnight: the
        # local date goes backwards there, so "earliest date first" is not "earliest instant".
        self.backward_midnight: list[int] = []
        if self._footer is None:
            self.horizon = 2**62
            self._scan_backward(0)
        else:
            self.horizon = last  # everything up to here is final
            self._extend(_year_of(last) + _FOOTER_CHUNK_YEARS)

    def _scan_backward(self, start_index: int) -> None:
        for i in range(start_index, len(self.trans)):
            before, after = self.offs[i], self.offs[i + 1]
            t = self.trans[i]
            if after < before and (t + after) // _DAY < (t + before - 1) // _DAY:
                self.backward_midnight.append(t)

    def _extend(self, last_year: int) -> None:
        footer = self._footer
        assert footer is not None
        last_year = min(last_year, _LAST_YEAR)
        first_year = _year_of(self.horizon)
        first_index = len(self.trans)
        current = self.offs[-1]
        pending: list[tuple[int, int]] = []
        for instant, _order, offset in footer.events(first_year, last_year):
            if instant <= self.horizon:
                continue
            if pending and pending[-1][0] == instant:
                pending[-1] = (instant, offset)
            else:
                pending.append((instant, offset))
        for instant, offset in pending:
            if offset != current:
                self.trans.append(instant)
                self.offs.append(offset)
                current = offset
        if last_year == _LAST_YEAR:
            # The footer has been applied to the last year a datetime holds: final for good.
            self.horizon = _NO_HORIZON
        else:
            self.horizon = (date(last_year, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY
        self._scan_backward(first_index)

    def ensure(self, instant: int) -> None:
        """Make the table final up to ``instant`` (+ a margin); cheap when it already is."""
        if instant + 2 * MAX_OFFSET + 8 * _DAY >= self.horizon:
            with self._lock:
                while instant + 2 * MAX_OFFSET + 8 * _DAY >= self.horizon:
                    self._extend(_year_of(self.horizon) + _FOOTER_CHUNK_YEARS)

    def offset_at(self, instant: int) -> int:
        """UTC offset in seconds in force at the UTC epoch second ``instant``."""
        self.ensure(instant)
        return self.offs[bisect.bisect_right(self.trans, instant)]


def _year_of(instant: int) -> int:
    return date.fromordinal(_EPOCH_ORDINAL + max(instant, -700_000 * _DAY) // _DAY).year


# --------------------------------------------------------------------------------------------
# The database and zone lookup.


@dataclass(frozen=True)
class _Database:
    source: TzDatabase
    path: str | None

    def read(self, key: str) -> bytes:
        if self.source == "tzdata":
            resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*key.split("/"))
            return resource.read_bytes()
        assert self.path is not None
        with open(os.path.join(self.path, *key.split("/")), "rb") as handle:
            return handle.read()

    def version(self) -> str:
        if self.source == "tzdata":
            # tzdata ships no type information; read the attribute through the module dict.
            return str(vars(importlib.import_module("tzdata"))["IANA_VERSION"])
        assert self.path is not None
        try:
            with open(os.path.join(self.path, "tzdata.zi"), encoding="ascii") as handle:
                first = handle.readline()
        except OSError:
            return "unknown"
        return first.removeprefix("# version").strip() or "unknown"

    def keys(self) -> frozenset[str]:
        if self.source == "tzdata":
            text = importlib.resources.files("tzdata").joinpath("zones").read_text("ascii")
            return frozenset(text.split())
        assert self.path is not None
        found: set[str] = set()
        for root, dirs, files in os.walk(self.path):
            dirs[:] = [d for d in dirs if d not in ("posix", "right")]
            for name in files:
                full = os.path.join(root, name)
                key = os.path.relpath(full, self.path).replace(os.sep, "/")
                if key in ("localtime", "posixrules") or not _KEY_RE.match(key):
                    continue
                try:
                    with open(full, "rb") as handle:
                        if handle.read(4) == b"TZif":
                            found.add(key)
                except OSError:
                    continue
        return frozenset(found)


@dataclass(eq=False)
class ZoneEntry:
    """A zone of the database in use: the ``ZoneInfo`` we hand out and its table."""

    key: str
    tzinfo: zoneinfo.ZoneInfo
    data: bytes
    _table: ZoneTable | None = None

    @property
    def table(self) -> ZoneTable:
        table = self._table
        if table is None:
            table = self._table = ZoneTable(self.data)
        return table


_state_lock = threading.Lock()
_database = _Database("tzdata", None)
_entries: dict[str, ZoneEntry] = {}
_by_id: dict[int, ZoneEntry] = {}
_keys: frozenset[str] | None = None


def use_tz_database(source: TzDatabase = "tzdata", *, path: str | None = None) -> None:
    """Choose the tz database: ``"tzdata"`` (default, the pinned PyPI package) or ``"system"``.

    ``path`` defaults to the first directory of ``zoneinfo.TZPATH`` for ``"system"``. Zones
    obtained before the switch keep answering from the old database; call this at start-up.
    """
    global _database, _keys
    if source == "tzdata":
        new = _Database("tzdata", None)
    elif source == "system":
        directory = path or next(iter(zoneinfo.TZPATH), None)
        if directory is None or not os.path.isdir(directory):
            raise UnknownZone(
                "tz database path",
                directory,
                f"no system time-zone directory at {shown(directory)}",
            )
        new = _Database("system", directory)
    else:
        raise UnknownZone(
            "tz database", source, f"unknown source {shown(source)} (use 'tzdata' or 'system')"
        )
    with _state_lock:
        _database = new
        _entries.clear()
        _by_id.clear()
        _keys = None


def tz_database() -> tuple[TzDatabase, str | None]:
    """The database in use: (source, directory or None for the tzdata package)."""
    return _database.source, _database.path


def tzdb_version() -> str:
    """The IANA release of the database in use, e.g. ``"2026f"``."""
    return _database.version()


def available_zones() -> frozenset[str]:
    """Every zone key (canonical names and their aliases) of the database in use."""
    global _keys
    keys = _keys
    if keys is None:
        keys = _keys = _database.keys()
    return keys


def _refuse_fixed_offset(name: str) -> UnknownZone:
    match = _FIXED_OFFSET_RE.match(name.strip())
    assert match is not None
    sign = 1 if match[1] == "+" else -1
    seconds = sign * (int(match[2]) * 3600 + int(match[3] or 0) * 60)
    probe_winter = datetime(2026, 1, 15, tzinfo=UTC)
    probe_summer = datetime(2026, 7, 15, tzinfo=UTC)
    suggestions: list[str] = []
    for key in sorted(available_zones()):
        if "/" not in key or key.startswith(("Etc/", "US/", "SystemV/")):
            continue
        zone = _entry_for_key(key).tzinfo
        winter = probe_winter.astimezone(zone).utcoffset()
        summer = probe_summer.astimezone(zone).utcoffset()
        if winter is not None and winter.total_seconds() == seconds and winter == summer:
            suggestions.append(key)
        if len(suggestions) == 3:
            break
    if seconds % 3600 == 0 and abs(seconds) <= 14 * 3600:
        hours = -seconds // 3600
        suggestions.append(f"Etc/GMT{hours:+d}" if hours else "Etc/UTC")
    hint = ", ".join(suggestions) if suggestions else "an IANA name such as Europe/Paris"
    return UnknownZone(
        "zone",
        name,
        f"fixed UTC offset {shown(name)} is not a time zone; recurring rules need an IANA "
        f"zone name whose offset follows the local clock, e.g. {hint}",
    )


def _entry_for_key(name: str) -> ZoneEntry:
    entry = _entries.get(name) if isinstance(name, str) else None
    if entry is not None:
        return entry
    if not isinstance(name, str) or not name:
        raise UnknownZone("zone", name, f"{shown(name)} is not a time zone name")
    check_text("zone", name, MAX_ZONE_NAME, UnknownZone)
    keys = available_zones()
    if name not in keys:
        if _FIXED_OFFSET_RE.match(name.strip()):
            raise _refuse_fixed_offset(name)
        lowered = {k.lower(): k for k in keys}
        close = lowered.get(name.lower())
        if close is None:
            matches = difflib.get_close_matches(name, sorted(keys), n=1, cutoff=0.6)
            close = matches[0] if matches else None
        hint = f" (did you mean {close!r}?)" if close else ""
        raise UnknownZone(
            "zone", name, f"unknown time zone {shown(name)} in tz database {tzdb_version()}{hint}"
        )
    data = _database.read(name)
    import io

    tz = zoneinfo.ZoneInfo.from_file(io.BytesIO(data), key=name)
    entry = ZoneEntry(name, tz, data)
    with _state_lock:
        existing = _entries.get(name)
        if existing is not None:
            return existing
        _entries[name] = entry
        _by_id[id(tz)] = entry
    return entry


def zone_entry(zone: str | tzinfo) -> ZoneEntry:
    """The cached entry of a zone given by key or by a ``ZoneInfo`` (looked up by its key)."""
    if isinstance(zone, str):
        return _entry_for_key(zone)
    entry = _by_id.get(id(zone))
    if entry is not None and entry.tzinfo is zone:
        return entry
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return _entry_for_key(key)
    if zone is UTC:
        return _entry_for_key("UTC")
    raise UnknownZone(
        "zone",
        zone,
        f"{shown(zone)} is not an IANA time zone; pass a name such as 'Europe/Paris' "
        "(fixed offsets are refused for recurring rules)",
    )


def get_zone(name: str) -> zoneinfo.ZoneInfo:
    """The ``ZoneInfo`` for an IANA key or alias from the database in use (key kept as given).

    Raises :class:`UnknownZone` naming the value (with a close match when there is one), and
    for fixed offsets such as ``"+05:00"`` with a message that suggests zones.
    """
    return _entry_for_key(name).tzinfo


# --------------------------------------------------------------------------------------------
# Transitions, for tests and the ``timezones.testing`` walker.


@dataclass(frozen=True)
class Transition:
    """One change of UTC offset: ``at`` (also ``instant``) is the first instant of the new
    offset, aware, in UTC."""

    at: datetime
    offset_before: timedelta
    offset_after: timedelta

    @property
    def instant(self) -> datetime:
        """The first instant of the new offset (the field ``at``)."""
        return self.at

    @property
    def kind(self) -> Literal["gap", "fold"]:
        """``gap`` when clocks jump forward (wall times skipped), ``fold`` when they go back."""
        return "gap" if self.offset_after > self.offset_before else "fold"

    @property
    def length(self) -> timedelta:
        return abs(self.offset_after - self.offset_before)


def transitions(zone: str | tzinfo, start: datetime, end: datetime) -> list[Transition]:
    """Every offset change of ``zone`` with ``start <= at < end`` (aware instants)."""
    table = zone_entry(zone).table
    lo, hi = epoch_seconds(start, "start"), epoch_seconds(end, "end")
    table.ensure(hi)
    out: list[Transition] = []
    i = bisect.bisect_left(table.trans, lo)
    while i < len(table.trans) and table.trans[i] < hi:
        out.append(
            Transition(
                _EPOCH + timedelta(seconds=table.trans[i]),
                timedelta(seconds=table.offs[i]),
                timedelta(seconds=table.offs[i + 1]),
            )
        )
        i += 1
    return out
