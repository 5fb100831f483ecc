"""``tockwork jobs ... | stats``: inspect, requeue and cancel jobs; per-queue figures."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import Any

import psycopg

import jobs
from scheduler.cli.common import (
    MAX_COUNT,
    InputError,
    SubParsers,
    after_arg,
    connect,
    database_arg,
    ensure_schema,
    instant,
    job_id,
    pooler,
    positive_float,
    positive_int,
    read_replica,
    read_url_arg,
    resolve_url,
    text,
)
from scheduler.health import replica_state
from scheduler.queries import query as scheduler_query


def _print_record(record: jobs.JobRecord) -> None:
    for field in (
        "id",
        "status",
        "queue",
        "job_type",
        "organization_id",
        "idempotency_key",
        "unique_key",
        "concurrency_key",
        "priority",
        "run_at",
        "expires_at",
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
            after=args.after,
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
                        "expires_at": r.expires_at.isoformat() if r.expires_at else None,
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
    more = f"; next page: --after {records[-1].id}" if len(records) == args.limit else ""
    print(f"({len(records)} job(s){more})")
    return 0


FILTER_FLAGS = "--id, --queue, --job-type or --error-code"


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    if not (args.id or args.queue or args.job_type or args.error_code):
        raise InputError(f"give at least one filter: {FILTER_FLAGS}")
    return {
        "ids": args.id or None,
        "queue": args.queue,
        "job_type": args.job_type,
        "error_code": args.error_code,
    }


def _unmatched(args: argparse.Namespace, ids: list[int], what: str) -> int:
    """Exit 1 naming the ``--id`` values that matched nothing (a missing job, or one in another
    status): the caller asked for those jobs by name, so doing nothing is not success."""
    missing = [i for i in dict.fromkeys(args.id or ()) if i not in set(ids)]
    if not missing:
        return 0
    shown_ids = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
    print(f"{args.prog}: failed: no {what} job with --id {shown_ids}", file=sys.stderr)
    return 1


_WAITING = frozenset({jobs.JobStatus.PENDING, jobs.JobStatus.RETRYING, jobs.JobStatus.LEASED})


def _waiting(
    conn: psycopg.Connection[Any], asked: list[int] | tuple[()], matched: set[int]
) -> dict[int, str]:
    """The ``--id`` values not requeued whose job is pending, retrying or leased: their status."""
    found: dict[int, str] = {}
    for ident in dict.fromkeys(asked):
        if ident in matched:
            continue
        try:
            status = jobs.get_job(conn, ident).status
        except jobs.JobNotFound:
            continue
        if status in _WAITING:
            found[ident] = str(status)
    return found


def cmd_jobs_requeue(args: argparse.Namespace) -> int:
    filters = _filters(args)
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise InputError(f"--since ({args.since.isoformat()}) must be before --until "
                         f"({args.until.isoformat()})")  # fmt: skip
    statuses = args.status or ["dead"]
    with connect(args) as conn:
        ids = jobs.requeue(
            conn,
            **filters,
            since=args.since,
            until=args.until,
            statuses=statuses,
        )
        if args.dry_run:
            conn.rollback()
        waiting = _waiting(conn, args.id or (), {*ids, *ids.skipped})
    verb = "would requeue" if args.dry_run else "requeued"
    print(f"{verb} {len(ids)} job(s)" + (f": {', '.join(map(str, ids[:50]))}" if ids else ""))
    if waiting:
        # Issue 26: already pending is nothing to do, not a failure (exit 0, said on stdout).
        print(
            "nothing to requeue, already waiting or running: "
            + ", ".join(f"{i} ({status})" for i, status in list(waiting.items())[:50])
            + (" ..." if len(waiting) > 50 else "")
        )
    skipped = ids.skipped
    if skipped:
        # Left as they were: another job with the same unique key is active (docs/jobs.md).
        print(
            f"skipped {len(skipped)} job(s) whose unique key an active job holds: "
            + ", ".join(map(str, skipped[:50]))
            + (" ..." if len(skipped) > 50 else "")
        )
    code = _unmatched(args, [*ids, *skipped, *waiting], " or ".join(statuses))
    held = [i for i in dict.fromkeys(args.id or ()) if i in set(skipped)]
    if code == 0 and held:
        print(
            f"{args.prog}: failed: not requeued, an active job holds the unique key of --id "
            + ", ".join(map(str, held[:20])),
            file=sys.stderr,
        )
        return 1
    return code


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    filters = _filters(args)
    with connect(args) as conn:
        ids = jobs.cancel(conn, **filters, reason=args.reason)
    print(f"cancelled {len(ids)} job(s)" + (f": {', '.join(map(str, ids[:50]))}" if ids else ""))
    return _unmatched(args, ids, "waiting (pending or retrying)")


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


def _replica_line(conn: psycopg.Connection[Any]) -> str:
    """Where the figures were read, as the dashboard's banner says it."""
    state = replica_state(conn)
    problem = state.problem()
    if problem is not None:
        return f"read from --read-url, which {problem}"
    return f"read from a replica, {state.lag or 0.0:.1f} s behind the primary"


