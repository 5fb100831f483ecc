"""Occurrences on demand: trigger now and backfill, in the caller's transaction.

Both enqueue occurrences of a schedule beside the ones its rule enqueues, under the schedule's
row lock (the lock the tick takes, so a replica and an operator never decide at once):

- :func:`trigger` enqueues one extra occurrence whose identity is its nominal instant (the
  ``at`` given, else now): its occurrence key is ``manual:<instant in UTC>``, so triggering
  twice with the same nominal time gives one job. The schedule's overlap policy applies.
- :func:`backfill` enqueues the rule's occurrences in a past range under *the same occurrence
  keys the tick uses* (``schedule:<id>:<local slot>``): an occurrence that already has a job
  (it ran, or an earlier backfill enqueued it) is found, not enqueued twice. A call handles at
  most ``batch`` occurrences and says where the next call resumes (``Backfill.resume_from``),
  so a large range is worked through in bounded transactions, each committed (a crash loses at
  most the uncommitted batch, which the next call redoes). ``dry_run=True`` writes nothing and
  reports what a run would do. Its overlap policy is its own (``allow`` by default: every
  occurrence of the range is enqueued at once).

Neither uses the schedule's runs (``max_runs``) nor moves its cursor: the rule's own
occurrences are unchanged. Jobs are enqueued to run now; their payload carries the occurrence
(:class:`scheduler.occurrence_job.OccurrenceMeta`) with its nominal instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.internal import (
    DEFAULT_MAX_ATTEMPTS,
    JobColumns,
    Steps,
    enqueue_columns_steps,
    existing_by_keys_steps,
    forms,
)
from scheduler.errors import InvalidSchedule
from scheduler.model import Overlap, Schedule
from scheduler.occurrence_job import MANUAL, OccurrenceMeta, occurrence_idempotency_key
from scheduler.overlap import (
    Remembered,
    active_steps,
    admit,
    cancel_previous_steps,
    concurrency_key,
    remember_steps,
)
from scheduler.planner import next_occurrence
from scheduler.queries import database_now_steps, query
from scheduler.schedules import _aware, _checked_now, _get_steps, _schedule_id
from scheduler.spec import check_overlap

MAX_BACKFILL_BATCH = 10_000
# The policies whose jobs wait for the running one (the queue's per-key concurrency).
_WAITING = (Overlap.BUFFER_ONE, Overlap.CANCEL_PREVIOUS)
DEFAULT_BACKFILL_BATCH = 1000


@dataclass(frozen=True, slots=True)
class OccurrenceRun:
    """One occurrence enqueued on demand: its key and nominal instant, and what became of it:
    ``created`` (a new job ``job_id``), ``existing`` (its job existed: ``job_id``), or
    ``skipped`` by the overlap policy (``reason``; no job)."""

    occurrence_key: str
    at: datetime
    outcome: str  # created, existing, skipped (a dry run: would_create, existing, would_skip)
    job_id: int | None = None
    reason: str | None = None


@dataclass(slots=True)
class Backfill:
    """What one :func:`backfill` call did (or, dry, would do) with its batch of the range."""

    schedule_id: int
    occurrences: list[OccurrenceRun] = field(default_factory=list)
    resume_from: datetime | None = None  # None: the range is done; else call again from it
    dry_run: bool = False

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.occurrences if o.outcome == outcome)

    @property
    def done(self) -> bool:
        return self.resume_from is None


def _policy(value: Any, default: Overlap) -> Overlap:
    return default if value is None else check_overlap(value, {})


def _enqueue_steps(
    schedule: Schedule,
    occs: Sequence[tuple[str, datetime]],
    policy: Overlap,
    now: datetime,
    dry_run: bool = False,
) -> Steps[list[OccurrenceRun]]:
    """Enqueue occurrences ``(key, nominal instant)`` of ``schedule`` to run now, under the
    overlap ``policy``; an occurrence whose job exists already is reported, not redone."""
    s = schedule
    keys = [occurrence_idempotency_key(s.id, key) for key, _ in occs]
    existing = yield from existing_by_keys_steps(
        [s.organization_id] * len(keys), [s.job_type] * len(keys), keys
    )
    fresh = [i for i in range(len(occs)) if i not in existing]
    # The jobs of a schedule with a policy are remembered whatever this call's policy, so
    # that its next occurrences see them.
    track = policy is not Overlap.ALLOW or s.overlap is not Overlap.ALLOW
    active = (yield from active_steps([s]))[0] if track and fresh else {}
    admission = admit(policy, active, len(fresh))
    ckey = concurrency_key(s.id) if policy in _WAITING else None
    columns = JobColumns()
    rows = [i for i, ok in zip(fresh, admission.admitted, strict=True) if ok]
    skipped = [i for i, ok in zip(fresh, admission.admitted, strict=True) if not ok]
    reason_of = dict(zip(fresh, admission.reasons, strict=True))
    for i in rows:
        key, at = occs[i]
        columns.append(
            s.job_type,
            OccurrenceMeta(s.id, key, at, s.version).into_payload(s.payload_text),
            queue=s.queue,
            idempotency_key=keys[i],
            organization_id=s.organization_id,
            run_at=now,
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            concurrency_key=ckey,
        )
    outcomes: dict[int, OccurrenceRun] = {}
    for i, job_id in existing.items():
        outcomes[i] = OccurrenceRun(occs[i][0], occs[i][1], "existing", job_id)
    if dry_run:
        for i in fresh:
            verb = "would_create" if i in rows else "would_skip"
            outcomes[i] = OccurrenceRun(occs[i][0], occs[i][1], verb, None, reason_of[i])
        return [outcomes[i] for i in range(len(occs))]
    yield from cancel_previous_steps(admission.cancel, now)
    enqueued = yield from enqueue_columns_steps(columns, now, True)
    for i, result in zip(rows, enqueued, strict=True):
        # Not created: a job with the key appeared since the lookup (it is that job).
        outcome = "created" if result.created else "existing"
        outcomes[i] = OccurrenceRun(occs[i][0], occs[i][1], outcome, result.id)
    for i in skipped:
        outcomes[i] = OccurrenceRun(occs[i][0], occs[i][1], "skipped", None, reason_of[i])
    if skipped:
        yield from _record_overlaps(s, [outcomes[i] for i in skipped], now)
    if track:
        remembered = Remembered(
            {s.id: admission.active + [r.id for r in enqueued if r.created]},
            {s.id: len(skipped)},
        )
        yield from remember_steps(remembered)
    return [outcomes[i] for i in range(len(occs))]


def _record_overlaps(
    schedule: Schedule, runs: Sequence[OccurrenceRun], now: datetime
) -> Steps[None]:
    """The occurrences the overlap policy skipped, as ``schedule_skips`` rows (counted by
    :func:`remember_steps`)."""
    yield (
        query("schedule_skip_record"),
        {
            "ids": [schedule.id] * len(runs),
            "keys": [r.occurrence_key for r in runs],
            "ats": [r.at for r in runs],
            "kinds": ["overlap"] * len(runs),
            "reasons": [r.reason for r in runs],
            "now": now,
        },
    )


def manual_key(at: datetime) -> str:
    """The occurrence key of a triggered occurrence: its nominal instant in UTC."""
    return MANUAL + at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _trigger(
    schedule_id: int,
    *,
    at: datetime | None = None,
    overlap: Overlap | str | None = None,
    now: datetime | None = None,
) -> Steps[OccurrenceRun]:
    """Enqueue one extra occurrence of a schedule, to run now (module docstring).

    ``at`` is its nominal instant and identity (default: now): the same ``at`` twice gives one
    job. ``overlap`` defaults to the schedule's policy: under ``skip``, a trigger while the
    previous job is active is skipped and counted like a scheduled occurrence.
    """
    _schedule_id(schedule_id)
    nominal = None if at is None else _aware("at", at)
    current = yield from _get_steps(schedule_id, for_update=True)
    policy = _policy(overlap, current.overlap)
    db_now = yield from database_now_steps(_checked_now(now))
    nominal = nominal or db_now
    (run,) = yield from _enqueue_steps(current, [(manual_key(nominal), nominal)], policy, db_now)
    return run


def _batch(value: Any) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_BACKFILL_BATCH
    ):
        raise InvalidSchedule(
            "batch", value, f"must be an integer from 1 to {MAX_BACKFILL_BATCH:,}"
        )
    return value


def _backfill(
    schedule_id: int,
    *,
    start: datetime,
    end: datetime,
    overlap: Overlap | str | None = None,
    dry_run: bool = False,
    batch: int = DEFAULT_BACKFILL_BATCH,
    now: datetime | None = None,
) -> Steps[Backfill]:
    """Enqueue the schedule's occurrences at or after ``start`` and before ``end`` (at most
    ``batch`` of them, up to 10,000; module docstring), under the tick's occurrence keys.

    ``end`` must not be after now: the future is the scheduler's. ``overlap`` defaults to
    ``allow``. Returns a :class:`Backfill`; until it is ``done``, call again (in a new
    transaction) with ``start=result.resume_from``.
    """
    _schedule_id(schedule_id)
    first, last = _aware("start", start), _aware("end", end)
    if last <= first:
        raise InvalidSchedule("end", end.isoformat(), f"must be after start ({start.isoformat()})")
    if type(dry_run) is not bool:
        raise InvalidSchedule("dry_run", dry_run, "must be True or False")
    size = _batch(batch)
    policy = _policy(overlap, Overlap.ALLOW)
    current = yield from _get_steps(schedule_id, for_update=not dry_run)
    db_now = yield from database_now_steps(_checked_now(now))
    if last > db_now:
        raise InvalidSchedule(
            "end",
            end.isoformat(),
            f"is after now ({db_now.isoformat(timespec='seconds')}): backfill fills the past, "
            "the scheduler enqueues what is to come",
        )
    occs: list[tuple[str, datetime]] = []
    occ = next_occurrence(current, first - timedelta(microseconds=1))
    while occ is not None and occ.at < last and len(occs) < size:
        occs.append((occ.key, occ.at))
        occ = next_occurrence(current, occ.at)
    result = Backfill(current.id, dry_run=dry_run)
    result.occurrences = yield from _enqueue_steps(current, occs, policy, db_now, dry_run)
    result.resume_from = occ.at if occ is not None and occ.at < last else None
    return result


# Written once as steps; the sync and async forms, in the caller's transaction:
trigger, trigger_async = forms(_trigger, "trigger")
backfill, backfill_async = forms(_backfill, "backfill")
