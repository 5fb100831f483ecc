"""The dashboard's routes on a big database: p50 and p99 per route (figures, not a test).

Fills a throwaway database (``tockwork_dash_<pid>`` on the server of
``scheduler.devdb.database_url()``, migrated, dropped at the end unless ``--keep``) with
``--jobs`` jobs (90% succeeded, 6% pending, 2% dead, 1% retrying, 0.01% leased (running: as many
as the workers' threads), 1% cancelled over 10 queues and 20 job types, created over 30 days),
``--attempts`` attempt rows (the latest hour dense; ``--reuse`` makes a fresh latest hour as
dense again) and ``--schedules`` schedules, ANALYZEs it, rolls up the attempts per minute (what
the built-in maintenance ``tockwork.attempt_rollup`` does every minute), then requests every
page and API route ``--requests`` times in-process (Starlette's TestClient: the whole app,
authentication, templates and JSON included, no network) and prints p50 / p99 per route beside
a baseline: the static stylesheet through the same stack (the floor of a request). The
overview is measured a second time with the rollup emptied (the maintenance not running). The
issue's target is 300 ms per route at 10,000,000 jobs, 1,000,000 schedules and 20,000,000 attempts:

    python -m bench.dashboard --jobs 10000000 --schedules 1000000 --attempts 20000000

The defaults are a tenth of that, which fills in a few minutes on a shared 2-core machine.
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
import uuid
from datetime import UTC, datetime

import psycopg
from psycopg import sql as pgsql
from starlette.testclient import TestClient

import jobs
import scheduler
from jobs.maintenance import rollup_attempts
from scheduler.dashboard import create_app
from scheduler.devdb import create_database, database_url, drop_database
from scheduler.migrations import COMPONENTS

TOKEN = "bench-token-0123456789abcdef"
BATCH = 500_000

# Ad-hoc fill statements (a benchmark's fixture, not the library's SQL).
FILL_JOBS = """
INSERT INTO jobs (queue, job_type, payload, status, run_at, attempts, last_error_code,
                  last_error_summary, completed_at, created_at, locked_at, locked_by,
                  locked_until, heartbeat_at, idempotency_key, organization_id)
SELECT 'q' || ((g / 100) %% 10), 'type_' || ((g / 7) %% 20), jsonb_build_object('n', g),
       s.status, c.created + interval '2 seconds', 1,
       CASE WHEN s.status = 'dead' THEN 'E_' || ((g / 100) %% 5) END,
       CASE WHEN s.status = 'dead' THEN 'boom' END,
       CASE WHEN s.status IN ('succeeded', 'dead', 'cancelled')
            THEN c.created + interval '3 seconds' END,
       c.created,
       CASE WHEN s.status = 'leased' THEN now() END,
       CASE WHEN s.status = 'leased' THEN 'worker-' || (g %% 8) END,
       CASE WHEN s.status = 'leased' THEN now() + interval '5 minutes' END,
       CASE WHEN s.status = 'leased' THEN now() - (g %% 30) * interval '1 second' END,
       CASE WHEN g %% 7 = 0 THEN 'key-' || g END,
       CASE WHEN g %% 3 = 0 THEN '00000000-0000-0000-0000-00000000000' || (g %% 9)::text END::uuid
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
CROSS JOIN LATERAL (SELECT CASE
    WHEN g %% 100 < 90 THEN 'succeeded' WHEN g %% 100 < 95 THEN 'pending'
    WHEN g %% 100 < 97 THEN 'dead' WHEN g %% 100 < 98 THEN 'retrying'
    WHEN g %% 100 < 99 THEN CASE WHEN g %% 10000 = 98 THEN 'leased' ELSE 'pending' END
    ELSE 'cancelled' END AS status) AS s
CROSS JOIN LATERAL (SELECT now() - interval '30 days'
    + (g::float8 / %(total)s) * interval '30 days' AS created) AS c
"""

# Finished jobs live in job_history (jobs migration 0021), as completions leave them.
MOVE_FINISHED = """
WITH ended AS (
    DELETE FROM jobs WHERE status IN ('succeeded', 'cancelled', 'expired')
    RETURNING id, organization_id, queue, job_type, payload, idempotency_key, status, priority,
              run_at, attempts, max_attempts, locked_at, locked_by, locked_until, lease_token,
              last_error_code, last_error_summary, completed_at, created_at, claim_id,
              started_token, unstarted_expiries, concurrency_key, trace_parent, trace_state,
              unique_key, heartbeat_at, expires_at
)
INSERT INTO job_history SELECT * FROM ended
"""

FILL_ATTEMPTS = """
INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                          outcome, error_code, duration_ms)
SELECT 1 + (g %% %(jobs)s), 1 + (g / %(jobs)s)::int, 'q' || (g %% 10), 'type_' || (g %% 20),
       'worker-' || (g %% 8), f.at - interval '40 ms', f.at,
       CASE WHEN g %% 50 = 0 THEN 'retry' ELSE 'succeeded' END,
       CASE WHEN g %% 50 = 0 THEN 'E_1' END, 40
