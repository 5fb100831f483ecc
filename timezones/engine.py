"""The recurrence engine: ``next_after`` and ``occurrences``.

How a fire is found (docs/dst-semantics.md states the rules, docs/time-zones.md the policy
table):

1. A rule compiles to a slot source (``timezones.slots``, ``timezones.rrule_plan``) that yields
   *nominal local slots* in pure wall-clock arithmetic: integers ``L`` = seconds since
   1970-01-01T00:00 *local* (``timezones.epoch``).
2. Each slot is classified and resolved by policy in ``timezones.resolve``: unambiguous, gap
   (``shift_forward``, ``at_transition`` or ``skip``) or fold (``first``, ``second`` or
   ``both``). Here the recurrence adds the same-local-date rule: a gap-resolved instant whose
   local date is not the slot's date is dropped (no "every Friday" on a Saturday in Apia 2011).
3. ``next_after`` is the smallest resolved instant strictly after ``after``. Slots are scanned in
   local order from ``after + min offset``; the scan stops once a slot can no longer resolve
   before the best instant found (``L - max offset > best``), which also covers folds that
   cross midnight backwards. Equal instants from two slots are one fire.
4. Cron *wildcard* jobs (minute or hour field starting with ``*``) are not slot based: they fire
   at every instant whose observed wall clock matches (Vixie), found period by period between
   offset changes. ``interval`` rules are elapsed time from an anchor and ignore the zone.

All arithmetic is on integer UTC seconds; aware datetimes are built only for the result. Where
no offset change lies within a day of a slot, the slot is :class:`timezones.resolve.Unambiguous`
and its instant is ``L - offset``: the hot paths below test for that case inline (two
bisections) and hand every other slot to ``timezones.resolve``.
"""

from __future__ import annotations

import bisect
import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timezone, tzinfo
from typing import Any, cast

from timezones.cron import CronSpec, parse_cron
from timezones.epoch import DAY, EPOCH, FIRST_LOCAL, SECOND, epoch_seconds, local_seconds
from timezones.epoch import seconds_of_day as _seconds_of_day
from timezones.errors import InvalidRule, TimezoneError, shown
from timezones.occurrence import Occurrence
from timezones.policy import (
    Adjustment,
    CronWildcard,
    FoldPolicy,
    GapPolicy,
    fold_policy,
    gap_policy,
)
from timezones.resolve import classify_near, resolve
from timezones.rrule_plan import compile_rrule
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
from timezones.slots import CronPlan, DailyPlan, IntervalPlan, MonthlyPlan, OncePlan, SlotPlan
from timezones.zones import MAX_OFFSET, ZoneEntry, ZoneTable, zone_entry
from timezones.zones import _entries as _ENTRIES

__all__ = ["next_after", "occurrences", "plan_of"]

_WINDOW = 2 * MAX_OFFSET
_WEEKDAY_INDEX = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}
_KNOWN_TZINFO_TYPES = frozenset({timezone, zoneinfo.ZoneInfo})
_RULE_TYPES = frozenset(
    {DailyRule, WeekdaysRule, WeeklyRule, MonthlyRule, OnceRule, RRuleRule, CronRule, IntervalRule}
)
_GAP_ADJUSTMENTS = frozenset({Adjustment.GAP_SHIFTED, Adjustment.GAP_AT_TRANSITION})
# The last instant a datetime holds (9999-12-31T23:59:59Z): a fire after it, or whose local
# time is after 9999-12-31T23:59:59, is not representable and counts as no further fire.
_LAST_INSTANT = (datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC) - EPOCH) // SECOND
_SAFE_INSTANT = _LAST_INSTANT - MAX_OFFSET


# ----------------------------------------------------------------------------------------------
# Compiling a rule to its slot source.


