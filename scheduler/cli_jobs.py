"""``tockwork migrate | worker | jobs ... | stats``: the queue's operator commands."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import psycopg

import jobs
from jobs import logs, migrate, validate
from scheduler import health
from scheduler.cli_common import (
    InputError,
    SubParsers,
    database_arg,
    import_attribute,
    instant,
    seconds,
)
from scheduler.db import COMPONENTS, ensure_schema, resolve_url
from scheduler.queries import query as scheduler_query


def _queue(text: str) -> tuple[str, int]:
    name, sep, n = text.partition("=")
    try:
        concurrency = int(n) if sep else 1
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--queue expects NAME=CONCURRENCY, got {text!r}"
        ) from None
    try:
        validate.queue_name(name, "--queue")
    except jobs.InvalidJob as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if concurrency < 1:
        raise argparse.ArgumentTypeError(f"--queue {name}: concurrency must be >= 1, got {n!r}")
    return name, concurrency


def load_app(spec: str) -> Mapping[str, jobs.Handler]:
    """Import ``module:attribute``: a mapping of job type to handler, or a function making one."""
    value = import_attribute(spec)
    if not isinstance(value, Mapping) or not all(callable(h) for h in value.values()):
        raise InputError(f"--app {spec!r} must name a mapping of job type to handler")
    return value


def cmd_migrate(args: argparse.Namespace) -> int:
    with psycopg.connect(resolve_url(args.database_url)) as conn:
        applied = migrate(conn, COMPONENTS)
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    handlers = load_app(args.app)
    queues = dict(args.queue or [("default", 4)])
    url = resolve_url(args.database_url)
    # Apps that open their own connections (scheduler.maintenance:app, the simulated reminders)
    # find the worker's database here.
    os.environ["DATABASE_URL"] = url
    ensure_schema(url, apply=args.migrate)
    worker = jobs.Worker(
        url,
        handlers,
        queues,
        name=args.name,
        lease=args.lease,
        grace=args.grace,
        poll_interval=args.poll,
        listen=not args.no_listen,
    )
    server = None
    if args.metrics_port is not None:
        check = health.Health(
            url,
            listening=lambda: worker.listening,
            poll_only=args.no_listen,
            max_scheduler_lag=args.max_scheduler_lag or None,
        )
        server = health.serve(url, args.metrics_port, host=args.metrics_host, health=check)
    try:
        stats = worker.run()
    finally:
        if server is not None:
            server.stop()
    summary = {"claimed": stats.claimed, "outcomes": stats.outcomes, "released": stats.released}
    print(json.dumps(summary), file=sys.stderr)
    if stats.released:
        # Handlers that overran the grace period still run in their threads, and their leases
        # were given back: end the process now rather than let them finish unowned.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _print_record(record: jobs.JobRecord) -> None:
    for field in (
        "id",
        "status",
        "queue",
        "job_type",
        "organization_id",
        "idempotency_key",
        "priority",
        "run_at",
        "attempts",
        "max_attempts",
        "locked_by",
        "locked_until",
        "lease_token",
        "last_error_code",
        "last_error_summary",
        "completed_at",
        "created_at",
    ):
        print(f"{field:>20}: {getattr(record, field)}")
    print(f"{'payload':>20}: {json.dumps(record.payload)}")


def cmd_jobs_show(args: argparse.Namespace) -> int:
    with psycopg.connect(resolve_url(args.database_url)) as conn:
        try:
            record = jobs.get_job(conn, args.id)
        except jobs.JobNotFound as exc:
            raise InputError(str(exc)) from None
        history = jobs.job_attempts(conn, args.id)
    if args.json:
        data = {
            "job": dataclasses.asdict(record),
            "attempts": [dataclasses.asdict(a) for a in history],
        }
        print(json.dumps(data, default=str))
        return 0
    _print_record(record)
    print("\nattempts:")
    print(f"  {'#':>3} {'outcome':<14} {'worker':<28} {'finished_at':<33} {'ms':>9}  error")
    for a in history:
        ms = f"{a.duration_ms:.1f}" if a.duration_ms is not None else "-"
        err = f"{a.error_code}: {a.error_summary}" if a.error_code else ""
        print(
            f"  {a.attempt:>3} {a.outcome:<14} {a.worker or '-':<28} "
            f"{a.finished_at.isoformat():<33} {ms:>9}  {err}"
        )
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    with psycopg.connect(resolve_url(args.database_url)) as conn:
        records = jobs.list_jobs(
            conn,
            statuses=args.status,
            queue=args.queue,
            job_type=args.job_type,
            error_code=args.error_code,
            limit=args.limit,
        )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": r.id,
                        "status": r.status,
                        "queue": r.queue,
                        "job_type": r.job_type,
                        "attempts": r.attempts,
                        "last_error_code": r.last_error_code,
                        "last_error_summary": r.last_error_summary,
                        "completed_at": r.completed_at.isoformat() if r.completed_at else None,
                    }
                    for r in records
                ]
            )
        )
        return 0
    print(f"{'id':>10} {'status':<10} {'queue':<16} {'job_type':<20} {'att':>4} error")
    for r in records:
        print(
            f"{r.id:>10} {r.status:<10} {r.queue:<16} {r.job_type:<20} {r.attempts:>4} "
            f"{r.last_error_code or ''}: {(r.last_error_summary or '')[:80]}"
        )
    print(f"({len(records)} job(s))")
    return 0


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "ids": args.id or None,
        "queue": args.queue,
        "job_type": args.job_type,
        "error_code": args.error_code,
    }


def cmd_jobs_requeue(args: argparse.Namespace) -> int:
    with psycopg.connect(resolve_url(args.database_url)) as conn:
        ids = jobs.requeue(
            conn,
            **_filters(args),
            since=args.since,
            until=args.until,
            statuses=args.status or ("dead",),
        )
        if args.dry_run:
            conn.rollback()
    verb = "would requeue" if args.dry_run else "requeued"
    print(f"{verb} {len(ids)} job(s)" + (f": {', '.join(map(str, ids[:50]))}" if ids else ""))
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    with psycopg.connect(resolve_url(args.database_url)) as conn:
        ids = jobs.cancel(conn, **_filters(args), reason=args.reason)
    print(f"cancelled {len(ids)} job(s)" + (f": {', '.join(map(str, ids[:50]))}" if ids else ""))
    return 0


def _stats_table(stats: list[jobs.QueueStats]) -> str:
    lines = [
        f"{'queue':<20} {'ready':>8} {'oldest_s':>9} {'leased':>7} {'retrying':>9} "
        f"{'dead':>6} {'scheduled':>10}"
    ]
    for s in stats:
        lines.append(
            f"{s.queue:<20} {s.ready:>8} {s.oldest_ready_age:>9.1f} {s.leased:>7} "
            f"{s.retrying:>9} {s.dead:>6} {s.scheduled:>10}"
        )
    if not stats:
        lines.append("(no unfinished jobs)")
    return "\n".join(lines)


def _more_stats(conn: psycopg.Connection[Any]) -> str:
    """The outbox and the scheduler, one line each (the figures /metrics exports too)."""
    box = jobs.outbox.stats(conn)
    row = conn.execute(scheduler_query("schedule_due_lag"), {"now": None}).fetchone()
    lag = float(row[0]) if row else 0.0
    return (
        f"\noutbox: pending {box.pending}, oldest pending {box.oldest_pending_age:.1f}s, "
        f"dead {box.dead}\nscheduler: most overdue schedule {lag:.1f}s late"
    )


def cmd_stats(args: argparse.Namespace) -> int:
    url = resolve_url(args.database_url)
    ensure_schema(url, apply=False)
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            stats = jobs.queue_stats(conn)
            if args.json:
                print(json.dumps([dataclasses.asdict(s) for s in stats]))
            else:
                if args.watch:
                    print("\033[2J\033[H", end="")
                print(_stats_table(stats))
                print(_more_stats(conn))
            if not args.watch:
                return 0
            time.sleep(args.interval)


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("migrate", help="apply the database migrations (safe to run concurrently)")
    database_arg(p)
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser("worker", help="run handlers for jobs of the given queues")
    database_arg(p)
    p.add_argument("--app", required=True, help="module:attribute naming {job_type: handler}")
    p.add_argument(
        "--queue",
        action="append",
        type=_queue,
        metavar="NAME=N",
        help="a queue and its concurrency (repeatable; default: default=4)",
    )
    p.add_argument("--name", help="worker name recorded in leases and history")
    p.add_argument("--lease", type=seconds("--lease"), default=timedelta(seconds=30))
    p.add_argument(
        "--grace",
        type=seconds("--grace"),
        default=timedelta(seconds=20),
        help="seconds running handlers get to finish after SIGTERM",
    )
    p.add_argument(
        "--poll",
        type=seconds("--poll"),
        default=timedelta(seconds=1),
        help="reconciliation poll interval in seconds",
    )
    p.add_argument("--no-listen", action="store_true", help="poll only (e.g. behind PgBouncer)")
    p.add_argument("--migrate", action="store_true", help="apply migrations before starting")
    p.add_argument(
        "--metrics-port", type=int, help="serve /metrics and /healthz on this port (0: any)"
    )
    p.add_argument("--metrics-host", default="0.0.0.0", help="address to serve metrics on")
    p.add_argument(
        "--max-scheduler-lag",
        type=seconds("--max-scheduler-lag"),
        default=health.DEFAULT_MAX_SCHEDULER_LAG,
        help="/healthz fails when a schedule is overdue by more (seconds; 0: do not check)",
    )
    p.add_argument("--log-json", action="store_true", help="log JSON lines")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.set_defaults(func=cmd_worker)

    jobs_parser = sub.add_parser("jobs", help="inspect, requeue and cancel jobs")
    jsub = jobs_parser.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    def filters(q: argparse.ArgumentParser) -> None:
        q.add_argument("--id", type=int, action="append", help="a job id (repeatable)")
        q.add_argument("--queue")
        q.add_argument("--job-type")
        q.add_argument("--error-code")

    q = jsub.add_parser("dead", help="list dead jobs")
    database_arg(q)
    q.add_argument("--queue")
    q.add_argument("--job-type")
    q.add_argument("--error-code")
    q.add_argument("--limit", type=int, default=100)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_jobs_list, status=["dead"])

    q = jsub.add_parser("list", help="list jobs in given statuses")
    database_arg(q)
    q.add_argument(
        "--status", action="append", choices=[str(s) for s in jobs.JobStatus], required=True
    )
    q.add_argument("--queue")
    q.add_argument("--job-type")
    q.add_argument("--error-code")
    q.add_argument("--limit", type=int, default=100)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_jobs_list)

    q = jsub.add_parser("show", help="one job with its attempt history")
    database_arg(q)
    q.add_argument("id", type=int)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_jobs_show)

    q = jsub.add_parser("requeue", help="put dead jobs back to pending")
    database_arg(q)
    filters(q)
    q.add_argument("--since", type=instant, help="died at or after (ISO instant)")
    q.add_argument("--until", type=instant, help="died before (ISO instant)")
    q.add_argument("--status", action="append", choices=["dead", "cancelled"])
    q.add_argument("--dry-run", action="store_true")
    q.set_defaults(func=cmd_jobs_requeue)

    q = jsub.add_parser("cancel", help="cancel waiting jobs")
    database_arg(q)
    filters(q)
    q.add_argument("--reason")
    q.set_defaults(func=cmd_jobs_cancel)

    p = sub.add_parser("stats", help="per-queue figures")
    database_arg(p)
    p.add_argument("--watch", action="store_true")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)
