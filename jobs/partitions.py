"""History in time partitions: one partition per UTC day, created ahead, dropped whole.

The history tables (``job_attempts``, ``job_effects``, ``job_history`` (the finished jobs, jobs
0021), and the scheduler's ``schedule_skips``)
are append-only and kept for a fixed age. Deleting a day of them row by row (a million rows a
day at a million reminders) leaves as many dead tuples for vacuum to clean, index entries to
prune and WAL to write; dropping the day's partition frees it at once, with none of that. So
each table is partitioned by range on its time column (native declarative partitioning, no
extension), one partition per UTC day named ``<table>_pYYYYMMDD``, plus a DEFAULT partition:

* :func:`ensure_partitions` creates the days from today to ``ahead_days`` ahead, each in a short
  transaction of its own (the built-in maintenance runs it every hour). A day's table is created
  standalone and then attached, which locks the parent in SHARE UPDATE EXCLUSIVE mode (writers
  go on), and gives up after ``lock_timeout`` rather than queue every writer behind it.
* :func:`drop_partitions` drops the days that ended before ``now - keep``: retention rounds up
  to whole days (a row is kept at most a day longer than its age). Dropping a partition takes
  an ACCESS EXCLUSIVE lock on the parent for the catalog change (a few milliseconds; the same
  ``lock_timeout`` applies).
* The DEFAULT partition takes the rows of a day that has no partition (the maintenance was not
  running), and, after migration, everything the table held before (the old table *is* the
  default partition: converting it moved no row). Retention empties it by bounded deletes, as
  before partitioning (:func:`jobs.maintenance.clean`). A day cannot be attached while the
  default partition holds rows of it: such a day is skipped and stays in the default partition.

:func:`prepare` builds, before the migration that partitions the tables (jobs 0020), the two
indexes the old tables lack, with ``CREATE INDEX CONCURRENTLY`` (no lock on writers), so that
the migration itself only renames and attaches. It does nothing on a database already migrated.

Effect records are partitioned by ``recorded_on`` (the UTC day of ``recorded_at``), so their
primary key is ``(effect_key, recorded_on)``; ``jobs/sql/job_effect.sql`` keeps a key unique
across days (a guard row near midnight, see ``job_effect_days``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from jobs.errors import InvalidJob
from jobs.queries import query

log = logging.getLogger("tockwork.partitions")

BatchSignal = Callable[[str, int], None]

LOCK_TIMEOUT = "5s"
"""How long partition DDL waits for its lock before giving up until the next run."""


@dataclass(frozen=True, slots=True)
class History:
    """A history table partitioned by day: its name, its partition key and the key's type."""

    table: str
    column: str
    kind: Literal["timestamptz", "date"]

    def partition(self, day: date) -> str:
        return f"{self.table}_p{day:%Y%m%d}"

    def bound(self, day: date) -> str:
        """The literal of the start of ``day`` in the key's type."""
        return day.isoformat() if self.kind == "date" else f"{day.isoformat()} 00:00:00+00"


ATTEMPTS = History("job_attempts", "finished_at", "timestamptz")
EFFECTS = History("job_effects", "recorded_on", "date")
FINISHED = History("job_history", "completed_at", "timestamptz")
TABLES = (ATTEMPTS, EFFECTS, FINISHED)
"""The jobs component's partitioned history (the scheduler declares ``schedule_skips``)."""

_DAY = re.compile(r"_p(\d{8})$")


def _today(conn: psycopg.Connection[Any], now: datetime | None) -> datetime:
    if now is None:
        with conn.transaction():
            row = conn.execute(query("pg_partition_now")).fetchone()
        assert row is not None
        now = row[0]
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise InvalidJob("now", now, "must be an aware datetime")
    return now.astimezone(UTC)


def partitions(conn: psycopg.Connection[Any], table: History) -> list[date]:
    """The days of ``table`` that have a partition, oldest first."""
    with conn.transaction():
        rows = conn.execute(query("pg_partition_list"), {"parent": table.table}).fetchall()
    days = []
    for (name,) in rows:
        found = _DAY.search(name)
        if found and name == table.partition(datetime.strptime(found.group(1), "%Y%m%d").date()):
            days.append(datetime.strptime(found.group(1), "%Y%m%d").date())
    return sorted(days)


