"""User reminders at run time: the still-due check and the reminder handlers.

A reminder job is enqueued ahead of time; between then and its run the user may have deleted or
paused the schedule, changed its time or zone, or entered quiet hours. :func:`still_due` re-reads
the schedule when the job runs so that a handler never delivers a superseded reminder, and
records the occurrence as skipped when it is not due any more. :func:`still_due_many` does the
same for a whole batch with one read of all their schedules (``still_due`` is it for one job),
and records the skips of the batch with one statement after the effect-once dedupe. Their
``_async`` forms run the same steps (:mod:`jobs.steps`). A job's occurrence is read from its
payload by :class:`scheduler.occurrence_job.OccurrenceMeta`.

The batch handler of reminders is :class:`scheduler.delivery.DeliveryHandler`: it runs the same
check (:func:`check_steps`, no write) for a batch, delivers through push channels, and writes
the skip records with :func:`record_skipped` in the worker's completion transaction, so they
commit exactly when the outcome does (a fenced batch records none, and its next run records
them once).

:class:`ReminderHandler` is the single-job handler (one transaction per reminder, through
:class:`scheduler.simulated.SimulatedPush`, whose "call" is a write in that transaction); it
opens a connection per worker thread and must be closed (:meth:`close`). ``tockwork worker
--app scheduler.delivery:simulated_app`` wires the delivery handler to the simulated channel;
``scheduler.reminders:simulated_single_app`` wires the single-job handler.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

import psycopg

import jobs
from jobs import Job, effects
from jobs.internal import Steps, steps
from scheduler import simulated
from scheduler.model import QuietAction, QuietHours, Schedule, schedule_from_row
from scheduler.occurrence_job import MANUAL, OccurrenceMeta, schedule_meta
from scheduler.planner import next_occurrence
from scheduler.queries import database_now, database_now_steps, query
from scheduler.simulated import Message, SimulatedPush
from timezones import Clock, get_zone

# Jobs per batch of the reminder batch handler: one multicast request (FCM's limit).
MAX_BATCH = simulated.MULTICAST_MAX


@dataclass(frozen=True)
class Due:
    """The answer of :func:`still_due`; true when the reminder should be delivered now."""

    due: bool
    reason: str | None = None  # deleted, paused, superseded, quiet_hours, expired, capped
    defer_until: datetime | None = None  # quiet hours with action "defer"

    def __bool__(self) -> bool:
        return self.due

    @property
    def skipped(self) -> bool:
        """Not due, and recorded as a skip of its schedule (paused, superseded, quiet ``skip``).

        A deleted schedule has nothing to record against; a deferred reminder is not skipped.
        """
        return not self.due and self.reason != "deleted" and self.defer_until is None


class _State(NamedTuple):
    """What the still-due rules read of a schedule (``schedule_still_due_many``): no rule, no
    payload, nothing to decode, so a batch of 500 costs a few columns per row (a named tuple:
    one per schedule of a batch, built at a third of a frozen dataclass's cost)."""

    paused: bool
    version: int
    quiet_hours: QuietHours | None
    zone: str

    @staticmethod
    def of(schedule: Schedule) -> _State:
        return _State(schedule.paused, schedule.version, schedule.quiet_hours, schedule.zone)


def _states(rows: Sequence[Any]) -> dict[int, _State]:
    """``schedule_still_due_many`` rows by schedule id."""
    # tuple.__new__, not _State(...): a named tuple's constructor is a Python function, a
    # frame per schedule of a batch; the columns are bigint, boolean and integer already.
    new = tuple.__new__
    return {
        sid: new(
            _State,
            (
                paused,
                version,
                None if q_start is None else QuietHours(q_start, q_end, QuietAction(q_action)),
                zone,
            ),
        )
        for sid, paused, version, q_start, q_end, q_action, zone in rows
    }


def _stale(metas: Mapping[int, OccurrenceMeta | None], states: Mapping[int, _State]) -> list[int]:
    """The schedules changed since one of these jobs was enqueued (not paused): only for them
    does the check need the whole row (the rule, to tell a superseded occurrence)."""
    ids: set[int] = set()
    for meta in metas.values():
        if meta is None:
            continue
        state = states.get(meta.schedule_id)
        if state is not None and not state.paused and state.version != meta.version:
            ids.add(meta.schedule_id)
    return sorted(ids)


def _decide(
    state: _State | None, schedule: Schedule | None, meta: OccurrenceMeta, at: datetime
) -> Due:
    """The still-due rules for one job of a schedule at instant ``at``: ``state`` is what
    ``schedule_still_due_many`` read (``None``: deleted), ``schedule`` the whole row when it
    was read (a schedule changed since the job was enqueued), which then speaks for it."""
    if schedule is not None:
        state = _State.of(schedule)
    if state is None:
        return Due(False, "deleted")
    if state.paused:
        return Due(False, "paused")
    if state.version != meta.version and not meta.occurrence_key.startswith(MANUAL):
        # (An occurrence triggered by hand is no occurrence of the rule: a change of the
        # rule does not supersede it.)
        if schedule is None:  # deleted between the two reads
            return Due(False, "deleted")
        occ = next_occurrence(schedule, meta.at - timedelta(seconds=1))
        if occ is None or occ.key != meta.occurrence_key or occ.at != meta.at:
            return Due(False, "superseded")
    quiet = state.quiet_hours
    if quiet is not None:
        tz = get_zone(state.zone)
        local = at.astimezone(tz)
        if quiet.contains(local):
            if quiet.action == "defer":
                return Due(False, "quiet_hours", quiet.end_after(local, tz))
            return Due(False, "quiet_hours")
    return Due(True)


def still_due_many(
    conn: psycopg.Connection[Any],
    jobs_: Sequence[Job],
    *,
    now: datetime | None = None,
    record: bool = True,
) -> dict[int, Due]:
    """:func:`still_due` for a batch: ``{job id: Due}``, all schedules read in one statement.

    The same rules as :func:`still_due`, at one instant (``now``, else the database clock read
    once). With ``record`` (the default) the not-due occurrences are recorded as skipped in the
    caller's transaction, as :func:`record_skipped` does; ``record=False`` only reads, for a
    handler that records them elsewhere (in the worker's completion transaction).
    """
    return steps.on(conn, _still_due_steps(jobs_, now, record))


def _still_due_steps(
    jobs_: Sequence[Job], now: datetime | None, record: bool
) -> Steps[dict[int, Due]]:
    """still_due_many(_async): the clock (unless given), the schedules' state, the whole rows
    of those changed since, the rules, and the skip records."""
    at = yield from database_now_steps(now)
    dues, _ = yield from check_steps(jobs_, at)
    if record:
        yield from _record_skipped_steps(jobs_, dues, at)
    return dues


def check_steps(jobs_: Sequence[Job], at: datetime) -> Steps[tuple[dict[int, Due], dict[int, str]]]:
    """The still-due rules of ``jobs_`` at ``at`` (no write): ``({job id: Due}, {schedule id:
    zone})``, the zones of the schedules read (a delivery renders local times with them)."""
    metas, ids = _metas(jobs_)
    if not ids:
        return {job.id: _DUE for job in jobs_}, {}
    rows = yield query("schedule_still_due_many"), {"ids": ids}
    return (yield from decide_steps(jobs_, rows, at, metas))


def decide_steps(
    jobs_: Sequence[Job],
    rows: Sequence[Any],
    at: datetime,
    metas: Mapping[int, OccurrenceMeta | None] | None = None,
) -> Steps[tuple[dict[int, Due], dict[int, str]]]:
    """:func:`check_steps` after its read: ``rows`` are the schedules' states as
    ``schedule_still_due_many`` returns them (a statement that reads more, such as the
    delivery's one read of a batch, returns them too); reads the whole rows of the schedules
    changed since their jobs were enqueued (rare), then decides."""
    if metas is None:
        metas = _metas(jobs_)[0]
    states = _states(rows)
    stale = _stale(metas, states)
    full = (yield query("schedule_get_many"), {"ids": stale}) if stale else []
    dues = _decide_all(jobs_, metas, states, full, at)
    return dues, {sid: state.zone for sid, state in states.items()}


def _metas(jobs_: Sequence[Job]) -> tuple[dict[int, OccurrenceMeta | None], list[int]]:
    """Each job's occurrence meta, and the ids of the schedules to read."""
    metas = {job.id: OccurrenceMeta.of(job) for job in jobs_}
    ids = sorted({meta.schedule_id for meta in metas.values() if meta is not None})
    return metas, ids


_DUE = Due(True)


def _decide_all(
    jobs_: Sequence[Job],
    metas: Mapping[int, OccurrenceMeta | None],
    states: Mapping[int, _State],
    full_rows: Sequence[Any],
    at: datetime,
) -> dict[int, Due]:
    schedules = {s.id: s for s in (schedule_from_row(tuple(r)) for r in full_rows)}
    dues: dict[int, Due] = {}
    for job in jobs_:
        meta = metas[job.id]
        if meta is None:
            dues[job.id] = _DUE
            continue
        state = states.get(meta.schedule_id)
        if (
            state is not None
            and not state.paused
            and state.version == meta.version
            and state.quiet_hours is None
        ):  # the common case: nothing to compute
            dues[job.id] = _DUE
            continue
        dues[job.id] = _decide(state, schedules.get(meta.schedule_id), meta, at)
    return dues


def record_skipped(
    conn: psycopg.Connection[Any],
    jobs_: Collection[Job],
    dues: Mapping[int, Due],
    *,
    now: datetime,
) -> int:
    """Record the skipped occurrences among ``jobs_`` (:attr:`Due.skipped`); return how many.

    Once per job, even if a handler runs again after a crash (an effect-once record per job,
    ``jobs.effects.record_many``), then the skips and their schedules' ``skipped_count`` in one
    statement. Runs in the caller's transaction.
    """
    return steps.on(conn, _record_skipped_steps(jobs_, dues, now))


def _record_skipped_steps(
    jobs_: Collection[Job], dues: Mapping[int, Due], now: datetime
) -> Steps[int]:
    todo, keys = _skips(jobs_, dues)
    if not todo:
        return 0
    job_ids = [job.id for job, _, _ in todo]
    new = yield from effects.record_many_steps(keys, job_ids=job_ids, now=now)
    params = _skip_params(todo, keys, new, dues, now)
    if params is None:
        return 0
    yield query("schedule_skip_record_counted"), params
    return len(params["ids"])


_Skip = tuple[Job, OccurrenceMeta, str]
# The skip kind of a not-due reason that has one of its own (schedule_skips.kind); every other
# reason (paused, quiet hours, no device) is kind 'skipped' with the reason beside it.
_KINDS = {"superseded": "superseded", "expired": "expired", "capped": "capped"}
_EXPIRED = Due(False, "expired")


def record_expired(conn: psycopg.Connection[Any], expired: Sequence[Job]) -> None:
    """The reminder handlers' ``on_expired`` (jobs' worker calls it in the transaction that
    ends these jobs 'expired': claimed after their schedule's max_lateness, not run): each
    occurrence recorded once as a skip of kind ``expired``, counted in its schedule's
    ``skipped_count``, dated by the database clock."""
    steps.on(conn, _record_expired_steps(expired))


def _record_expired_steps(expired: Sequence[Job]) -> Steps[int]:
    at = yield from database_now_steps(None)
    return (
        yield from _record_skipped_steps(
            expired, dict.fromkeys((j.id for j in expired), _EXPIRED), at
        )
    )


def _skips(jobs_: Collection[Job], dues: Mapping[int, Due]) -> tuple[list[_Skip], list[str]]:
    """The skipped jobs among ``jobs_`` with their kind, and their effect-once keys."""
    todo: list[_Skip] = []
    for job in jobs_:
        due, meta = dues.get(job.id), OccurrenceMeta.of(job)
        if due is not None and due.skipped and meta is not None:
            # A reason may carry details after a colon ("capped: at most 3 per 3600 s").
            kind = _KINDS.get((due.reason or "").partition(":")[0], "skipped")
            todo.append((job, meta, kind))
    return todo, [effects.effect_key(job, "schedule-skip") for job, _, _ in todo]


def _skip_params(
    todo: list[_Skip],
    keys: list[str],
    new: Collection[str],
    dues: Mapping[int, Due],
    now: datetime,
) -> dict[str, Any] | None:
    """The skip records of the jobs whose effect-once key was new, or None if none was."""
    rows = [
        (job, meta, kind) for (job, meta, kind), key in zip(todo, keys, strict=True) if key in new
    ]
    if not rows:
        return None
    return {
        "ids": [meta.schedule_id for _, meta, _ in rows],
        "keys": [meta.occurrence_key for _, meta, _ in rows],
        "ats": [meta.at for _, meta, _ in rows],
        "kinds": [kind for _, _, kind in rows],
        "reasons": [dues[job.id].reason for job, _, _ in rows],
        "now": now,
    }


def still_due(conn: psycopg.Connection[Any], job: Job, *, now: datetime | None = None) -> Due:
    """Is this scheduled job's occurrence still to be delivered, now?

    Re-reads the schedule: deleted or paused -> not due; its rule, zone or policies changed
    since the job was enqueued and this occurrence is no longer one of its fires -> not due
    (superseded); the user's local time is inside quiet hours -> not due (``defer_until`` set
    when the quiet-hours action is ``defer``). A job that no schedule enqueued is always due.
    A not-due occurrence is recorded as skipped, once, in the caller's transaction.
    (:func:`still_due_many` for one job.)
    """
    return still_due_many(conn, [job], now=now)[job.id]


async def still_due_many_async(
    conn: psycopg.AsyncConnection[Any],
    jobs_: Sequence[Job],
    *,
    now: datetime | None = None,
    record: bool = True,
) -> dict[int, Due]:
    """:func:`still_due_many` on an ``AsyncConnection`` (for ``async def`` handlers): the same
    rules and the same skip records, in the caller's async transaction."""
    return await steps.on_async(conn, _still_due_steps(jobs_, now, record))


async def record_skipped_async(
    conn: psycopg.AsyncConnection[Any],
    jobs_: Collection[Job],
    dues: Mapping[int, Due],
    *,
    now: datetime,
) -> int:
    """:func:`record_skipped` on an ``AsyncConnection``."""
    return await steps.on_async(conn, _record_skipped_steps(jobs_, dues, now))


async def still_due_async(
    conn: psycopg.AsyncConnection[Any], job: Job, *, now: datetime | None = None
) -> Due:
    """:func:`still_due` on an ``AsyncConnection``, for ``async def`` reminder handlers."""
    return (await still_due_many_async(conn, [job], now=now))[job.id]


def reminder_message(job: Job, *, key: str = "") -> Message:
    """The push a reminder job sends: its payload's ``subject`` and ``message`` (``key``: its
    push effect key when the caller has it already)."""
    payload = job.payload if isinstance(job.payload, Mapping) else {}
    subject = payload.get("subject")
    return Message(
        job,
        None if subject is None else str(subject),
        str(payload.get("message", "reminder")),
        key,
    )


class _ThreadConnections:
    """One connection per worker thread, opened on first use; :meth:`close` closes them all."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[psycopg.Connection[Any]] = []

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = jobs.connect(self.conninfo)  # the process's pooler mode (TOCKWORK_POOLER)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()


class _Reminders(_ThreadConnections):
    """What both reminder handlers hold: the provider, and the clock their instant comes from
    (else the database's)."""

    def __init__(self, conninfo: str, provider: SimulatedPush, *, clock: Clock | None = None):
        super().__init__(conninfo)
        self.provider = provider
        self.clock = clock

    def _now(self, conn: psycopg.Connection[Any]) -> datetime:
        return database_now(conn, self.clock.now() if self.clock is not None else None)


class ReminderHandler(_Reminders):
    """A handler for reminder jobs: check :func:`still_due`, then push through ``provider``.

    A deferred reminder (quiet hours) is snoozed until the window ends; a superseded, paused or
    deleted one is dropped (recorded as skipped) and the job succeeds. One the worker claimed
    after its max_lateness is not run (jobs' expiry) and recorded as an ``expired`` skip
    (:func:`record_expired`, its ``on_expired``). Each worker thread gets its own connection;
    :meth:`close` closes them all.
    """

    on_expired = staticmethod(record_expired)

    def __call__(self, job: Job) -> None:
        conn = self._connection()
        try:
            with conn.transaction():
                now = self._now(conn)
                due = still_due(conn, job, now=now)
                if not due:
                    if due.defer_until is not None:
                        raise jobs.Snooze(max(due.defer_until - now, timedelta(0)))
                    return
                m = reminder_message(job)
                self.provider.send(conn, job, subject=m.subject, message=m.message)
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc


class ReminderBatch(Protocol):
    """The methods of ``jobs.Batch`` the reminder batch handler uses (docs/jobs.md)."""

    @property
    def jobs(self) -> Sequence[Job]: ...

    def succeed(self, job: Job) -> None: ...

    def retry(
        self, job: Job, message: str = "", *, code: str = "error", delay: timedelta | None = None
    ) -> None: ...

    def rate_limited(self, job: Job, retry_after: timedelta, message: str = "") -> None: ...

    def fail(self, job: Job, message: str, *, code: str = "permanent") -> None: ...

    def snooze(self, job: Job, delay: timedelta) -> None: ...

    def in_completion(
        self, fn: Callable[[psycopg.Connection[Any], Sequence[Job]], None]
    ) -> None: ...


def reminder_handler(
    conninfo: str, provider: SimulatedPush, *, clock: Clock | None = None
) -> ReminderHandler:
    """A :class:`ReminderHandler` (kept as a function for the documented name)."""
    return ReminderHandler(conninfo, provider, clock=clock)


def _simulated() -> tuple[str, SimulatedPush]:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise jobs.InvalidJob("DATABASE_URL", url, "the simulated app needs DATABASE_URL")
    # The provider's table is an opt-in component: using the provider opts in.
    simulated.install(url)
    provider = SimulatedPush(
        transient_rate=float(os.environ.get("TOCKWORK_SIM_TRANSIENT", "0")),
        rate_limit_rate=float(os.environ.get("TOCKWORK_SIM_RATE_LIMIT", "0")),
        retry_after=timedelta(seconds=float(os.environ.get("TOCKWORK_SIM_RETRY_AFTER", "1"))),
    )
    return url, provider


def simulated_single_app() -> dict[str, jobs.Handler]:
    """``--app scheduler.reminders:simulated_single_app``: the single-job handler, one
    transaction per reminder (to compare with the batch handler); same environment."""
    url, provider = _simulated()
    return {"reminder": reminder_handler(url, provider)}


__all__ = [
    "MAX_BATCH",
    "Due",
    "ReminderBatch",
    "ReminderHandler",
    "SimulatedPush",
    "record_expired",
    "record_skipped",
    "reminder_handler",
    "reminder_message",
    "schedule_meta",
    "simulated_single_app",
    "still_due",
    "still_due_many",
]
