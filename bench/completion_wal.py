"""What a completed job costs the database: WAL bytes and server CPU per job, from its outcome to
its retention (figures, not a test).

One throwaway database (``tockwork_cwal_<pid>`` on the server of
``scheduler.devdb.database_url()``, the jobs component migrated, dropped at the end). ``--jobs``
jobs (with idempotency keys unless ``--no-keys``: the scheduler's occurrences carry one) are
enqueued, then claimed and completed as a worker does (``PgJobStore.claim`` and ``complete``,
batches of ``--batch``), then retention runs (``jobs.maintenance.clean`` with the finished
jobs' age at 0, a day later), then a VACUUM of the tables it touched: the work autovacuum must do
after it (autovacuum is off for these tables, so the VACUUM does that work). Each phase: the
WAL the one writing connection's server process wrote (``pg_stat_get_backend_wal``,
PostgreSQL 18: other sessions of a shared server do not count; a CHECKPOINT first, so every
phase starts with the same full-page images to write) and that process's CPU
(``/proc/<backend pid>/stat``: the server must run on this machine), per job.

Run it on two trees to compare them (the same interpreter, ``PYTHONPATH`` naming the tree):

    PYTHONPATH=/path/to/before python -m bench.completion_wal
    python -m bench.completion_wal --jobs 20000 --no-keys
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import os
import time
from datetime import timedelta
from typing import Any, LiteralString

import psycopg
from psycopg import sql

import jobs
from jobs import maintenance
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from scheduler.devdb import database_url, throwaway_database

FLUSH: LiteralString = "SELECT pg_stat_force_next_flush()"
# This backend's own WAL (PostgreSQL 18): other sessions of a shared server do not count.
BACKEND_WAL: LiteralString = "SELECT wal_bytes FROM pg_stat_get_backend_wal(pg_backend_pid())"
# Autovacuum off for the tables measured, so that the VACUUM phase does all of that work.
LEAVES: LiteralString = """
SELECT relid::regclass::text FROM pg_partition_tree('job_attempts') WHERE isleaf
UNION ALL
SELECT relid::regclass::text FROM pg_partition_tree(to_regclass('job_history')) WHERE isleaf
UNION ALL
SELECT 'jobs'
"""
HAS_HISTORY: LiteralString = "SELECT to_regclass('job_history') IS NOT NULL"
# The tables a completion and the retention write: jobs, and job_history where it exists.
VACUUM: LiteralString = "VACUUM jobs"
VACUUM_HISTORY: LiteralString = "VACUUM jobs, job_history"
TICK = os.sysconf("SC_CLK_TCK")


def backend_wal(conn: psycopg.Connection[Any]) -> float:
    """WAL bytes this connection's server process wrote so far (its statistics flushed by the
    transaction that asks for it, read by the next)."""
    conn.execute(FLUSH)
    row = conn.execute(BACKEND_WAL).fetchone()
    assert row is not None
    return float(row[0])


def server_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds (user + system) of the server process behind ``conn``."""
    with open(f"/proc/{conn.info.backend_pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Phase:
    """WAL bytes and server CPU of what runs on ``conn`` between start() and stop()."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.wal = 0.0
        self.cpu = 0.0
        self.wall = 0.0

    def start(self) -> None:
        self._wal = backend_wal(self.conn)
        self._cpu = server_cpu(self.conn)
        self._wall = time.perf_counter()

    def stop(self) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += server_cpu(self.conn) - self._cpu
        self.wal += backend_wal(self.conn) - self._wal


def run(url: str, n: int, batch: int, keys: bool) -> dict[str, Phase]:
    with psycopg.connect(url, autocommit=True) as conn:
        maintenance.ensure_partitions(conn, ahead_days=2)
        for (table,) in conn.execute(LEAVES).fetchall():
            conn.execute(
                sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
                    sql.Identifier(table)
                )
            )
        with conn.transaction():
            jobs.enqueue_many(
                conn,
                [
                    jobs.JobSpec("noop", {"i": i}, idempotency_key=f"occ:{i}" if keys else None)
                    for i in range(n)
                ],
            )
        conn.execute("VACUUM ANALYZE jobs")
        history = (conn.execute(HAS_HISTORY).fetchone() or (False,))[0]
        store = PgJobStore(conn)
        complete, retention, vacuum = Phase(conn), Phase(conn), Phase(conn)
        conn.execute("CHECKPOINT")
        done = 0
        while done < n:
            claimed = store.claim({"default": batch}, "bench", timedelta(minutes=5), None)
            if not claimed:
                break
            started = claimed[0].created_at
            complete.start()
            store.complete([Finished(j, SUCCEEDED, started, 1.0) for j in claimed], "bench", None)
            complete.stop()
            done += len(claimed)
        row = conn.execute("SELECT now() + interval '1 day'").fetchone()
        assert row is not None
        config = maintenance.RetentionConfig(
            finished_retention=timedelta(0),
            attempt_retention=timedelta(days=30),
            effect_retention=timedelta(days=30),
        )
        conn.execute("CHECKPOINT")
        retention.start()
        counts = maintenance.clean(conn, config, now=row[0])
        retention.stop()
        assert counts["jobs"] == done, (counts, done)
        conn.execute("CHECKPOINT")
        vacuum.start()
        conn.execute(VACUUM_HISTORY if history else VACUUM)
        vacuum.stop()
    return {"complete": complete, "retention": retention, "vacuum": vacuum}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs completed")
    parser.add_argument("--batch", type=int, default=100, help="jobs per claim and completion")
    parser.add_argument("--no-keys", action="store_true", help="jobs without idempotency keys")
    parser.add_argument("--quick", action="store_true", help="a smoke run (tiny sizes)")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.batch = 500, 50
    name = f"tockwork_cwal_{os.getpid()}"
    with throwaway_database(database_url(), name, components=("jobs",)) as url:
        phases = run(url, args.jobs, args.batch, not args.no_keys)
    n = args.jobs
    print(f"{n:,} jobs, completions of {args.batch}, idempotency keys: {not args.no_keys}"
          f" (tree: {Path(jobs.__file__).resolve().parents[1]})")  # fmt: skip
    print(f"{'phase':<10} {'WAL B/job':>10} {'server CPU us/job':>18} {'wall us/job':>12}")
    for label, p in phases.items():
        print(f"{label:<10} {p.wal / n:>10.0f} {p.cpu * 1e6 / n:>18.1f} {p.wall * 1e6 / n:>12.1f}")
    total_wal = sum(p.wal for p in phases.values())
    total_cpu = sum(p.cpu for p in phases.values())
    print(f"{'total':<10} {total_wal / n:>10.0f} {total_cpu * 1e6 / n:>18.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
