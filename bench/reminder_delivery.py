"""Reminder delivery benchmark (issue 9): a herd of reminders due at one instant, end to end.

Everything runs in one throwaway database (``tockwork_delivery_<pid>``, created on the server of
``scheduler.devdb.database_url()`` with every migration component, dropped at the end), with the
real commands and the library's defaults:

1. **Herd, no jitter.** 2 ``tockwork scheduler`` replicas (no flags: default lookahead, batch
   size, interval) and 2 ``tockwork worker --app scheduler.delivery:simulated_app --queue
   reminders=16`` processes start first, as a user's would be running when reminders come due;
   then ``--size`` daily reminders (``daily@HH:MM:SS`` in 300 zones, the local time of one
   instant ``T`` in each zone) are created with ``scheduler.create_schedules``, ``T`` being far
   enough ahead for the creation and the enqueue (:func:`herd_lead`). Reported: the enqueue
   rate and when the herd was all in the table (relative to ``T``), deliveries/s, the time from
   ``T`` to the last delivery, lateness p50/p95/p99 (delivery against the nominal occurrence),
   duplicates (two deliveries of one occurrence or one job; must be 0), dead jobs, and a
   timeline by due time (:func:`timeline`: how far ahead each job was inserted, when its
   handler started and when it was delivered, against its run_at; the backlog).
2. **Raw pipeline.** The delivered jobs are put back to pending and 2 processes do the same
   reads and writes in batched SQL with no library: claim 100 (``FOR UPDATE SKIP LOCKED``, with a
   lease), read their schedules in one query, insert the effect rows and the push rows with
   ``unnest``, complete the jobs and write their attempt rows. Library / raw is the headline.
3. **Herd, 300 s of jitter.** The same herd again, fresh, with ``jitter`` 300: lateness is
   measured against each job's jittered ``run_at``.

After the figures, the writes of each phase per delivered reminder (issue 22): WAL bytes (the
server's, and this database's by relation with ``pg_walinspect``), rows inserted, updated (HOT)
and deleted per table, index entries, and the CPU of the phase's server backends
(:class:`Meter`; bench/README.md says how each is taken).

Delivery times are the ``simulated_pushes.delivered_at`` stamps the provider writes, so polling
(which only decides when a run is over) does not enter the figures. The bench waits on database
state (counts, with a timeout), never on fixed sleeps.

Figures, not a test: ``python -m bench.reminder_delivery [--quick | --size N] [--jitter-only]
[--help]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds queue.py, which would shadow the standard library's ``queue`` (multiprocessing
# imports it) if this folder came first on sys.path: put the repository root there instead.
_BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH_DIR]
sys.path.insert(0, str(_BENCH_DIR.parent))

import argparse  # noqa: E402
import bisect  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from _queue import Empty  # noqa: E402  (queue.Empty; bench/queue.py shadows queue for mypy)
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from multiprocessing.queues import Queue as MpQueue  # noqa: E402
from multiprocessing.synchronize import Event as MpEvent  # noqa: E402
from typing import Any, LiteralString  # noqa: E402

import psycopg  # noqa: E402

import scheduler  # noqa: E402
from scheduler import devdb  # noqa: E402
from scheduler.cli import build_parser  # noqa: E402
from scheduler.devdb import database_url  # noqa: E402
from scheduler.migrations import ALL_COMPONENTS  # noqa: E402
from timezones import available_zones, get_zone, next_after, parse_rule  # noqa: E402

CTX = multiprocessing.get_context("spawn")

QUEUE = "reminders"
JOB_TYPE = "reminder"  # what scheduler.delivery.simulated_app handles
APP = "scheduler.delivery:simulated_app"
ZONE_COUNT = 300
CHUNK = 5000  # schedules per create_schedules call (one transaction each)
STARTUP = 15.0  # seconds allowed for the processes to start
ENQUEUE_RATE_FLOOR = 5000.0  # occurrences/s the 2 replicas enqueue at the least (for the lead)
TARGET_RATIO = 0.8  # issue 22: the library at >= 80% of the raw pipeline's rate
TARGET_HERD_SECONDS = 180.0
TARGET_HERD_SIZE = 1_000_000
TARGET_JITTER_P99 = 2.0
METER_LEAD = 8.0  # seconds before T at which a herd's write figures begin (vacuum, checkpoint)

# -- SQL (the bench's own: progress, figures, and the raw pipeline) ------------------------------

RESET: LiteralString = (
    "TRUNCATE schedules, schedule_skips, jobs, job_history, job_attempts, job_effects,"
    " simulated_pushes"
    " RESTART IDENTITY"
)
VACUUM: LiteralString = (
    "VACUUM ANALYZE schedules, jobs, job_attempts, job_effects, simulated_pushes"
)
CHECKPOINT: LiteralString = "CHECKPOINT"
MAX_JOB_ID: LiteralString = "SELECT coalesce(max(id), 0) FROM jobs_all"
PUSHES_INSERTED: LiteralString = (
    "SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables WHERE relname = 'simulated_pushes'"
)
COUNT_JOBS: LiteralString = "SELECT count(*) FROM jobs_all"
COUNT_DELIVERED: LiteralString = "SELECT count(*) FROM simulated_pushes"
# Whether any job is unfinished: since jobs 0021 a finished job leaves jobs for job_history, so
# only jobs is read, and through its partial indexes (jobs_ready_idx, jobs_leased_idx) as
# index-only scans: not a scan of every row (whose first read after a checkpoint sets hint bits
# and, with data checksums, writes a full-page image the phase would be charged for). Scalar
# subqueries with ORDER BY ... LIMIT 1, not EXISTS: the planner drops an EXISTS's ORDER BY and,
# with the statistics of the herd still pending, chose a sequential scan of jobs for it.
UNFINISHED: LiteralString = """
SELECT (SELECT id FROM jobs WHERE queue = 'reminders' AND status IN ('pending', 'retrying')
        ORDER BY priority DESC, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT locked_until FROM jobs WHERE status = 'leased' ORDER BY locked_until LIMIT 1)
       IS NOT NULL
"""
STATUSES: LiteralString = "SELECT status, count(*) FROM jobs_all GROUP BY 1 ORDER BY 1"
DELIVERY_SPAN: LiteralString = """
SELECT count(*), min(delivered_at), max(delivered_at) FROM simulated_pushes
"""
# A push row's job: the simulated channel leaves simulated_pushes.job_id and occurrence_at NULL
# (it sends messages, not jobs); the delivery records the same effect key with the job's id in
# job_effects, and the job's payload holds the nominal occurrence (the raw pipeline writes both).
# Lateness of each delivery against the nominal occurrence and against its job's run_at
# (jittered; a retried job's run_at moves, so only first attempts count for that one).
LATENESS: LiteralString = """
SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM p.delivered_at - o.at)::float8),
       max(extract(epoch FROM p.delivered_at - o.at)::float8),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM p.delivered_at - j.run_at)::float8)
           FILTER (WHERE j.attempts = 1),
       max(extract(epoch FROM p.delivered_at - j.run_at)::float8) FILTER (WHERE j.attempts = 1)
FROM simulated_pushes AS p
JOIN job_effects AS e ON e.effect_key = p.effect_key
JOIN jobs_all AS j ON j.id = e.job_id
CROSS JOIN LATERAL (SELECT coalesce(p.occurrence_at,
                                    (j.payload -> 'tockwork_schedule' ->> 'at')::timestamptz)
                    AS at) AS o
"""
DUPLICATES: LiteralString = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs_all
            GROUP BY payload -> 'tockwork_schedule' ->> 'id',
                     payload -> 'tockwork_schedule' ->> 'occurrence'
            HAVING count(*) > 1) AS d),
       (SELECT count(*) FROM (SELECT 1 FROM simulated_pushes
            GROUP BY schedule_id, occurrence_key HAVING count(*) > 1) AS d),
       (SELECT count(*) FROM (SELECT 1 FROM simulated_pushes AS p
            JOIN job_effects AS e ON e.effect_key = p.effect_key
            GROUP BY e.job_id HAVING count(*) > 1) AS d)
"""
# One row per delivered job (first attempt only): when it was due, started and delivered.
TIMELINE_ROWS: LiteralString = """
SELECT j.id, extract(epoch FROM j.run_at - %(due)s)::float8,
       extract(epoch FROM a.started_at - %(due)s)::float8,
       extract(epoch FROM p.delivered_at - %(due)s)::float8
FROM simulated_pushes AS p
JOIN job_effects AS e ON e.effect_key = p.effect_key
JOIN jobs_all AS j ON j.id = e.job_id
JOIN job_attempts AS a ON a.job_id = j.id AND a.attempt = 1
WHERE j.attempts = 1
"""
ATTEMPTS: LiteralString = "SELECT outcome, count(*) FROM job_attempts GROUP BY 1 ORDER BY 1"
# The delivered herd left jobs for job_history (jobs 0021): back into jobs first.
UNFINISH: LiteralString = """
WITH back AS (
    DELETE FROM job_history
    RETURNING id, organization_id, queue, job_type, payload, idempotency_key, status, priority,
              run_at, attempts, max_attempts, locked_at, locked_by, locked_until, lease_token,
              last_error_code, last_error_summary, completed_at, created_at, claim_id,
              started_token, unstarted_expiries, concurrency_key, trace_parent, trace_state,
              unique_key, heartbeat_at, expires_at
)
INSERT INTO jobs (id, organization_id, queue, job_type, payload, idempotency_key, status,
                  priority, run_at, attempts, max_attempts, locked_at, locked_by, locked_until,
                  lease_token, last_error_code, last_error_summary, completed_at, created_at,
                  claim_id, started_token, unstarted_expiries, concurrency_key, trace_parent,
                  trace_state, unique_key, heartbeat_at, expires_at)
SELECT * FROM back
"""
# Put the delivered herd back to pending (for the raw pipeline, or for the library's workers
# again): same rows, same indexes, due now (the workers are stopped until the phase starts).
REQUEUE: LiteralString = """
UPDATE jobs SET status = 'pending', attempts = 0, run_at = now(), locked_at = NULL,
                locked_by = NULL, locked_until = NULL, completed_at = NULL, last_error_code = NULL,
                last_error_summary = NULL, claim_id = NULL, started_token = NULL,
                unstarted_expiries = 0, heartbeat_at = NULL
"""
RAW_TRUNCATE: LiteralString = "TRUNCATE job_attempts, job_effects, simulated_pushes"

