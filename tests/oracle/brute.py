"""Brute-force reference for ``timezones``: minute stepping in UTC, no transition tables.

Independent of the engine by construction: zones come from ``ZoneInfo.from_file`` over the
``tzdata`` package, wall clocks from ``datetime.astimezone`` minute by minute, cron fields from
a separate tiny matcher. The fire set F of docs/dst-semantics.md (section 2) is computed
literally:

* every nominal slot in the window is looked up in the map "wall time -> UTC minutes that show
  it"; one instant fires, two go through the fold policy, none is a gap: ``at_transition`` is
  the first minute whose wall clock is past the slot, ``shift_forward`` is the slot minus the
  offset in force just before that minute, and a result on another local date is dropped;
* wildcard cron jobs fire at every UTC minute whose wall clock matches the fields.

Slow on purpose (about 2 us per minute); keep windows to days.
"""

from __future__ import annotations

import bisect
import importlib.resources
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo

from dateutil import rrule as du_rrule

MINUTE = timedelta(minutes=1)


@cache
def zone(key: str) -> ZoneInfo:
    """The zone from the pinned tzdata package (never the OS files)."""
    data = importlib.resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).read_bytes()
    return ZoneInfo.from_file(io.BytesIO(data), key=key)


def find_transitions(key: str, start: datetime, end: datetime) -> list[datetime]:
    """UTC instants where the offset changes, by hourly stepping then bisection to the second."""
    tz = zone(key)
    out: list[datetime] = []
    t = start
    prev = t.astimezone(tz).utcoffset()
    while t < end:
        nxt = t + timedelta(hours=1)
        off = nxt.astimezone(tz).utcoffset()
        if off != prev:
            lo, hi = t, nxt
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                mid = mid.replace(microsecond=0)
                if mid == lo:
                    break
                if mid.astimezone(tz).utcoffset() == prev:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            prev = off
        t = nxt
    return out


# ------------------------------------------------------------------------------------------
# Rules as the oracle understands them.


@dataclass(frozen=True)
class Spec:
    """A rule for the oracle: ``kind`` and its parameters, spelt independently of the engine."""

    kind: str  # daily, weekly, monthly, once, cron, rrule
    at: time = time(0, 0)
    weekdays: frozenset[int] = frozenset()  # Monday = 0
    day: int | str = 1  # monthly: 1..31 or "last"
    when: datetime | None = None  # once
    expr: str = ""  # cron
    anchored: bool = False  # cron: per-slot even for wildcard jobs
    rrule: str = ""
    dtstart: datetime | None = None


