"""Slot sources: the compiled form of each rule kind, yielding nominal local slots.

A rule names *nominal local slots*: wall times computed in pure calendar arithmetic, with no
zone and no DST (daily: every local date at the time of day; monthly: day N of every month that
has one; cron: the Vixie fields). Slots are integers ``L`` on the local scale of
``timezones.epoch``. Turning a slot into an instant is not done here (``timezones.resolve``
does it); this module only says *which* wall times a rule names, in ascending order.

The RRULE source lives in ``timezones.rrule_plan`` (it memoises a dateutil expansion).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

from timezones.cron import CronSpec
from timezones.epoch import DAY, EPOCH_ORDINAL, FIRST_LOCAL, LAST_LOCAL, days_in_month
from timezones.policy import GapPolicy

__all__ = ["CronPlan", "DailyPlan", "IntervalPlan", "MonthlyPlan", "OncePlan", "SlotPlan"]


class SlotPlan:
    """The compiled form of a rule: a source of nominal local slots (see the module docstring).

    ``default_gap`` is the rule kind's gap policy when none is given; ``fast`` says the fast
    path of ``next_after`` applies (slot based, no UNTIL bound); ``until`` is an instant bound
    (RRULE ``UNTIL=...Z``); ``wall_clock`` is set for cron wildcard jobs, which are not slot
    based.
    """

    default_gap = GapPolicy.SHIFT_FORWARD
    fast = True
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


class DailyPlan(SlotPlan):
    """Every local date (or the listed weekdays, Monday = 0) at ``at`` seconds after midnight."""

    def __init__(self, at: int, weekdays: frozenset[int] | None) -> None:
        self.at = at
        self.weekdays = weekdays

    def first_slot_after(self, local: int) -> int | None:
        day = (local - self.at) // DAY + 1
        weekdays = self.weekdays
        if weekdays is not None:
            while (day + 3) % 7 not in weekdays:
                day += 1
        return day * DAY + self.at

    def slots_from(self, local: int) -> Iterator[int]:
        at, weekdays = self.at, self.weekdays
        day = max(-(-(local - at) // DAY), FIRST_LOCAL // DAY)
        last = LAST_LOCAL // DAY
        while day <= last:
            if weekdays is None or (day + 3) % 7 in weekdays:
                yield day * DAY + at
            day += 1


class MonthlyPlan(SlotPlan):
    """Day ``day`` (``None``: the last day) of every month that has it, at ``at`` seconds."""

    def __init__(self, day: int | None, at: int) -> None:
        self.day = day
        self.at = at

    def first_slot_after(self, local: int) -> int | None:
        start = date.fromordinal(EPOCH_ORDINAL + (local - self.at) // DAY)
        year, month = start.year, start.month
        while year <= 9999:
            last = days_in_month(year, month)
            day = last if self.day is None else self.day
            if day <= last:
                slot = (date(year, month, day).toordinal() - EPOCH_ORDINAL) * DAY + self.at
                if slot > local:
                    return slot
            month += 1
            if month == 13:
                month, year = 1, year + 1
        return None

    def slots_from(self, local: int) -> Iterator[int]:
        start = date.fromordinal(EPOCH_ORDINAL + max(local - self.at, FIRST_LOCAL) // DAY)
        year, month = start.year, start.month
        while year <= 9999:
            last = days_in_month(year, month)
            day = last if self.day is None else self.day
            if day <= last:
                slot = (date(year, month, day).toordinal() - EPOCH_ORDINAL) * DAY + self.at
                if slot >= local:
                    yield slot
            month += 1
            if month == 13:
                month, year = 1, year + 1


class OncePlan(SlotPlan):
    """One local slot."""

    def __init__(self, slot: int) -> None:
        self.slot = slot

    def slots_from(self, local: int) -> Iterator[int]:
        if self.slot >= local:
            yield self.slot


class CronPlan(SlotPlan):
    """A Vixie cron expression; wildcard jobs follow the wall clock unless anchored."""

    default_gap = GapPolicy.AT_TRANSITION

    def __init__(self, spec: CronSpec, wall_clock: bool) -> None:
        self.spec = spec
        self.wall_clock = spec if wall_clock else None
        self.fast = not wall_clock

    def slots_from(self, local: int) -> Iterator[int]:
        return self.spec.slots_from(max(local, FIRST_LOCAL))


class IntervalPlan(SlotPlan):
    """Elapsed time from an anchor instant: no local slots, the zone is ignored."""

    fast = False

    def __init__(self, anchor: int, period: int) -> None:
        self.anchor = anchor
        self.period = period
