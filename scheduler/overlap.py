"""The overlap policy: what an occurrence does while the schedule's previous job is active.

A schedule whose policy is not ``allow`` gives each of its occurrence jobs one of two *slots*,
unique keys of the job (``schedule:<id>:slot:0`` and ``:slot:1``). The queue keeps at most one
active (pending, retrying or leased) job per unique key (``jobs_unique_active_uq``), so a slot
is held from the enqueue until the job succeeds, goes dead or is cancelled, and the database,
not a replica's memory, says whether the previous occurrence is still active. Every enqueue of
an occurrence (the tick, trigger now, a backfill) holds the schedule's row lock and reads the
slots' holders in that transaction, so two replicas never decide on the same slot at once; the
unique index is the backstop, and a crash before the commit leaves nothing behind.

- ``skip``: only slot 0 is used; an occurrence while any slot is held is not enqueued and is
  counted (``overlap_skipped_count``, a ``schedule_skips`` row of kind ``overlap``). Never two
  of the schedule's jobs active at once, whatever the queue's settings.
- ``buffer_one``: an occurrence takes a free slot, so at most one waits behind the running
  one; beyond that it is skipped as above.
- ``cancel_previous``: the waiting (pending or retrying) holders are cancelled, and the newest
  occurrence takes a freed slot. A running (leased) job is never interrupted.

``buffer_one`` and ``cancel_previous`` jobs carry the concurrency key ``schedule:<id>``: on a
queue with ``jobs.set_queue_policy(queue, concurrency_per_key=1)`` the waiting job starts only
once the running one ends (the per-key concurrency of the claim). Without it, the two may run
at once.

:func:`admit` decides (pure) from the holders; :func:`apply_overlap_steps` reads them for a
tick batch's plans, cancels what ``cancel_previous`` cancels and rewrites the plans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from jobs.internal import JobColumns, Steps, active_holders_steps, cancel_steps
from scheduler.model import Overlap, Schedule
from scheduler.planner import Plan

SLOTS = 2


def slot_key(schedule_id: int, slot: int) -> str:
    """The unique key of a schedule's occurrence jobs in ``slot`` (0 or 1)."""
    return f"schedule:{schedule_id}:slot:{slot}"


def concurrency_key(schedule_id: int) -> str:
    """The concurrency key of a schedule's ``buffer_one`` and ``cancel_previous`` jobs."""
    return f"schedule:{schedule_id}"


@dataclass(frozen=True, slots=True)
class Holder:
    """An active job holding one of a schedule's slots."""

    slot: int
    job_id: int
    status: str  # pending, retrying or leased


@dataclass(slots=True)
class Admission:
    """What happens to ``n`` occurrences of one schedule, in order: each one's slot (None: not
    enqueued, with ``reasons[i]`` saying why), and the waiting jobs to cancel first."""

    slots: list[int | None] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return sum(1 for s in self.slots if s is None)


def admit(policy: Overlap, holders: Sequence[Holder], n: int) -> Admission:
    """Decide ``n`` occurrences (oldest first) of a schedule whose slots are held by
    ``holders`` (module docstring). ``allow`` admits every one without a slot (-1)."""
    result = Admission()
    if policy is Overlap.ALLOW:
        result.slots = [-1] * n
        result.reasons = [None] * n
        return result
    held = {h.slot: h for h in holders}
    if policy is Overlap.CANCEL_PREVIOUS:
        waiting = [h for h in holders if h.status != "leased"]
        result.cancel = [h.job_id for h in waiting]
        for h in waiting:
            del held[h.slot]
        # Only the newest occurrence runs: the older ones of the batch would be cancelled at once.
        for _ in range(n - 1):
            result.slots.append(None)
            result.reasons.append("overlap: cancel_previous, a newer occurrence replaced it")
        if n:
            free = _free(held)
            result.slots.append(free)
            result.reasons.append(None if free is not None else _busy(held))
        return result
    usable = 1 if policy is Overlap.SKIP else SLOTS
    for _ in range(n):
        free = _free(held) if len(held) == 0 or policy is Overlap.BUFFER_ONE else None
        if free is not None and free < usable:
            held[free] = Holder(free, 0, "new")
            result.slots.append(free)
            result.reasons.append(None)
        else:
            result.slots.append(None)
            result.reasons.append(_busy(held))
    return result