def _cron_field(text: str, low: int, high: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        base, _, step = part.partition("/")
        if base == "*":
            a, b = low, high
        elif "-" in base:
            a, b = (int(x) for x in base.split("-"))
        else:
            a = int(base)
            b = high if step else a
        out.update(range(a, b + 1, int(step or 1)))
    return out


@dataclass(frozen=True)
class Cron:
    minute: frozenset[int]
    hour: frozenset[int]
    dom: frozenset[int]
    month: frozenset[int]
    dow: frozenset[int]
    dom_star: bool
    dow_star: bool
    wild: bool

    @classmethod
    def parse(cls, expr: str) -> Cron:
        f = expr.split()
        dow = {d % 7 for d in _cron_field(f[4], 0, 7)}
        return cls(
            frozenset(_cron_field(f[0], 0, 59)),
            frozenset(_cron_field(f[1], 0, 23)),
            frozenset(_cron_field(f[2], 1, 31)),
            frozenset(_cron_field(f[3], 1, 12)),
            frozenset(dow),
            f[2].startswith("*"),
            f[4].startswith("*"),
            f[0].startswith("*") or f[1].startswith("*"),
        )

    def day(self, d: date) -> bool:
        if d.month not in self.month:
            return False
        dow = (d.weekday() + 1) % 7
        if self.dom_star or self.dow_star:
            return d.day in self.dom and dow in self.dow
        return d.day in self.dom or dow in self.dow

    def matches(self, wall: datetime) -> bool:
        return (
            wall.second == 0
            and wall.minute in self.minute
            and wall.hour in self.hour
            and self.day(wall.date())
        )


def nominal_slots(spec: Spec, first: date, last: date) -> list[datetime]:
    """Naive local slots named by the rule on local dates ``first..last``."""
    out: list[datetime] = []
    if spec.kind == "once":
        assert spec.when is not None
        return [spec.when] if first <= spec.when.date() <= last else []
    if spec.kind == "rrule":
        rule = du_rrule.rrulestr(spec.rrule, dtstart=spec.dtstart or datetime(2000, 1, 1))
        lo = datetime.combine(first, time(0))
        hi = datetime.combine(last, time(23, 59, 59))
        return list(rule.between(lo, hi, inc=True))
    cron = Cron.parse(spec.expr) if spec.kind == "cron" else None
    d = first
    while d <= last:
        if spec.kind == "daily" or (spec.kind == "weekly" and d.weekday() in spec.weekdays):
            out.append(datetime.combine(d, spec.at))
        elif spec.kind == "monthly":
            nxt = date(d.year + d.month // 12, d.month % 12 + 1, 1)
            is_last = (nxt - timedelta(days=1)) == d
            if (spec.day == "last" and is_last) or spec.day == d.day:
                out.append(datetime.combine(d, spec.at))
        elif cron is not None and cron.day(d):
            out.extend(
                datetime.combine(d, time(h, m))
                for h in sorted(cron.hour)
                for m in sorted(cron.minute)
            )
        d += timedelta(days=1)
    return out


# ------------------------------------------------------------------------------------------
# The fire set.


@dataclass(frozen=True)
class Fire:
    at: datetime  # UTC
    nominal: datetime  # naive local slot
    second: bool = False  # the later instant of a fold under fold=both / wall-clock repeat


class Walk:
    """Every UTC minute of a window with its observed wall clock."""

    def __init__(self, key: str, start: datetime, end: datetime) -> None:
        self.key = key
        self.tz = zone(key)
        self.instants: list[datetime] = []
        self.walls: list[datetime] = []
        self.seen: dict[datetime, list[datetime]] = {}
        t = start.astimezone(UTC).replace(second=0, microsecond=0)
        while t <= end:
            wall = t.astimezone(self.tz).replace(tzinfo=None)
            self.instants.append(t)
            self.walls.append(wall)
            self.seen.setdefault(wall, []).append(t)
            t += MINUTE

    def local_date(self, u: datetime) -> date:
        return u.astimezone(self.tz).date()

    def resolve(self, slot: datetime, gap: str, fold: str) -> list[Fire]:
        hits = self.seen.get(slot, [])
        if len(hits) == 1:
            return [Fire(hits[0], slot)]
        if len(hits) >= 2:
            if fold == "first":
                return [Fire(hits[0], slot)]
            if fold == "second":
                return [Fire(hits[-1], slot)]
            return [Fire(hits[0], slot), Fire(hits[-1], slot, second=True)]
        # A gap, if the wall clock jumps over the slot inside the window.
        for i in range(1, len(self.walls)):
            if self.walls[i - 1] < slot < self.walls[i]:
                if gap == "skip":
                    return []
                if gap == "at_transition":
                    u = self.instants[i]
                else:
                    u = self.instants[i - 1] + (slot - self.walls[i - 1])
                if self.local_date(u) != slot.date():
                    return []
                return [Fire(u, slot)]
        return []

    def fires(self, spec: Spec, gap: str, fold: str) -> list[Fire]:
        """F inside the window (minus a day at each edge, where slots may be cut)."""
        if spec.kind == "cron" and not spec.anchored and Cron.parse(spec.expr).wild:
            cron = Cron.parse(spec.expr)
            out: list[Fire] = []
            for u, wall in zip(self.instants, self.walls, strict=True):
                if cron.matches(wall):
                    out.append(
                        Fire(u, wall, second=len(self.seen[wall]) > 1 and self.seen[wall][0] != u)
                    )
            return out
        first = self.walls[0].date() - timedelta(days=1)
        last = self.walls[-1].date() + timedelta(days=1)
        found: dict[datetime, Fire] = {}
        for slot in nominal_slots(spec, first, last):
            for fire in self.resolve(slot, gap, fold):
                if fire.at not in found or fire.at < found[fire.at].at:
                    found.setdefault(fire.at, fire)
        return sorted(found.values(), key=lambda f: f.at)


def next_fire(fires: Iterable[Fire], after: datetime) -> Fire | None:
    """The first fire strictly after ``after``."""
    ordered = sorted(fires, key=lambda f: f.at)
    i = bisect.bisect_right([f.at for f in ordered], after)
    return ordered[i] if i < len(ordered) else None
