"""Retention over a simulated week: day partitions against DELETE retention (figures, not a test).

Two throwaway databases (``tockwork_ret_<mode>_<pid>`` on the server of
``scheduler.devdb.database_url()``, migrated, dropped at the end), one per mode, run the same
simulated week, day by day in turn (a run cut short still compares the modes), at
``--per-day`` reminders a day (default 1,000,000), time compressed with an injected clock
(every statement is given the simulated instant), retention ``--retention-days`` (default 3)
for everything (finished jobs, attempts, effect records, skips):

* ``partitions``: the built-in maintenance as in production: ``tockwork.partitions``
  (:func:`scheduler.maintenance.ensure_partitions`, two days ahead) before each day, and
  ``tockwork.retention`` (:func:`scheduler.maintenance.retention`) after it, which drops the
  expired days of the history tables whole; a finished job leaves ``jobs`` for ``job_history``
  as it completes (jobs 0021);
* ``delete``: the same retention without day partitions: every history row lands in the default
  partition, a plain table, and retention deletes it in bounded batches, and finished jobs stay
  in ``jobs`` until retention deletes them: the DELETE retention of the release before
  partitioning (the same statements, on the same table shape).

Each day writes, per reminder: a job (inserted pending and completed in bulk: in ``partitions``
mode moved to ``job_history`` as the completion does, in ``delete`` mode updated to succeeded
in ``jobs`` as completions did before; the claim's update is not simulated), an attempt row,
an effect record through the library's own statement (``jobs.effects.record_many``, batches of 1,000
keys: NOT EXISTS over every day partition and the midnight guard row included), and one skip
per ten reminders. After the day: the retention (timed), the dead tuples it left, a VACUUM of
the four tables (timed: the work autovacuum must do to keep up, run here so that it is measured
in the compressed time; the server's own autovacuum also runs and its time is reported where
PostgreSQL 18 counts it), the tables' and their indexes' sizes, and ``--claims`` claim + complete
cycles of 10 jobs from a live backlog (p50 and p99 of each: the completion writes the attempt
rows into the partitioned table). The issue's target: sizes and claim latency flat from day 4 on
with partitions.

    python -m bench.retention                      # a week at 1,000,000 a day (long)
    python -m bench.retention --per-day 200000     # the figures of docs/performance.md
    python -m bench.retention --quick              # the smoke run
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a module or a script: the repository root first on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import logging
import os
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg

from jobs import effects
from jobs.retry import SUCCEEDED
from jobs.store import Finished, PgJobStore
from scheduler import maintenance
from scheduler.devdb import database_url, throwaway_database
from scheduler.migrations import COMPONENTS

START = datetime(2026, 1, 5, tzinfo=UTC)
RECORD_BATCH = 1000
MODES = ("delete", "partitions")
FILL_CHUNK = 200_000

# Ad-hoc fill statements (a benchmark's fixture, not the library's SQL).
FILL_JOBS: LiteralString = """
INSERT INTO jobs (queue, job_type, payload, status, run_at, created_at, attempts)
SELECT 'reminders', 'reminder', jsonb_build_object('n', g), 'pending', t.at, t.at, 1
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS g
CROSS JOIN LATERAL (SELECT %(day)s::timestamptz
                           + (g::float8 / %(n)s) * interval '1 day' AS at) AS t
"""
COMPLETE_JOBS: LiteralString = """
UPDATE jobs SET status = 'succeeded', completed_at = run_at + interval '2 seconds'
WHERE queue = 'reminders' AND status = 'pending'
"""
# What job_complete does to a job that succeeds since jobs 0021: out of jobs, into job_history.
MOVE_JOBS: LiteralString = """
WITH ended AS (
    DELETE FROM jobs WHERE queue = 'reminders' AND status = 'pending'
    RETURNING id, organization_id, queue, job_type, payload, idempotency_key, 'succeeded'::text,
              priority, run_at, attempts, max_attempts, locked_at, locked_by, locked_until,
              lease_token, last_error_code, last_error_summary, run_at + interval '2 seconds',
              created_at, claim_id, started_token, unstarted_expiries, concurrency_key,
              trace_parent, trace_state, unique_key, heartbeat_at, expires_at
)
INSERT INTO job_history SELECT * FROM ended
"""
FILL_ATTEMPTS: LiteralString = """
INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                          outcome, duration_ms)
SELECT g, 1, 'reminders', 'reminder', 'w', t.at, t.at + interval '40 ms', 'succeeded', 40
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS g
CROSS JOIN LATERAL (SELECT %(day)s::timestamptz
                           + ((g - %(base)s)::float8 / %(n)s) * interval '1 day' AS at) AS t