def _compile(rule: Rule) -> SlotPlan:
    if isinstance(rule, DailyRule):
        return DailyPlan(_seconds_of_day(rule.at), None)
    if isinstance(rule, WeekdaysRule):
        return DailyPlan(_seconds_of_day(rule.at), frozenset(range(5)))
    if isinstance(rule, WeeklyRule):
        return DailyPlan(_seconds_of_day(rule.at), frozenset(_WEEKDAY_INDEX[d] for d in rule.days))
    if isinstance(rule, MonthlyRule):
        return MonthlyPlan(None if rule.day == "last" else rule.day, _seconds_of_day(rule.at))
    if isinstance(rule, OnceRule):
        return OncePlan(local_seconds(rule.at))
    if isinstance(rule, CronRule):
        spec = parse_cron(rule.expr)
        return CronPlan(spec, spec.wildcard and rule.wildcard == CronWildcard.WALL_CLOCK)
    if isinstance(rule, RRuleRule):
        return compile_rrule(rule.rrule, rule.dtstart)
    if isinstance(rule, IntervalRule):
        return IntervalPlan((rule.anchor - EPOCH) // SECOND, rule.seconds)
    raise InvalidRule("rule", rule, f"unsupported rule {shown(rule)}")


def plan_of(rule: Rule) -> SlotPlan:
    """The compiled slot source of a rule, built once and kept on the (frozen) model."""
    # Read the private slot directly: pydantic's __getattr__ for private attributes is slow.
    private = rule.__pydantic_private__
    plan: SlotPlan | None = private.get("_plan") if private is not None else None
    if plan is None:
        plan = _compile(rule)
        rule._plan = plan
    return plan


# ----------------------------------------------------------------------------------------------
# Finding the next fire.

_Fire = tuple[int, int, Adjustment | None, int]  # (instant, nominal slot, adjustment, fold index)


def _resolve_slot(
    table: ZoneTable, slot: int, lo: int, hi: int, gap: GapPolicy, fold: FoldPolicy
) -> list[tuple[int, Adjustment | None, int]]:
    """A slot near an offset change, resolved by policy, with the same-local-date rule."""
    fires = resolve(classify_near(table, slot, lo, hi), slot, gap, fold)
    if fires and fires[0][1] in _GAP_ADJUSTMENTS:
        u = fires[0][0]
        if (u + table.offset_at(u)) // DAY != slot // DAY:
            return []
    return fires


def _next_slot_fire(
    plan: SlotPlan, table: ZoneTable, a: int, gap: GapPolicy, fold: FoldPolicy
) -> _Fire | None:
    if a + 3 * _WINDOW + 8 * DAY >= table.horizon:
        table.ensure(a + 2 * _WINDOW + 8 * DAY)
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
            # Unambiguous (timezones.resolve.classify's first case, inlined for speed).
            u = slot - offs[k]
            if u > a and (best is None or u < best_u) and (until is None or u <= until):
                best, best_u = (u, slot, None, 0), u
                j, j2 = bisect.bisect_right(trans, u - _WINDOW), bisect.bisect_right(trans, u)
                omax = offs[j] if j == j2 else max(offs[j : j2 + 1])
            continue
        for u, adjusted, index in _resolve_slot(table, slot, k, k2, gap, fold):
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
        match = spec.next_match(max(-(-local // 60) * 60, FIRST_LOCAL))
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
    plan: SlotPlan, table: ZoneTable, a: int, gap: GapPolicy, fold: FoldPolicy
) -> _Fire | None:
    if isinstance(plan, IntervalPlan):
        steps = max(0, (a - plan.anchor) // plan.period + 1)
        u = plan.anchor + steps * plan.period
        return (u, u + table.offset_at(u), None, 0)
    if plan.wall_clock is not None:
        return _next_wall_clock_fire(plan.wall_clock, table, a)
    return _next_slot_fire(plan, table, a, gap, fold)


def _representable(table: ZoneTable, fire: _Fire | None) -> _Fire | None:
    """``fire``, or ``None`` when its instant or local time lies beyond the year 9999."""
    if fire is None or fire[0] <= _SAFE_INSTANT:
        return fire
    u = fire[0]
    if u > _LAST_INSTANT or u + table.offset_at(u) > _LAST_INSTANT:
        return None
    return fire


def _build(entry: ZoneEntry, fire: _Fire, utc_key: bool) -> Occurrence:
    return Occurrence(fire[0], fire[1], entry.tzinfo, fire[2], fire[3], utc_key)


def _prepare(
    rule: Rule | str | Any,
    zone: str | tzinfo,
    gap: GapPolicy | str | None,
    fold: FoldPolicy | str | None,
) -> tuple[SlotPlan, ZoneEntry, GapPolicy, FoldPolicy]:
    parsed: Rule = cast(Rule, rule) if type(rule) in _RULE_TYPES else parse_rule(rule)
    plan = plan_of(parsed)
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
    plan: SlotPlan | None = None
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
    try:
        zone_of_after = after.tzinfo
    except AttributeError:  # not a datetime: epoch_seconds raises the typed error
        zone_of_after = None
    if zone_of_after is None or (
        type(zone_of_after) not in _KNOWN_TZINFO_TYPES and after.utcoffset() is None
    ):
        epoch_seconds(after, "after")  # raises NaiveDatetimeError
    # timestamp() is exact to well under 0.5 s once the microseconds are taken off.
    a = round(after.timestamp() - after.microsecond * 1e-6)
    table = entry.table
    if plan.fast and a + 3 * _WINDOW + 8 * DAY < table.horizon:
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
            u = slot - offs[k]
            if k == bisect.bisect_right(trans, slot + MAX_OFFSET) and a < u <= _SAFE_INSTANT:
                return Occurrence(u, slot, entry.tzinfo)
    fire = _representable(table, _next_fire(plan, table, a, gap_p, fold_p))
    if fire is None:
        return None
    return Occurrence(fire[0], fire[1], entry.tzinfo, fire[2], fire[3], type(plan) is IntervalPlan)


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
    # No upper bound: the iterator is lazy, so a count only bounds the iteration and allocates
    # nothing (issue 26: count=10**9 consumed a few at a time was refused).
    if count is not None and (type(count) is not int or count < 0):  # not a bool, a float, a str
        raise TimezoneError("count", count, f"must be an integer >= 0; got {shown(count)}")
    return _iterate(plan, entry, a, limit, count, gap_p, fold_p)


def _iterate(
    plan: SlotPlan,
    entry: ZoneEntry,
    a: int,
    limit: int | None,
    count: int | None,
    gap: GapPolicy,
    fold: FoldPolicy,
) -> Iterator[Occurrence]:
    produced = 0
    utc_key = isinstance(plan, IntervalPlan)
    while count is None or produced < count:
        fire = _representable(entry.table, _next_fire(plan, entry.table, a, gap, fold))
        if fire is None or (limit is not None and fire[0] > limit):
            return
        yield _build(entry, fire, utc_key)
        produced += 1
        a = fire[0]