FROM generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
CROSS JOIN LATERAL (SELECT CASE
    WHEN g > %(total)s - %(last_hour)s
        THEN now() - interval '1 hour' * ((%(total)s - g)::float8 / %(last_hour)s)
    ELSE now() - interval '30 days' + (g::float8 / %(total)s) * interval '30 days'
    END AS at) AS f
"""

COPY_SCHEDULES = """
INSERT INTO schedules (subject, job_type, queue, rule, zone, cursor_at, next_run_at,
                       tzdb_version, payload)
SELECT 'user-' || g, job_type, queue, rule, (ARRAY['Europe/Berlin', 'America/New_York',
       'Asia/Tokyo', 'UTC'])[1 + g %% 4], cursor_at,
       next_run_at + (g %% 86400) * interval '1 second', tzdb_version, payload
FROM schedules CROSS JOIN generate_series(%(start)s::bigint, %(stop)s::bigint) AS g
WHERE id = %(template)s
"""


# The secondary indexes of the filled tables: dropped before the fill and built after it (one
# sort per index instead of ten million insertions into each), as a restore would. The unique
# ones stay (the schedule's insert infers its ON CONFLICT target from one).
INDEXES = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index AS i
WHERE i.indrelid IN ('jobs'::regclass, 'job_attempts'::regclass, 'schedules'::regclass)
  AND NOT i.indisunique
ORDER BY 1
"""


