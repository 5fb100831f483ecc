"""The overlap policy: what an occurrence does while the schedule's previous job is active.

A schedule whose policy is not ``allow`` remembers, in its row, the jobs it enqueued last
(``overlap_job_ids``). Every enqueue of one of its occurrences (the tick, trigger now, a
backfill) holds the schedule's row lock, asks the queue which of those jobs are still active
(pending, retrying or leased: a primary-key probe per job), decides, and writes the new list in
the same transaction as the jobs. So two replicas never decide for one schedule at once, and a
crash before the commit leaves nothing behind: the decision is exact, and the occurrence jobs
keep their idempotency keys (``schedule:<id>:<occurrence key>``), so each is still enqueued once.

- ``skip`` (the default for definitions): an occurrence while a previous job is active is not
  enqueued; it is counted (``overlap_skipped_count``, a ``schedule_skips`` row of kind
  ``overlap``). Never two of the schedule's jobs active at once, whatever the queue.
- ``buffer_one``: an occurrence is enqueued while fewer than two are active, so at most one
  waits behind the running one; beyond that it is skipped as above.
- ``allow`` (the default for reminders): every occurrence is enqueued (and ahead of time).
- ``cancel_previous``: the waiting (pending or retrying) previous jobs are cancelled and the
  newest occurrence is enqueued. A running (leased) job is never interrupted.

``buffer_one`` and ``cancel_previous`` jobs carry the concurrency key ``schedule:<id>``: on a
queue with ``jobs.set_queue_policy(queue, concurrency_per_key=1)`` (the per-key concurrency of
the claim) the waiting job starts only once the running one ends; without it they may run side
by side. Occurrences under a policy other than ``allow`` are enqueued when due, not ahead:
whether the previous job is still active is known only then.

:func:`admit` decides (pure); :func:`apply_overlap_steps` does it for a tick batch's plans and
:func:`remember_steps` writes what the schedules enqueued.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from jobs.internal import JobColumns, Steps, active_among_steps, cancel_steps
from scheduler.model import Overlap, Schedule
from scheduler.planner import Plan
from scheduler.queries import query

# buffer_one: the running job and one waiting.
BUFFER = 2


def concurrency_key(schedule_id: int) -> str:
    """The concurrency key of a schedule's ``buffer_one`` and ``cancel_previous`` jobs."""
    return f"schedule:{schedule_id}"


@dataclass(slots=True)
class Admission:
    """What happens to ``n`` occurrences of one schedule, in order: whether each is enqueued
    (``admitted``; else ``reasons[i]`` says why not), the waiting jobs to cancel first, and
    the previous jobs that stay active (to remember with the new ones)."""

    admitted: list[bool] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)


def admit(policy: Overlap, active: Mapping[int, str], n: int) -> Admission:
    """Decide ``n`` occurrences (oldest first) of a schedule whose previous jobs ``active``
    (``{job id: status}``) are still active (module docstring)."""
    result = Admission(active=sorted(active))
    if policy is Overlap.ALLOW:
        result.admitted, result.reasons = [True] * n, [None] * n
        return result
    if policy is Overlap.CANCEL_PREVIOUS:
        result.cancel = sorted(i for i, status in active.items() if status != "leased")
        result.active = sorted(i for i, status in active.items() if status == "leased")
        # Only the newest occurrence runs: the older ones of the batch would be cancelled at once.
        result.admitted = [False] * (n - 1) + [True] * min(n, 1)
        reason = "overlap: cancel_previous, a newer occurrence replaced it"
        result.reasons = [reason] * (n - 1) + [None] * min(n, 1)
        return result
    room = (1 if policy is Overlap.SKIP else BUFFER) - len(active)
    busy = _busy(active)
    for _ in range(n):
        ok = room > 0
        room -= ok
        result.admitted.append(ok)
        result.reasons.append(None if ok else busy)
    return result


