"""``tockwork scheduler`` (a replica) and ``tockwork schedules
sync|list|show|preview|overdue``."""

from __future__ import annotations

import argparse
import json
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from jobs.internal import logs
from scheduler import health
from scheduler.cli.common import (
    MAX_COUNT,
    InputError,
    SubParsers,
    after_arg,
    config_args,
    config_from_args,
    connect,
    connect_kwargs,
    database_arg,
    ensure_schema,
    instant,
    list_args,
    log_args,
    metrics_args,
    positive_int,
    resolve_url,
    seconds,
    text,
)
from scheduler.definitions import load_file, load_limits, sync
from scheduler.errors import ScheduleNotFound
from scheduler.maintenance import QUEUE as MAINTENANCE_QUEUE
from scheduler.maintenance import sync_maintenance
from scheduler.model import Overlap, Schedule
from scheduler.runs import DEFAULT_BACKFILL_BATCH, MAX_BACKFILL_BATCH, backfill, trigger
from scheduler.schedules import MAX_NOTE, get_schedule, list_schedules, pause, preview, resume
from scheduler.tick import Scheduler, SchedulerConfig
from timezones import SystemClock
from timezones.errors import shown

MAX_PREVIEW = 1000  # occurrences a preview prints (each one is a bounded computation)
# Who the audit trail says paused or resumed a schedule from the command line.
_ACTOR = "cli"
_OVERLAPS = [str(o) for o in Overlap]


