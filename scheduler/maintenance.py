"""Built-in maintenance, scheduled through the scheduler's own definitions (queue ``maintenance``).

===========================  ===================  =============================================
definition key               rule (UTC)            what the job does
===========================  ===================  =============================================
``tockwork.lease_recovery``  ``every:1m``          returns expired leases to the queue (the
                                                   workers' reapers do it too; this covers a
                                                   fleet with no worker running)
``tockwork.retention``       ``cron:17 3 * * *``   deletes succeeded and cancelled jobs, attempt
                                                   history, effect records, schedule skips,
                                                   webhook attempts, processed outbox events and
                                                   finished one-off schedules older than their age
``tockwork.tzdb_recompute``  ``cron:7 * * * *``    recomputes schedules computed with another
                                                   tz database version
``tockwork.attempt_rollup``  ``every:1m``          counts the attempts of each closed minute
                                                   per outcome (the dashboard's chart reads
                                                   these rows, not an hour of attempts)
``tockwork.partitions``      ``cron:47 * * * *``   creates the day partitions of the history
                                                   tables (attempts, effects, skips) a week
                                                   ahead (retention drops the expired days)
===========================  ===================  =============================================

This module declares and schedules the work; the work on the queue's tables (lease recovery,
retention of jobs, attempts, effects and outbox events, the rollup of attempts) lives with
those tables in :mod:`jobs.maintenance`, as procrastinate's ``builtin_tasks`` wrap the manager
that owns the table. Only the partitions and the retention of the scheduler's own
``schedule_skips`` are done here (through :mod:`jobs.partitions`, which works on any history
table it is given).

Every job is idempotent (a duplicate run finds nothing left to do) and works in bounded batches
of short transactions, so it never holds long locks. Dead jobs are kept until a person acts,
unless ``dead_days`` is set.

**No extra process.** The definitions enqueue on their own queue, :data:`QUEUE`
(``tockwork.maintenance``), which holds nothing else, so any process with these handlers can
serve it whatever other job types it knows. ``tockwork scheduler`` syncs the definitions when
it starts (:func:`sync_maintenance`: created when missing, the retention ages set before kept),
and every ``tockwork worker`` serves :data:`QUEUE` with one thread besides its own queues
(:func:`with_maintenance`); ``--no-maintenance`` turns either off. Without a scheduler nothing
is enqueued (the workers' reapers still recover expired leases). An application that runs
:class:`jobs.Worker` itself adds them with :func:`with_maintenance`.
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
from scheduler.errors import ScheduleNotFound
from scheduler.queries import database_now, query
from scheduler.schedules import get_schedule

log = logging.getLogger("tockwork.maintenance")

PREFIX = "tockwork."
# The built-in definitions' own queue: it holds their jobs only, so a worker that serves it with
# :func:`handlers` never claims a job it has no handler for (definitions as code default to the
# queue ``maintenance``, which an application's own jobs share).
QUEUE = "tockwork.maintenance"
BATCH = 5000
AHEAD_DAYS = 7
SKIPS = jobs.partitions.History("schedule_skips", "recorded_at", "timestamptz")
"""The scheduler's partitioned history table (by day of ``recorded_at``)."""
LEASE_BATCH = 1000
DEFAULT_AGES = {
    "succeeded_days": 7,
    "attempts_days": 30,
    "effects_days": 30,
    "skips_days": 30,
    "outbox_days": 7,
    "webhook_attempts_days": 30,
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
        Definition(key=f"{PREFIX}lease_recovery", rule="every:1m", zone=zone, queue=QUEUE,
                   job_type="tockwork.lease_recovery", catch_up="latest"),
        Definition(key=f"{PREFIX}retention", rule="cron:17 3 * * *", zone=zone, queue=QUEUE,
                   job_type="tockwork.retention", payload=ages, catch_up="latest"),
        Definition(key=f"{PREFIX}tzdb_recompute", rule="cron:7 * * * *", zone=zone, queue=QUEUE,
                   job_type="tockwork.tzdb_recompute", catch_up="latest"),
        Definition(key=f"{PREFIX}attempt_rollup", rule="every:1m", zone=zone, queue=QUEUE,
                   job_type="tockwork.attempt_rollup", catch_up="latest"),
        Definition(key=f"{PREFIX}partitions", rule="cron:47 * * * *", zone=zone, queue=QUEUE,
                   job_type="tockwork.partitions", catch_up="latest"),
    ]  # fmt: skip


