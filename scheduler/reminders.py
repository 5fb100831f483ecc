"""User reminders at run time: the still-due check and a simulated push provider.

A reminder job is enqueued ahead of time; between then and its run the user may have deleted or
paused the schedule, changed its time or zone, or entered quiet hours. :func:`still_due` re-reads
the schedule when the job runs so that a handler never delivers a superseded reminder, and
records the occurrence as skipped when it is not due any more.

:class:`ReminderHandler` delivers through a push provider; :func:`simulated_app` wires it to
:class:`scheduler.simulated.SimulatedPush` (the provider for tests and demos, with its own opt-in
table) for ``tockwork worker --app scheduler.reminders:simulated_app``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs import Job, effects
from scheduler import simulated
from scheduler.errors import ScheduleNotFound
from scheduler.planner import next_occurrence, schedule_meta
from scheduler.queries import database_now, query
from scheduler.schedules import get_schedule
from scheduler.simulated import SimulatedPush
from timezones import Clock


@dataclass(frozen=True)
class Due:
    """The answer of :func:`still_due`; true when the reminder should be delivered now."""

    due: bool
    reason: str | None = None  # deleted, paused, superseded, quiet_hours
    defer_until: datetime | None = None  # quiet hours with action "defer"

    def __bool__(self) -> bool:
        return self.due


def _record_skip(
    conn: psycopg.Connection[Any], job: Job, meta: Mapping[str, Any], reason: str, now: datetime
) -> None:
    # Once per job, even if the handler runs again after a crash.
    if not effects.record_once(conn, effects.effect_key(job, "schedule-skip"), job_id=job.id):
        return
    conn.execute(
        query("schedule_skip_record"),
        {
            "ids": [meta["id"]],
            "keys": [meta["occurrence"]],
            "ats": [datetime.fromisoformat(meta["at"])],
            "kinds": ["skipped" if reason != "superseded" else "superseded"],
            "reasons": [reason],
            "now": now,
        },
    )
    conn.execute(query("schedule_count_skip"), {"id": meta["id"]})


def still_due(conn: psycopg.Connection[Any], job: Job, *, now: datetime | None = None) -> Due:
    """Is this scheduled job's occurrence still to be delivered, now?

    Re-reads the schedule: deleted or paused -> not due; its rule, zone or policies changed
    since the job was enqueued and this occurrence is no longer one of its fires -> not due
    (superseded); the user's local time is inside quiet hours -> not due (``defer_until`` set
    when the quiet-hours action is ``defer``). A job that no schedule enqueued is always due.
    A not-due occurrence is recorded as skipped, once, in the caller's transaction.
    """
    meta = schedule_meta(job)
    if meta is None:
        return Due(True)
    at = database_now(conn, now)
    try:
        schedule = get_schedule(conn, int(meta["id"]))
    except ScheduleNotFound:
        return Due(False, "deleted")
    if schedule.paused:
        _record_skip(conn, job, meta, "paused", at)
        return Due(False, "paused")
    if schedule.version != meta.get("version"):
        occ_at = datetime.fromisoformat(meta["at"])
        occ = next_occurrence(schedule, occ_at - timedelta(seconds=1))
        if occ is None or occ.key != meta["occurrence"] or occ.at != occ_at:
            _record_skip(conn, job, meta, "superseded", at)
            return Due(False, "superseded")
    quiet = schedule.quiet_hours
    if quiet is not None:
        local = at.astimezone(schedule.tz)
        if quiet.contains(local):
            if quiet.action == "defer":
                return Due(False, "quiet_hours", quiet.end_after(local, schedule.tz))
            _record_skip(conn, job, meta, "quiet_hours", at)
            return Due(False, "quiet_hours")
    return Due(True)


class ReminderHandler:
    """A handler for reminder jobs: check :func:`still_due`, then push through ``provider``.

    A deferred reminder (quiet hours) is snoozed until the window ends; a superseded, paused or
    deleted one is dropped (recorded as skipped) and the job succeeds. Each worker thread gets
    its own connection; :meth:`close` closes them all.
    """

    def __init__(self, conninfo: str, provider: SimulatedPush, *, clock: Clock | None = None):
        self.conninfo = conninfo
        self.provider = provider
        self.clock = clock
        self._local = threading.local()
        self._lock = threading.Lock()
        self._opened: list[psycopg.Connection[Any]] = []

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = psycopg.connect(self.conninfo)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()

    def __call__(self, job: Job) -> None:
        conn = self._connection()
        try:
            with conn.transaction():
                now = database_now(conn, self.clock.now() if self.clock is not None else None)
                due = still_due(conn, job, now=now)
                if not due:
                    if due.defer_until is not None:
                        raise jobs.Snooze(max(due.defer_until - now, timedelta(0)))
                    return
                payload = job.payload if isinstance(job.payload, Mapping) else {}
                subject = payload.get("subject")
                self.provider.send(
                    conn,
                    job,
                    subject=None if subject is None else str(subject),
                    message=str(payload.get("message", "reminder")),
                )
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc


def reminder_handler(
    conninfo: str, provider: SimulatedPush, *, clock: Clock | None = None
) -> ReminderHandler:
    """A :class:`ReminderHandler` (kept as a function for the documented name)."""
    return ReminderHandler(conninfo, provider, clock=clock)


def simulated_app() -> dict[str, jobs.Handler]:
    """``tockwork worker --app scheduler.reminders:simulated_app``: reminders via SimulatedPush.

    Reads ``DATABASE_URL`` and the failure rates ``TOCKWORK_SIM_TRANSIENT`` and
    ``TOCKWORK_SIM_RATE_LIMIT`` (fractions, default 0) from the environment.
    """
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
    return {"reminder": reminder_handler(url, provider)}


__all__ = [
    "Due",
    "ReminderHandler",
    "SimulatedPush",
    "reminder_handler",
    "schedule_meta",
    "simulated_app",
    "still_due",
]
