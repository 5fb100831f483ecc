"""Built-in maintenance, scheduled through the scheduler's own definitions (queue ``maintenance``).

===========================  ===================  =============================================
definition key               rule (UTC)            what the job does
===========================  ===================  =============================================
``tockwork.lease_recovery``  ``every:1m``          returns expired leases to the queue (the
                                                   workers' reapers do it too; this covers a
                                                   fleet with no worker running)
``tockwork.retention``       ``cron:17 3 * * *``   deletes succeeded and cancelled jobs, attempt
                                                   history, effect records, schedule skips,
                                                   processed outbox events and finished one-off
                                                   schedules older than their age
``tockwork.tzdb_recompute``  ``cron:7 * * * *``    recomputes schedules computed with another
                                                   tz database version
``tockwork.attempt_rollup``  ``every:1m``          counts the attempts of each closed minute
                                                   per outcome (the dashboard's chart reads
                                                   these rows, not an hour of attempts)
===========================  ===================  =============================================

This module declares and schedules the work; the work on the queue's tables (lease recovery,
retention of jobs, attempts, effects and outbox events, the rollup of attempts) lives with
those tables in :mod:`jobs.maintenance`, as procrastinate's ``builtin_tasks`` wrap the manager
that owns the table. Only the retention of the scheduler's own ``schedule_skips`` is done here.

Every job is idempotent (a duplicate run finds nothing left to do) and works in bounded batches
of short transactions, so it never holds long locks. Dead jobs are kept until a person acts,
unless ``dead_days`` is set. Sync the definitions with ``tockwork scheduler --maintenance`` (or
:func:`sync_maintenance`) and run a worker for the queue::

    tockwork worker --app scheduler.maintenance:app --queue maintenance=1
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import psycopg

import jobs
from jobs import maintenance as queue_maintenance
from scheduler.definitions import Definition, SyncResult, sync
from scheduler.queries import database_now, query

log = logging.getLogger("tockwork.maintenance")

PREFIX = "tockwork."
BATCH = 5000
LEASE_BATCH = 1000
DEFAULT_AGES = {
    "succeeded_days": 7,
    "attempts_days": 30,
    "effects_days": 30,
    "skips_days": 30,
    "outbox_days": 7,
    # Finished one-off (``once:``) schedules, kept marked for this long after they fired
    # (issue 24); recurring schedules that finished are kept until deleted.
    "finished_once_days": 30,
}


def definitions(
    *, retention: Mapping[str, int | None] | None = None, zone: str = "UTC"
) -> list[Definition]:
    """The built-in definitions; ``retention`` overrides ages in days (see DEFAULT_AGES)."""
    ages: dict[str, int | None] = {**DEFAULT_AGES, **(retention or {})}
    unknown = set(ages) - set(DEFAULT_AGES) - {"dead_days"}
    if unknown:
        raise jobs.InvalidJob("retention", sorted(unknown), "unknown retention settings")
    return [
        Definition(key=f"{PREFIX}lease_recovery", rule="every:1m", zone=zone,
                   job_type="tockwork.lease_recovery", catch_up="latest"),
        Definition(key=f"{PREFIX}retention", rule="cron:17 3 * * *", zone=zone,
                   job_type="tockwork.retention", payload=ages, catch_up="latest"),
        Definition(key=f"{PREFIX}tzdb_recompute", rule="cron:7 * * * *", zone=zone,
                   job_type="tockwork.tzdb_recompute", catch_up="latest"),
        Definition(key=f"{PREFIX}attempt_rollup", rule="every:1m", zone=zone,
                   job_type="tockwork.attempt_rollup", catch_up="latest"),
    ]  # fmt: skip


def sync_maintenance(
    conn: psycopg.Connection[Any],
    *,
    retention: Mapping[str, int | None] | None = None,
    now: datetime | None = None,
) -> SyncResult:
    """Create or update the built-in definitions (the ``tockwork.`` keys only)."""
    return sync(conn, definitions(retention=retention), now=now, scope="builtin")


def _days(name: str, days: Any) -> timedelta:
    if isinstance(days, bool) or not isinstance(days, int | float) or days < 0:
        raise jobs.InvalidJob(name, days, "must be a number of days >= 0")
    return timedelta(days=days)


def _delete_before(conn: psycopg.Connection[Any], name: str, before: datetime) -> int:
    """The scheduler's own tables (schedule skips, finished one-off schedules): bounded
    deletes by the named query until one deletes less than a batch."""
    total = 0
    while True:
        with conn.transaction():
            deleted = conn.execute(query(name), {"before": before, "limit": BATCH}).rowcount
        total += max(deleted, 0)
        if deleted < BATCH:
            return total


def retention(
    conn: psycopg.Connection[Any],
    ages: Mapping[str, Any] | None = None,
    *,
    now: datetime | None = None,
) -> dict[str, int]:
    """Delete what is older than its age, in bounded batches; returns counts per kind.

    The queue's tables are cleaned by :func:`jobs.maintenance.clean`; the schedule skips here.
    Every age is checked before anything is deleted. ``conn`` must not be inside a transaction
    (each batch commits).
    """
    settings = {**DEFAULT_AGES, **(ages or {})}
    at = database_now(conn, now)
    dead_days = settings.get("dead_days")
    config = queue_maintenance.RetentionConfig(
        finished_retention=_days("succeeded_days", settings["succeeded_days"]),
        dead_retention=None if dead_days is None else _days("dead_days", float(dead_days)),
        attempt_retention=_days("attempts_days", settings["attempts_days"]),
        effect_retention=_days("effects_days", settings["effects_days"]),
        outbox_retention=_days("outbox_days", settings["outbox_days"]),
        batch_size=BATCH,
    )
    skips_before = at - _days("skips_days", settings["skips_days"])
    queue = queue_maintenance.clean(conn, config, now=at)
    counts = {
        "jobs": queue["jobs"],
        "attempts": queue["attempts"],
        "effects": queue["effects"],
        "skips": _delete_before(conn, "schedule_skip_delete_before", skips_before),
        "outbox": queue["outbox"],
        "finished_schedules": _delete_before(
            conn,
            "schedule_delete_finished_once",
            at - _days("finished_once_days", settings["finished_once_days"]),
        ),
    }
    log.info("retention: deleted %s", counts)
    return counts


def lease_recovery(conn: psycopg.Connection[Any], *, now: datetime | None = None) -> int:
    """Return every expired lease to the queue (or to dead), in batches of ``LEASE_BATCH``.

    Each batch is its own transaction when ``conn`` is idle (a savepoint inside the caller's
    transaction otherwise).
    """
    config = queue_maintenance.RescueConfig(batch_size=LEASE_BATCH)
    return queue_maintenance.recover_leases(conn, config, now=now)


def attempt_rollup(conn: psycopg.Connection[Any], *, now: datetime | None = None) -> int:
    """Count the attempts of the closed minutes into ``job_attempt_minutes`` (the defaults of
    :class:`jobs.maintenance.RollupConfig`); the minutes written. ``conn`` must not be inside a
    transaction (each batch commits)."""
    return queue_maintenance.rollup_attempts(conn, now=now)


def app() -> dict[str, jobs.Handler]:
    """``tockwork worker --app scheduler.maintenance:app --queue maintenance=1``.

    Reads ``DATABASE_URL`` (``tockwork worker --database-url`` sets it for the app).
    """
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise jobs.InvalidJob("DATABASE_URL", url, "the maintenance app needs DATABASE_URL")

    def run_retention(job: jobs.Job) -> None:
        ages = job.payload if isinstance(job.payload, Mapping) else {}
        settings = {k: v for k, v in ages.items() if k in DEFAULT_AGES or k == "dead_days"}
        with jobs.connect(url) as conn:
            retention(conn, settings)

    def run_lease_recovery(_job: jobs.Job) -> None:
        with jobs.connect(url) as conn:
            lease_recovery(conn)

    def run_tzdb(_job: jobs.Job) -> None:
        from scheduler.tick import Scheduler

        replica = Scheduler(url)
        try:
            replica.recompute_stale_tzdb()
        finally:
            replica.close()

    def run_attempt_rollup(_job: jobs.Job) -> None:
        with jobs.connect(url) as conn:
            attempt_rollup(conn)

    return {
        "tockwork.attempt_rollup": run_attempt_rollup,
        "tockwork.retention": run_retention,
        "tockwork.lease_recovery": run_lease_recovery,
        "tockwork.tzdb_recompute": run_tzdb,
    }
