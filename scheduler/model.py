"""Values of the scheduler: schedules, quiet hours, catch-up policies, tick results."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime, time, timedelta
from enum import StrEnum
from functools import lru_cache
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from timezones import FoldPolicy, GapPolicy, Rule, get_zone, parse_rule, resolve_local


class CatchUp(StrEnum):
    """What a schedule does with occurrences that fell due while no scheduler ran.

    ``skip``: deliver none that are later than the grace (default 60 s) ; ``latest``: deliver the
    latest missed one if it is within the grace (default 1 h), record the rest as missed (the
    default for reminders); ``all``: deliver every missed occurrence, the newest
    ``catch_up_max`` of them, record older ones as missed (the default for definitions).
    """

    SKIP = "skip"
    LATEST = "latest"
    ALL = "all"


DEFAULT_GRACE: dict[CatchUp, timedelta | None] = {
    CatchUp.SKIP: timedelta(seconds=60),
    CatchUp.LATEST: timedelta(hours=1),
    CatchUp.ALL: None,
}


class Overlap(StrEnum):
    """What an occurrence does while the schedule's previous occurrence's job is still active
    (pending, leased or retrying); see docs/scheduling.md, "Overlap".

    ``skip``: do not enqueue it, count it (the default for definitions); ``buffer_one``: enqueue
    one more that waits, skip any beyond it; ``allow``: enqueue it regardless (the default for
    reminders); ``cancel_previous``: cancel the waiting previous job and enqueue this one.
    """

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"
    CANCEL_PREVIOUS = "cancel_previous"


class QuietAction(StrEnum):
    DEFER = "defer"  # deliver at the end of the quiet window
    SKIP = "skip"  # do not deliver this occurrence


@dataclass(frozen=True)
class QuietHours:
    """A local window (e.g. 22:00-07:00) in the schedule's zone in which nothing is delivered."""

    start: time
    end: time
    action: QuietAction = QuietAction.DEFER

    def contains(self, local: datetime) -> bool:
        t = local.time().replace(tzinfo=None)
        if self.start <= self.end:
            return self.start <= t < self.end
        return t >= self.start or t < self.end

    def end_after(self, local: datetime, zone: ZoneInfo) -> datetime:
        """The instant (UTC) the window containing ``local`` ends.

        The end is a local wall time, resolved in ``zone`` by ``timezones.resolve_local`` with
        ``gap=shift_forward`` (an end at 02:30 on a 02:00 -> 03:00 night is 03:30 new time) and
        ``fold=first`` (an end at 01:30 on a fall-back night is the earlier 01:30), except when
        ``local`` is already past that first 01:30 (01:10 on the second pass): the window then
        ends at the second 01:30, so an end is never before the moment it is asked from.
        """
        day = local.date()
        if self.start > self.end and local.time().replace(tzinfo=None) >= self.start:
            day += timedelta(days=1)
        end = resolve_local(
            datetime.combine(day, self.end),
            zone,
            gap=GapPolicy.SHIFT_FORWARD,
            fold=FoldPolicy.FIRST,
        )
        assert end is not None  # shift_forward always gives an instant
        if end <= local:  # in the fold's second pass, past the first instant of the end
            second = resolve_local(
                datetime.combine(day, self.end),
                zone,
                gap=GapPolicy.SHIFT_FORWARD,
                fold=FoldPolicy.SECOND,
            )
            assert second is not None
            end = second
        return end

    def to_json(self) -> dict[str, str]:
        return {
            "start": self.start.strftime("%H:%M"),
            "end": self.end.strftime("%H:%M"),
            "action": str(self.action),
        }


