"""Helpers for users' test suites: DST reports over their schedules, zone changes, pinned "now".

``dst_report`` walks every offset change of the zones your schedules use over a date range and
lists each occurrence a DST policy touched::

    from timezones.testing import ZonedRule, dst_report
    report = dst_report([ZonedRule("standup", "weekdays@09:00", "Europe/Berlin")],
                        datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    assert [item.kind for item in report] == []  # 09:00 is never near a Berlin transition

Pinning "now": take a ``timezones.Clock`` in your code and pass a :class:`FrozenClock` in tests
(``frozen_clock("2026-03-08T06:59Z")``), e.g. as a pytest fixture::

    @pytest.fixture
    def clock() -> FrozenClock:
        return frozen_clock("2026-03-08T06:59Z")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from timezones.clock import FrozenClock
from timezones.engine import next_after, occurrences, plan_of
from timezones.errors import NaiveDatetimeError
from timezones.occurrence import Occurrence
from timezones.policy import FoldPolicy, GapPolicy
from timezones.rules import Rule, parse_rule
from timezones.slots import IntervalPlan
from timezones.zones import Transition, get_zone, transitions

__all__ = [
    "DstReportItem",
    "FrozenClock",
    "Schedule",
    "ZonedRule",
    "dst_report",
    "fires_across_zone_change",
    "frozen_clock",
]

_WINDOW = timedelta(days=2)


@dataclass(frozen=True)
class ZonedRule:
    """A schedule definition as users write it: a name, a rule and an IANA zone.

    Its former name :data:`Schedule` stays as an alias; ``ZonedRule`` keeps it apart from
    :class:`scheduler.Schedule`, the stored schedule.
    """

    name: str
    rule: Rule | str | Mapping[str, Any]
    zone: str
    gap: GapPolicy | str | None = None
    fold: FoldPolicy | str | None = None


# The former name (docs and callers used it): one class, two names.
Schedule = ZonedRule


@dataclass(frozen=True)
class DstReportItem:
    """One slot of a schedule near an offset change that a policy shifted, skipped or folded."""

    schedule: str
    zone: str
    rule: str
    transition: Transition
    nominal: datetime  # the naive local slot
    kind: Literal["shifted", "skipped", "folded"]
    fires: tuple[Occurrence, ...] = field(default=())  # what actually fires for the slot

    def __str__(self) -> str:
        when = ", ".join(o.at.strftime("%Y-%m-%dT%H:%MZ") for o in self.fires) or "no fire"
        return (
            f"{self.schedule} ({self.rule} in {self.zone}): {self.nominal:%Y-%m-%dT%H:%M} "
            f"{self.kind} -> {when}"
        )


def frozen_clock(at: datetime | str) -> FrozenClock:
    """A :class:`FrozenClock` at an aware datetime or an ISO string (``...Z`` or offset)."""
    if isinstance(at, str):
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise NaiveDatetimeError("at", at, f"naive datetime {at.isoformat()!r} has no zone")
    return FrozenClock(at)


def dst_report(
    schedules: Iterable[ZonedRule | tuple[Any, str]], start: datetime, end: datetime
) -> list[DstReportItem]:
    """Every occurrence of the schedules that a gap or fold policy touched in ``[start, end)``.

    ``shifted``: a gap moved the fire (``gap_shifted`` / ``gap_at_transition``); ``skipped``: a
    slot named by the rule produced no fire (``skip`` policy, or a local date that does not
    exist, e.g. Pacific/Apia 2011-12-30); ``folded``: the slot's wall time happened twice.
    Schedules may be :class:`ZonedRule` or ``(rule, zone)`` pairs.
    """
    items: list[DstReportItem] = []
    for index, raw in enumerate(schedules):
        schedule = raw if isinstance(raw, ZonedRule) else ZonedRule(f"#{index}", raw[0], raw[1])
        rule = parse_rule(schedule.rule)
        get_zone(schedule.zone)  # validate early, naming the zone
        for change in transitions(schedule.zone, start, end):
            items.extend(_around(schedule, rule, change))
    return items


def _around(schedule: ZonedRule, rule: Rule, change: Transition) -> list[DstReportItem]:
    lo, hi = change.at - _WINDOW, change.at + _WINDOW
    actual = list(
        occurrences(rule, schedule.zone, lo, until=hi, gap=schedule.gap, fold=schedule.fold)
    )
    by_slot: dict[datetime, list[Occurrence]] = {}
    for occ in actual:
        by_slot.setdefault(occ.nominal, []).append(occ)
    # The slots the rule names: what fires when both instants of folds and shifted gaps count.
    named = {
        o.nominal
        for o in occurrences(rule, schedule.zone, lo, until=hi, gap="shift_forward", fold="both")
    }
    named |= set(_nominal_slots(rule, schedule.zone, lo, hi))
    out: list[DstReportItem] = []
    for slot in sorted(named | by_slot.keys()):
        fired = tuple(by_slot.get(slot, ()))
        kind: Literal["shifted", "skipped", "folded"] | None = None
        if not fired:
            kind = "skipped"
        elif any(o.adjusted is not None and o.adjusted.value.startswith("gap") for o in fired):
            kind = "shifted"
        elif any(o.adjusted is not None or o.fold_index for o in fired):
            kind = "folded"
        if kind is not None:
            out.append(
                DstReportItem(schedule.name, schedule.zone, str(rule), change, slot, kind, fired)
            )
    return out


def _nominal_slots(rule: Rule, zone: str, lo: datetime, hi: datetime) -> list[datetime]:
    """Nominal local slots whose local date lies in the window (missing dates included)."""
    plan = plan_of(rule)
    if plan.wall_clock is not None or isinstance(plan, IntervalPlan):
        return []
    tz = get_zone(zone)
    epoch = datetime(1970, 1, 1)
    first = lo.astimezone(tz).replace(tzinfo=None) + timedelta(hours=6)
    last = hi.astimezone(tz).replace(tzinfo=None) - timedelta(hours=6)
    out: list[datetime] = []
    for slot in plan.slots_from((first - epoch) // timedelta(seconds=1)):
        value = epoch + timedelta(seconds=slot)
        if value > last:
            break
        out.append(value)
    return out


def fires_across_zone_change(
    rule: Rule | str | Mapping[str, Any],
    old_zone: str,
    new_zone: str,
    start: datetime,
    changed_at: datetime,
    *,
    gap: GapPolicy | str | None = None,
    fold: FoldPolicy | str | None = None,
) -> tuple[list[Occurrence], Occurrence | None]:
    """A user moves from ``old_zone`` to ``new_zone`` at ``changed_at``.

    Returns the fires in ``(start, changed_at]`` in the old zone (history, unchanged) and the
    first fire afterwards: ``next_after(rule, new_zone, max(changed_at, last fire))``.
    """
    history = list(occurrences(rule, old_zone, start, until=changed_at, gap=gap, fold=fold))
    last = history[-1].at if history else start
    resume = max(changed_at.astimezone(UTC), last)
    return history, next_after(rule, new_zone, resume, gap=gap, fold=fold)