def fill(url: str, n_jobs: int, n_attempts: int, n_schedules: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        indexes = conn.execute(INDEXES).fetchall()
        for name, _ in indexes:
            conn.execute(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(name)))
        for name, total, sql, extra in [
            ("jobs", n_jobs, FILL_JOBS, {}),
            (
                "attempts",
                n_attempts,
                FILL_ATTEMPTS,
                {"jobs": n_jobs, "last_hour": min(n_attempts // 100, 200_000)},
            ),
        ]:
            started = time.monotonic()
            for start in range(1, total + 1, BATCH):
                stop = min(total, start + BATCH - 1)
                conn.execute(sql, {"start": start, "stop": stop, "total": total, **extra})
            print(f"filled {total:,} {name} in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        conn.execute(MOVE_FINISHED)
        print(f"moved the finished jobs in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        with conn.transaction():
            template = scheduler.create_schedule(
                conn,
                job_type="reminder",
                rule="daily@08:00",
                zone="Europe/Berlin",
                subject="template",
            )
        for start in range(1, n_schedules, BATCH):
            stop = min(n_schedules - 1, start + BATCH - 1)
            conn.execute(COPY_SCHEDULES, {"start": start, "stop": stop, "template": template.id})
        print(f"filled {n_schedules:,} schedules in {time.monotonic() - started:.0f} s")
        started = time.monotonic()
        for _, definition in indexes:
            conn.execute(definition)
        print(f"built {len(indexes)} indexes in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("VACUUM ANALYZE job_history")
        conn.execute("VACUUM ANALYZE job_attempts")
        conn.execute("VACUUM ANALYZE schedules")
        print(f"vacuum analyze in {time.monotonic() - started:.0f} s", flush=True)


# The latest hour of attempts again before a --reuse run (the fill's dense hour has moved out of
# the chart's window by then): as many as the fill put there, in finished_at order, second
# attempts as the fill's latest hour holds (so the lateness page, which reads first attempts,
# sees what it saw after the fill).
REFRESH_HOUR = """
INSERT INTO job_attempts (job_id, attempt, queue, job_type, worker, started_at, finished_at,
                          outcome, error_code, duration_ms)
SELECT 1 + g, 2, 'q' || (g %% 10), 'type_' || (g %% 20), 'worker-' || (g %% 8),
       f.at - interval '40 ms', f.at,
       CASE WHEN g %% 50 = 0 THEN 'retry' ELSE 'succeeded' END,
       CASE WHEN g %% 50 = 0 THEN 'E_1' END, 40
FROM generate_series(1, %(n)s::bigint) AS g
CROSS JOIN LATERAL (SELECT now() - interval '1 hour' * (1 - g::float8 / %(n)s) AS at) AS f
"""


def refresh_hour(url: str) -> None:
    """Make the last hour as dense as the fill made it (for the chart's live fallback)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM job_attempts WHERE finished_at > now() - interval '1 hour'"
        ).fetchone()
        have = row[0] if row else 0
        want = conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = 'job_attempts'::regclass"
        ).fetchone()
        n = min(int(want[0]) // 100 if want else 0, 200_000)
        if have < n // 2:
            started = time.monotonic()
            conn.execute(REFRESH_HOUR, {"n": n})
            print(
                f"refreshed the latest hour: {n:,} attempts in {time.monotonic() - started:.0f} s"
            )


def rollup(url: str) -> None:
    """What the built-in maintenance tockwork.attempt_rollup does every minute."""
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.monotonic()
        written = rollup_attempts(conn)
        print(
            f"attempt rollup: {written} minutes in {(time.monotonic() - started) * 1000:.0f} ms",
            flush=True,
        )


def routes(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT max(id) FROM jobs WHERE status = 'dead'").fetchone()
        dead_id = row[0] if row else 1
        row = conn.execute("SELECT max(id) FROM schedules").fetchone()
        schedule_id = row[0] if row else 1
    return [
        "/static/style.css",  # the baseline
        "/api/queues",
        "/api/jobs",
        "/api/jobs?status=dead&queue=q3",
        "/api/jobs?status=pending&queue=q1&job_type=type_11",
        "/api/jobs?status=pending",
        "/jobs?status=pending&queue=q1",
        f"/api/jobs?before={dead_id}&limit=50",
        "/api/jobs?idempotency_key=key-70",
        "/api/jobs?organization_id=00000000-0000-0000-0000-000000000003&status=dead",
        "/api/jobs?error_code=E_2",
        "/api/jobs?organization_id=00000000-0000-0000-0000-000000000004",
        "/api/jobs?status=retrying&queue=q5",
        "/api/jobs?status=leased",
        f"/api/jobs/{dead_id}",
        "/api/schedules?subject=user-4242",
        "/api/schedules?zone=Asia/Tokyo",
        "/",
        "/jobs",
        "/jobs?status=succeeded&queue=q2",
        f"/jobs/{dead_id}",
        "/dead",
        "/dead?queue=q4&error_code=E_4",
        "/dead?job_type=type_3",  # few dead letters of the type: a bounded run of the index
        "/api/jobs?error_code=E_2&queue=q0",  # none: the code's index, bounded
        "/jobs?error_code=E_3&status=dead",
        "/schedules",
        "/schedules?key=tockwork.",
        f"/schedules/{schedule_id}",
        "/preview?rule=daily@02:30&zone=Europe/Berlin",
        "/lateness?window=1h",
        "/lateness?window=7d",
        "/outbox",
    ]


def measure(url: str, requests: int, only: list[str] | None = None) -> None:
    rollup(url)
    paths = [p for p in routes(url) if not only or p == "/static/style.css" or p in only]
    app = create_app(url, token=TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def timed(path: str) -> tuple[float, float]:
        client.get(path, headers=headers)  # warm: connection, plan, caches
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            response = client.get(path, headers=headers)
            times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (path, response.status_code, response.text)
        times.sort()
        return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]

    with TestClient(app) as client:
        results = [(path, *timed(path)) for path in paths]
        if not only or "/" in only:
            # The maintenance not running: every minute of the chart counted from the attempts
            # (bounded), then the rollup written again.
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM job_attempt_minutes")
            results.append(("/ (rollup lacking: chart counted live)", *timed("/")))
            rollup(url)
    base = results[0][1]
    paths = [r[0] for r in results]
    width = max(len(p) for p in paths)
    print(f"{'route':<{width}}  {'p50 ms':>8}  {'p99 ms':>8}  {'p50/baseline':>12}")
    for path, p50, p99 in results:
        flag = "  over 300 ms" if p99 > 300 else ""
        print(f"{path:<{width}}  {p50:8.1f}  {p99:8.1f}  {p50 / base:12.1f}{flag}")
    print(f"(baseline: the static stylesheet through the same stack, p50 {base:.1f} ms)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=2_000_000)
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=30, help="per route")
    parser.add_argument("--keep", action="store_true", help="keep the database (prints its URL)")
    parser.add_argument(
        "--reuse", metavar="URL", help="measure a database an earlier --keep run filled"
    )
    parser.add_argument(
        "--only", action="append", metavar="PATH", help="measure only these routes (repeatable)"
    )
    parser.add_argument(
        "--write-cost",
        type=int,
        metavar="N",
        help="instead: the worker's drain of N jobs with and without migration 0011's indexes",
    )
    args = parser.parse_args()
    if args.write_cost:
        write_cost(args.write_cost, rounds=5)
        return 0
    if args.reuse:
        print(f"dashboard bench {datetime.now(UTC):%Y-%m-%d %H:%M}Z on {args.reuse}", flush=True)
        print_sizes(args.reuse)
        refresh_hour(args.reuse)
        measure(args.reuse, args.requests, args.only)
        return 0
    print(
        f"dashboard bench {datetime.now(UTC):%Y-%m-%d %H:%M}Z: {args.jobs:,} jobs, "
        f"{args.attempts:,} attempts, {args.schedules:,} schedules, {args.requests} requests "
        "per route",
        flush=True,
    )
    server, name = database_url(), f"tockwork_dash_{os.getpid()}"
    url = create_database(server, name, components=COMPONENTS, replace=True)
    try:
        fill(url, args.jobs, args.attempts, args.schedules)
        print_sizes(url)
        measure(url, args.requests)
    finally:
        if args.keep:
            print(f"kept: {url} (measure it again with --reuse; drop it with DROP DATABASE)")
        else:
            drop_database(server, name)
    return 0


# The indexes migration 0011 added for the dashboard: what --write-cost drops in its baseline.
DASHBOARD_INDEXES = (
    "jobs_retrying_idx",
    "jobs_dead_recent_idx",
    "jobs_error_code_idx",
    "jobs_dead_organization_idx",
)


def _fail_every_tenth(job: jobs.Job) -> None:
    if job.payload["n"] % 10 == 0:
        raise jobs.PermanentError("boom", code="E_BENCH")


def write_cost(n_jobs: int, rounds: int) -> None:
    """The queue's write path with and without migration 0011's indexes: enqueue ``n_jobs``
    (a third with an organization), drain them with a worker (4 threads; one in ten fails
    permanently with an error code, so the error-code and dead-letter indexes take entries),
    alternating the two databases ``rounds`` times; prints the median drain time of each."""
    logging.getLogger("tockwork.jobs").setLevel(logging.ERROR)  # not a line per dead job
    server = database_url()
    names = {
        "with 0011 indexes": f"tockwork_dash_w_{os.getpid()}",
        "without them (baseline)": f"tockwork_dash_wo_{os.getpid()}",
    }
    urls = {
        k: create_database(server, v, components=COMPONENTS, replace=True) for k, v in names.items()
    }
    try:
        with psycopg.connect(urls["without them (baseline)"], autocommit=True) as conn:
            for index in DASHBOARD_INDEXES:
                conn.execute(pgsql.SQL("DROP INDEX {}").format(pgsql.Identifier(index)))
        times: dict[str, list[float]] = {k: [] for k in urls}
        for _ in range(rounds):
            for label, url in urls.items():
                with psycopg.connect(url) as conn, conn.transaction():
                    conn.execute("TRUNCATE jobs, job_history, job_attempts")
                    jobs.enqueue_many(
                        conn,
                        [
                            jobs.JobSpec(
                                "bench",
                                {"n": i},
                                organization_id=uuid.UUID(int=i % 3) if i % 3 else None,
                            )
                            for i in range(n_jobs)
                        ],
                    )
                worker = jobs.Worker(
                    url, {"bench": _fail_every_tenth}, {"default": 4}, listen=False
                )
                started = time.perf_counter()
                worker.run_until_idle()
                times[label].append(time.perf_counter() - started)
        base = statistics.median(times["without them (baseline)"])
        print(f"write cost: drain {n_jobs:,} jobs (10% dead with a code), {rounds} rounds")
        for label, values in times.items():
            median = statistics.median(values)
            print(
                f"  {label:<24} median {median:6.2f} s  ({n_jobs / median:,.0f} jobs/s)"
                f"  ratio {median / base:.3f}  (rounds: {', '.join(f'{v:.2f}' for v in values)})"
            )
        with psycopg.connect(urls["with 0011 indexes"]) as conn:
            for index in DASHBOARD_INDEXES:
                row = conn.execute("SELECT pg_relation_size(%s::regclass)", (index,)).fetchone()
                assert row is not None
                print(f"  {index}: {row[0] / 1024:,.0f} KiB after the last round")
    finally:
        for name in names.values():
            drop_database(server, name)


def print_sizes(url: str) -> None:
    with psycopg.connect(url) as conn:
        for table in ("jobs", "job_attempts", "schedules"):
            row = conn.execute(
                "SELECT reltuples::bigint, pg_total_relation_size(oid) FROM pg_class"
                " WHERE oid = %s::regclass",
                (table,),
            ).fetchone()
            assert row is not None
            print(f"{table}: about {row[0]:,} rows, {row[1] / 2**30:.1f} GiB with indexes")


if __name__ == "__main__":
    sys.exit(main())
