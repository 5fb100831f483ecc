"""What a tick does with one due schedule: pure computation, no I/O, no clock.

Given a schedule, the tick's ``now`` and its lookahead horizon, :func:`plan` lists the
occurrences after the schedule's cursor up to the horizon and decides for each one: enqueue it
(with its run_at: the occurrence plus deterministic jitter, or the end of the quiet window), or
record it as missed (downtime beyond the catch-up grace) or skipped (quiet hours). It returns the
new cursor (the instant of the last occurrence decided) and the next occurrence after it.

The next occurrence is always computed from the previous *scheduled* occurrence, never from
"now + period", so nothing drifts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.model import CatchUp, Overlap, QuietAction, Schedule
from timezones import Occurrence, next_after

# At most this many occurrences are decided per schedule per tick; a schedule with more overdue
# occurrences (an every-minute rule after a week down) continues at the next tick.
MAX_PER_TICK = 2000


@dataclass(frozen=True, slots=True)
class OccurrenceDecision:
    occurrence: Occurrence
    run_at: datetime | None  # None: not enqueued
    kind: str  # "enqueue", "missed", "skipped", "overlap"
    reason: str | None = None


@dataclass
class Plan:
    schedule: Schedule
    decisions: list[OccurrenceDecision] = field(default_factory=list)
    cursor_at: datetime | None = None  # None: unchanged
    next: Occurrence | None = None
    enqueued: int = 0
    missed: int = 0
    skipped: int = 0
    overlapped: int = 0  # enqueue decisions the overlap policy turned into skips

    @property
    def last_enqueued(self) -> OccurrenceDecision | None:
        for d in reversed(self.decisions):
            if d.kind == "enqueue":
                return d
        return None


def jitter_offset(schedule_id: int, occurrence_key: str, jitter_seconds: int) -> timedelta:
    """A deterministic offset in [0, jitter): every replica computes the same one."""
    if jitter_seconds <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{schedule_id}:{occurrence_key}".encode(), digest_size=8).digest()
    millis = int.from_bytes(digest, "big") % (jitter_seconds * 1000)
    return timedelta(milliseconds=millis)


class PlanMemo:
    """What the plans of one tick batch share: in a herd, schedules with the same rule, zone,
    policies and cursor have the same occurrences, computed (and keyed) once. Occurrences are
    immutable values, so sharing them is safe."""

    __slots__ = ("_keys", "_next")

    def __init__(self) -> None:
        self._next: dict[tuple[Any, ...], Occurrence | None] = {}
        # id(occurrence) -> (the occurrence, its key): holding it keeps the id from reuse.
        self._keys: dict[int, tuple[Occurrence, str]] = {}

    def next_after(self, schedule: Schedule, after: datetime) -> Occurrence | None:
        rule = schedule.rule_raw
        if not isinstance(rule, str):  # parsed already: no cheap identity for the rule
            return next_occurrence(schedule, after)
        k = (rule, schedule.zone, schedule.gap, schedule.fold, after)
        try:
            occ = self._next[k]
        except KeyError:
            occ = self._next[k] = _rule_next(schedule, after)
        return _within(schedule, occ)

    def key(self, occ: Occurrence) -> str:
        """``occ.key``, formatted once per occurrence."""
        hit = self._keys.get(id(occ))
        if hit is not None and hit[0] is occ:
            return hit[1]
        text = occ.key
        self._keys[id(occ)] = (occ, text)
        return text


def run_at_for(
    schedule: Schedule, occ: Occurrence, following: Occurrence | None, key: str | None = None
) -> datetime:
    """The occurrence's instant plus jitter, capped so the job never passes the next one."""
    offset = jitter_offset(schedule.id, occ.key if key is None else key, schedule.jitter_seconds)
    if following is not None and offset:
        room = following.at - occ.at - timedelta(seconds=1)
        offset = max(timedelta(0), min(offset, room))
    return occ.at + offset


def _rule_next(schedule: Schedule, after: datetime) -> Occurrence | None:
    return next_after(schedule.rule, schedule.zone, after, gap=schedule.gap, fold=schedule.fold)


def _within(schedule: Schedule, occ: Occurrence | None) -> Occurrence | None:
    """``occ`` if it is within the schedule's ``end_at`` (the lifetime), else None."""
    end = schedule.end_at
    if occ is not None and end is not None and occ.at > end:
        return None
    return occ


def next_occurrence(schedule: Schedule, after: datetime) -> Occurrence | None:
    """The schedule's next occurrence after ``after``, None after its ``end_at``."""
    return _within(schedule, _rule_next(schedule, after))


def plan(
    schedule: Schedule, now: datetime, horizon: datetime, memo: PlanMemo | None = None
) -> Plan:
    """Decide the occurrences of ``schedule`` after its cursor and up to ``horizon``.

    ``memo`` (one per batch) shares the occurrences of schedules alike (:class:`PlanMemo`).
    With ``max_runs``, the plan stops at the enqueue that uses the last remaining run (the
    tick then ends the schedule; an occurrence the overlap policy skips uses none).
    """
    result = _plan(schedule, now, horizon, memo)
    remaining = schedule.remaining_runs
    if remaining is not None and result.enqueued > remaining:
        _cap(result, remaining, memo)
    return result


