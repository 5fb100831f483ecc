"""The RRULE plan: RFC 5545 expansion on a naive DTSTART, memoised as sorted local slots.

dateutil expands the rule in wall-clock arithmetic (a naive DTSTART, so no zone is involved and
invalid dates such as 31 April are dropped and not counted, as RFC 5545 requires). The slots
are memoised as integers and looked up by bisection; ``UNTIL=...Z`` is taken out of the rule and
kept as an instant bound, compared after resolution.

**Bounded cost.** dateutil finds the next occurrence by walking periods (a day at a time for a
``MINUTELY`` rule whose day is filtered out), so a rule that can never fire would walk to the
year 9999 (``FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=-30``: seconds) and ``INTERVAL=0`` would walk
forever. :func:`compile_rrule` refuses both at parse time, in three steps of bounded cost:

1. the parts dateutil does not check: ``INTERVAL`` and ``COUNT`` from 1 to a bound, ASCII text;
2. the date filters alone (BYMONTH, BYMONTHDAY, BYYEARDAY, BYWEEKNO, BYDAY) expanded yearly
   over 2000-2027: these 28 years hold every kind of year (leap or not, starting on each
   weekday), and which dates of a year match depends only on its kind, so no date there means
   no date ever (``BYMONTH=2;BYMONTHDAY=-30``, ``BYYEARDAY=366;BYMONTH=1``);
3. the rule itself (without COUNT) searched for an occurrence late in the calendar, its DTSTART
   moved by whole periods so that dateutil's walk ends at the year 9999 soon (see
   :func:`_late`): a yearly, monthly or weekly rule over a whole 400-year cycle, a daily or
   finer one over :data:`PROBE_YEARS` years. Nothing there (an interval that never meets its
   filters, ``FREQ=DAILY;INTERVAL=7;BYDAY=TU`` from a Monday) is refused with the reason.

A rule that passes repeats with the calendar, so a later search also ends within a bounded
number of periods; a daily or finer rule whose occurrences lie more than :data:`PROBE_YEARS`
years apart is refused rather than walked.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from dateutil import rrule as du_rrule

from timezones.epoch import DAY, EPOCH, EPOCH_NAIVE, SECOND
from timezones.errors import InvalidRule, shown
from timezones.slots import SlotPlan

__all__ = ["DEFAULT_DTSTART", "MAX_COUNT", "MAX_INTERVAL", "RRulePlan", "compile_rrule"]

# The package may not read the clock, so a rule without DTSTART starts here (local time).
DEFAULT_DTSTART = datetime(2000, 1, 1)
_CACHE_CAP = 100_000
_CHUNK = 64
_CHUNK_SPAN = 400 * DAY  # a chunk read ahead stops at the first slot this far past its first
_MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
MAX_INTERVAL = 1_000_000
MAX_COUNT = 100_000_000
# How many years a daily or finer rule is searched for an occurrence: two 28-year solar
# cycles (dateutil visits a filtered-out day once, so about 20,000 steps).
PROBE_YEARS = 56
# At most this many dateutil steps per search (see _steps_per_day).
PROBE_STEPS = 1_000_000
_LAST = datetime(9999, 12, 31, 23, 59, 59)

# Frequencies whose periods have a fixed length in naive wall-clock time; a rule of one of them
# without COUNT can be rebased: moving DTSTART by whole periods leaves its slots unchanged.
_FIXED_PERIODS = {
    du_rrule.SECONDLY: 1,
    du_rrule.MINUTELY: 60,
    du_rrule.HOURLY: 3600,
    du_rrule.DAILY: DAY,
    du_rrule.WEEKLY: 7 * DAY,
}
# Rebase rather than expand when the query lies this many periods past the memoised slots.
_REBASE_AFTER = 512


class RRulePlan(SlotPlan):
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
        self._dtstart = (dtstart - EPOCH_NAIVE) // SECOND
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
        moved = self.rule.replace(dtstart=EPOCH_NAIVE + timedelta(seconds=start))
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
            if local < self._floor or far or (len(cache) >= _CACHE_CAP and local > end):
                self._rebase(local)

    def _extend(self) -> None:
        with self._lock:
            cache = self._cache
            if self._done or len(cache) >= _CACHE_CAP:
                return
            first: int | None = None
            for _ in range(_CHUNK):
                item = _next(self._source)
                if item is None:
                    self._done = True
                    return
                slot = (item - EPOCH_NAIVE) // SECOND
                cache.append(slot)
                if first is None:
                    first = slot
                elif slot - first > _CHUNK_SPAN:
                    # A sparse rule (Monday 29 February): read ahead no further than needed,
                    # each next slot may be decades of dateutil's walking away.
                    return

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
                if len(cache) >= _CACHE_CAP:
                    if self._period is not None:
                        yield from self.slots_from(cache[-1] + 1)
                        return
                    # Dense rule with COUNT or calendar periods queried far ahead: stream.
                    start = max(local, cache[-1] + 1)
                    stream = self.rule.xafter(EPOCH_NAIVE + timedelta(seconds=start), inc=True)
                    while (item := _next(stream)) is not None:
                        yield (item - EPOCH_NAIVE) // SECOND
                    return
                self._extend()
            yield cache[i]
            i += 1


def _next(source: Iterator[datetime]) -> datetime | None:
    """The next item of a dateutil expansion; ``None`` at its end, which includes the end of
    the representable calendar (dateutil may step past the year 9999 and raise there)."""
    try:
        return next(source, None)
    except (ValueError, OverflowError):
        return None


def _check_parts(rrule: str) -> None:
    """What dateutil does not check: plain ASCII, and INTERVAL and COUNT within bounds."""
    if not rrule.isascii():
        raise InvalidRule("rrule", rrule, f"{shown(rrule)} holds characters other than ASCII")
    for part in rrule.split(";"):
        name, _, value = part.partition("=")
        bound = {"INTERVAL": MAX_INTERVAL, "COUNT": MAX_COUNT}.get(name)
        if bound is None:
            continue
        if not value.isdigit() or len(value) > len(str(bound)) or not 1 <= int(value) <= bound:
            raise InvalidRule(
                "rrule", rrule, f"{name}={shown(value)} must be an integer from 1 to {bound}"
            )


def _day_filters(built: du_rrule.rrule) -> dict[str, Any] | None:
    """The rule's date filters as rrule keywords, or ``None`` when it filters no dates."""
    nweekdays = getattr(built, "_bynweekday", None) or ()
    weekdays = [du_rrule.weekday(d) for d in getattr(built, "_byweekday", None) or ()]
    weekdays += [du_rrule.weekday(d, n) for d, n in nweekdays]
    months = getattr(built, "_bymonth", None)
    monthdays = tuple(getattr(built, "_bymonthday", ())) + tuple(getattr(built, "_bynmonthday", ()))
    filters: dict[str, Any] = {
        "bymonth": months,
        "bymonthday": monthdays or None,
        "byyearday": getattr(built, "_byyearday", None),
        "byweekno": getattr(built, "_byweekno", None),
        "byweekday": weekdays or None,
    }
    if all(v is None for v in filters.values()):
        return None
    if nweekdays and months is None and getattr(built, "_freq", None) == du_rrule.MONTHLY:
        # A monthly rule's 2MO is the second Monday of each month: say "each month" explicitly,
        # or the yearly expansion would read it as the second Monday of the year.
        filters["bymonth"] = tuple(range(1, 13))
    return filters