def cmd_scheduler(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    url = resolve_url(args.database_url, args)
    definitions = _load(args.definitions, "--definitions") if args.definitions else None
    kwargs = connect_kwargs(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=args.migrate, flag=True)
    with connect(args) as conn:
        if not args.no_maintenance:
            # The built-in maintenance needs no extra process: every replica syncs it (created
            # when missing; the ages set before kept), every worker serves its queue.
            with conn.transaction():
                built_in = sync_maintenance(conn)
            if built_in.created or built_in.updated:
                print(
                    f"maintenance definitions: created {len(built_in.created)}, "
                    f"updated {len(built_in.updated)}"
                )
        if definitions is not None:
            with conn.transaction():
                result = sync(conn, definitions, limits=load_limits(args.definitions))
            print(
                f"definitions: created {len(result.created)}, updated {len(result.updated)}, "
                f"deleted {len(result.deleted)}, unchanged {len(result.unchanged)}"
            )
    replica = Scheduler(
        url, config=config_from_args(SchedulerConfig, args), connect_kwargs=kwargs, name=args.name
    )
    server = None
    if args.metrics_port is not None:
        check = health.Health(url, poll_only=True, max_scheduler_lag=args.max_scheduler_lag or None)
        server = health.serve(url, args.metrics_port, host=args.metrics_host, health=check)
    try:
        totals = replica.run()
    finally:
        if server is not None:
            server.stop()
    print(
        json.dumps(
            {"enqueued": totals.enqueued, "missed": totals.missed, "skipped": totals.skipped,
             "duplicates": totals.duplicates, "locked_elsewhere": totals.locked_elsewhere}
        )
    )  # fmt: skip
    return 0


def _load(path: str, field: str) -> list[Any]:
    """The definitions of a TOML file, checked before anything connects: a file that cannot be
    read, is not UTF-8 or is not TOML, or whose ``schedule`` is not an array of tables, is bad
    input naming the file."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(field, path, "no such file") from None
    except OSError as exc:
        raise InputError(field, path, f"cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            field, path, f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(field, path, f"is not valid TOML: {exc}") from None
    items = document.get("schedule", [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(
            field,
            path,
            f"'schedule' must be an array of tables ([[schedule]]), got {shown(items, 60)}",
        )
    return load_file(path)


def cmd_sync(args: argparse.Namespace) -> int:
    definitions = _load(args.file, "FILE")
    with connect(args) as conn:
        result = sync(conn, definitions, limits=load_limits(args.file))
        if args.dry_run:
            conn.rollback()
    verb = "would " if args.dry_run else ""
    for name, keys in (
        ("create", result.created),
        ("update", result.updated),
        ("delete", result.deleted),
    ):
        print(f"{verb}{name}: {', '.join(keys) if keys else '-'}")
    print(f"unchanged: {len(result.unchanged)}")
    if result.limits is not None and (result.limits.set or result.limits.cleared):
        print(f"{verb}set limits: {', '.join(result.limits.set) or '-'}; "
              f"{verb}clear limits: {', '.join(result.limits.cleared) or '-'}")  # fmt: skip
    return 0


def state(s: Schedule) -> str:
    """A schedule's state in words: ``active``, ``finished``, ``paused``, with the pause's end
    and note (``paused until 2026-06-01T08:00:00+00:00: migrating``)."""
    if s.paused:
        until = f" until {s.paused_until.isoformat()}" if s.paused_until else ""
        note = f": {s.pause_note}" if s.pause_note else ""
        return f"paused{until}{note}"
    return "finished" if s.finished else "active"


def _row(s: Schedule) -> str:
    nxt = s.next_run_at.isoformat() if s.next_run_at else "-"
    name = s.key or (f"subject={s.subject}" if s.subject else "-")
    rule = json.dumps({k: v for k, v in s.rule_json.items() if k != "version"})
    return (
        f"{s.id:>7} {name:<24} {s.job_type:<22} {s.zone:<20} {nxt:<26} "
        f"{'paused' if s.paused else 'finished' if s.finished else 'active':<8} {rule}"
    )


def cmd_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        items = list_schedules(conn, limit=args.limit, after=args.after)
    print(f"{'id':>7} {'key/subject':<24} {'job_type':<22} {'zone':<20} {'next_run_at':<26} state")
    for s in items:
        print(_row(s))
        if s.paused and (s.pause_note or s.paused_until):
            print(f"{'':>8}{state(s)}")
    more = f"; next page: --after {items[-1].id}" if len(items) == args.limit else ""
    print(f"({len(items)} schedule(s){more})")
    return 0


def _find(conn: psycopg.Connection[Any], ident: str) -> Schedule:
    try:
        # ASCII digits only: str.isdigit() is true of '٣' (int() reads 3) and of '²' (int()
        # refuses it); anything else is a key.
        if ident.isascii() and ident.isdigit():
            return get_schedule(conn, int(ident))
        return get_schedule(conn, key=ident)
    except ScheduleNotFound as exc:
        raise InputError(str(exc)) from None


def cmd_show(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        s = _find(conn, args.key)
    for name in (
        "id", "key", "subject", "organization_id", "job_type", "queue", "zone", "gap", "fold",
        "jitter_seconds", "catch_up", "catch_up_grace_seconds", "catch_up_max", "quiet_hours",
        "paused", "cursor_at", "next_run_at", "next_occurrence_key", "last_occurrence_key",
        "last_occurrence_at", "last_job_id", "enqueued_count", "missed_count", "skipped_count",
        "tzdb_version", "version", "source", "created_at", "updated_at", "overlap",
        "overlap_skipped_count", "pause_note", "paused_until", "start_at", "end_at", "max_runs",
        "remaining_runs", "finished_at", "max_lateness_seconds",
    ):  # fmt: skip
        print(f"{name:>22}: {getattr(s, name)}")
    print(f"{'state':>22}: {state(s)}")
    print(f"{'rule':>22}: {json.dumps(s.rule_json)}")
    print(f"{'payload':>22}: {json.dumps(s.payload)}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        s = _find(conn, args.key)
        s = pause(conn, s.id, note=args.note, until=args.until, actor=_ACTOR)
    print(f"{s.key or s.id}: {state(s)}; next run {_when(s.next_run_at)}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        s = _find(conn, args.key)
        s = resume(conn, s.id, actor=_ACTOR)
    print(f"{s.key or s.id}: {state(s)}; next run {_when(s.next_run_at)}")
    return 0


def _when(at: datetime | None) -> str:
    return at.isoformat() if at else "- (none)"


def cmd_trigger(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        s = _find(conn, args.key)
        run = trigger(conn, s.id, at=args.at, overlap=args.overlap)
    job = f"job {run.job_id}" if run.job_id is not None else "no job"
    reason = f" ({run.reason})" if run.reason else ""
    print(f"{s.key or s.id}: {run.occurrence_key} {run.outcome}: {job}{reason}")
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    """Work through the range one batch (one transaction) at a time, printing progress."""
    if args.end <= args.start:
        raise InputError("--end", args.end.isoformat(), "must be after --start")
    totals: dict[str, int] = {}
    start: datetime | None = args.start
    batches = 0
    with connect(args) as conn:
        s = _find(conn, args.key)
        while start is not None:
            result = backfill(
                conn, s.id, start=start, end=args.end, overlap=args.overlap,
                dry_run=args.dry_run, batch=args.batch,
            )  # fmt: skip
            if args.dry_run:
                conn.rollback()
            else:
                conn.commit()
            batches += 1
            for o in result.occurrences:
                totals[o.outcome] = totals.get(o.outcome, 0) + 1
                if args.verbose:
                    print(f"  {o.at.isoformat()} {o.occurrence_key} {o.outcome}"
                          + (f" job {o.job_id}" if o.job_id is not None else ""))  # fmt: skip
            last = result.occurrences[-1].at.isoformat() if result.occurrences else "-"
            counts = ", ".join(f"{k} {v}" for k, v in sorted(totals.items())) or "nothing"
            print(f"batch {batches}: up to {last}: {counts}", flush=True)
            start = result.resume_from
    verb = "would enqueue" if args.dry_run else "enqueued"
    created = totals.get("would_create" if args.dry_run else "created", 0)
    print(
        f"{s.key or s.id}: {verb} {created}, existing {totals.get('existing', 0)}, "
        f"skipped {totals.get('would_skip' if args.dry_run else 'skipped', 0)} (overlap)"
    )
    return 0


def cmd_preview(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        s = _find(conn, args.key)
    after = args.after or SystemClock().now()  # the composition root reads the clock
    items = preview(s, after, args.count)
    if args.json:
        print(json.dumps([
            {"utc": o.at.strftime("%Y-%m-%dT%H:%M:%SZ"), "local": o.local.isoformat(),
             "nominal": o.nominal.isoformat(), "adjusted": o.adjusted, "key": o.key}
            for o in items
        ]))  # fmt: skip
        return 0
    print(f"{s.key or s.id}: {json.dumps(s.rule_json)} in {s.zone}")
    for o in items:
        mark = f"  <- {o.adjusted}" if o.adjusted else ""
        print(f"  {o.local.isoformat():<28} {o.at.strftime('%Y-%m-%dT%H:%M:%SZ')}{mark}")
    return 0


def cmd_overdue(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        items = health.overdue_schedules(conn, after=args.after, limit=args.limit)
    if args.json:
        print(json.dumps([
            {"id": o.id, "key": o.key, "subject": o.subject, "job_type": o.job_type,
             "organization_id": None if o.organization_id is None else str(o.organization_id),
             "next_run_at": o.next_run_at.isoformat(), "occurrence_key": o.next_occurrence_key,
             "overdue_seconds": round(o.overdue_seconds, 3)}
            for o in items
        ]))  # fmt: skip
        return 0
    print(f"{'id':>7} {'key/subject':<24} {'job_type':<22} {'next_run_at':<26} overdue")
    for o in items:
        name = o.key or (f"subject={o.subject}" if o.subject else "-")
        print(
            f"{o.id:>7} {name:<24} {o.job_type:<22} {o.next_run_at.isoformat():<26} "
            f"{o.overdue_seconds:,.0f} s"
        )
    after = int(args.after.total_seconds())
    why = "; no scheduler replica is enqueueing them" if items else ""
    print(f"({len(items)} schedule(s) overdue by more than {after} s{why})")
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "scheduler",
        help="run a scheduler replica (run as many as you like)",
        description="Run a scheduler replica until SIGTERM or SIGINT: enqueue each due "
        "occurrence once (replicas coordinate through the database; run as many as you like).",
    )
    database_arg(p, production=True)
    config_args(p, SchedulerConfig, "lookahead", "max_lookahead", "batch_size", "interval")
    p.add_argument(
        "--name", type=text("--name"), help="this replica's name in logs (default: host:pid:n)"
    )
    p.add_argument(
        "--definitions", metavar="FILE", help="a TOML file of definitions to sync at start-up"
    )
    p.add_argument("--migrate", action="store_true", help="apply migrations before starting")
    switch = p.add_mutually_exclusive_group()
    switch.add_argument(
        "--no-maintenance",
        action="store_true",
        help="do not sync the built-in maintenance definitions (lease recovery, retention, "
        "tzdb, attempt rollup) at start; by default every replica does, and every worker "
        f"serves their queue {MAINTENANCE_QUEUE}",
    )
    switch.add_argument(
        "--maintenance",
        action="store_true",
        help="sync the built-in maintenance definitions at start: the default, kept for "
        "command lines written before it was",
    )
    metrics_args(p, health.DEFAULT_MAX_SCHEDULER_LAG)
    log_args(p)
    p.set_defaults(func=cmd_scheduler)

    schedules = sub.add_parser(
        "schedules",
        help="definitions and schedules",
        description="Sync definitions from a TOML file; list, show and preview schedules.",
    )
    ssub = schedules.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    q = ssub.add_parser(
        "sync",
        help="create, update and remove definitions from a TOML file",
        description="Create, update and remove definitions (schedules with a key) so that the "
        "database matches a TOML file of [[schedule]] tables.",
    )
    database_arg(q)
    q.add_argument("file", metavar="FILE", help="the TOML file of [[schedule]] tables")
    q.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    q.set_defaults(func=cmd_sync)
    q = ssub.add_parser("list", help="list schedules", description="List schedules.")
    database_arg(q)
    q.add_argument(
        "--limit",
        type=positive_int("--limit", MAX_COUNT),
        default=200,
        metavar="N",
        help=f"at most this many (1 to {MAX_COUNT:,})",
    )
    after_arg(q, "schedule")
    q.set_defaults(func=cmd_list)
    q = ssub.add_parser(
        "show", help="one schedule by key or id", description="One schedule, by key or id."
    )
    database_arg(q)
    q.add_argument("key", metavar="KEY_OR_ID", help="the schedule's key, or its numeric id")
    q.set_defaults(func=cmd_show)
    q = ssub.add_parser(
        "preview",
        help="a schedule's next occurrences, DST marks included",
        description="A stored schedule's next occurrences, with the DST policy that touched each.",
    )
    database_arg(q)
    q.add_argument("key", metavar="KEY_OR_ID", help="the schedule's key, or its numeric id")
    q.add_argument(
        "--count",
        type=positive_int("--count", MAX_PREVIEW),
        default=10,
        metavar="N",
        help=f"how many occurrences (1 to {MAX_PREVIEW:,})",
    )
    q.add_argument(
        "--after", type=instant, metavar="ISO", help="start after this instant (default: now)"
    )
    q.add_argument("--json", action="store_true", help="print a JSON list")
    q.set_defaults(func=cmd_preview)
    q = ssub.add_parser(
        "overdue",
        help="schedules whose next occurrence is past with no job for it",
        description="Active schedules whose next occurrence is more than --after seconds past: "
        "no job exists for it (no scheduler replica ran, or none keeps up). Most overdue first.",
    )
    database_arg(q)
    q.add_argument(
        "--after",
        type=seconds("--after"),
        default=str(int(health.DEFAULT_OVERDUE_AFTER.total_seconds())),
        metavar="SECONDS",
        help="overdue by more than this (seconds; default "
        f"{int(health.DEFAULT_OVERDUE_AFTER.total_seconds())})",
    )
    list_args(q)
    q.set_defaults(func=cmd_overdue)
    _register_operations(ssub)


def _one_schedule(
    ssub: SubParsers[argparse.ArgumentParser], name: str, help: str, description: str
) -> argparse.ArgumentParser:
    """A command on one schedule: ``tockwork schedules NAME KEY_OR_ID --database-url ...``."""
    q = ssub.add_parser(name, help=help, description=description)
    database_arg(q)
    q.add_argument("key", metavar="KEY_OR_ID", help="the schedule's key, or its numeric id")
    return q


def _register_operations(ssub: SubParsers[argparse.ArgumentParser]) -> None:
    """pause, resume, trigger and backfill (issue 24)."""
    q = _one_schedule(
        ssub,
        "pause",
        "pause a schedule, with a note and an optional end",
        "Pause a schedule: nothing is enqueued until it is resumed, or until "
        "--until, when it resumes by itself; the occurrences in the pause are not caught up.",
    )
    q.add_argument(
        "--note", type=text("--note", MAX_NOTE), metavar="TEXT", help="why (shown with it)"
    )
    q.add_argument("--until", type=instant, metavar="ISO", help="resume by itself at this instant")
    q.set_defaults(func=cmd_pause)
    q = _one_schedule(
        ssub,
        "resume",
        "resume a paused schedule",
        "Resume a paused schedule from now on (the paused occurrences are not caught up).",
    )
    q.set_defaults(func=cmd_resume)
    q = _one_schedule(
        ssub,
        "trigger",
        "run a schedule now, once more",
        "Enqueue one extra occurrence of a schedule, to run now. Its nominal time "
        "(--at, default now) is its identity: the same --at twice gives one job. The overlap "
        "policy applies.",
    )
    q.add_argument("--at", type=instant, metavar="ISO", help="the nominal time (default: now)")
    q.add_argument(
        "--overlap", choices=_OVERLAPS, help="the overlap policy (default: the schedule's)"
    )
    q.set_defaults(func=cmd_trigger)
    q = _one_schedule(
        ssub,
        "backfill",
        "enqueue a past range's occurrences",
        "Enqueue the occurrences of a schedule at or after --start and before "
        "--end (in the past) under the scheduler's own occurrence keys: one that already has "
        "a job is not enqueued again. Works in batches, one transaction each, and prints "
        "progress; --dry-run says what it would do.",
    )
    q.add_argument("--start", type=instant, required=True, metavar="ISO", help="range start")
    q.add_argument(
        "--end", type=instant, required=True, metavar="ISO", help="range end (exclusive)"
    )
    q.add_argument(
        "--overlap", choices=_OVERLAPS, help="the overlap policy (default: allow, every one)"
    )
    q.add_argument(
        "--batch",
        type=positive_int("--batch", MAX_BACKFILL_BATCH),
        default=DEFAULT_BACKFILL_BATCH,
        metavar="N",
        help=f"occurrences per transaction (1 to {MAX_BACKFILL_BATCH:,})",
    )
    q.add_argument("--dry-run", action="store_true", help="say what would happen, do nothing")
    q.add_argument("--verbose", action="store_true", help="print each occurrence")
    q.set_defaults(func=cmd_backfill)
