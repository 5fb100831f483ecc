"""The RRULE plan: RFC 5545 expansion on a naive DTSTART, memoised as sorted local slots.

dateutil expands the rule in wall-clock arithmetic (a naive DTSTART, so no zone is involved and
invalid dates such as 31 April are dropped and not counted, as RFC 5545 requires). The slots
are memoised as integers and looked up by bisection; ``UNTIL=...Z`` is taken out of the rule and
kept as an instant bound, compared after resolution.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from dateutil import rrule as du_rrule

from timezones.epoch import DAY, EPOCH, EPOCH_NAIVE, SECOND
from timezones.errors import InvalidRule
from timezones.slots import Plan

__all__ = ["DEFAULT_DTSTART", "RRulePlan", "compile_rrule"]

# The package may not read the clock, so a rule without DTSTART starts here (local time).
DEFAULT_DTSTART = datetime(2000, 1, 1)
_CACHE_CAP = 100_000
_CHUNK = 64
_MAX_DAYS = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

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


class RRulePlan(Plan):
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
            for _ in range(_CHUNK):
                item = next(self._source, None)
                if item is None:
                    self._done = True
                    return
                cache.append((item - EPOCH_NAIVE) // SECOND)

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
                    for item in self.rule.xafter(EPOCH_NAIVE + timedelta(seconds=start), inc=True):
                        yield (item - EPOCH_NAIVE) // SECOND
                    return
                self._extend()
            yield cache[i]
            i += 1


def compile_rrule(rrule: str, dtstart: datetime | None) -> RRulePlan:
    """Build the dateutil rule on a naive DTSTART; ``UNTIL=...Z`` becomes an instant bound.

    Raises :class:`InvalidRule` (field ``rrule``) for text dateutil refuses or a rule that can
    never fire.
    """
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
    except (ValueError, TypeError) as exc:
        raise InvalidRule("rrule", rrule, str(exc)) from None
    if not isinstance(built, du_rrule.rrule):
        raise InvalidRule("rrule", rrule, "expected a single RRULE")
    months = getattr(built, "_bymonth", None)
    days = getattr(built, "_bymonthday", None)
    negative = getattr(built, "_bynmonthday", None)
    if months and days and not negative and all(d > _MAX_DAYS[m - 1] for m in months for d in days):
        raise InvalidRule("rrule", rrule, "BYMONTHDAY never occurs in BYMONTH")
    return RRulePlan(built, until, start)