"""
FILL_SKIPS: LiteralString = """
INSERT INTO schedule_skips (schedule_id, occurrence_key, occurrence_at, kind, recorded_at)
SELECT g, 'o' || g, t.at, 'skipped', t.at
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1, 10) AS g
CROSS JOIN LATERAL (SELECT %(day)s::timestamptz
                           + ((g - %(base)s)::float8 / %(n)s) * interval '1 day' AS at) AS t
"""
FILL_BACKLOG: LiteralString = """
INSERT INTO jobs (queue, job_type, payload, run_at)
SELECT 'live', 'reminder', '{}', %(at)s FROM generate_series(1, %(n)s)
"""
RESET_BACKLOG: LiteralString = """
UPDATE jobs SET status = 'pending', attempts = 0, completed_at = NULL
WHERE queue = 'live' AND status <> 'pending'
"""
TABLES = ("jobs", "job_history", "job_attempts", "job_effects", "schedule_skips")
# Sizes and dead tuples of a table and its partitions (all of them, the default one included).
# (pg_partition_tree lists nothing for a plain table: jobs.)
STATS: LiteralString = """
WITH leaves AS (
    SELECT relid FROM pg_partition_tree(%(table)s::regclass) WHERE isleaf
    UNION
    SELECT oid FROM pg_class WHERE oid = %(table)s::regclass AND relkind = 'r'
)
SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,
       coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.n_live_tup), 0)::bigint