RAW_CLAIM: LiteralString = """
UPDATE jobs AS j
SET status = 'leased', attempts = j.attempts + 1, locked_at = now(), locked_by = %(worker)s,
    locked_until = now() + interval '30 seconds', lease_token = j.lease_token + 1
WHERE j.id = ANY(ARRAY(
    SELECT id FROM jobs
    WHERE queue = 'reminders' AND status IN ('pending', 'retrying') AND run_at <= now()
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
))
RETURNING j.id, j.lease_token, j.attempts, j.job_type, j.idempotency_key, j.payload, j.locked_at
"""
RAW_SCHEDULES: LiteralString = """
SELECT id, paused, version, quiet_start, quiet_end, quiet_action, zone
FROM schedules WHERE id = ANY(%(ids)b::bigint[])
"""
# Effect-once records, then the push rows for the keys that were new, in one statement (the
# raw baseline checks the key within its day only: job_effects is partitioned by day).
RAW_EFFECTS_AND_PUSHES: LiteralString = """
WITH input AS (
    SELECT * FROM unnest(%(keys)b::text[], %(job_ids)b::bigint[], %(schedule_ids)b::bigint[],
                         %(occurrences)b::text[], %(ats)b::timestamptz[], %(subjects)b::text[],
                         %(messages)b::text[], %(attempts)b::int[])
         AS t(effect_key, job_id, schedule_id, occurrence_key, occurrence_at, subject, message,
              attempt)
),
recorded AS (
    INSERT INTO job_effects (effect_key, job_id)
    SELECT effect_key, job_id FROM input
    ON CONFLICT (effect_key, recorded_on) DO NOTHING
    RETURNING effect_key
)
INSERT INTO simulated_pushes (effect_key, job_id, schedule_id, occurrence_key, occurrence_at,
                              subject, message, attempt)
SELECT i.effect_key, i.job_id, i.schedule_id, i.occurrence_key, i.occurrence_at, i.subject,
       i.message, i.attempt
FROM input AS i JOIN recorded AS r ON r.effect_key = i.effect_key
"""
RAW_COMPLETE: LiteralString = """
WITH input AS (
    SELECT * FROM unnest(%(ids)b::bigint[], %(tokens)b::bigint[], %(attempts)b::int[],
                         %(started)b::timestamptz[])
         AS t(id, token, attempt, started_at)
),
ended AS (
    -- The same writes as the library's completion (jobs 0021): the finished row leaves jobs
    -- for job_history.
    DELETE FROM jobs AS j
    USING input AS i
    -- ANY(ids) as well as the join: a primary-key probe, not a hash join over the table.
    WHERE j.id = ANY(%(ids)b::bigint[]) AND j.id = i.id AND j.lease_token = i.token
    RETURNING j.id, j.organization_id, j.queue, j.job_type, j.payload, j.idempotency_key,
              'succeeded'::text, j.priority, j.run_at, j.attempts, j.max_attempts,
              NULL::timestamptz, NULL::text, NULL::timestamptz, j.lease_token + 1,
              j.last_error_code, j.last_error_summary, now(), j.created_at, j.claim_id,
              j.started_token, 0::smallint, j.concurrency_key, j.trace_parent, j.trace_state,
              j.unique_key, j.heartbeat_at, j.expires_at
),
updated AS (
    INSERT INTO job_history (id, organization_id, queue, job_type, payload, idempotency_key,
                             status, priority, run_at, attempts, max_attempts, locked_at,
                             locked_by, locked_until, lease_token, last_error_code,
                             last_error_summary, completed_at, created_at, claim_id,
                             started_token, unstarted_expiries, concurrency_key, trace_parent,
                             trace_state, unique_key, heartbeat_at, expires_at)
    SELECT * FROM ended
    RETURNING id
)
INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                          outcome, duration_ms)
SELECT i.id, i.attempt, 'reminders', 'reminder', %(worker)s, i.started_at, now(),
       CASE WHEN u.id IS NULL THEN 'fenced' ELSE 'succeeded' END, 0
FROM input AS i LEFT JOIN updated AS u ON u.id = i.id
"""
SERVER: LiteralString = (
    "SELECT current_setting('server_version'), current_setting('fsync'), "
    "current_setting('synchronous_commit')"
)


# -- writes per delivery (issue 22) ---------------------------------------------------------------
# What a phase wrote, read before and after it: the WAL position of the server (every database
# on it: a shared server's other work is in it too), and this database's row counters. PG15+
# backends flush their counters lazily (at most once a second when idle, and when they exit):
# the bench flushes its own (pg_stat_force_next_flush) and reads after the phase's processes
# have exited, in a fresh snapshot (pg_stat_clear_snapshot).
WRITE_TABLES = (
    "jobs",
    "job_attempts",
    "job_effects",
    "simulated_pushes",
    "schedules",
    "schedule_skips",
)
STATS_FLUSH: LiteralString = "SELECT pg_stat_force_next_flush()"
STATS_CLEAR: LiteralString = "SELECT pg_stat_clear_snapshot()"
# The insert position, not pg_current_wal_lsn() (the write position): with asynchronous commit
# the last commits of a phase may still be only in the WAL buffers when it ends.
WAL_LSN: LiteralString = "SELECT pg_current_wal_insert_lsn()::text"
WAL_FLUSHED: LiteralString = "SELECT pg_current_wal_flush_lsn() >= %(lsn)s::text::pg_lsn"
# The phase's backends: this database's client backends but the bench's own (the meter's and
# the progress poller's: their CPU is reported apart), and of the phase's processes only when
# ``app`` (an application_name pattern) is given.
BACKENDS: LiteralString = """
SELECT pid FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND pid <> ALL(%(exclude)s::int[])
  AND (%(app)s::text IS NULL OR application_name LIKE %(app)s::text)
"""
# The server's clock and WAL insert position at one poll of a timed phase (no table read).
SAMPLE: LiteralString = """
SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text,
       (SELECT redo_lsn::text FROM pg_control_checkpoint())
"""
# Client backends of the library's workers not idle outside a transaction (before they are
# stopped for the raw pipeline's phase: none may hold a lock or a snapshot then).
WORKERS_BUSY: LiteralString = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'tockwork-bench-worker%%'
  AND state <> 'idle'
"""
# The redo position of the last checkpoint: changed between a phase's start and end when a
# checkpoint (the server's, for any database's WAL) began during the phase, after which the
# first change of each page logs a full-page image again (those FPIs are chance, not the phase's).
REDO_LSN: LiteralString = "SELECT redo_lsn::text FROM pg_control_checkpoint()"
WAL_DIFF: LiteralString = "SELECT pg_wal_lsn_diff(%(end)s::text::pg_lsn, %(start)s::text::pg_lsn)"
TABLE_COUNTERS: LiteralString = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
FROM pg_stat_all_tables WHERE relname = ANY(%(tables)s::text[]) AND schemaname = 'public'
"""
# Each table's indexes, and whether each is partial or a BRIN (whose insert writes nothing
# unless the block range's summary widens).
TABLE_INDEXES: LiteralString = """
SELECT t.relname, i.relname, x.indpred IS NOT NULL, am.amname
FROM pg_index AS x
JOIN pg_class AS t ON t.oid = x.indrelid
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN pg_am AS am ON am.oid = i.relam
WHERE t.relname = ANY(%(tables)s::text[]) AND t.relnamespace = 'public'::regnamespace
ORDER BY 1, 2
"""
# pg_walinspect (contrib), when the server has it: this database's WAL records between two
# positions by relation (the relation of each record's first block) and kind, with the
# full-page images. Leaf index entries are the B-tree INSERT_LEAF / INSERT_POST records and
# the leaf splits (a split logs the inserted entry itself).
WALINSPECT: LiteralString = "CREATE EXTENSION IF NOT EXISTS pg_walinspect"
WALINSPECT_AVAILABLE: LiteralString = (
    "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_walinspect')"
)
# A temporary physical slot keeps the server from recycling the phase's WAL before it is read
# (a busy shared server keeps only a few segments); it goes with the session that made it.
WAL_SLOT: LiteralString = "SELECT pg_create_physical_replication_slot(%(name)s, true, true)"
WAL_BY_RELATION: LiteralString = """
WITH blocks AS (
    SELECT start_lsn, block_id, reltablespace, relfilenode, resource_manager, record_type,
           record_length, coalesce(block_fpi_length, 0) AS fpi, description
    FROM pg_get_wal_block_info(%(start)s::text::pg_lsn, %(end)s::text::pg_lsn, false)
    WHERE reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
),
records AS (
    SELECT DISTINCT ON (start_lsn) start_lsn, reltablespace, relfilenode, resource_manager,
           record_type, record_length, description,
           sum(fpi) OVER (PARTITION BY start_lsn) AS fpi
    FROM blocks
    ORDER BY start_lsn, block_id
)
SELECT coalesce(pg_filenode_relation(
                    CASE WHEN reltablespace = (SELECT oid FROM pg_tablespace
                                               WHERE spcname = 'pg_default')
                         THEN 0 ELSE reltablespace END, relfilenode)::regclass::text,
                'filenode ' || relfilenode::text) AS relation,
       count(*) AS records,
       sum(record_length)::bigint AS bytes,
       sum(fpi)::bigint AS fpi,
       count(*) FILTER (WHERE resource_manager = 'Btree'
                          AND (record_type IN ('INSERT_LEAF', 'INSERT_POST')
                               OR (record_type IN ('SPLIT_L', 'SPLIT_R')
                                   AND description LIKE 'level: 0%%'))) AS leaf_entries,
       count(*) FILTER (WHERE resource_manager IN ('Heap', 'Heap2')
                          AND record_type IN ('INSERT', 'INSERT+INIT')) AS heap_inserts,
       count(*) FILTER (WHERE resource_manager = 'Heap2'
                          AND record_type IN ('MULTI_INSERT', 'MULTI_INSERT+INIT'))
           AS multi_inserts,
       count(*) FILTER (WHERE resource_manager = 'Heap'
                          AND record_type IN ('UPDATE', 'UPDATE+INIT')) AS updates,
       count(*) FILTER (WHERE resource_manager = 'Heap'
                          AND record_type IN ('HOT_UPDATE', 'HOT_UPDATE+INIT')) AS hot_updates,
       count(*) FILTER (WHERE resource_manager = 'Heap' AND record_type = 'DELETE') AS deletes,
       count(*) FILTER (WHERE resource_manager = 'Heap' AND record_type = 'LOCK') AS locks,
       -- full-page images by cause: a hint bit set by a read (data checksums), and pruning,
       -- vacuum and the visibility map (autovacuum, or a read's page pruning)
       coalesce(sum(fpi) FILTER (WHERE resource_manager = 'XLOG'
                                   AND record_type = 'FPI_FOR_HINT'), 0)::bigint AS fpi_hint,
       coalesce(sum(fpi) FILTER (WHERE resource_manager = 'Heap2'
                                   AND record_type NOT LIKE 'MULTI_INSERT%%'
                                   AND record_type NOT IN ('NEW_CID', 'LOCK_UPDATED',
                                                           'REWRITE')), 0)::bigint
           AS fpi_prune
FROM records
GROUP BY 1
ORDER BY 3 DESC
"""