def cmd_stats(args: argparse.Namespace) -> int:
    url = resolve_url(args.database_url)
    pooler(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=False)
    replica = read_replica(args)  # refuses a primary; names --read-url when unreachable
    opened = (
        jobs.connect(replica, autocommit=True)
        if replica is not None
        else connect(args, autocommit=True)
    )
    with opened as conn:
        while True:
            stats = jobs.queue_stats(conn)
            if args.json:
                print(json.dumps([dataclasses.asdict(s) for s in stats]))
            else:
                if args.watch:
                    print("\033[2J\033[H", end="")
                print(_stats_table(stats))
                print(_more_stats(conn))
                if replica is not None:
                    print(_replica_line(conn))
            if not args.watch:
                return 0
            time.sleep(args.interval)


def _list_options(q: argparse.ArgumentParser) -> None:
    q.add_argument("--queue", type=text("--queue"), help="only this queue")
    q.add_argument("--job-type", type=text("--job-type"), help="only this job type")
    q.add_argument(
        "--error-code", type=text("--error-code"), help="only jobs whose last error has this code"
    )
    q.add_argument(
        "--limit",
        type=positive_int("--limit", MAX_COUNT),
        default=100,
        metavar="N",
        help=f"at most this many, oldest id first (1 to {MAX_COUNT:,})",
    )
    after_arg(q, "job")
    q.add_argument("--json", action="store_true", help="print a JSON list")


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    jobs_parser = sub.add_parser(
        "jobs",
        help="inspect, requeue and cancel jobs",
        description="Inspect jobs, requeue dead ones, cancel waiting ones.",
    )
    jsub = jobs_parser.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    def filters(q: argparse.ArgumentParser, verb: str) -> None:
        group = q.add_argument_group(
            "filters", f"at least one is required; {verb} the jobs matching all those given"
        )
        group.add_argument(
            "--id", type=job_id(), action="append", metavar="ID", help="a job id (repeatable)"
        )
        group.add_argument("--queue", type=text("--queue"), help="jobs of this queue")
        group.add_argument("--job-type", type=text("--job-type"), help="jobs of this type")
        group.add_argument(
            "--error-code", type=text("--error-code"), help="jobs whose last error has this code"
        )

    q = jsub.add_parser("dead", help="list dead jobs", description="List dead jobs, newest first.")
    database_arg(q)
    _list_options(q)
    q.set_defaults(func=cmd_jobs_list, status=["dead"])

    q = jsub.add_parser(
        "list", help="list jobs in given statuses", description="List jobs, newest first."
    )
    database_arg(q)
    q.add_argument(
        "--status",
        action="append",
        choices=[str(s) for s in jobs.JobStatus],
        required=True,
        help="a status to list (repeatable; required)",
    )
    _list_options(q)
    q.set_defaults(func=cmd_jobs_list)

    q = jsub.add_parser(
        "show",
        help="one job with its attempt history",
        description="One job with its attempt history; exit 2 when no job has this id.",
    )
    database_arg(q)
    q.add_argument("id", type=job_id("ID"), metavar="ID", help="the job's id")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_jobs_show)

    q = jsub.add_parser(
        "requeue",
        help="put dead jobs back to pending (a filter is required)",
        description="Put dead (or cancelled, or expired) jobs back to pending with a fresh set of "
        f"attempts. A filter is required: {FILTER_FLAGS}. Exits 1 when an --id matched no job "
        "in the given statuses.",
    )
    database_arg(q)
    filters(q, "requeue")
    q.add_argument(
        "--since",
        type=instant,
        metavar="ISO",
        help="died at or after this instant (with Z or offset)",
    )
    q.add_argument(
        "--until", type=instant, metavar="ISO", help="died before this instant (with Z or offset)"
    )
    q.add_argument(
        "--status",
        action="append",
        choices=["dead", "cancelled", "expired"],
        help="requeue jobs in this status (repeatable; default: dead; an expired job requeued "
        "runs without its lateness limit)",
    )
    q.add_argument(
        "--dry-run", action="store_true", help="say what would be requeued, change nothing"
    )
    q.set_defaults(func=cmd_jobs_requeue)

    q = jsub.add_parser(
        "cancel",
        help="cancel waiting jobs (a filter is required)",
        description="Cancel pending and retrying jobs (a leased job is running and is left "
        f"alone). A filter is required: {FILTER_FLAGS}. Exits 1 when an --id matched no "
        "waiting job.",
    )
    database_arg(q)
    filters(q, "cancel")
    q.add_argument(
        "--reason", type=text("--reason", 500), help="why, kept on the job (at most 500 characters)"
    )
    q.set_defaults(func=cmd_jobs_cancel)

    p = sub.add_parser(
        "stats",
        help="per-queue figures, the outbox and the scheduler's lag",
        description="Per-queue figures (ready, oldest ready age, leased, retrying, dead, "
        "scheduled), the outbox and the most overdue schedule.",
    )
    database_arg(p)
    read_url_arg(p)
    p.add_argument("--watch", action="store_true", help="refresh until interrupted (Ctrl-C)")
    p.add_argument(
        "--interval",
        type=positive_float("--interval", 3600),
        default=2.0,
        metavar="SECONDS",
        help="seconds between refreshes with --watch (above 0, at most 3600)",
    )
    p.add_argument("--json", action="store_true", help="print the queue figures as JSON")
    p.set_defaults(func=cmd_stats)