def _cap(result: Plan, runs: int, memo: PlanMemo | None) -> None:
    """Keep the decisions up to the ``runs``-th enqueue; the next is the one after it."""
    seen = 0
    for i, d in enumerate(result.decisions):
        if d.kind == "enqueue":
            seen += 1
            if seen == runs:
                dropped = result.decisions[i + 1 :]
                del result.decisions[i + 1 :]
                result.enqueued = runs
                result.missed -= sum(1 for x in dropped if x.kind == "missed")
                result.skipped -= sum(1 for x in dropped if x.kind == "skipped")
                result.cursor_at = d.occurrence.at
                result.next = dropped[0].occurrence if dropped else result.next
                return


def _plan(
    schedule: Schedule, now: datetime, horizon: datetime, memo: PlanMemo | None = None
) -> Plan:
    result = Plan(schedule)
    occs: list[Occurrence] = []
    step = memo.next_after if memo is not None else next_occurrence
    if schedule.overlap is not Overlap.ALLOW:
        # Decided when due, not ahead: whether the previous job is still active is known then.
        horizon = min(horizon, now)
    if schedule.remaining_runs == 0:
        return result  # every run used: no next occurrence, the schedule is finished
    occ = step(schedule, schedule.cursor_at)
    while occ is not None and occ.at <= horizon and len(occs) < MAX_PER_TICK:
        occs.append(occ)
        occ = step(schedule, occ.at)
    result.next = occ
    if not occs:
        return result
    result.cursor_at = occs[-1].at
    if len(occs) == 1 and schedule.quiet_hours is None and occs[0].at > now:
        # The common case (a herd enqueued ahead): one future occurrence, no quiet hours.
        only = occs[0]
        key = memo.key(only) if memo is not None else None
        result.decisions.append(
            OccurrenceDecision(only, run_at_for(schedule, only, occ, key), "enqueue")
        )
        result.enqueued = 1
        return result

    past = [o for o in occs if o.at <= now]
    deliver_past: set[int] = set()
    grace = schedule.grace
    if past:
        if schedule.catch_up is CatchUp.LATEST:
            last = len(past) - 1
            if grace is None or now - past[last].at <= grace:
                deliver_past.add(last)
        elif schedule.catch_up is CatchUp.SKIP:
            deliver_past = {
                i for i, o in enumerate(past) if grace is not None and now - o.at <= grace
            }
        else:  # ALL: the newest catch_up_max, within the grace when one is set
            start = max(0, len(past) - schedule.catch_up_max)
            deliver_past = {
                i for i in range(start, len(past)) if grace is None or now - past[i].at <= grace
            }

    quiet = schedule.quiet_hours
    for i, o in enumerate(occs):
        following = occs[i + 1] if i + 1 < len(occs) else result.next
        if o.at <= now and i not in deliver_past:
            late = now - o.at
            result.decisions.append(
                OccurrenceDecision(o, None, "missed", f"{schedule.catch_up} catch-up, {late} late")
            )
            result.missed += 1
            continue
        if quiet is not None and quiet.contains(o.local):
            if quiet.action is QuietAction.SKIP:
                result.decisions.append(OccurrenceDecision(o, None, "skipped", "quiet_hours"))
                result.skipped += 1
                continue
            end = quiet.end_after(o.local, schedule.tz)
            run_at = end + jitter_offset(schedule.id, o.key, schedule.jitter_seconds)
            result.decisions.append(
                OccurrenceDecision(o, run_at, "enqueue", "deferred_quiet_hours")
            )
            result.enqueued += 1
            continue
        key = memo.key(o) if memo is not None else None
        result.decisions.append(
            OccurrenceDecision(o, run_at_for(schedule, o, following, key), "enqueue")
        )
        result.enqueued += 1
    return result


# The adaptive lookahead (scheduler/tick.py): the herd is given this much more time than the
# measured rate says it needs (the rate wavers with the load of the machine).
LOOKAHEAD_SAFETY = 1.5


def adaptive_lookahead(
    due: int,
    rate: float,
    lookahead: timedelta,
    max_lookahead: timedelta,
    margin: timedelta = timedelta(0),
) -> timedelta:
    """How far ahead a tick looks, given ``due`` schedules falling due within ``max_lookahead``.

    Enqueueing them at ``rate`` per second takes ``due / rate`` seconds; a tick that looks that
    far ahead (times :data:`LOOKAHEAD_SAFETY`, plus ``margin`` for the age of the count) starts
    on a herd early enough to have it all in the table before its instant. Never less than
    ``lookahead`` (the configured minimum) nor more than ``max_lookahead``. Only how early a
    job is inserted depends on it, never its run_at.
    """
    if rate <= 0:
        return max(lookahead, max_lookahead)
    need = timedelta(seconds=due * LOOKAHEAD_SAFETY / rate) + margin
    return max(lookahead, min(max_lookahead, need))