def _ddl(name: str, table: History, day: date) -> sql.Composed:
    return sql.SQL(query(name)).format(
        parent=sql.Identifier(table.table),
        partition=sql.Identifier(table.partition(day)),
        start=sql.Literal(table.bound(day)),
        stop=sql.Literal(table.bound(day + timedelta(days=1))),
    )


def ensure_partitions(
    conn: psycopg.Connection[Any],
    table: History,
    *,
    ahead_days: int = 7,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> list[date]:
    """Create the missing day partitions of ``table`` from today (UTC) to ``ahead_days`` ahead;
    the days created.

    Each day is its own transaction (``conn`` must not be inside one). A day whose rows already
    sit in the default partition, or whose lock is not granted within :data:`LOCK_TIMEOUT`, is
    skipped (logged; the next run tries again). ``on_batch`` is called with
    ``("partition_created", 1)`` per day created.
    """
    if (
        isinstance(ahead_days, bool)
        or not isinstance(ahead_days, int)
        or not 0 <= ahead_days <= 366
    ):
        raise InvalidJob("ahead_days", ahead_days, "must be an integer from 0 to 366")
    today = _today(conn, now).date()
    have = set(partitions(conn, table))
    created: list[date] = []
    for offset in range(ahead_days + 1):
        day = today + timedelta(days=offset)
        if day in have:
            continue
        try:
            with conn.transaction():
                conn.execute(query("pg_set_local_lock_timeout"), {"timeout": LOCK_TIMEOUT})
                conn.execute(_ddl("pg_partition_create", table, day))
                conn.execute(_ddl("pg_partition_attach", table, day))
        except pg_errors.CheckViolation:
            log.warning("%s: %s stays in the default partition (it holds rows of that day)",
                        table.table, day)  # fmt: skip
            continue
        except pg_errors.LockNotAvailable:
            log.warning("%s: the partition of %s waits for the next run (lock timeout)",
                        table.table, day)  # fmt: skip
            continue
        created.append(day)
        if on_batch is not None:
            on_batch("partition_created", 1)
    if created:
        log.info("%s: created the partitions of %s", table.table, [d.isoformat() for d in created])
    return created


def drop_partitions(
    conn: psycopg.Connection[Any],
    table: History,
    *,
    keep: timedelta,
    now: datetime | None = None,
    on_batch: BatchSignal | None = None,
) -> int:
    """Drop the day partitions of ``table`` whose day ended before ``now - keep``; the rows they
    held. Each day is its own transaction (``conn`` must not be inside one); a day whose lock
    is not granted within :data:`LOCK_TIMEOUT` waits for the next run. ``on_batch`` is called
    with ``(kind, rows)`` per day dropped, ``kind`` being ``"<table>_partition"``."""
    if not isinstance(keep, timedelta) or keep < timedelta(0):
        raise InvalidJob("keep", keep, "must be a timedelta >= 0")
    cutoff = _today(conn, now) - keep
    total = 0
    for day in partitions(conn, table):
        stop = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        if stop > cutoff:
            break
        try:
            with conn.transaction():
                conn.execute(query("pg_set_local_lock_timeout"), {"timeout": LOCK_TIMEOUT})
                row = conn.execute(_ddl("pg_partition_count", table, day)).fetchone()
                conn.execute(_ddl("pg_partition_drop", table, day))
        except pg_errors.LockNotAvailable:
            log.warning("%s: dropping %s waits for the next run (lock timeout)", table.table, day)
            continue
        rows = int(row[0]) if row else 0
        total += rows
        if on_batch is not None:
            on_batch(f"{table.table}_partition", rows)
        log.info("%s: dropped the partition of %s (%d rows)", table.table, day, rows)
    return total


def prepare(conn: psycopg.Connection[Any]) -> list[str]:
    """Before migrating to partitioned history (jobs 0020) on a large database: build the
    indexes the migration would otherwise build inside its transaction, concurrently (writers
    go on); the statements run. ``conn`` must be in autocommit mode. Nothing on a database whose
    history is already partitioned, so it is safe to run again."""
    if not conn.autocommit:
        raise InvalidJob("conn", "not autocommit", "prepare() needs an autocommit connection")
    row = conn.execute(query("pg_relation_kind"), {"name": ATTEMPTS.table}).fetchone()
    if row is None or row[0] != "r":
        return []
    done = []
    for name in ("job_attempt_prepare_id_index", "job_effect_prepare_day",
                 "job_effect_prepare_day_index"):  # fmt: skip
        conn.execute(query(name))
        done.append(name)
    return done
