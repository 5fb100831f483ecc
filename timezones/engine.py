"""The recurrence engine: ``next_after`` and ``occurrences``.

How a fire is found (docs/time-zones.md has the policy table):

1. A rule yields *nominal local slots* in pure wall-clock arithmetic: integers ``L`` = seconds
   since 1970-01-01T00:00 *local* (daily: every date; cron: the Vixie fields; RRULE: dateutil
   expansion of a naive DTSTART, invalid dates dropped and not counted).
2. Each slot resolves against the zone's transition table (``timezones.zones.ZoneTable``) into 0,
   1 or 2 instants ``u`` with ``u + offset(u) == L``. One: fire there. Two (fold): the fold
   policy picks ``first``, ``second`` or ``both``. None (gap): the gap policy gives
   ``shift_forward`` (``L - offset_before``), ``at_transition`` (the transition instant) or
   ``skip``. A shifted instant whose local date is not the slot's date is dropped (the
   same-local-date rule: no "every Friday" on a Saturday in Apia 2011).
3. ``next_after`` is the smallest resolved instant strictly after ``after``. Slots are scanned in
   local order from ``after + min offset``; the scan stops once a slot can no longer resolve
   before the best instant found (``L - max offset > best``), which also covers folds that
   cross midnight backwards. Equal instants from two slots are one fire.
4. Cron *wildcard* jobs (minute or hour field starting with ``*``) are not slot based: they fire
   at every instant whose observed wall clock matches (Vixie), found period by period between
   offset changes. ``interval`` rules are elapsed time from an anchor and ignore the zone.

All arithmetic is on integer UTC seconds; aware datetimes are built only for the result.
"""

from __future__ import annotations

import bisect
import threading
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Any, cast

from dateutil import rrule as du_rrule

from timezones.cron import CronSpec, parse_cron
from timezones.errors import NaiveDatetimeError, TimezoneError
from timezones.policy import (
    Adjustment,
    CronWildcard,
    FoldPolicy,
    GapPolicy,
    fold_policy,
    gap_policy,
)
from timezones.rules import (
    CronRule,
    DailyRule,
    IntervalRule,
    MonthlyRule,
    OnceRule,
    RRuleRule,
    Rule,
    WeekdaysRule,
    WeeklyRule,
    parse_rule,
)
from timezones.zones import MAX_OFFSET, ZoneEntry, ZoneTable, zone_entry
from timezones.zones import _entries as _ENTRIES

__all__ = ["Occurrence", "epoch_seconds", "next_after", "occurrences"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_SECOND = timedelta(seconds=1)
_DAY = 86400
_WINDOW = 2 * MAX_OFFSET
_LAST_LOCAL = (date(9999, 12, 31).toordinal() - _EPOCH_ORDINAL) * _DAY
_FIRST_LOCAL = (date(1, 1, 2).toordinal() - _EPOCH_ORDINAL) * _DAY
_WEEKDAY_INDEX = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}
_RRULE_CACHE_CAP = 100_000
_RRULE_CHUNK = 64
_RRULE_DEFAULT_DTSTART = datetime(2000, 1, 1)
_MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_KNOWN_TZINFO_TYPES = frozenset({timezone, zoneinfo.ZoneInfo})
_RULE_TYPES = frozenset(
    {DailyRule, WeekdaysRule, WeeklyRule, MonthlyRule, OnceRule, RRuleRule, CronRule, IntervalRule}
)