def _free(held: dict[int, Holder]) -> int | None:
    return next((slot for slot in range(SLOTS) if slot not in held), None)


def _busy(held: dict[int, Holder]) -> str:
    jobs = ", ".join(
        f"job {h.job_id} {h.status}" if h.job_id else "an occurrence enqueued just before"
        for h in sorted(held.values(), key=lambda h: h.slot)
    )
    return f"overlap: previous job still active ({jobs})" if jobs else "overlap"


def holders_steps(schedules: Sequence[Schedule]) -> Steps[list[list[Holder]]]:
    """The active holders of each schedule's slots, one list per schedule, in one statement."""
    orgs: list[Any] = []
    types: list[str] = []
    keys: list[str] = []
    for s in schedules:
        for slot in range(SLOTS):
            orgs.append(s.organization_id)
            types.append(s.job_type)
            keys.append(slot_key(s.id, slot))
    result: list[list[Holder]] = [[] for _ in schedules]
    for index, job_id, status in (yield from active_holders_steps(orgs, types, keys)):
        result[index // SLOTS].append(Holder(index % SLOTS, job_id, status))
    return result


def cancel_previous_steps(ids: Sequence[int], now: datetime) -> Steps[None]:
    """Cancel the waiting jobs ``cancel_previous`` replaces (a leased one is left alone)."""
    if ids:
        yield from cancel_steps(ids=list(ids), reason="overlap_cancelled", now=now)


def apply_overlap_steps(plans: Sequence[Plan], now: datetime) -> Steps[dict[tuple[int, int], int]]:
    """Apply each plan's overlap policy to its enqueue decisions: those not admitted become
    ``overlap`` skips (counted in ``Plan.overlapped``), ``cancel_previous`` cancels the
    waiting jobs it replaces. Returns the slot of each admitted decision, by (plan index,
    decision index); ``allow`` plans are not read and have none."""
    chosen = [
        i for i, p in enumerate(plans)
        if p.schedule.overlap is not Overlap.ALLOW and p.enqueued
    ]  # fmt: skip
    if not chosen:
        return {}
    holders = yield from holders_steps([plans[i].schedule for i in chosen])
    slots: dict[tuple[int, int], int] = {}
    cancel: list[int] = []
    for i, held in zip(chosen, holders, strict=True):
        p = plans[i]
        positions = [j for j, d in enumerate(p.decisions) if d.kind == "enqueue"]
        admission = admit(p.schedule.overlap, held, len(positions))
        cancel.extend(admission.cancel)
        for j, slot, reason in zip(positions, admission.slots, admission.reasons, strict=True):
            if slot is None:
                p.decisions[j] = replace(p.decisions[j], run_at=None, kind="overlap", reason=reason)
                p.enqueued -= 1
                p.overlapped += 1
            else:
                slots[(i, j)] = slot
    yield from cancel_previous_steps(cancel, now)
    return slots


def slot_columns(schedule: Schedule, slot: int) -> tuple[str, str | None]:
    """The unique key and concurrency key of a schedule's job in ``slot``."""
    ckey = None if schedule.overlap is Overlap.SKIP else concurrency_key(schedule.id)
    return slot_key(schedule.id, slot), ckey


def with_slots(columns: JobColumns, rows: Sequence[tuple[int, Schedule, int]]) -> None:
    """Give the job rows ``(row, schedule, slot)`` of ``columns`` their slot's unique key
    (kept while active: ``on_active="keep"``) and concurrency key."""
    n = len(columns)
    uniques: list[str | None] = [None] * n
    ckeys: list[str | None] = [None] * n
    for row, schedule, slot in rows:
        uniques[row], ckeys[row] = slot_columns(schedule, slot)
    columns.unique_keys, columns.on_active = uniques, ["keep"] * n
    columns.concurrency_keys = ckeys if any(k is not None for k in ckeys) else None