@dataclass
class Sample:
    """One poll of a timed phase: the server's clock, its WAL insert position, CPU seconds."""

    clock: datetime
    lsn: str
    backends: dict[int, float]  # the phase's server backends, by pid
    workers: float  # the phase's client processes (the library's workers or the raw loops)
    probe: float  # the bench's own backends
    redo: str = ""  # the last checkpoint's redo position


@dataclass
class WriteMark:
    """What the server had written when a phase began (or ended)."""

    lsn: str
    tables: dict[str, tuple[int, int, int, int]]  # ins, upd, hot upd, del
    redo: str = ""  # the last checkpoint's redo position (pg_control_checkpoint)


@dataclass
class Writes:
    """What one phase wrote, per delivered reminder (figures) and in total (counts)."""

    deliveries: int = 0
    wal_bytes: int = 0  # the server's (pg_wal_lsn_diff), every database on it
    tables: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    indexes: dict[str, list[tuple[str, bool, str]]] = field(default_factory=dict)
    # this database's WAL by relation (pg_walinspect): records, bytes, fpi bytes, leaf index
    # entries, heap inserts, multi inserts, updates, hot updates, deletes, locks, fpi bytes of
    # hint bits (FPI_FOR_HINT), fpi bytes of pruning and vacuum (Heap2)
    wal: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # CPU seconds of the phase's server backends (this database's, /proc: a local server only)
    server_cpu: float = math.nan
    # CPU seconds of the phase's workers over the phase (not their start-up and idle wait)
    worker_cpu: float = math.nan
    # CPU seconds of the bench's own backends over the phase (the progress poller's probes and
    # the meter's marks): the bench's, not the phase's, so not in server_cpu
    probe_cpu: float = math.nan
    checkpointed: bool = False  # a checkpoint began during the phase (see REDO_LSN)
    notes: list[str] = field(default_factory=list)

    def per(self, value: float) -> float:
        return value / self.deliveries if self.deliveries else math.nan

    @property
    def db_wal_bytes(self) -> int:
        return sum(v[1] for v in self.wal.values())

    @property
    def db_fpi_bytes(self) -> int:
        return sum(v[2] for v in self.wal.values())

    def index_entries_bound(self, table: str) -> int:
        """Inserts and non-HOT updates times the table's indexes: an upper bound (a partial
        index takes only the rows of its predicate, a BRIN range rarely changes)."""
        ins, upd, hot, _ = self.tables.get(table, (0, 0, 0, 0))
        return (ins + upd - hot) * len(self.indexes.get(table, []))