def sync_maintenance(
    conn: psycopg.Connection[Any],
    *,
    retention: Mapping[str, int | None] | None = None,
    now: datetime | None = None,
) -> SyncResult:
    """Create or update the built-in definitions (the ``tockwork.`` keys only), in the
    caller's transaction.

    ``retention`` sets the ages of :data:`DEFAULT_AGES` (and ``dead_days``); without it, the
    ages the stored ``tockwork.retention`` definition has are kept (so that a scheduler that
    syncs at start does not undo them), and a new one gets the defaults. Concurrent syncs (two
    replicas starting) wait for each other on a transaction-level advisory lock.
    """
    conn.execute(query("pg_maintenance_sync_lock"))
    if retention is None:
        try:
            stored = get_schedule(conn, key=f"{PREFIX}retention").payload
        except ScheduleNotFound:
            stored = None
        if isinstance(stored, Mapping):
            known = set(DEFAULT_AGES) | {"dead_days"}
            retention = {k: v for k, v in stored.items() if k in known}
    return sync(conn, definitions(retention=retention), now=now, scope="builtin")


def _days(name: str, days: Any) -> timedelta:
    if isinstance(days, bool) or not isinstance(days, int | float) or days < 0:
        raise jobs.InvalidJob(name, days, "must be a number of days >= 0")
    return timedelta(days=days)


def _delete_before(conn: psycopg.Connection[Any], name: str, before: datetime) -> int:
    """One of the scheduler's own tables (``name`` deletes one batch: schedule skips, for
    ``schedule_skips`` its default partition, the days being dropped whole; webhook attempts;
    finished one-off schedules): bounded deletes until one deletes less than a batch."""
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

    The queue's tables are cleaned by :func:`jobs.maintenance.clean`; the schedule skips and
    the webhook attempts (``webhook_attempts_days``, default 30) here.
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
    skips_age = _days("skips_days", settings["skips_days"])
    queue = queue_maintenance.clean(conn, config, now=at)
    skips = jobs.partitions.drop_partitions(conn, SKIPS, keep=skips_age, now=at)
    counts = {
        "jobs": queue["jobs"],
        "attempts": queue["attempts"],
        "effects": queue["effects"],
        "skips": skips + _delete_before(conn, "schedule_skip_delete_before", at - skips_age),
        "outbox": queue["outbox"],
        "webhook_attempts": _delete_before(
            conn,
            "webhook_attempt_delete_before",
            at - _days("webhook_attempts_days", settings["webhook_attempts_days"]),
        ),
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


def ensure_partitions(
    conn: psycopg.Connection[Any], *, ahead_days: int = AHEAD_DAYS, now: datetime | None = None
) -> dict[str, int]:
    """Create the day partitions of every history table (``job_attempts``, ``job_effects``,
    ``schedule_skips``) from today (UTC) to ``ahead_days`` ahead; the days created per table.
    ``conn`` must not be inside a transaction (each day commits)."""
    created = queue_maintenance.ensure_partitions(conn, ahead_days=ahead_days, now=now)
    skips = jobs.partitions.ensure_partitions(conn, SKIPS, ahead_days=ahead_days, now=now)
    return {**created, SKIPS.table: len(skips)}


def app() -> dict[str, jobs.Handler]:
    """``tockwork worker --app scheduler.maintenance:app --queue tockwork.maintenance=1`` (every
    ``tockwork worker`` serves these already, unless ``--no-maintenance``).

    Reads ``DATABASE_URL`` (``tockwork worker --database-url`` sets it for the app).
    """
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise jobs.InvalidJob("DATABASE_URL", url, "the maintenance app needs DATABASE_URL")
    return handlers(url)


def with_maintenance(
    app: Mapping[str, jobs.Handler], queues: Mapping[str, int], url: str
) -> tuple[dict[str, jobs.Handler], dict[str, int]]:
    """``app`` and ``queues`` with the built-in maintenance added: its handlers (for ``url``)
    for the job types ``app`` does not handle itself, and :data:`QUEUE` with one thread unless
    ``queues`` names it already. What ``tockwork worker`` serves unless ``--no-maintenance``."""
    merged = {**handlers(url), **app}
    return merged, {**queues, QUEUE: queues.get(QUEUE, 1)}


def handlers(url: str) -> dict[str, jobs.Handler]:
    """The handlers of the built-in definitions' job types, each connecting to ``url``."""

    def run_retention(job: jobs.Job) -> None:
        ages = job.payload if isinstance(job.payload, Mapping) else {}
        settings = {k: v for k, v in ages.items() if k in DEFAULT_AGES or k == "dead_days"}
        # Autocommit: each batch and each partition's DDL is its own transaction (an implicit
        # one left open by a first read would hold a dropped day's lock until the end).
        with jobs.connect(url, autocommit=True) as conn:
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

    def run_partitions(_job: jobs.Job) -> None:
        with jobs.connect(url, autocommit=True) as conn:
            ensure_partitions(conn)

    return {
        "tockwork.attempt_rollup": run_attempt_rollup,
        "tockwork.partitions": run_partitions,
        "tockwork.retention": run_retention,
        "tockwork.lease_recovery": run_lease_recovery,
        "tockwork.tzdb_recompute": run_tzdb,
    }