@dataclass(frozen=True)
class Schedule:
    """A schedule row."""

    id: int
    organization_id: UUID | None
    key: str | None
    subject: str | None
    job_type: str
    queue: str
    payload_raw: dict[str, Any] | str  # str: JSON text not parsed yet (the tick's fast path)
    rule_raw: dict[str, Any] | str
    zone: str
    gap: str | None
    fold: str | None
    jitter_seconds: int
    catch_up: CatchUp
    catch_up_grace_seconds: int | None
    catch_up_max: int
    quiet_hours: QuietHours | None
    paused: bool
    cursor_at: datetime
    next_run_at: datetime | None
    next_occurrence_key: str | None
    last_occurrence_key: str | None
    last_occurrence_at: datetime | None
    last_job_id: int | None
    enqueued_count: int
    missed_count: int
    skipped_count: int
    tzdb_version: str
    version: int
    source: str
    created_at: datetime
    updated_at: datetime
    overlap: Overlap = field(default_factory=lambda: Overlap.ALLOW)
    overlap_skipped_count: int = 0
    pause_note: str | None = None
    paused_until: datetime | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    finished_at: datetime | None = None
    # The jobs enqueued last under an overlap policy other than allow (scheduler/overlap.py).
    overlap_job_ids: list[int] = field(default_factory=list)
    _rule: list[Rule] = field(default_factory=list, repr=False, compare=False)
    # How late its jobs may start, in seconds (None: no limit); see create_schedule.
    max_lateness_seconds: int | None = None

    @property
    def payload(self) -> dict[str, Any]:
        raw = self.payload_raw
        value: dict[str, Any] = json.loads(raw) if isinstance(raw, str) else raw
        return value

    @property
    def payload_text(self) -> str:
        raw = self.payload_raw
        if isinstance(raw, str):
            return raw
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False)

    @property
    def rule_json(self) -> dict[str, Any]:
        raw = self.rule_raw
        value: dict[str, Any] = json.loads(raw) if isinstance(raw, str) else raw
        return value

    @property
    def rule(self) -> Rule:
        if not self._rule:
            raw = self.rule_raw
            # jsonb text from PostgreSQL is canonical (sorted keys), a fine cache key as is.
            text = raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)
            self._rule.append(_parsed(text))
        return self._rule[0]

    @property
    def remaining_runs(self) -> int | None:
        """How many more occurrences the schedule enqueues before ``max_runs`` ends it (None:
        no limit). Trigger now and backfill do not use runs."""
        if self.max_runs is None:
            return None
        return max(0, self.max_runs - self.enqueued_count)

    @property
    def finished(self) -> bool:
        """Whether the schedule ran out of occurrences (end of rule, ``end_at``, ``max_runs``):
        it is kept, marked, and fires no more."""
        return self.finished_at is not None

    @property
    def tz(self) -> ZoneInfo:
        return get_zone(self.zone)

    @property
    def grace(self) -> timedelta | None:
        if self.catch_up_grace_seconds is not None:
            return timedelta(seconds=self.catch_up_grace_seconds)
        return DEFAULT_GRACE[self.catch_up]


@lru_cache(maxsize=8192)
def _parsed(rule_json: str) -> Rule:
    """Rules are frozen values: one parsed (and compiled) rule per distinct JSON form, so a
    tick over a million schedules with the same rule parses it once."""
    return parse_rule(json.loads(rule_json))


def schedule_from_row(row: tuple[Any, ...]) -> Schedule:
    """Build a :class:`Schedule` from a row of the ``schedule_columns`` fragment
    (scheduler/sql/schedule.sql), which every query that reads whole schedules selects."""
    (
        sid, org, key, subject, job_type, queue, payload, rule, zone, gap, fold, jitter,
        catch_up, grace, catch_up_max, q_start, q_end, q_action, paused, cursor_at, next_run_at,
        next_key, last_key, last_at, last_job, enq, missed, skipped, tzdb, version, source,
        created_at, updated_at, overlap, overlap_skipped, pause_note, paused_until, start_at,
        end_at, max_runs, finished_at, overlap_job_ids, max_lateness,
    ) = row  # fmt: skip
    quiet = QuietHours(q_start, q_end, QuietAction(q_action)) if q_start is not None else None
    return Schedule(
        sid, org, key, subject, job_type, queue, payload, rule, zone, gap, fold, jitter,
        CatchUp(catch_up), grace, catch_up_max, quiet, paused, cursor_at, next_run_at, next_key,
        last_key, last_at, last_job, enq, missed, skipped, tzdb, version, source, created_at,
        updated_at, Overlap(overlap), overlap_skipped, pause_note, paused_until, start_at,
        end_at, max_runs, finished_at, overlap_job_ids, max_lateness_seconds=max_lateness,
    )  # fmt: skip


@dataclass
class TickResult:
    """What one tick did."""

    enqueued: int = 0
    duplicates: int = 0  # occurrences whose job already existed (another replica, a crash)
    missed: int = 0
    skipped: int = 0
    overlapped: int = 0  # occurrences skipped by the overlap policy (previous job active)
    locked_elsewhere: int = 0
    schedules: int = 0
    batches: int = 0

    def __str__(self) -> str:
        """A line for humans (the scheduler's stop log): ``enqueued 5, duplicates 0, ...``."""
        return ", ".join(
            f"{f.name.replace('_', ' ')} {getattr(self, f.name)}" for f in fields(self)
        )

    def add(self, other: TickResult) -> None:
        self.enqueued += other.enqueued
        self.duplicates += other.duplicates
        self.missed += other.missed
        self.skipped += other.skipped
        self.locked_elsewhere += other.locked_elsewhere
        self.schedules += other.schedules
        self.batches += other.batches
        self.overlapped += other.overlapped