FROM leaves AS t
LEFT JOIN pg_stat_user_tables AS s ON s.relid = t.relid
"""
# Per table, so that a dropped partition's time does not count as negative.
AUTOVACUUM_TIME: LiteralString = """
SELECT relid, total_autovacuum_time::float8 FROM pg_stat_user_tables
"""
HAS_AUTOVACUUM_TIME: LiteralString = """
SELECT count(*) FROM pg_attribute
WHERE attrelid = 'pg_stat_user_tables'::regclass AND attname = 'total_autovacuum_time'
"""
VACUUM: LiteralString = (
    "VACUUM (ANALYZE) jobs, job_history, job_attempts, job_effects, schedule_skips"
)


@dataclass
class Day:
    day: int
    jobs_mb: float
    history_mb: float
    history_rows: int
    jobs_dead: int
    dead: int
    retention_s: float
    vacuum_s: float
    autovacuum_s: float | None
    records_per_s: float
    claim_p50: float
    claim_p99: float
    complete_p50: float
    complete_p99: float


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def sizes(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int, int]]:
    out = {}
    for table in TABLES:
        row = conn.execute(STATS, {"table": table}).fetchone()
        assert row is not None
        out[table] = (int(row[0]), int(row[1]), int(row[2]))
    return out


def write_day(conn: psycopg.Connection[Any], day: datetime, n: int, base: int, move: bool) -> float:
    """The day's reminders; the effect records' rate (records per second)."""
    for lo in range(0, n, FILL_CHUNK):
        params = {
            "start": base + lo,
            "stop": base + min(n, lo + FILL_CHUNK),
            "base": base,
            "day": day,
            "n": n,
        }
        conn.execute(FILL_JOBS, {**params, "start": lo, "stop": min(n, lo + FILL_CHUNK)})
        conn.execute(FILL_ATTEMPTS, params)
        conn.execute(FILL_SKIPS, params)
    conn.execute(MOVE_JOBS if move else COMPLETE_JOBS)
    started = time.perf_counter()
    for lo in range(0, n, RECORD_BATCH):
        keys = [f"push:{base + i}" for i in range(lo, min(n, lo + RECORD_BATCH))]
        at = day + timedelta(days=(lo + RECORD_BATCH / 2) / n)
        with conn.transaction():
            effects.record_many(conn, keys, now=at)
    return n / max(time.perf_counter() - started, 1e-9)


def cycles(url: str, at: datetime, n: int) -> tuple[list[float], list[float]]:
    """``n`` claims of 10 from the live backlog, each completed; the latencies (ms)."""
    claim_ms: list[float] = []
    complete_ms: list[float] = []
    done = 0
    with psycopg.connect(url, autocommit=True) as conn:
        store = PgJobStore(conn)
        for _ in range(n):
            t0 = time.perf_counter()
            claimed = store.claim({"live": 10}, "bench", timedelta(minutes=5), at)
            t1 = time.perf_counter()
            store.complete([Finished(j, SUCCEEDED, at, 1.0) for j in claimed], "bench", at)
            t2 = time.perf_counter()
            claim_ms.append((t1 - t0) * 1000)
            complete_ms.append((t2 - t1) * 1000)
            done += len(claimed)
        conn.execute(RESET_BACKLOG)
        # The completed ones left jobs (job_history): as many new ones keep the backlog's size.
        conn.execute(FILL_BACKLOG, {"at": START, "n": done})
    return claim_ms, complete_ms


def simulate_day(
    mode: str, url: str, conn: psycopg.Connection[Any], d: int, args: argparse.Namespace
) -> Day:
    """Day ``d`` of ``mode`` on its database: the day's writes, the retention after it, the
    vacuum, the sizes and the claim cycles."""
    ages = {
        key: args.retention_days
        for key in ("succeeded_days", "attempts_days", "effects_days", "skips_days")
    }
    has_av = (conn.execute(HAS_AUTOVACUUM_TIME).fetchone() or (0,))[0] == 1
    day = START + timedelta(days=d)
    if mode == "partitions":
        maintenance.ensure_partitions(conn, ahead_days=2, now=day)
    rate = write_day(conn, day, args.per_day, d * args.per_day, mode == "partitions")
    # The retention job's time (tockwork.retention runs at 03:17 UTC).
    after = day + timedelta(days=1, hours=3, minutes=17)
    av_before = dict(conn.execute(AUTOVACUUM_TIME).fetchall()) if has_av else {}
    t0 = time.perf_counter()
    maintenance.retention(conn, ages, now=after)
    retention_s = time.perf_counter() - t0
    conn.execute("SELECT pg_stat_force_next_flush()")
    before_vacuum = sizes(conn)
    dead = sum(before_vacuum[t][1] for t in TABLES[1:])
    t0 = time.perf_counter()
    conn.execute(VACUUM)
    vacuum_s = time.perf_counter() - t0
    av_after = dict(conn.execute(AUTOVACUUM_TIME).fetchall()) if has_av else {}
    av_ms = sum(ms - av_before[relid] for relid, ms in av_after.items() if relid in av_before)
    found = sizes(conn)
    claim_ms, complete_ms = cycles(url, after, args.claims)
    history = [found[t] for t in TABLES[1:]]
    return Day(
        day=d + 1,
        jobs_mb=found["jobs"][0] / 2**20,
        history_mb=sum(h[0] for h in history) / 2**20,
        history_rows=sum(h[2] for h in history),
        jobs_dead=before_vacuum["jobs"][1],
        dead=dead,
        retention_s=retention_s,
        vacuum_s=vacuum_s,
        autovacuum_s=av_ms / 1000 if has_av else None,
        records_per_s=rate,
        claim_p50=statistics.median(claim_ms),
        claim_p99=pct(claim_ms, 0.99),
        complete_p50=statistics.median(complete_ms),
        complete_p99=pct(complete_ms, 0.99),
    )


def run(args: argparse.Namespace) -> dict[str, list[Day]]:
    """Both modes, day by day in turn (a run cut short still compares them)."""
    results: dict[str, list[Day]] = {mode: [] for mode in MODES}
    with ExitStack() as stack:
        dbs = {}
        for mode in MODES:
            name = f"tockwork_ret_{mode}_{os.getpid()}"
            url = stack.enter_context(
                throwaway_database(database_url(), name, components=COMPONENTS)
            )
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            conn.execute("SET synchronous_commit = off")
            conn.execute(FILL_BACKLOG, {"at": START, "n": args.backlog})
            dbs[mode] = (url, conn)
        for d in range(args.days):
            for mode, (url, conn) in dbs.items():
                results[mode].append(simulate_day(mode, url, conn, d, args))
                print_day(mode, results[mode][-1])
    return results


def print_day(mode: str, d: Day) -> None:
    av = "-" if d.autovacuum_s is None else f"{d.autovacuum_s:.1f}"
    print(
        f"{mode:<10} {d.day:>3} {d.jobs_mb:>8.0f} {d.jobs_dead:>10,} {d.history_mb:>10.0f}"
        f" {d.history_rows:>12,} {d.dead:>11,} {d.retention_s:>8.2f} {d.vacuum_s:>8.2f} {av:>6}"
        f" {d.records_per_s:>9,.0f} {d.claim_p50:>6.2f} {d.claim_p99:>6.2f}"
        f" {d.complete_p50:>6.2f} {d.complete_p99:>6.2f}",
        flush=True,
    )


def spread(values: list[float]) -> float:
    """max / min of ``values`` (1.0: flat)."""
    return max(values) / max(min(values), 1e-9)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--per-day", type=int, default=1_000_000, help="reminders a day")
    parser.add_argument("--days", type=int, default=7, help="simulated days")
    parser.add_argument("--retention-days", type=int, default=3, help="retention of everything")
    parser.add_argument("--claims", type=int, default=300, help="claim cycles measured a day")
    parser.add_argument("--backlog", type=int, default=20_000, help="live pending jobs")
    parser.add_argument("--quick", action="store_true", help="a smoke run (tiny sizes)")
    args = parser.parse_args()
    if args.quick:
        args.per_day, args.days, args.claims, args.backlog = 3000, 5, 10, 200
    logging.basicConfig(level=logging.WARNING)
    print(
        f"a simulated week: {args.per_day:,} reminders a day, {args.days} days, retention"
        f" {args.retention_days} days; claims of 10 from a backlog of {args.backlog:,}"
    )
    print(
        f"{'mode':<10} {'day':>3} {'jobs MB':>8} {'jobs dead':>10} {'history MB':>10}"
        f" {'history rows':>12} {'hist. dead':>11} {'retain s':>8} {'vacuum s':>8} {'av s':>6}"
        f" {'records/s':>9} {'claim':>6} {'p99':>6} {'done':>6} {'p99':>6}"
    )
    results = run(args)
    last = {mode: days[-1] for mode, days in results.items()}
    p, d = last["partitions"], last["delete"]
    print()
    both = (p.jobs_mb + p.history_mb) / max(d.jobs_mb + d.history_mb, 1e-9)
    print(f"last day, partitions / delete: jobs MB {p.jobs_mb / max(d.jobs_mb, 1e-9):.2f}"
          f", jobs + history MB {both:.2f} (finished jobs are history with partitions)"
          f", history MB {p.history_mb / max(d.history_mb, 1e-9):.2f}"
          f", history dead tuples {p.dead:,} / {d.dead:,}"
          f", retention + vacuum s {(p.retention_s + p.vacuum_s):.2f}"
          f" / {(d.retention_s + d.vacuum_s):.2f}"
          f", records/s {p.records_per_s / max(d.records_per_s, 1e-9):.2f}")  # fmt: skip
    settled = [day for day in results["partitions"] if day.day >= args.retention_days + 1]
    if len(settled) >= 2:
        print(f"partitions from day {args.retention_days + 1}: history MB max/min"
              f" {spread([x.history_mb for x in settled]):.2f}, jobs MB max/min"
              f" {spread([x.jobs_mb for x in settled]):.2f}, claim p50 max/min"
              f" {spread([x.claim_p50 for x in settled]):.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