class Occurrence:
    """One fire of a rule (immutable; the datetimes are built on first access).

    ``at`` is the aware UTC instant; ``local`` the same instant as an aware local time in the
    zone; ``nominal`` the naive local slot the rule named (it differs from ``local`` when a gap
    policy moved the fire); ``adjusted`` which policy touched it (``None`` if none);
    ``fold_index`` is 1 for the second instant of a repeated wall time (fold ``both``, or a
    wildcard cron job firing again in the repeated hour), else 0; ``key`` the stable text key.
    """

    __slots__ = ("_adjusted", "_at", "_fold_index", "_instant", "_local", "_slot", "_tz", "_utc")

    def __init__(
        self,
        instant: int,
        slot: int,
        zone: tzinfo,
        adjusted: Adjustment | None = None,
        fold_index: int = 0,
        utc_key: bool = False,
    ) -> None:
        self._instant = instant
        self._slot = slot
        self._tz = zone
        self._adjusted = adjusted
        self._fold_index = fold_index
        self._utc = utc_key
        self._at: datetime | None = None
        self._local: datetime | None = None

    @property
    def at(self) -> datetime:
        """The instant of the fire, aware, in UTC."""
        at = self._at
        if at is None:
            at = self._at = datetime.fromtimestamp(self._instant, UTC)
        return at

    @property
    def local(self) -> datetime:
        """The instant as an aware local time in the rule's zone (``fold`` set correctly)."""
        local = self._local
        if local is None:
            local = self._local = datetime.fromtimestamp(self._instant, self._tz)
        return local

    @property
    def nominal(self) -> datetime:
        """The naive local wall time the rule named."""
        return _EPOCH_NAIVE + timedelta(seconds=self._slot)

    @property
    def adjusted(self) -> Adjustment | None:
        """``None``, or which gap/fold policy decided this fire."""
        return self._adjusted

    @property
    def fold_index(self) -> int:
        """1 for the second instant of a repeated wall time, else 0."""
        return self._fold_index

    @property
    def zone(self) -> tzinfo:
        """The zone the rule was evaluated in."""
        return self._tz

    @property
    def key(self) -> str:
        """Stable text key of the slot: ``2026-03-08T02:30`` (``#1`` for a second fold fire).

        Interval rules have no local slot: their key is the UTC instant ``...Z``.
        """
        if self._utc:
            return self.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        nominal = self.nominal
        text = nominal.isoformat(timespec="seconds" if nominal.second else "minutes")
        return f"{text}#1" if self._fold_index else text

    def _identity(self) -> tuple[int, int, str, Adjustment | None, int]:
        return (self._instant, self._slot, str(self._tz), self._adjusted, self._fold_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Occurrence):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        adjusted = None if self._adjusted is None else self._adjusted.value
        return (
            f"Occurrence(at={self.at.isoformat()!r}, local={self.local.isoformat()!r}, "
            f"adjusted={adjusted!r}, key={self.key!r})"
        )


def epoch_seconds(value: datetime, field: str) -> int:
    """Whole UTC seconds since 1970 (floored) of an aware datetime; naive input is an error."""
    if not isinstance(value, datetime):
        raise TypeError(f"{field}: expected an aware datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise NaiveDatetimeError(
            f"{field}: naive datetime {value.isoformat()!r} has no time zone; pass an aware "
            "instant such as datetime(..., tzinfo=UTC)"
        )
    # timestamp() is exact to well under 0.5 s once the microseconds are taken off.
    return round(value.timestamp() - value.microsecond * 1e-6)


# ----------------------------------------------------------------------------------------------
# Plans: the compiled form of a rule.


class _Plan:
    default_gap = GapPolicy.SHIFT_FORWARD
    fast = True  # slot based, no UNTIL bound: the fast path of next_after applies
    until: int | None = None
    wall_clock: CronSpec | None = None

    def slots_from(self, local: int) -> Iterator[int]:
        """Nominal local slots ``>= local``, ascending."""
        raise NotImplementedError

    def first_slot_after(self, local: int) -> int | None:
        """The first nominal local slot ``> local``."""
        for slot in self.slots_from(local + 1):
            return slot
        return None