def _never(rrule: str, why: str) -> InvalidRule:
    return InvalidRule("rrule", rrule, f"{shown(rrule)} can never fire: {why}")


def _late(built: du_rrule.rrule, start: datetime) -> du_rrule.rrule:
    """The rule without COUNT, its DTSTART moved by whole periods to late in the calendar.

    dateutil walks periods until it finds an occurrence or passes the year 9999, and stops
    nowhere else (not at UNTIL): moving DTSTART late bounds the walk. A yearly or monthly rule
    moves by whole 400-year cycles that are whole numbers of its intervals, which keeps every
    date it names, and still walks a whole cycle (at most 400 or 4,800 periods); a rule with
    fixed-length periods moves to :data:`PROBE_YEARS` before the end.
    """
    freq = getattr(built, "_freq", du_rrule.DAILY)
    interval = int(getattr(built, "_interval", 1) or 1)
    if freq in (du_rrule.YEARLY, du_rrule.MONTHLY):
        months = math.lcm(interval * (12 if freq == du_rrule.YEARLY else 1), 4800)
        total = start.year * 12 + start.month - 1
        steps = (_LAST.year * 12 + 11 - months - total) // months
        if steps <= 0:
            return built.replace(count=None)
        moved = total + steps * months
        return built.replace(count=None, dtstart=start.replace(year=moved // 12))
    period = _FIXED_PERIODS[freq] * interval
    target = (_LAST - EPOCH_NAIVE) // SECOND - _probe_days(built) * DAY
    own = (start - EPOCH_NAIVE) // SECOND
    steps = (target - own) // period
    if steps <= 0:
        return built.replace(count=None)
    return built.replace(count=None, dtstart=start + timedelta(seconds=steps * period))


def _steps_per_day(built: du_rrule.rrule) -> int:
    """About how many steps dateutil takes per day it walks through: a minutely or secondly
    rule whose hours (or minutes) are filtered steps through every period of a day to find the
    next allowed one; any other rule steps once per day it skips."""
    freq = getattr(built, "_freq", du_rrule.DAILY)
    interval = int(getattr(built, "_interval", 1) or 1)
    if freq == du_rrule.MINUTELY and getattr(built, "_byhour", None) is not None:
        return max(1, 1440 // interval)
    if freq == du_rrule.SECONDLY and (
        getattr(built, "_byhour", None) is not None or getattr(built, "_byminute", None) is not None
    ):
        return max(1, 86400 // interval)
    return 1


def _probe_days(built: du_rrule.rrule) -> int:
    """How many days the search of :func:`_late` covers: a whole 400-year cycle for a weekly
    or coarser rule (a step visits a week or more at once), else :data:`PROBE_YEARS` years or
    what :data:`PROBE_STEPS` steps walk, whichever is shorter."""
    if getattr(built, "_freq", du_rrule.DAILY) <= du_rrule.WEEKLY:
        return 146_097
    return max(1, min(PROBE_YEARS * 366, PROBE_STEPS // _steps_per_day(built)))


def _probe(built: du_rrule.rrule, rrule: str, start: datetime) -> None:
    """Refuse a rule that can never fire, at a bounded cost (the module docstring)."""
    filters = _day_filters(built)
    if filters is not None:
        days = du_rrule.rrule(
            du_rrule.YEARLY,
            dtstart=datetime(_LAST.year - 27, 1, 1),
            wkst=getattr(built, "_wkst", 0),
            byhour=0,
            byminute=0,
            bysecond=0,
            **filters,
        )
        if _next(iter(days)) is None:
            raise _never(rrule, "no date matches its BYMONTH, BYMONTHDAY, BYYEARDAY, BYDAY")
        if _steps_per_day(built) > 1:
            _check_sparse(built, rrule, days)
    try:
        first = _next(iter(_late(built, start)))
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidRule("rrule", rrule, f"{shown(rrule)}: {exc}") from None
    if first is None:
        raise _never(
            rrule,
            f"its FREQ and INTERVAL never meet its filters (no occurrence in "
            f"{_probe_days(built)} days)",
        )


def _check_sparse(built: du_rrule.rrule, rrule: str, days: du_rrule.rrule) -> None:
    """Refuse a minutely or secondly rule with filtered hours whose dates lie further apart
    than its search affords: each next occurrence would cost too many steps to find."""
    ordinals = [d.toordinal() for d in days]  # the matching dates of 28 years, one each
    gaps = [b - a for a, b in itertools.pairwise(ordinals)]
    widest = max(gaps) if gaps else 28 * 366
    afford = _probe_days(built)
    if widest > afford:
        raise InvalidRule(
            "rrule",
            rrule,
            f"{shown(rrule)} costs too much to expand: its dates lie up to {widest} days apart "
            f"and each day costs {_steps_per_day(built)} steps at this FREQ and INTERVAL (at "
            f"most {afford} days are searched); give the times of day with FREQ=DAILY and "
            "BYHOUR/BYMINUTE/BYSECOND instead",
        )


def compile_rrule(rrule: str, dtstart: datetime | None) -> RRulePlan:
    """Build the dateutil rule on a naive DTSTART; ``UNTIL=...Z`` becomes an instant bound.

    Raises :class:`InvalidRule` (field ``rrule``) for text dateutil refuses or a rule that can
    never fire (the module docstring says how that is decided, at a bounded cost).
    """
    _check_parts(rrule)
    parts: list[str] = []
    until: int | None = None
    for part in rrule.split(";"):
        name, _, value = part.partition("=")
        if name == "UNTIL" and value.endswith("Z"):
            try:
                moment = datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
            except ValueError as exc:
                raise InvalidRule("rrule", rrule, str(exc)) from None
            until = (moment - EPOCH) // SECOND
            continue
        parts.append(part)
    start = dtstart or DEFAULT_DTSTART
    try:
        built = du_rrule.rrulestr(";".join(parts), dtstart=start)
    except (ValueError, TypeError, OverflowError, LookupError) as exc:
        raise InvalidRule("rrule", rrule, str(exc)) from None
    if not isinstance(built, du_rrule.rrule):
        raise InvalidRule("rrule", rrule, "expected a single RRULE")
    months = getattr(built, "_bymonth", None)
    days = getattr(built, "_bymonthday", None)
    negative = getattr(built, "_bynmonthday", None)
    if months and days and not negative and all(d > _MAX_DAYS[m - 1] for m in months for d in days):
        raise InvalidRule("rrule", rrule, "BYMONTHDAY never occurs in BYMONTH")
    _probe(built, rrule, start)
    return RRulePlan(built, until, start)