def _counters(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int, int, int]]:
    conn.execute(STATS_FLUSH)
    conn.execute(STATS_CLEAR)
    rows = conn.execute(TABLE_COUNTERS, {"tables": list(WRITE_TABLES)}).fetchall()
    return {str(r[0]): (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows}


def write_mark(conn: psycopg.Connection[Any]) -> WriteMark:
    """The server's WAL position and this database's row counters now (own counters flushed)."""
    tables = _counters(conn)
    row = conn.execute(WAL_LSN).fetchone()
    assert row is not None
    return WriteMark(str(row[0]), tables, redo_lsn(conn))


def redo_lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute(REDO_LSN).fetchone()
    return "" if row is None else str(row[0])


def start_wal_keeping(conn: psycopg.Connection[Any]) -> bool:
    """Make pg_walinspect usable on this session, and keep the WAL from now on (a temporary
    slot of this session): False when the server has no pg_walinspect."""
    row = conn.execute(WALINSPECT_AVAILABLE).fetchone()
    if row is None or not row[0]:
        return False
    conn.execute(WALINSPECT)
    # No slot to be had (wal_level minimal, none free): the WAL is read unkept.
    with contextlib.suppress(psycopg.Error):
        conn.execute(WAL_SLOT, {"name": f"tockwork_delivery_{os.getpid()}_{id(conn)}"})
    return True


def writes_between(
    conn: psycopg.Connection[Any],
    start: WriteMark,
    end_lsn: str,
    deliveries: int,
    *,
    expect_updates: int,
    walinspect: bool,
    timeout: float = 30.0,
) -> Writes:
    """What was written from ``start`` to ``end_lsn``, counters read once the phase's backends
    have flushed theirs (jobs' updates reach ``expect_updates``, or ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        tables = _counters(conn)
        upd = tables.get("jobs", (0, 0, 0, 0))[1] - start.tables.get("jobs", (0, 0, 0, 0))[1]
        pushes = (
            tables.get("simulated_pushes", (0, 0, 0, 0))[0]
            - start.tables.get("simulated_pushes", (0, 0, 0, 0))[0]
        )
        if (upd >= expect_updates and pushes >= deliveries) or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # waiting on the counters' flush (a condition, with a timeout)
    result = Writes(deliveries)
    if upd < expect_updates or pushes < deliveries:
        result.notes.append(
            f"counters short: jobs {upd:,} updates of {expect_updates:,}, simulated_pushes "
            f"{pushes:,} inserts of {deliveries:,} seen"
        )
    for name, now_counts in tables.items():
        before = start.tables.get(name, (0, 0, 0, 0))
        result.tables[name] = tuple(a - b for a, b in zip(now_counts, before, strict=True))  # type: ignore[assignment]
    for table, index, partial, method in conn.execute(
        TABLE_INDEXES, {"tables": list(WRITE_TABLES)}
    ).fetchall():
        result.indexes.setdefault(str(table), []).append((str(index), bool(partial), str(method)))
    row = conn.execute(WAL_DIFF, {"start": start.lsn, "end": end_lsn}).fetchone()
    assert row is not None
    result.wal_bytes = int(row[0])
    if walinspect:
        while True:
            flushed = conn.execute(WAL_FLUSHED, {"lsn": end_lsn}).fetchone()
            if (flushed is not None and flushed[0]) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        try:
            rows = conn.execute(WAL_BY_RELATION, {"start": start.lsn, "end": end_lsn}).fetchall()
        except psycopg.Error as exc:  # e.g. the range recycled where no slot kept it
            result.notes.append(f"no WAL by relation: {exc}".splitlines()[0])
        else:
            result.wal = {str(r[0]): tuple(int(v) for v in r[1:]) for r in rows}
    return result


def _f(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.2f}"


def _hint(w: Writes, v: tuple[int, ...]) -> str:
    """A relation's full-page images of hint bits and of pruning/vacuum, a delivery."""
    return f"{_f(w.per(v[10]))}, {_f(w.per(v[11]))}" if len(v) > 11 else "-"


def describe_writes(phases: list[tuple[str, Writes]]) -> list[str]:
    """The writes of the phases side by side, per delivered reminder."""
    names = [name for name, _ in phases]
    lines: list[tuple[str, list[str]]] = [
        ("deliveries measured", [f"{w.deliveries:,}" for _, w in phases]),
        ("WAL bytes, server (pg_current_wal_lsn)", [_f(w.per(w.wal_bytes)) for _, w in phases]),
        (
            "server CPU us (this database's backends)",
            [_f(w.per(w.server_cpu * 1e6)) for _, w in phases],
        ),
        (
            "workers' CPU us (the phase only)",
            [_f(w.per(w.worker_cpu * 1e6)) for _, w in phases],
        ),
        (
            "the bench's probes' backend CPU us (not above)",
            [_f(w.per(w.probe_cpu * 1e6)) for _, w in phases],
        ),
    ]
    if any(w.wal for _, w in phases):
        lines.append(
            (
                "WAL bytes, this database (walinspect)",
                [_f(w.per(w.db_wal_bytes)) for _, w in phases],
            )
        )
        lines.append(
            ("  of which full-page images", [_f(w.per(w.db_fpi_bytes)) for _, w in phases])
        )
        lines.append(
            (
                "    of hint bits (a read's), of pruning/vacuum",
                [
                    _hint(w, (0,) * 10 + tuple(sum(v[k] for v in w.wal.values()) for k in (10, 11)))
                    for _, w in phases
                ],
            )
        )
        lines.append(
            (
                "WAL records, this database",
                [_f(w.per(sum(v[0] for v in w.wal.values()))) for _, w in phases],
            )
        )
    tables = sorted({t for _, w in phases for t in w.tables})
    for table in tables:
        counts = [w.tables.get(table, (0, 0, 0, 0)) for _, w in phases]
        if not any(any(c) for c in counts):
            continue
        lines.append(
            (
                f"{table}: rows ins / upd (hot) / del",
                [
                    f"{_f(w.per(c[0]))} / {_f(w.per(c[1]))} ({_f(w.per(c[2]))}) / {_f(w.per(c[3]))}"
                    for (_, w), c in zip(phases, counts, strict=True)
                ],
            )
        )
        lines.append(
            (
                f"{table}: index entries <= (ins + non-HOT upd) x indexes",
                [
                    f"{_f(w.per(w.index_entries_bound(table)))} ({len(w.indexes.get(table, []))})"
                    for _, w in phases
                ],
            )
        )
    if any(w.wal for _, w in phases):
        relations = sorted(
            {r for _, w in phases for r in w.wal},
            key=lambda r: -max(w.wal.get(r, (0, 0))[1] for _, w in phases),
        )
        for rel in relations:
            counts_ = [w.wal.get(rel, (0,) * 12) for _, w in phases]
            if max(w.per(v[1]) for (_, w), v in zip(phases, counts_, strict=True)) < 1.0:
                continue
            lines.append(
                (
                    f"WAL {rel}: bytes (fpi: hint, prune/vacuum); leaf entries",
                    [
                        f"{_f(w.per(v[1]))} ({_f(w.per(v[2]))}: {_hint(w, v)}); {_f(w.per(v[3]))}"
                        for (_, w), v in zip(phases, counts_, strict=True)
                    ],
                )
            )
    width = max(len(label) for label, _ in lines)
    cols = [max(len(n), *(len(v[i]) for _, v in lines)) for i, n in enumerate(names)]
    out = [
        "      writes per delivered reminder".ljust(width + 6)
        + "  "
        + "  ".join(n.rjust(c) for n, c in zip(names, cols, strict=True))
    ]
    for label, values in lines:
        out.append(
            "      "
            + label.ljust(width)
            + "  "
            + "  ".join(v.rjust(c) for v, c in zip(values, cols, strict=True))
        )
    for name, w in phases:
        out.extend(f"      note ({name}): {n}" for n in w.notes)
    return out


class Meter:
    """The write figures of one phase: :meth:`begin` when its work is all in the table and none
    delivered yet, :meth:`end` when the last is delivered, :meth:`writes` once its processes
    have exited. Holds its own connection (and the temporary WAL slot) for the phase."""

    def __init__(self, url: str, app: str | None = None) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.walinspect = start_wal_keeping(self.conn)
        self.app = app  # the phase's backends' application_name pattern (None: all)
        # the bench's own backends (the meter's and the poller's): CPU reported apart
        self.probes: set[int] = {self.conn.info.backend_pid}
        self.probe_start = 0.0
        self.probe_end = math.nan
        self.start: WriteMark | None = None
        self.end_lsn: str | None = None
        self.end_redo = ""
        self.notes: list[str] = []
        self.cpu_start: dict[int, float] = {}
        self.cpu_end: dict[int, float] = {}
        self.extra_server_cpu = 0.0  # backends that reported their own (the raw pipeline's)
        # the workers' CPU seconds at begin and end (Processes.cpu), or reported (raw)
        self.worker_cpu_start = math.nan
        self.worker_cpu = math.nan

    def backend_cpu(self) -> dict[int, float]:
        """CPU seconds of this database's other client backends, by pid (none if the server's
        processes are not visible here)."""
        rows = self.conn.execute(
            BACKENDS, {"exclude": sorted(self.probes), "app": self.app}
        ).fetchall()
        return {pid: cpu for (pid,) in rows if (cpu := backend_seconds(int(pid))) is not None}

    def probe_cpu(self) -> float:
        return sum(backend_seconds(pid) or 0.0 for pid in self.probes)

    def sample(self, workers: float) -> Sample:
        """The server's clock and WAL position, the CPU of the phase's backends and of the
        bench's own, and ``workers`` (the phase's processes' CPU seconds), now."""
        row = self.conn.execute(SAMPLE).fetchone()
        assert row is not None
        return Sample(
            row[0], str(row[1]), self.backend_cpu(), workers, self.probe_cpu(), str(row[2])
        )

    def counters(self) -> dict[str, tuple[int, int, int, int]]:
        return _counters(self.conn)

    def begin(self, *, jobs_inserted: int | None = None, timeout: float = 30.0) -> None:
        """Vacuum and checkpoint (each phase then starts from pages in the same state, the hint
        bits set and no full-page image written yet: the raw phase's start), wait for the
        counters of ``jobs_inserted`` inserts into jobs to be flushed, and mark."""
        self.conn.execute(VACUUM)
        self.conn.execute(CHECKPOINT)
        deadline = time.monotonic() + timeout
        while jobs_inserted is not None and time.monotonic() < deadline:
            if self.counters().get("jobs", (0, 0, 0, 0))[0] >= jobs_inserted:
                break
            time.sleep(0.05)  # waiting on the replicas' counters (a condition, with a timeout)
        self.start = write_mark(self.conn)
        self.cpu_start = self.backend_cpu()
        self.probe_start = self.probe_cpu()

    def end(self) -> None:
        row = self.conn.execute(WAL_LSN).fetchone()
        assert row is not None
        self.end_lsn = str(row[0])
        self.end_redo = redo_lsn(self.conn)
        self.cpu_end = self.backend_cpu()
        self.probe_end = self.probe_cpu()

    def between(self, start: Sample, end: Sample) -> None:
        """A timed phase's figures from two of its samples (see :func:`timed_phase`)."""
        self.cpu_start, self.cpu_end = start.backends, end.backends
        self.probe_start, self.probe_end = start.probe, end.probe
        self.worker_cpu = end.workers - start.workers
        self.end_lsn = end.lsn
        self.end_redo = end.redo

    def server_cpu(self) -> float:
        """The phase's server CPU: what its backends alive at the end used since the start
        (a backend that exited before the end is missed: the raw pipeline's report theirs)."""
        if not self.cpu_end and not self.extra_server_cpu:
            return math.nan
        used = sum(cpu - self.cpu_start.get(pid, 0.0) for pid, cpu in self.cpu_end.items())
        return used + self.extra_server_cpu

    def writes(self, deliveries: int, expect_updates: int | None = None) -> Writes | None:
        """The phase's figures; the row counters once jobs' updates reach ``expect_updates``
        (default: one a delivery, the claim: the completion moves the row to job_history)."""
        if self.start is None or self.end_lsn is None:
            return None
        result = writes_between(
            self.conn,
            self.start,
            self.end_lsn,
            deliveries,
            expect_updates=deliveries if expect_updates is None else expect_updates,
            walinspect=self.walinspect,
        )
        result.notes[:0] = self.notes
        if self.start.redo != self.end_redo:
            result.checkpointed = True
            result.notes.append(
                "a checkpoint began during the phase: part of its full-page images are chance"
            )
        result.server_cpu = self.server_cpu()
        result.worker_cpu = self.worker_cpu
        result.probe_cpu = self.probe_end - self.probe_start
        return result

    def close(self) -> None:
        self.conn.close()


# -- the herd -------------------------------------------------------------------------------------


def percent(value: float) -> str:
    return f"{value:.0%}"


def herd_zones(due: datetime, count: int = ZONE_COUNT) -> list[tuple[str, str]]:
    """``count`` zones spread over the zone list, each with the rule text that fires at ``due``.

    A zone whose ``daily@HH:MM:SS`` would not fire exactly at ``due`` (a transition today) is
    passed over for the next one.
    """
    names = sorted(z for z in available_zones() if z not in ("Factory", "localtime"))
    spread = [names[i * len(names) // count] for i in range(count)]
    chosen = set(spread)
    created = due - timedelta(hours=1)
    picked: list[tuple[str, str]] = []
    for name in spread + [z for z in names if z not in chosen]:
        rule = f"daily@{due.astimezone(get_zone(name)):%H:%M:%S}"
        occ = next_after(parse_rule(rule), name, created)
        if occ is not None and occ.at == due:
            picked.append((name, rule))
            if len(picked) == count:
                break
    if len(picked) < count:
        raise RuntimeError(f"only {len(picked)} zones fire at {due:%H:%M}Z")
    return picked


def schedule_items(n: int, zones: list[tuple[str, str]], jitter: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i in range(n):
        zone, rule = zones[i % len(zones)]
        items.append(
            {
                "job_type": JOB_TYPE,
                "rule": rule,
                "zone": zone,
                "subject": f"user-{i}",
                "queue": QUEUE,
                "jitter": jitter,
                "payload": {"subject": f"user-{i}", "message": "time to stretch"},
            }
        )
    return items


def create(url: str, items: list[dict[str, Any]]) -> float:
    """Create the schedules through the API in chunks; return the seconds it took."""
    start = time.perf_counter()
    with psycopg.connect(url) as conn:
        for k in range(0, len(items), CHUNK):
            with conn.transaction():
                scheduler.create_schedules(conn, items[k : k + CHUNK])
    return time.perf_counter() - start


def creation_rate(url: str) -> float:
    """Schedules per second through the API, from a small sample (then removed)."""
    sample = 2000
    due = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    seconds = create(url, schedule_items(sample, herd_zones(due, 50), 0))
    reset(url)
    return sample / seconds


def replica_lookahead(scheduler_args: list[str]) -> float:
    """The lookahead ``tockwork scheduler`` uses with these arguments (none: its default)."""
    value = build_parser().parse_args(["scheduler", *scheduler_args]).lookahead
    return value.total_seconds() if isinstance(value, timedelta) else 60.0


def reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RESET)
        conn.execute(VACUUM)


def tockwork_command() -> list[str]:
    """The installed ``tockwork`` script beside this interpreter, else ``python -m``."""
    script = Path(sys.executable).with_name("tockwork")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "scheduler.cli"]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process, from /proc (0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def backend_seconds(pid: int) -> float | None:
    """:func:`cpu_seconds` of a server backend, None where /proc does not show it (a remote
    server, or another user's processes)."""
    if not os.path.exists(f"/proc/{pid}/stat"):
        return None
    return cpu_seconds(pid)


@dataclass
class Processes:
    """The scheduler replicas and workers of one run, with their logs in ``folder``."""

    folder: Path
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        # application_name tockwork-bench-<name>: the phase's backends, found by it (libpq).
        env = {**env, "PGAPPNAME": f"tockwork-bench-{name}"}
        proc = subprocess.Popen(
            [*tockwork_command(), *args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        self.procs.append((name, proc))

    def check(self) -> None:
        for name, proc in self.procs:
            if proc.poll() is not None:
                tail = (self.folder / f"{name}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")

    def cpu(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for name, proc in self.procs:
            kind = name.rstrip("0123456789")
            totals[kind] = totals.get(kind, 0.0) + cpu_seconds(proc.pid)
        return totals

    def signal(self, kind: str, sig: int) -> None:
        for name, proc in self.procs:
            if name.rstrip("0123456789") == kind and proc.poll() is None:
                proc.send_signal(sig)

    def pause_workers(self, conn: psycopg.Connection[Any], timeout: float = 30.0) -> None:
        """Stop the workers (SIGSTOP) while they are idle outside a transaction, so that they
        neither claim the jobs put back for the raw pipeline nor hold a lock or a snapshot."""
        deadline = time.monotonic() + timeout
        while True:
            self.signal("worker", signal.SIGSTOP)
            row = conn.execute(WORKERS_BUSY).fetchone()
            if row is not None and int(row[0]) == 0:
                return
            self.signal("worker", signal.SIGCONT)
            if time.monotonic() > deadline:
                raise RuntimeError("the workers were never all idle to be paused")
            time.sleep(0.02)  # a worker was mid-statement: let it finish and try again

    def stop(self, kind: str | None = None) -> None:
        """SIGTERM the processes (of one ``kind``: "worker", "scheduler"), and wait."""
        chosen = [(n, p) for n, p in self.procs if kind is None or n.rstrip("0123456789") == kind]
        for _, proc in chosen:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # a paused worker would not handle SIGTERM
                proc.send_signal(signal.SIGTERM)
        for _, proc in chosen:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.procs = [(n, p) for n, p in self.procs if (n, p) not in chosen]


@dataclass
class Progress:
    """What the poller saw: when the first job and the whole herd were in the table."""

    first_job: float | None = None  # perf_counter, interpolated between two polls
    all_jobs: float | None = None
    done: bool = False
    # (perf_counter, max(jobs.id)) at each poll: ids are allocated in insert order, so these
    # date each job's insert within one poll interval (the timeline's "inserted").
    samples: list[tuple[float, int]] = field(default_factory=list)


def wait_for_delivery(
    url: str,
    n: int,
    due: datetime,
    timeout: float,
    procs: Processes,
    poll: float = 0.1,
    meter: Meter | None = None,
    jobs_inserted: int | None = None,
) -> Progress:
    """Poll until the herd is enqueued and delivered (or ``timeout`` s after ``due``).

    Cheap probes every ``poll`` s (``max(id)`` of jobs until the herd is all in, then the
    server's insert counter of ``simulated_pushes``); whether any job is unfinished
    (:data:`UNFINISHED`, a few index pages) only when the counter says all are delivered, or
    every 5 s. ``meter`` begins when the herd is all in the table (``jobs_inserted``: the jobs
    insert counter to wait for) and ends at the last delivery; the poller's backend is one of
    its probes (its CPU reported apart from the server's).
    """
    progress = Progress()
    deadline = time.monotonic() + (due - datetime.now(UTC)).total_seconds() + timeout
    last_exact = 0.0
    previous = time.perf_counter()
    next_report = time.monotonic()
    max_id = 0
    with psycopg.connect(url, autocommit=True) as conn:
        if meter is not None:
            meter.probes.add(conn.info.backend_pid)
        base_row = conn.execute(PUSHES_INSERTED).fetchone()
        base = int(base_row[0]) if base_row else 0
        while True:
            now = time.perf_counter()
            if progress.all_jobs is None:  # after that no id is allocated
                max_row = conn.execute(MAX_JOB_ID).fetchone()
                max_id = int(max_row[0]) if max_row else 0
            if max_id and (not progress.samples or max_id != progress.samples[-1][1]):
                progress.samples.append(((previous + now) / 2, max_id))
            if progress.first_job is None and max_id > 0:
                progress.first_job = (previous + now) / 2
            if progress.all_jobs is None and max_id >= n:
                count_row = conn.execute(COUNT_JOBS).fetchone()
                if count_row is not None and int(count_row[0]) >= n:
                    progress.all_jobs = (previous + now) / 2
            if (
                meter is not None
                and meter.start is None
                and progress.all_jobs is not None
                and (due - datetime.now(UTC)).total_seconds() <= METER_LEAD
            ):
                # Close to T, so that no checkpoint of the server's other work falls between
                # the mark and the delivery (full-page images that are not the phase's own).
                meter.begin(jobs_inserted=jobs_inserted)
                meter.worker_cpu_start = procs.cpu().get("worker", math.nan)
                row = conn.execute(COUNT_DELIVERED).fetchone()
                if row is not None and int(row[0]):
                    meter.notes.append(
                        f"{int(row[0]):,} delivered before the mark (the herd was enqueued "
                        "late, or the mark was): the figures miss their writes"
                    )
            pushed_row = conn.execute(PUSHES_INSERTED).fetchone()
            pushed = (int(pushed_row[0]) if pushed_row else 0) - base
            if progress.all_jobs is not None and (
                pushed >= n or time.monotonic() - last_exact > 5.0
            ):
                last_exact = time.monotonic()
                unfinished = conn.execute(UNFINISHED).fetchone()
                if unfinished is not None and not unfinished[0]:
                    progress.done = True
                    if meter is not None:
                        meter.end()
                        meter.worker_cpu = (
                            procs.cpu().get("worker", math.nan) - meter.worker_cpu_start
                        )
                    return progress
            if time.monotonic() >= next_report:
                to_go = (due - datetime.now(UTC)).total_seconds()
                print(
                    f"    [T{'-' if to_go > 0 else '+'}{abs(to_go):4.0f}s] "
                    f"enqueued ~{max_id:>9,}  delivered ~{max(pushed, 0):>9,}",
                    flush=True,
                )
                next_report = time.monotonic() + 5.0
                procs.check()
            if time.monotonic() > deadline:
                return progress
            previous = now
            time.sleep(poll)


@dataclass
class HerdResult:
    name: str
    n: int
    jitter: int
    create_seconds: float = 0.0
    enqueue_rate: float = math.nan
    enqueued_at: float = math.nan  # seconds relative to the due instant (negative: before)
    delivered: int = 0
    first_delivery: float = math.nan  # relative to the due instant
    last_delivery: float = math.nan
    rate: float = math.nan
    nominal: tuple[float, float, float, float] = (math.nan,) * 4  # p50, p95, p99, max
    run_at: tuple[float, float, float, float] = (math.nan,) * 4
    duplicates: tuple[int, int, int] = (0, 0, 0)  # jobs, occurrences, per job
    statuses: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    completed: bool = False
    timeline: list[str] = field(default_factory=list)
    writes: Writes | None = None

    @property
    def duplicate_count(self) -> int:
        return sum(self.duplicates)


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``values`` (nearest rank; NaN for none)."""
    if not values:
        return math.nan
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


def timeline(
    rows: list[tuple[int, float, float, float]],
    inserts: list[tuple[float, int]],
    buckets: int = 12,
) -> list[str]:
    """Where the lateness of a herd comes from, in buckets of due time (relative to T).

    ``rows`` are (job id, run_at, handler start, delivery), ``inserts`` (time, max job id) at
    each poll, all in seconds relative to T. A job's insert time is the first poll that saw its
    id (ids are allocated in insert order). Per bucket of run_at: jobs, how late the insert was
    against run_at (negative: ahead), how late the handler started and the delivery was
    (p50/p99), and the backlog (due and not yet delivered) at the bucket's end.
    """
    if not rows:
        return []
    times = [t for t, _ in inserts]
    ids = [i for _, i in inserts]
    low = min(r[1] for r in rows)
    high = max(r[1] for r in rows)
    width = max((high - low) / buckets, 1.0)
    last = max(0, math.ceil((high - low) / width) - 1)  # the latest run_at in the last bucket
    groups: dict[int, list[tuple[float, float, float]]] = {}
    for job_id, run_at, started, delivered in rows:
        seen = bisect.bisect_left(ids, job_id)
        inserted = times[seen] if seen < len(times) else math.nan
        k = min(int((run_at - low) // width), last)
        groups.setdefault(k, []).append((inserted - run_at, started - run_at, delivered - run_at))
    deliveries = sorted(r[3] for r in rows)
    due_times = sorted(r[1] for r in rows)
    lines = [
        "      timeline by due time (s vs T): jobs; insert - run_at p50/max; "
        "start - run_at p50/p99; delivery - run_at p50/p99; backlog at the end"
    ]
    for k in sorted(groups):
        values = groups[k]
        ins = sorted(v[0] for v in values)
        start = sorted(v[1] for v in values)
        late = sorted(v[2] for v in values)
        end = low + (k + 1) * width
        backlog = bisect.bisect_right(due_times, end) - bisect.bisect_right(deliveries, end)
        lines.append(
            f"        [{low + k * width:+7.1f}, {end:+7.1f}) {len(values):>8,}; "
            f"{_quantile(ins, 0.5):+7.1f}/{ins[-1]:+7.1f}; "
            f"{_quantile(start, 0.5):6.2f}/{_quantile(start, 0.99):6.2f}; "
            f"{_quantile(late, 0.5):6.2f}/{_quantile(late, 0.99):6.2f}; {max(backlog, 0):>8,}"
        )
    return lines


def measure(conn: psycopg.Connection[Any], result: HerdResult, due: datetime) -> None:
    """Fill ``result`` from the tables (delivery stamps, lateness, duplicates, statuses)."""
    span = conn.execute(DELIVERY_SPAN).fetchone()
    assert span is not None
    result.delivered = int(span[0])
    if span[1] is not None:
        result.first_delivery = (span[1] - due).total_seconds()
        result.last_delivery = (span[2] - due).total_seconds()
        seconds = (span[2] - span[1]).total_seconds()
        result.rate = result.delivered / seconds if seconds > 0 else math.nan
    late = conn.execute(LATENESS).fetchone()
    if late is not None and late[0] is not None:
        result.nominal = (*late[0], late[1])
        if late[2] is not None:
            result.run_at = (*late[2], late[3])
    dup = conn.execute(DUPLICATES).fetchone()
    assert dup is not None
    result.duplicates = (int(dup[0]), int(dup[1]), int(dup[2]))
    result.statuses = {s: int(c) for s, c in conn.execute(STATUSES).fetchall()}
    result.attempts = {o: int(c) for o, c in conn.execute(ATTEMPTS).fetchall()}


def herd_lead(size: int, rate: float) -> float:
    """Seconds from now to the due instant of a herd of ``size`` created at ``rate``/s.

    The replicas and workers are up first (as a user's would be when reminders come due), then
    the schedules are created: the lead covers the start, the creation (at half the sampled
    rate: the replicas enqueue while it runs) and the enqueueing of what was created last.
    """
    return STARTUP + 2.0 * size / rate + max(60.0, size / ENQUEUE_RATE_FLOOR)


def run_herd(
    url: str, args: argparse.Namespace, jitter: int, logs: Path, *, keep_workers: bool = False
) -> tuple[HerdResult, Processes | None]:
    """One fresh herd of ``args.size`` reminders delivered by the real commands; with
    ``keep_workers``, the workers are left running but paused (the replicas stopped), and
    returned for the requeued pairs (the caller stops them)."""
    name = f"herd, jitter {jitter} s"
    result = HerdResult(name, args.size, jitter)
    reset(url)
    rate = creation_rate(url)
    lookahead = replica_lookahead(args.scheduler_args)
    due = (datetime.now(UTC) + timedelta(seconds=herd_lead(args.size, rate))).replace(microsecond=0)
    zones = herd_zones(due)
    items = schedule_items(args.size, zones, jitter)
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    for var in ("TOCKWORK_SIM_TRANSIENT", "TOCKWORK_SIM_RATE_LIMIT"):
        env.pop(var, None)  # no injected failures
    procs = Processes(logs)
    kept = False
    meter = Meter(url)
    jobs_inserted = meter.counters().get("jobs", (0, 0, 0, 0))[0] + args.size
    try:
        for i in range(2):
            # The herd alone: no built-in maintenance in the figures (issue 26 made it default).
            procs.start(
                f"scheduler{i}", ["scheduler", "--no-maintenance", *args.scheduler_args], env
            )
        for i in range(2):
            procs.start(
                f"worker{i}", ["worker", "--app", APP, "--no-maintenance", *args.worker_args], env
            )
        print(
            f"  {name}: started 2 replicas (lookahead {lookahead:g}s, adaptive) and 2 workers "
            f"({' '.join(args.worker_args)}); creating {args.size:,} reminders in {len(zones)} "
            f"zones due at {due:%H:%M:%S}Z (e.g. {zones[0][1]} in {zones[0][0]}) at about "
            f"{rate:,.0f}/s ...",
            flush=True,
        )
        result.create_seconds = create(url, items)
        del items
        ahead = (due - datetime.now(UTC)).total_seconds()
        print(f"    created in {result.create_seconds:.1f}s; T-{ahead:.0f}s", flush=True)
        if ahead < 0:
            print(f"    warning: the schedules were all created only at T+{-ahead:.0f}s")
        procs.check()
        timeout = args.timeout if args.timeout else 600.0 + args.size / 500.0 + jitter
        progress = wait_for_delivery(
            url, args.size, due, timeout, procs, meter=meter, jobs_inserted=jobs_inserted
        )
        result.cpu = procs.cpu()
        kept = keep_workers and progress.done
    finally:
        if kept:
            procs.stop("scheduler")
        else:
            procs.stop()

    result.completed = progress.done
    # perf_counter of the polls -> seconds relative to the due instant.
    offset = time.perf_counter() - (datetime.now(UTC) - due).total_seconds()
    if progress.first_job is not None and progress.all_jobs is not None:
        span = progress.all_jobs - progress.first_job
        result.enqueue_rate = args.size / span if span > 0 else math.nan
        result.enqueued_at = progress.all_jobs - offset
    with psycopg.connect(url, autocommit=True) as conn:
        if kept:
            procs.pause_workers(conn)
        measure(conn, result, due)
        rows = conn.execute(TIMELINE_ROWS, {"due": due}).fetchall()
    try:
        result.writes = meter.writes(result.delivered)
    finally:
        meter.close()
    result.timeline = timeline(
        [(int(r[0]), r[1], r[2], r[3]) for r in rows],
        [(t - offset, i) for t, i in progress.samples],
    )
    del rows
    print(describe(result), flush=True)
    return result, procs if kept else None


def describe(r: HerdResult) -> str:
    head = (
        f"    {r.name}: {'done' if r.completed else 'TIMED OUT'}; delivered {r.delivered:,} "
        f"of {r.n:,}; jobs {r.statuses}; attempts {r.attempts}"
    )
    duplicates = (
        f"      duplicates: jobs per occurrence {r.duplicates[0]}, deliveries per occurrence "
        f"{r.duplicates[1]}, deliveries per job {r.duplicates[2]}; CPU "
        + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(r.cpu.items()))
    )
    if not r.create_seconds:  # a requeued herd: no schedules created, no due instant
        span = r.last_delivery - r.first_delivery
        return f"{head}\n      deliveries {r.rate:,.0f}/s over {span:.2f}s\n{duplicates}"
    return "\n".join(
        (
            head,
            f"      schedules created in {r.create_seconds:.1f}s "
            f"({r.n / r.create_seconds:,.0f}/s via create_schedules)",
            f"      enqueue {r.enqueue_rate:,.0f}/s, all in the table at T{r.enqueued_at:+.1f}s; "
            f"deliveries {r.rate:,.0f}/s from T{r.first_delivery:+.1f}s "
            f"to T{r.last_delivery:+.1f}s",
            "      lateness vs nominal p50/p95/p99/max "
            + "/".join(f"{v:.2f}" for v in r.nominal)
            + " s; vs run_at "
            + "/".join(f"{v:.2f}" for v in r.run_at)
            + " s",
            duplicates,
            *r.timeline,
        )
    )


# -- the raw pipeline ---------------------------------------------------------------------------


def _raw_child(
    url: str, batch: int, ready: MpQueue[Any], go: MpEvent, out: MpQueue[Any], stop: MpEvent
) -> None:
    worker = f"raw:{os.getpid()}"
    done = 0
    with psycopg.connect(url, application_name="tockwork-bench-raw") as conn:
        backend = conn.info.backend_pid
        ready.put(os.getpid())
        go.wait()
        cpu0 = time.process_time()
        server0 = backend_seconds(backend)
        while True:
            with conn.transaction():
                rows = conn.execute(RAW_CLAIM, {"worker": worker, "limit": batch}).fetchall()
            if not rows:
                break
            metas = [r[5]["tockwork_schedule"] for r in rows]
            with conn.transaction():
                found = {
                    s[0]: s
                    for s in conn.execute(
                        RAW_SCHEDULES, {"ids": [int(m["id"]) for m in metas]}
                    ).fetchall()
                }
            # Still due: the schedule exists, is not paused, and is the version that enqueued.
            due = [
                (r, m)
                for r, m in zip(rows, metas, strict=True)
                if (s := found.get(int(m["id"]))) is not None and not s[1] and s[2] == m["version"]
            ]
            with conn.transaction():
                conn.execute(
                    RAW_EFFECTS_AND_PUSHES,
                    {
                        "keys": [f"push:{r[3]}:-:{r[4]}" for r, _ in due],
                        "job_ids": [r[0] for r, _ in due],
                        "schedule_ids": [int(m["id"]) for _, m in due],
                        "occurrences": [m["occurrence"] for _, m in due],
                        "ats": [datetime.fromisoformat(m["at"]) for _, m in due],
                        "subjects": [r[5].get("subject") for r, _ in due],
                        "messages": [str(r[5].get("message", "reminder")) for r, _ in due],
                        "attempts": [r[2] for r, _ in due],
                    },
                )
                conn.execute(
                    RAW_COMPLETE,
                    {
                        "ids": [r[0] for r in rows],
                        "tokens": [r[1] for r in rows],
                        "attempts": [r[2] for r in rows],
                        "started": [r[6] for r in rows],
                        "worker": worker,
                    },
                )
            done += len(rows)
        server1 = backend_seconds(backend)
        server = math.nan if server0 is None or server1 is None else server1 - server0
        out.put(
            {"pid": os.getpid(), "done": done, "cpu": time.process_time() - cpu0, "server": server}
        )
        # Alive, idle, until the phase's figures are read: its backend's CPU with the others'.
        stop.wait(600)


def _get(source: MpQueue[Any], children: list[Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return source.get(timeout=0.1)
        except Empty:
            if any(c.exitcode not in (None, 0) for c in children):
                raise RuntimeError("a raw pipeline process failed (traceback above)") from None
            if time.monotonic() > deadline:
                raise


def requeue(url: str) -> None:
    """The delivered herd back to pending and due, its attempts, effects and pushes gone."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(UNFINISH)
        conn.execute(REQUEUE)
        conn.execute(RAW_TRUNCATE)


def timed_phase(
    meter: Meter,
    workers_cpu: Callable[[], float],
    start: Callable[[], None],
    finished: Callable[[psycopg.Connection[Any]], bool],
    timeout: float,
    poll: float = 0.1,
) -> bool:
    """One delivery of the requeued herd, measured alike for the library and the raw pipeline.

    The jobs are all due and the phase's processes ready but held (the library's workers
    stopped, the raw loops waiting on their start event): vacuum and checkpoint, a first
    sample, ``start()``; then a sample every ``poll`` s (the server's clock and WAL insert
    position, the CPU of the phase's backends, of its processes and of the bench's own backend:
    /proc and two functions, no table read) until ``finished`` (the phase's own end). The
    phase's figures run from the first sample to the first one taken at or after its last
    delivery (``simulated_pushes.delivered_at``, the same clock): neither side is charged for
    the wait after its last delivery, nor for how the bench learns that it is over. False when
    ``timeout`` s passed first.
    """
    meter.begin()
    samples = [meter.sample(workers_cpu())]
    start()
    deadline = time.monotonic() + timeout
    done = False
    while not done and time.monotonic() < deadline:
        time.sleep(poll)  # the poll interval of the samples (the end is a condition)
        samples.append(meter.sample(workers_cpu()))
        done = finished(meter.conn)
    span = meter.conn.execute(DELIVERY_SPAN).fetchone()
    meter.between(samples[0], phase_end(samples, span[2] if span is not None else None))
    return done


def phase_end(samples: list[Sample], last_delivery: datetime | None) -> Sample:
    """The first sample taken at or after the last delivery (the last sample if none was, or
    nothing was delivered)."""
    if last_delivery is not None:
        for sample in samples:
            if sample.clock >= last_delivery:
                return sample
    return samples[-1]


def run_raw(url: str, n: int, processes: int, batch: int, due: datetime) -> HerdResult:
    """The herd's jobs again, delivered by ``processes`` raw batched-SQL loops."""
    result = HerdResult(f"raw batched SQL x{processes}", n, 0)
    requeue(url)
    meter = Meter(url, app="tockwork-bench-raw")
    ready: MpQueue[Any] = CTX.Queue()
    out: MpQueue[Any] = CTX.Queue()
    go = CTX.Event()
    stop = CTX.Event()
    children = [
        CTX.Process(target=_raw_child, args=(url, batch, ready, go, out, stop))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    reports: list[dict[str, Any]] = []

    def finished(_: psycopg.Connection[Any]) -> bool:
        while len(reports) < len(children):
            try:
                reports.append(out.get(timeout=0.01))
            except Empty:
                if any(c.exitcode not in (None, 0) for c in children):
                    raise RuntimeError("a raw pipeline process failed (traceback above)") from None
                return False
        return True

    try:
        for _ in children:
            _get(ready, children, 120)
        timed_phase(meter, lambda: sum(cpu_seconds(c.pid or 0) for c in children), go.set,
                    finished, 3600)  # fmt: skip
    except BaseException:
        meter.close()
        raise
    finally:
        stop.set()
        for child in children:
            child.join(30)
    result.completed = len(reports) == processes and sum(r["done"] for r in reports) == n
    result.cpu = {"raw": sum(r["cpu"] for r in reports)}
    with psycopg.connect(url, autocommit=True) as conn:
        measure(conn, result, due)
    try:
        result.writes = meter.writes(result.delivered)
    finally:
        meter.close()
    print(describe(result), flush=True)
    return result


def run_library_again(url: str, n: int, procs: Processes, due: datetime) -> HerdResult:
    """The herd's jobs again, delivered by the same running (paused) library workers."""
    result = HerdResult("library again", n, 0)
    requeue(url)
    meter = Meter(url, app="tockwork-bench-worker%")
    row = meter.conn.execute(PUSHES_INSERTED).fetchone()
    base = int(row[0]) if row else 0
    last_exact = [0.0]

    def finished(conn: psycopg.Connection[Any]) -> bool:
        # The insert counter (a backend flushes it at most once a second) says when to look;
        # the unfinished jobs (a few index pages) say whether it is over.
        pushed_row = conn.execute(PUSHES_INSERTED).fetchone()
        pushed = (int(pushed_row[0]) if pushed_row else 0) - base
        if pushed < n and time.monotonic() - last_exact[0] < 5.0:
            return False
        last_exact[0] = time.monotonic()
        unfinished = conn.execute(UNFINISHED).fetchone()
        procs.check()
        return unfinished is not None and not unfinished[0]

    try:
        result.completed = timed_phase(
            meter,
            lambda: procs.cpu().get("worker", math.nan),
            lambda: procs.signal("worker", signal.SIGCONT),
            finished,
            600.0 + n / 500.0,
        )
        procs.pause_workers(meter.conn)
        result.cpu = {"worker": meter.worker_cpu}
        with psycopg.connect(url, autocommit=True) as conn:
            measure(conn, result, due)
        result.writes = meter.writes(result.delivered)
    finally:
        meter.close()
    print(describe(result), flush=True)
    return result


@dataclass
class Pair:
    """One library phase and one raw phase on the same jobs, and the order they ran in."""

    number: int
    library: HerdResult
    raw: HerdResult
    library_first: bool

    @property
    def ratio(self) -> float:
        return self.library.rate / self.raw.rate

    @staticmethod
    def cpu_us(r: HerdResult) -> tuple[float, float]:
        """Server backends' and the phase's processes' CPU us a delivery."""
        w = r.writes
        if w is None:
            return (math.nan, math.nan)
        return (w.per(w.server_cpu * 1e6), w.per(w.worker_cpu * 1e6))

    @property
    def cpu_ratio(self) -> float:
        """Raw's CPU a delivery over the library's (server + processes): as the rate ratio,
        the library's share of the raw pipeline's efficiency."""
        return sum(self.cpu_us(self.raw)) / sum(self.cpu_us(self.library))


def median(values: list[float]) -> float:
    """The median of the values that are numbers (NaN: a figure a phase could not take)."""
    numbers = [v for v in values if not math.isnan(v)]
    return statistics.median(numbers) if numbers else math.nan


def describe_pairs(pairs: list[Pair]) -> list[str]:
    """A table of the pairs, then the medians beside the target."""

    def wal(r: HerdResult) -> str:
        w = r.writes
        if w is None:
            return "-"
        mark = "*" if w.checkpointed else ""
        if w.wal:
            return f"{w.per(w.db_wal_bytes):,.0f} ({w.per(w.db_fpi_bytes):,.0f}){mark}"
        return f"{w.per(w.wal_bytes):,.0f} (-){mark}"

    def probe(r: HerdResult) -> str:
        return "-" if r.writes is None else _f(r.writes.per(r.writes.probe_cpu * 1e6))

    lines = [
        "| pair | order | library/s | raw/s | library / raw | server CPU us, library / raw | "
        "workers' (raw loops') CPU us, library / raw | CPU ratio raw/library | "
        "WAL B (FPI B), library / raw | probes' CPU us, library / raw |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in pairs:
        (ls, lw), (rs, rw) = Pair.cpu_us(p.library), Pair.cpu_us(p.raw)
        lines.append(
            f"| {p.number}{' (herd)' if p.number == 1 else ''} | "
            f"{'library, raw' if p.library_first else 'raw, library'} | "
            f"{p.library.rate:,.0f} | {p.raw.rate:,.0f} | {percent(p.ratio)} | "
            f"{_f(ls)} / {_f(rs)} | {_f(lw)} / {_f(rw)} | {percent(p.cpu_ratio)} | "
            f"{wal(p.library)} / {wal(p.raw)} | {probe(p.library)} / {probe(p.raw)} |"
        )
    ratios = [p.ratio for p in pairs]
    cpu = [p.cpu_ratio for p in pairs]
    again = pairs[1:]
    lines.append(
        f"median library / raw {percent(median(ratios))} over {len(pairs)} pairs "
        f"({', '.join(percent(r) for r in ratios)}; spread {percent(max(ratios) - min(ratios))})"
        + (
            f", {percent(median([p.ratio for p in again]))} over the {len(again)} requeued"
            if again
            else ""
        )
        + f"; median CPU ratio {percent(median(cpu))} "
        f"({', '.join(percent(r) for r in cpu)}); target >= {percent(TARGET_RATIO)}"
    )
    if any(
        r.writes is not None and r.writes.checkpointed for p in pairs for r in (p.library, p.raw)
    ):
        lines.append(
            "* a checkpoint (the server's, any database's WAL) began during the phase: the "
            "first change of each page after it logs a full-page image again"
        )
    return lines


# -- report -------------------------------------------------------------------------------------


@dataclass
class Row:
    figure: str
    value: str
    target: str
    ok: bool | None


def print_table(rows: list[Row]) -> None:
    headers = ("figure", "value", "target", "result")
    table = [
        (r.figure, r.value, r.target, "-" if r.ok is None else ("PASS" if r.ok else "FAIL"))
        for r in rows
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    print(line)
    print("-" * len(line))
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip())


def p3(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:.2f}" for v in values[:3]) + " s"


def rows_for(
    herd: HerdResult | None,
    raw: HerdResult | None,
    jittered: HerdResult | None,
    pairs: list[Pair] | None = None,
) -> list[Row]:
    rows = [] if herd is None else herd_rows(herd, raw)
    if pairs and len(pairs) > 1:
        ratio = median([p.ratio for p in pairs])
        rows += [
            Row(
                f"median library / raw, {len(pairs)} pairs",
                percent(ratio),
                f">= {percent(TARGET_RATIO)}",
                ratio >= TARGET_RATIO,
            ),
            Row(
                "median CPU a delivery, raw / library",
                percent(median([p.cpu_ratio for p in pairs])),
                f"(>= {percent(TARGET_RATIO)} by rate)",
                None,
            ),
        ]
    if jittered is not None:
        ok = (
            jittered.completed
            and jittered.duplicate_count == 0
            and jittered.run_at[2] <= TARGET_JITTER_P99
        )
        rows += [
            Row(
                f"jitter {jittered.jitter} s: herd all in the table at",
                f"T{jittered.enqueued_at:+.1f} s",
                "-",
                None,
            ),
            Row(
                f"jitter {jittered.jitter} s: lateness vs run_at p50/p95/p99",
                p3(jittered.run_at),
                f"p99 <= {TARGET_JITTER_P99:g} s",
                ok,
            ),
            Row(
                f"jitter {jittered.jitter} s: last delivery, duplicates",
                f"T{jittered.last_delivery:+.1f} s, {jittered.duplicate_count}",
                "-, 0",
                jittered.duplicate_count == 0 and jittered.completed,
            ),
        ]
    return rows


def herd_rows(herd: HerdResult, raw: HerdResult | None) -> list[Row]:
    n = herd.n
    clean = herd.completed and herd.duplicate_count == 0 and herd.delivered == n
    rows = [
        Row("enqueue (2 replicas, defaults)", f"{herd.enqueue_rate:,.0f}/s", "-", None),
        Row(
            "herd all in the table at",
            f"T{herd.enqueued_at:+.1f} s",
            "before T",
            herd.enqueued_at < 0,
        ),
        Row("deliveries/s (2 workers)", f"{herd.rate:,.0f}/s", "-", None),
    ]
    if raw is not None:
        ratio = herd.rate / raw.rate
        rows.append(Row("raw batched SQL x2", f"{raw.rate:,.0f}/s", "-", None))
        rows.append(
            Row(
                "library / raw (the herd's pair)",
                percent(ratio),
                f">= {percent(TARGET_RATIO)}",
                ratio >= TARGET_RATIO,
            )
        )
    suffix = "" if n == TARGET_HERD_SIZE else f" (target set for {TARGET_HERD_SIZE:,})"
    rows += [
        Row(
            f"{n:,} due at T: last delivery",
            f"T{herd.last_delivery:+.1f} s",
            f"<= T+{TARGET_HERD_SECONDS:g} s{suffix}",
            clean and herd.last_delivery <= TARGET_HERD_SECONDS,
        ),
        Row("lateness vs nominal p50/p95/p99", p3(herd.nominal), "-", None),
        Row(
            "duplicates, dead",
            f"{herd.duplicate_count}, {herd.statuses.get('dead', 0)}",
            "0, 0",
            herd.duplicate_count == 0 and not herd.statuses.get("dead"),
        ),
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="reminders in the herd")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000, jitter 20 s")
    parser.add_argument("--jitter", type=int, default=300, help="jitter of the second herd (s)")
    parser.add_argument("--no-jitter-run", action="store_true", help="skip the jittered herd")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw pipeline")
    parser.add_argument(
        "--jitter-only", action="store_true", help="only the jittered herd (no plain herd, no raw)"
    )
    parser.add_argument("--raw-batch", type=int, default=100, help="raw pipeline claim size")
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="library/raw pairs: the herd's, then K-1 on the requeued jobs, the order "
        "alternated (default 3; --quick 2)",
    )
    parser.add_argument(
        "--worker-args",
        default=f"--queue {QUEUE}=16",
        help="arguments of each `tockwork worker` after --app (default: '%(default)s')",
    )
    parser.add_argument(
        "--scheduler-args", default="", help="arguments of each `tockwork scheduler` (none)"
    )
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="seconds after T before giving up a run"
    )
    args = parser.parse_args()
    if args.quick:
        args.size, args.jitter = 2000, 20
    if args.repeat is None:
        args.repeat = 2 if args.quick else 3
    if args.repeat < 1:
        print(f"reminder delivery: --repeat must be at least 1, got {args.repeat}", file=sys.stderr)
        return 2
    if args.no_raw or args.jitter_only:
        args.repeat = 1
    args.worker_args = args.worker_args.split()
    args.scheduler_args = args.scheduler_args.split()

    began = time.perf_counter()
    load_at_start = os.getloadavg()[0]
    logs = Path(tempfile.mkdtemp(prefix="tockwork-delivery-"))
    raw: HerdResult | None = None
    jittered: HerdResult | None = None
    pairs: list[Pair] = []
    name = f"tockwork_delivery_{os.getpid()}"
    with devdb.throwaway_database(database_url(), name, components=ALL_COMPONENTS) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            settings = conn.execute(SERVER).fetchone()
        assert settings is not None
        print(
            f"reminder delivery: PostgreSQL {settings[0]} (fsync={settings[1]}, "
            f"synchronous_commit={settings[2]}), {os.cpu_count()} CPUs, database {name}, "
            f"process logs in {logs}"
        )
        herd: HerdResult | None = None
        workers: Processes | None = None
        if not args.jitter_only:
            herd, workers = run_herd(url, args, 0, logs, keep_workers=args.repeat > 1)
        try:
            if herd is not None and not args.no_raw:
                print(f"  raw batched SQL x2, claim {args.raw_batch} ...", flush=True)
                due = datetime.now(UTC)  # only the span matters for the raw figures
                raw = run_raw(url, args.size, 2, args.raw_batch, due)
                pairs.append(Pair(1, herd, raw, True))
            for number in range(2, args.repeat + 1 if workers is not None else 0):
                assert workers is not None
                library_first = number % 2 == 1  # pair 1 (the herd's) ran the library first
                print(
                    f"  pair {number}: the herd requeued, "
                    + ("library then raw" if library_first else "raw then library")
                    + " ...",
                    flush=True,
                )
                due = datetime.now(UTC)
                sides: dict[str, HerdResult] = {}
                for side in ("library", "raw") if library_first else ("raw", "library"):
                    if side == "library":
                        sides[side] = run_library_again(url, args.size, workers, due)
                    else:
                        sides[side] = run_raw(url, args.size, 2, args.raw_batch, due)
                pairs.append(Pair(number, sides["library"], sides["raw"], library_first))
        finally:
            if workers is not None:
                workers.stop()
        if not args.no_jitter_run:
            jittered, _ = run_herd(url, args, args.jitter, logs)
    print()
    rows = rows_for(herd, raw, jittered, pairs)
    print_table(rows)
    if pairs:
        print(
            f"\nlibrary/raw pairs ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average "
            f"{load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} now; per delivery, "
            "each phase from its start to its last delivery; WAL this database's):"
        )
        print("\n".join(describe_pairs(pairs)))
    phases = [
        (name, r.writes)
        for name, r in (("tockwork", herd), ("raw", raw), ("tockwork jitter", jittered))
        if r is not None and r.writes is not None
    ]
    if phases:
        print()
        print("\n".join(describe_writes(phases)))
    summary = {
        "size": args.size,
        "herd": herd.__dict__ if herd else None,
        "raw": raw.__dict__ if raw else None,
        "jittered": jittered.__dict__ if jittered else None,
        "pairs": [
            {
                "pair": p.number,
                "library_first": p.library_first,
                "library_rate": p.library.rate,
                "raw_rate": p.raw.rate,
                "ratio": p.ratio,
                "cpu_us": {"library": Pair.cpu_us(p.library), "raw": Pair.cpu_us(p.raw)},
                "cpu_ratio": p.cpu_ratio,
            }
            for p in pairs
        ],
    }
    print("\njson: " + json.dumps(summary, default=str))
    print(f"total {time.perf_counter() - began:.0f}s")
    ok = all(r.ok is not False for r in rows)
    if ok:
        shutil.rmtree(logs, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
