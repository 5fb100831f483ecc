"""``tockwork jobs ... | stats``: inspect, requeue and cancel jobs; per-queue figures."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import psycopg

import jobs
from scheduler.cli.common import (
    InputError,
    SubParsers,
    connect,
    database_arg,
    ensure_schema,
    instant,
    pooler,
    resolve_url,
)
from scheduler.queries import query as scheduler_query


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
    with connect(args) as conn:
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
    with connect(args) as conn:
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
    with connect(args) as conn:
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
    with connect(args) as conn:
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
    pooler(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=False)
    with connect(args, autocommit=True) as conn:
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