class _DailyPlan(_Plan):
    def __init__(self, at: int, weekdays: frozenset[int] | None) -> None:
        self.at = at
        self.weekdays = weekdays

    def first_slot_after(self, local: int) -> int | None:
        day = (local - self.at) // _DAY + 1
        weekdays = self.weekdays
        if weekdays is not None:
            while (day + 3) % 7 not in weekdays:
                day += 1
        return day * _DAY + self.at

    def slots_from(self, local: int) -> Iterator[int]:
        at, weekdays = self.at, self.weekdays
        day = max(-(-(local - at) // _DAY), _FIRST_LOCAL // _DAY)
        last = _LAST_LOCAL // _DAY
        while day <= last:
            if weekdays is None or (day + 3) % 7 in weekdays:
                yield day * _DAY + at
            day += 1


class _MonthlyPlan(_Plan):
    def __init__(self, day: int | None, at: int) -> None:
        self.day = day  # None: the last day of the month
        self.at = at

    def first_slot_after(self, local: int) -> int | None:
        start = date.fromordinal(_EPOCH_ORDINAL + (local - self.at) // _DAY)
        year, month = start.year, start.month
        while year <= 9999:
            last = _days_in_month(year, month)
            day = last if self.day is None else self.day
            if day <= last:
                slot = (date(year, month, day).toordinal() - _EPOCH_ORDINAL) * _DAY + self.at
                if slot > local:
                    return slot
            month += 1
            if month == 13:
                month, year = 1, year + 1
        return None

    def slots_from(self, local: int) -> Iterator[int]:
        start = date.fromordinal(_EPOCH_ORDINAL + max(local - self.at, _FIRST_LOCAL) // _DAY)
        year, month = start.year, start.month
        while year <= 9999:
            last = _days_in_month(year, month)
            day = last if self.day is None else self.day
            if day <= last:
                slot = (date(year, month, day).toordinal() - _EPOCH_ORDINAL) * _DAY + self.at
                if slot >= local:
                    yield slot
            month += 1
            if month == 13:
                month, year = 1, year + 1


class _OncePlan(_Plan):
    def __init__(self, slot: int) -> None:
        self.slot = slot

    def slots_from(self, local: int) -> Iterator[int]:
        if self.slot >= local:
            yield self.slot


class _CronPlan(_Plan):
    default_gap = GapPolicy.AT_TRANSITION

    def __init__(self, spec: CronSpec, wall_clock: bool) -> None:
        self.spec = spec
        self.wall_clock = spec if wall_clock else None
        self.fast = not wall_clock

    def slots_from(self, local: int) -> Iterator[int]:
        return self.spec.slots_from(max(local, _FIRST_LOCAL))


# Frequencies whose periods have a fixed length in naive wall-clock time; a rule of one of them
# without COUNT can be rebased: moving DTSTART by whole periods leaves its slots unchanged.
_FIXED_PERIODS = {
    du_rrule.SECONDLY: 1,
    du_rrule.MINUTELY: 60,
    du_rrule.HOURLY: 3600,
    du_rrule.DAILY: _DAY,
    du_rrule.WEEKLY: 7 * _DAY,
}
# Rebase rather than expand when the query lies this many periods past the memoised slots.
_REBASE_AFTER = 512


class _RRulePlan(_Plan):
    """Slots from dateutil on a naive DTSTART, memoised as sorted integers (bisect lookup).

    The memo holds every slot from ``_floor`` up to its last entry. A dense rule queried far
    from its DTSTART (``FREQ=MINUTELY`` with the default DTSTART of 2000, asked about 2026) is
    not expanded from the start: when its frequency has fixed-length periods and it has no
    COUNT, the expansion restarts from a DTSTART moved by a whole number of periods to just
    before the query, which yields the same slots.
    """

    def __init__(self, rule: du_rrule.rrule, until: int | None, dtstart: datetime) -> None:
        self.rule = rule
        self.until = until
        self.fast = until is None
        self._dtstart = (dtstart - _EPOCH_NAIVE) // _SECOND
        freq = getattr(rule, "_freq", None)
        count = getattr(rule, "_count", None)
        interval = int(getattr(rule, "_interval", 1) or 1)
        fixed = _FIXED_PERIODS.get(freq) if freq is not None else None
        self._period = fixed * interval if fixed is not None and count is None else None
        self._floor = self._dtstart
        self._cache: list[int] = []
        self._source: Iterator[datetime] = iter(rule)
        self._done = False
        self._lock = threading.Lock()

    def _rebase(self, local: int) -> None:
        """Restart the memo one period before ``local`` (caller holds the lock)."""
        assert self._period is not None
        k = max(0, (local - self._dtstart) // self._period - 1)
        start = self._dtstart + k * self._period
        moved = self.rule.replace(dtstart=_EPOCH_NAIVE + timedelta(seconds=start))
        self._source = iter(moved)
        self._cache = []
        self._floor = start
        self._done = False

    def _prepare(self, local: int) -> None:
        if self._period is None:
            return
        with self._lock:
            cache = self._cache
            end = cache[-1] if cache else self._floor
            far = not self._done and local - end > _REBASE_AFTER * self._period
            if local < self._floor or far or (len(cache) >= _RRULE_CACHE_CAP and local > end):
                self._rebase(local)

    def _extend(self) -> None:
        with self._lock:
            cache = self._cache
            if self._done or len(cache) >= _RRULE_CACHE_CAP:
                return
            for _ in range(_RRULE_CHUNK):
                item = next(self._source, None)
                if item is None:
                    self._done = True
                    return
                cache.append((item - _EPOCH_NAIVE) // _SECOND)

    def slots_from(self, local: int) -> Iterator[int]:
        self._prepare(local)
        cache = self._cache
        i = bisect.bisect_left(cache, local)
        while True:
            while i >= len(cache):
                if self._cache is not cache:
                    # Another thread rebased the memo: continue from the next slot there.
                    nxt = cache[-1] + 1 if cache else local
                    yield from self.slots_from(max(local, nxt))
                    return
                if self._done:
                    return
                if len(cache) >= _RRULE_CACHE_CAP:
                    if self._period is not None:
                        yield from self.slots_from(cache[-1] + 1)
                        return
                    # Dense rule with COUNT or calendar periods queried far ahead: stream.
                    start = max(local, cache[-1] + 1)
                    for item in self.rule.xafter(_EPOCH_NAIVE + timedelta(seconds=start), inc=True):
                        yield (item - _EPOCH_NAIVE) // _SECOND
                    return
                self._extend()
            yield cache[i]
            i += 1


class _IntervalPlan(_Plan):
    fast = False

    def __init__(self, anchor: int, period: int) -> None:
        self.anchor = anchor
        self.period = period


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _seconds_of_day(value: Any) -> int:
    return int(value.hour * 3600 + value.minute * 60 + value.second)


def compile_rrule(rule: RRuleRule) -> _RRulePlan:
    """Build the dateutil rule on a naive DTSTART; ``UNTIL=...Z`` becomes an instant bound."""
    parts: list[str] = []
    until: int | None = None
    for part in rule.rrule.split(";"):
        name, _, value = part.partition("=")
        if name == "UNTIL" and value.endswith("Z"):
            moment = datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            until = (moment - _EPOCH) // _SECOND
            continue
        parts.append(part)
    dtstart = rule.dtstart or _RRULE_DEFAULT_DTSTART
    built = du_rrule.rrulestr(";".join(parts), dtstart=dtstart)
    if not isinstance(built, du_rrule.rrule):
        raise ValueError("expected a single RRULE")
    months = getattr(built, "_bymonth", None)
    days = getattr(built, "_bymonthday", None)
    negative = getattr(built, "_bynmonthday", None)
    if months and days and not negative and all(d > _MAX_DAYS[m - 1] for m in months for d in days):
        raise ValueError("BYMONTHDAY never occurs in BYMONTH")
    return _RRulePlan(built, until, dtstart)


def _compile(rule: Rule) -> _Plan:
    if isinstance(rule, DailyRule):
        return _DailyPlan(_seconds_of_day(rule.at), None)
    if isinstance(rule, WeekdaysRule):
        return _DailyPlan(_seconds_of_day(rule.at), frozenset(range(5)))
    if isinstance(rule, WeeklyRule):
        return _DailyPlan(_seconds_of_day(rule.at), frozenset(_WEEKDAY_INDEX[d] for d in rule.days))
    if isinstance(rule, MonthlyRule):
        return _MonthlyPlan(None if rule.day == "last" else rule.day, _seconds_of_day(rule.at))
    if isinstance(rule, OnceRule):
        return _OncePlan((rule.at - _EPOCH_NAIVE) // _SECOND)
    if isinstance(rule, CronRule):
        spec = parse_cron(rule.expr)
        return _CronPlan(spec, spec.wildcard and rule.wildcard == CronWildcard.WALL_CLOCK)
    if isinstance(rule, RRuleRule):
        return compile_rrule(rule)
    if isinstance(rule, IntervalRule):
        return _IntervalPlan((rule.anchor - _EPOCH) // _SECOND, rule.seconds)
    raise TimezoneError(f"rule: unsupported rule {rule!r}")


def _plan_of(rule: Rule) -> _Plan:
    # Read the private slot directly: pydantic's __getattr__ for private attributes is slow.
    private = rule.__pydantic_private__
    plan: _Plan | None = private.get("_plan") if private is not None else None
    if plan is None:
        plan = _compile(rule)
        rule._plan = plan
    return plan


# ----------------------------------------------------------------------------------------------
# Resolution.

_Fire = tuple[int, int, Adjustment | None, int]  # (instant, nominal slot, adjustment, fold index)


def _resolve_near_transition(
    table: ZoneTable, slot: int, lo: int, hi: int, gap: GapPolicy, fold: FoldPolicy
) -> list[tuple[int, Adjustment | None, int]]:
    trans, offs = table.trans, table.offs
    n = len(trans)
    candidates = []
    for k in range(lo, hi + 1):
        u = slot - offs[k]
        if (k == 0 or trans[k - 1] <= u) and (k == n or u < trans[k]):
            candidates.append(u)
    if len(candidates) == 1:
        return [(candidates[0], None, 0)]
    if candidates:
        first, second = candidates[0], candidates[-1]
        if fold is FoldPolicy.FIRST:
            return [(first, Adjustment.FOLD_FIRST, 0)]
        if fold is FoldPolicy.SECOND:
            return [(second, Adjustment.FOLD_SECOND, 0)]
        return [(first, Adjustment.FOLD_FIRST, 0), (second, Adjustment.FOLD_SECOND, 1)]
    if gap is GapPolicy.SKIP:
        return []
    day = slot // _DAY
    for j in range(lo, hi):
        t, before, after = trans[j], offs[j], offs[j + 1]
        if t + before <= slot < t + after:
            if gap is GapPolicy.AT_TRANSITION:
                if (t + after) // _DAY != day:
                    return []
                return [(t, Adjustment.GAP_AT_TRANSITION, 0)]
            u = slot - before
            if (u + table.offset_at(u)) // _DAY != day:
                return []
            return [(u, Adjustment.GAP_SHIFTED, 0)]
    return []  # pragma: no cover - a slot with no instant lies in some gap


def _next_slot_fire(
    plan: _Plan, table: ZoneTable, a: int, gap: GapPolicy, fold: FoldPolicy
) -> _Fire | None:
    if a + 3 * _WINDOW + 8 * _DAY >= table.horizon:
        table.ensure(a + 2 * _WINDOW + 8 * _DAY)
    trans, offs = table.trans, table.offs
    lo, hi = bisect.bisect_right(trans, a - _WINDOW), bisect.bisect_right(trans, a + _WINDOW)
    omin = offs[lo] if lo == hi else min(offs[lo : hi + 1])
    until = plan.until
    best: _Fire | None = None
    best_u = omax = 0
    for slot in plan.slots_from(a + omin + 1):
        if best is not None and slot - omax > best_u:
            break
        if until is not None and slot - MAX_OFFSET > until:
            break
        if slot + _WINDOW >= table.horizon:
            table.ensure(slot)
            trans, offs = table.trans, table.offs
        k = bisect.bisect_right(trans, slot - MAX_OFFSET)
        k2 = bisect.bisect_right(trans, slot + MAX_OFFSET)
        if k == k2:
            u = slot - offs[k]
            if u > a and (best is None or u < best_u) and (until is None or u <= until):
                best, best_u = (u, slot, None, 0), u
                j, j2 = bisect.bisect_right(trans, u - _WINDOW), bisect.bisect_right(trans, u)
                omax = offs[j] if j == j2 else max(offs[j : j2 + 1])
            continue
        for u, adjusted, index in _resolve_near_transition(table, slot, k, k2, gap, fold):
            if u > a and (best is None or u < best_u) and (until is None or u <= until):
                best, best_u = (u, slot, adjusted, index), u
                j, j2 = bisect.bisect_right(trans, u - _WINDOW), bisect.bisect_right(trans, u)
                omax = offs[j] if j == j2 else max(offs[j : j2 + 1])
    return best


def _next_wall_clock_fire(spec: CronSpec, table: ZoneTable, a: int) -> _Fire | None:
    t = a + 1
    while True:
        table.ensure(t)
        trans, offs = table.trans, table.offs
        k = bisect.bisect_right(trans, t)
        offset = offs[k]
        end = trans[k] if k < len(trans) else None
        local = t + offset
        match = spec.next_match(max(-(-local // 60) * 60, _FIRST_LOCAL))
        if match is None:
            return None
        u = match - offset
        if end is None or u < end:
            index = 0
            for j in range(bisect.bisect_right(trans, match - MAX_OFFSET), k):
                v = match - offs[j]
                if (j == 0 or trans[j - 1] <= v) and v < trans[j]:
                    index = 1  # this wall time was already observed earlier (a fold)
                    break
            return (u, match, None, index)
        t = end


def _next_fire(
    plan: _Plan, table: ZoneTable, a: int, gap: GapPolicy, fold: FoldPolicy
) -> _Fire | None:
    if isinstance(plan, _IntervalPlan):
        steps = max(0, (a - plan.anchor) // plan.period + 1)
        u = plan.anchor + steps * plan.period
        return (u, u + table.offset_at(u), None, 0)
    if plan.wall_clock is not None:
        return _next_wall_clock_fire(plan.wall_clock, table, a)
    return _next_slot_fire(plan, table, a, gap, fold)


def _build(entry: ZoneEntry, fire: _Fire, utc_key: bool) -> Occurrence:
    return Occurrence(fire[0], fire[1], entry.tzinfo, fire[2], fire[3], utc_key)


def _prepare(
    rule: Rule | str | Any,
    zone: str | tzinfo,
    gap: GapPolicy | str | None,
    fold: FoldPolicy | str | None,
) -> tuple[_Plan, ZoneEntry, GapPolicy, FoldPolicy]:
    parsed: Rule = cast(Rule, rule) if type(rule) in _RULE_TYPES else parse_rule(rule)
    plan = _plan_of(parsed)
    entry = _ENTRIES.get(zone) if type(zone) is str else None
    if entry is None:
        entry = zone_entry(zone)
    gap_p = plan.default_gap if gap is None else gap_policy(gap, plan.default_gap)
    fold_p = FoldPolicy.FIRST if fold is None else fold_policy(fold)
    return plan, entry, gap_p, fold_p


def next_after(
    rule: Rule | str | Any,
    zone: str | tzinfo,
    after: datetime,
    *,
    gap: GapPolicy | str | None = None,
    fold: FoldPolicy | str | None = None,
) -> Occurrence | None:
    """The first fire of ``rule`` in ``zone`` strictly after the aware instant ``after``.

    ``rule`` is a model or anything :func:`timezones.parse_rule` accepts; ``zone`` an IANA key
    or a ``ZoneInfo`` (looked up by key in the database in use). ``gap`` defaults to
    ``shift_forward`` (``at_transition`` for cron), ``fold`` to ``first``. Returns ``None`` when
    the rule has no further fire (``once`` in the past, RRULE COUNT/UNTIL exhausted).
    """
    # This function is the hot path (the scheduler calls it for every schedule): the common
    # case is inlined, the rest goes through _prepare/_next_fire.
    plan: _Plan | None = None
    if type(rule) in _RULE_TYPES:
        private = cast(Rule, rule).__pydantic_private__
        if private is not None:
            plan = private.get("_plan")
    if plan is None or gap is not None or fold is not None:
        plan, entry, gap_p, fold_p = _prepare(rule, zone, gap, fold)
    else:
        found = _ENTRIES.get(zone) if type(zone) is str else None
        entry = zone_entry(zone) if found is None else found
        gap_p, fold_p = plan.default_gap, FoldPolicy.FIRST
    zone_of_after = after.tzinfo
    if zone_of_after is None or (
        type(zone_of_after) not in _KNOWN_TZINFO_TYPES and after.utcoffset() is None
    ):
        epoch_seconds(after, "after")  # raises NaiveDatetimeError
    # timestamp() is exact to well under 0.5 s once the microseconds are taken off.
    a = round(after.timestamp() - after.microsecond * 1e-6)
    table = entry.table
    if plan.fast and a + 3 * _WINDOW + 8 * _DAY < table.horizon:
        trans, offs = table.trans, table.offs
        lo = bisect.bisect_right(trans, a - _WINDOW)
        if lo == bisect.bisect_right(trans, a + _WINDOW):
            # Fast path: one offset in force around `after` and around the slot found. No
            # earlier slot can resolve after `after` (that needs a smaller offset near `after`)
            # and no later slot before the one found (that needs another offset near it).
            slot = plan.first_slot_after(a + offs[lo])
            if slot is None:
                return None
            k = bisect.bisect_right(trans, slot - MAX_OFFSET)
            if k == bisect.bisect_right(trans, slot + MAX_OFFSET) and slot - offs[k] > a:
                return Occurrence(slot - offs[k], slot, entry.tzinfo)
    fire = _next_fire(plan, table, a, gap_p, fold_p)
    if fire is None:
        return None
    return Occurrence(fire[0], fire[1], entry.tzinfo, fire[2], fire[3], type(plan) is _IntervalPlan)


def occurrences(
    rule: Rule | str | Any,
    zone: str | tzinfo,
    after: datetime,
    *,
    count: int | None = None,
    until: datetime | None = None,
    gap: GapPolicy | str | None = None,
    fold: FoldPolicy | str | None = None,
) -> Iterator[Occurrence]:
    """Successive fires strictly after ``after``: at most ``count``, none later than ``until``.

    Each fire is ``next_after`` of the previous one, so the sequence is strictly increasing.
    Without ``count`` or ``until`` the iterator is unbounded for recurring rules.
    """
    plan, entry, gap_p, fold_p = _prepare(rule, zone, gap, fold)
    a = epoch_seconds(after, "after")
    limit = None if until is None else epoch_seconds(until, "until")
    if count is not None and count < 0:
        raise TimezoneError(f"count: must be >= 0, got {count!r}")
    return _iterate(plan, entry, a, limit, count, gap_p, fold_p)


def _iterate(
    plan: _Plan,
    entry: ZoneEntry,
    a: int,
    limit: int | None,
    count: int | None,
    gap: GapPolicy,
    fold: FoldPolicy,
) -> Iterator[Occurrence]:
    produced = 0
    utc_key = isinstance(plan, _IntervalPlan)
    while count is None or produced < count:
        fire = _next_fire(plan, entry.table, a, gap, fold)
        if fire is None or (limit is not None and fire[0] > limit):
            return
        yield _build(entry, fire, utc_key)
        produced += 1
        a = fire[0]