def _busy(active: Mapping[int, str]) -> str:
    jobs = ", ".join(f"job {i} {status}" for i, status in sorted(active.items()))
    return f"overlap: previous job still active ({jobs})" if jobs else "overlap: this batch's"


def active_steps(schedules: Sequence[Schedule]) -> Steps[list[dict[int, str]]]:
    """The still-active jobs among each schedule's ``overlap_job_ids``, in one statement."""
    ids = [i for s in schedules for i in s.overlap_job_ids]
    found = yield from active_among_steps(ids)
    return [{i: found[i] for i in s.overlap_job_ids if i in found} for s in schedules]


def cancel_previous_steps(ids: Sequence[int], now: datetime) -> Steps[None]:
    """Cancel the waiting jobs ``cancel_previous`` replaces (a leased one is left alone)."""
    if ids:
        yield from cancel_steps(ids=list(ids), reason="overlap_cancelled", now=now)


@dataclass(slots=True)
class Remembered:
    """What each schedule of a batch enqueued under an overlap policy, to write in its row
    (:func:`remember_steps`): the jobs that may still be active, and the skips to count."""

    jobs: dict[int, list[int]] = field(default_factory=dict)
    skipped: dict[int, int] = field(default_factory=dict)


def apply_overlap_steps(
    plans: Sequence[Plan], now: datetime
) -> Steps[tuple[set[tuple[int, int]], Remembered]]:
    """Apply each plan's overlap policy to its enqueue decisions: those not admitted become
    ``overlap`` skips (counted in ``Plan.overlapped``), ``cancel_previous`` cancels the
    waiting jobs it replaces. Returns the admitted decisions of the plans with a policy, by
    (plan index, decision index), and the previous jobs each such schedule keeps."""
    chosen = [
        i for i, p in enumerate(plans)
        if p.schedule.overlap is not Overlap.ALLOW and p.enqueued
    ]  # fmt: skip
    remembered = Remembered()
    if not chosen:
        return set(), remembered
    actives = yield from active_steps([plans[i].schedule for i in chosen])
    admitted: set[tuple[int, int]] = set()
    cancel: list[int] = []
    for i, active in zip(chosen, actives, strict=True):
        p = plans[i]
        positions = [j for j, d in enumerate(p.decisions) if d.kind == "enqueue"]
        admission = admit(p.schedule.overlap, active, len(positions))
        cancel.extend(admission.cancel)
        remembered.jobs[p.schedule.id] = admission.active
        for j, ok, reason in zip(positions, admission.admitted, admission.reasons, strict=True):
            if ok:
                admitted.add((i, j))
            else:
                p.decisions[j] = replace(p.decisions[j], run_at=None, kind="overlap", reason=reason)
                p.enqueued -= 1
                p.overlapped += 1
    yield from cancel_previous_steps(cancel, now)
    return admitted, remembered


def remember_steps(remembered: Remembered) -> Steps[None]:
    """Write each schedule's ``overlap_job_ids`` (and count its on-demand skips)."""
    if not remembered.jobs:
        return
    ids = sorted(remembered.jobs)
    yield (
        query("schedule_set_overlap_jobs"),
        {
            "ids": ids,
            "job_ids": ["{" + ",".join(map(str, remembered.jobs[i])) + "}" for i in ids],
            "skipped": [remembered.skipped.get(i, 0) for i in ids],
        },
    )


def with_concurrency_keys(columns: JobColumns, rows: Sequence[tuple[int, Schedule]]) -> None:
    """Give the job rows ``(row, schedule)`` of ``columns`` their schedule's concurrency key
    where its policy waits for the running job (``buffer_one``, ``cancel_previous``)."""
    keys: list[str | None] = [None] * len(columns)
    for row, schedule in rows:
        if schedule.overlap in (Overlap.BUFFER_ONE, Overlap.CANCEL_PREVIOUS):
            keys[row] = concurrency_key(schedule.id)
    if any(k is not None for k in keys):
        columns.concurrency_keys = keys
