"""Maintenance of the queue's own tables: lease recovery and retention, in bounded batches.

The queue owns its tables (``jobs``, ``job_attempts``, ``job_effects``, ``outbox_events``), so
the work that keeps them healthy lives here, beside their SQL. Shaped like River's
``internal/maintenance/job_cleaner.go``: each task has a config with defaults and validation,
and a batch loop that runs one short statement per batch (each its own transaction) and stops
when a batch comes back short. No batch holds a lock for long; a duplicate run finds nothing
left to do.

* :func:`rescue_leases` / :func:`recover_leases` return expired leases to the queue (or to
  dead when the attempts are spent). Every worker's reaper runs one bounded batch per
  ``reap_interval``; ``scheduler.maintenance`` schedules a full pass every minute, which covers
  a fleet with no worker running.
* :func:`clean` deletes what is finished and old: finished jobs (``job_history``, and those
  that finished in ``jobs`` before migration 0021), attempt history, effect records and
  processed outbox events. Dead jobs and dead events wait for a
  person unless ``dead_retention`` is set. The history tables are partitioned by day
  (:mod:`jobs.partitions`): their expired days are dropped whole, and only their default
  partition (days that had no partition, history from before the partitioning) is deleted by
  batches. :func:`ensure_partitions` creates the days ahead.
* :func:`rollup_attempts` counts the attempts of each closed minute per outcome into
  ``job_attempt_minutes`` (the dashboard's chart of the last hour reads 60 rows instead of an
  hour of attempts). It runs beside the completions, never inside them: a counter row updated by
  every completion would serialize the workers' completions on its lock. A minute is rolled up
  once it ended ``settle`` ago, and computed again while it is within ``recheck`` of that (an
  attempt whose transaction committed late); a minute the rollup lacks (the maintenance was not
  running) is filled in by the next run within ``backfill``, and a reader counts what is still
  missing from the attempts themselves.

Nothing here schedules itself: the scheduler declares when these run
(``scheduler.maintenance``), as procrastinate's ``builtin_tasks`` wrap the manager that owns the
table. ``on_batch`` is a test signal (River's ``testsignal``): ``None`` costs nothing in
production, and a test passes a callback to see every batch instead of polling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, LiteralString

import psycopg

from jobs import partitions
from jobs.errors import InvalidJob
from jobs.queries import query
from jobs.store import JobStore, PgJobStore

log = logging.getLogger("tockwork.maintenance")

BatchSignal = Callable[[str, int], None]
"""Called after each batch with the kind (``"leases"``, ``"jobs"``, ...) and its row count."""

ROLLUP_DELETE_BATCH = 5000

Rescued = tuple[int, str, str]
"""An expired lease recovered: ``(job id, queue, new status)``."""


def _batch_size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJob("batch_size", value, "must be a positive integer")
    return value


def _age(field: str, value: Any) -> timedelta:
    if not isinstance(value, timedelta) or value < timedelta(0):
        raise InvalidJob(field, value, "must be a timedelta >= 0")
    return value


@dataclass(frozen=True, slots=True)
class RescueConfig:
    """How the lease rescuer works (River's ``JobRescuerConfig``)."""

    batch_size: int = 1000
    """Expired leases recovered per statement."""

    max_batches: int | None = None
    """Stop after this many batches (a worker's reaper runs one); None: until a batch is short."""

    def __post_init__(self) -> None:
        _batch_size(self.batch_size)
        if self.max_batches is not None and (
            isinstance(self.max_batches, bool)
            or not isinstance(self.max_batches, int)
            or self.max_batches < 1
        ):
            raise InvalidJob("max_batches", self.max_batches, "must be None or a positive integer")


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """How long the queue keeps what is finished (River's ``JobCleanerConfig``)."""

    finished_retention: timedelta = timedelta(days=7)
    """Succeeded and cancelled jobs, counted from ``completed_at``."""

    dead_retention: timedelta | None = None
    """Dead jobs, counted from ``completed_at``; None keeps them until a person acts."""

    attempt_retention: timedelta = timedelta(days=30)
    """Attempt history (``job_attempts``), counted from ``finished_at``, whatever the job."""

    effect_retention: timedelta = timedelta(days=30)
    """Effect records (``job_effects``): a retry older than this could repeat its effect."""

    outbox_retention: timedelta = timedelta(days=7)
    """Processed outbox events, counted from ``processed_at``; dead events are kept."""

    batch_size: int = 5000
    """Rows deleted per statement (each batch is its own transaction)."""

    def __post_init__(self) -> None:
        _age("finished_retention", self.finished_retention)
        if self.dead_retention is not None:
            _age("dead_retention", self.dead_retention)
        _age("attempt_retention", self.attempt_retention)
        _age("effect_retention", self.effect_retention)
        _age("outbox_retention", self.outbox_retention)
        _batch_size(self.batch_size)


@dataclass(frozen=True, slots=True)
class RollupConfig:
    """How the per-minute rollup of attempts works (:func:`rollup_attempts`)."""

    settle: timedelta = timedelta(minutes=1)
    """A minute is rolled up once it ended this long ago (its attempts have committed by then:
    ``finished_at`` is the start of a completion's short transaction)."""

    recheck: timedelta = timedelta(minutes=3)
    """Closed minutes this recent are computed again by every run, rolled up or not."""

    backfill: timedelta = timedelta(hours=2)
    """How far back a run fills in minutes that have no row (the maintenance was stopped)."""

    keep: timedelta = timedelta(days=7)
    """Rows older than this are deleted (by the same run, in batches)."""

    batch_minutes: int = 60
    """Minutes computed per statement (each its own transaction)."""

    def __post_init__(self) -> None:
        _age("settle", self.settle)
        _age("recheck", self.recheck)
        if not isinstance(self.backfill, timedelta) or self.backfill < timedelta(minutes=1):
            raise InvalidJob("backfill", self.backfill, "must be a timedelta of a minute or more")
        if not isinstance(self.keep, timedelta) or self.keep < self.backfill:
            raise InvalidJob("keep", self.keep, "must be a timedelta >= backfill")
        if (
            isinstance(self.batch_minutes, bool)
            or not isinstance(self.batch_minutes, int)
            or self.batch_minutes < 1
        ):
            raise InvalidJob("batch_minutes", self.batch_minutes, "must be a positive integer")


def _batches(
    kind: str,
    run_batch: Callable[[], int],
    batch_size: int,
    max_batches: int | None = None,
    on_batch: BatchSignal | None = None,
) -> int:
    """Run ``run_batch`` until it handles fewer than ``batch_size`` rows; the total handled."""
    total = batches = 0
    while True:
        handled = max(run_batch(), 0)
        total += handled
        batches += 1
        if on_batch is not None:
            on_batch(kind, handled)
        if handled < batch_size or (max_batches is not None and batches >= max_batches):
            return total


def rescue_leases(
    store: JobStore,
    config: RescueConfig | None = None,
    *,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> list[Rescued]:
    """Recover expired leases through ``store`` (each batch one :meth:`JobStore.reap`).

    The store decides the transactions: :class:`jobs.store.PgJobStore` on an autocommit
    connection (a worker's) commits every batch on its own.
    """
    config = config or RescueConfig()
    rescued: list[Rescued] = []

    def batch() -> int:
        found = store.reap(config.batch_size, now)
        rescued.extend(found)
        return len(found)

    _batches("leases", batch, config.batch_size, config.max_batches, on_batch)
    return rescued


def recover_leases(
    conn: psycopg.Connection[Any],
    config: RescueConfig | None = None,
    *,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> int:
    """Return every expired lease to the queue (or to dead); the number recovered.

    Each batch is its own transaction when ``conn`` is idle (a savepoint inside the caller's
    transaction otherwise).
    """
    config = config or RescueConfig()
    store = PgJobStore(conn)

    def batch() -> int:
        with conn.transaction():
            return len(store.reap(config.batch_size, now))

    return _batches("leases", batch, config.batch_size, config.max_batches, on_batch)


def _delete(
    conn: psycopg.Connection[Any],
    kind: str,
    name: LiteralString,
    params: dict[str, Any],
    batch_size: int,
    on_batch: BatchSignal | None,
) -> int:
    def batch() -> int:
        with conn.transaction():
            return conn.execute(query(name), {**params, "limit": batch_size}).rowcount

    return _batches(kind, batch, batch_size, on_batch=on_batch)


def clean(
    conn: psycopg.Connection[Any],
    config: RetentionConfig | None = None,
    *,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> dict[str, int]:
    """Delete what is older than its retention, in bounded batches; the counts per kind.

    Kinds: ``jobs``, ``attempts``, ``effects``, ``outbox``. Ages count back from ``now``
    (default: the database clock of each batch). ``conn`` must not be inside a transaction
    (each batch commits). Attempts and effects: the day partitions that ended before their
    retention are dropped (their rows counted), then the default partition is deleted from in
    batches (:mod:`jobs.partitions`); so are finished jobs (``job_history``, kind ``jobs``, after
    ``finished_retention``), and what finished in ``jobs`` before migration 0021 is deleted there
    by batches.
    """
    config = config or RetentionConfig()
    dead = config.dead_retention
    tasks: list[tuple[str, LiteralString, dict[str, Any]]] = [
        (
            "jobs",
            "job_delete_finished",
            {
                "finished_age": config.finished_retention.total_seconds(),
                "dead_age": None if dead is None else dead.total_seconds(),
            },
        ),
        ("jobs", "job_history_delete_before", {"age": config.finished_retention.total_seconds()}),
        (
            "attempts",
            "job_attempt_delete_before",
            {"age": config.attempt_retention.total_seconds()},
        ),
        ("effects", "job_effect_delete_before", {"age": config.effect_retention.total_seconds()}),
        (
            "outbox",
            "outbox_event_delete_processed",
            {"age": config.outbox_retention.total_seconds()},
        ),
    ]
    dropped = {
        "jobs": partitions.drop_partitions(
            conn, partitions.FINISHED, keep=config.finished_retention, now=now, on_batch=on_batch
        ),
        "attempts": partitions.drop_partitions(
            conn, partitions.ATTEMPTS, keep=config.attempt_retention, now=now, on_batch=on_batch
        ),
        "effects": partitions.drop_partitions(
            conn, partitions.EFFECTS, keep=config.effect_retention, now=now, on_batch=on_batch
        ),
    }
    counts: dict[str, int] = dict(dropped)
    for kind, name, params in tasks:
        counts[kind] = counts.get(kind, 0) + _delete(
            conn, kind, name, {**params, "now": now}, config.batch_size, on_batch
        )
    log.debug("queue retention: deleted %s", counts)
    return counts


def ensure_partitions(
    conn: psycopg.Connection[Any],
    *,
    ahead_days: int = 7,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> dict[str, int]:
    """Create the day partitions of ``job_attempts``, ``job_effects`` and ``job_history`` from
    today (UTC) to
    ``ahead_days`` ahead (:func:`jobs.partitions.ensure_partitions`); the days created per
    table. ``conn`` must not be inside a transaction (each day commits)."""
    return {
        table.table: len(
            partitions.ensure_partitions(
                conn, table, ahead_days=ahead_days, now=now, on_batch=on_batch
            )
        )
        for table in partitions.TABLES
    }


def _runs(minutes: list[datetime], most: int) -> list[tuple[datetime, datetime]]:
    """Newest-first minutes as ``[start, stop)`` ranges of consecutive minutes, each at most
    ``most`` minutes long, newest first."""
    ranges: list[tuple[datetime, datetime]] = []
    step = timedelta(minutes=1)
    for minute in minutes:
        if ranges:
            start, stop = ranges[-1]
            if minute == start - step and stop - minute <= most * step:
                ranges[-1] = (minute, stop)
                continue
        ranges.append((minute, minute + step))
    return ranges


def rollup_attempts(
    conn: psycopg.Connection[Any],
    config: RollupConfig | None = None,
    *,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> int:
    """Count the attempts of the closed minutes into ``job_attempt_minutes``; the minutes
    written.

    Writes the closed minutes of the last ``backfill`` that have no row and the ``recheck``
    latest ones again, ``batch_minutes`` consecutive minutes per statement (each its own
    transaction: ``conn`` must not be inside one), newest first; then deletes rows older than
    ``keep``. Idempotent, and safe to run twice at once (both write the same counts).
    ``on_batch`` is called with ``("attempt_minutes", minutes)`` after each statement.
    """
    config = config or RollupConfig()
    params = {
        "now": now,
        "settle": config.settle.total_seconds(),
        "recheck": config.recheck.total_seconds(),
        "backfill": config.backfill.total_seconds(),
    }
    with conn.transaction():
        rows = conn.execute(query("job_attempt_minute_wanted"), params).fetchall()
    wanted: list[datetime] = [row[0] for row in rows]
    written = 0
    for start, stop in _runs(wanted, config.batch_minutes):
        with conn.transaction():
            conn.execute(
                query("job_attempt_minute_roll"), {"start": start, "stop": stop, "now": now}
            )
        minutes = round((stop - start) / timedelta(minutes=1))
        written += minutes
        if on_batch is not None:
            on_batch("attempt_minutes", minutes)
    _delete(
        conn,
        "attempt_minutes_deleted",
        "job_attempt_minute_delete_before",
        {"age": config.keep.total_seconds(), "now": now},
        ROLLUP_DELETE_BATCH,
        on_batch,
    )
    log.debug("attempt rollup: %d minutes", written)
    return written
