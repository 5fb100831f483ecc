"""``tockwork scheduler`` (a replica) and ``tockwork schedules
sync|list|show|preview|overdue``."""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

import psycopg

from jobs.internal import logs
from scheduler import health
from scheduler.cli.common import (
    MAX_COUNT,
    InputError,
    SubParsers,
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
from scheduler.maintenance import sync_maintenance
from scheduler.model import Schedule
from scheduler.schedules import get_schedule, list_schedules, preview
from scheduler.tick import Scheduler, SchedulerConfig
from timezones import SystemClock
from timezones.errors import shown

MAX_PREVIEW = 1000  # occurrences a preview prints (each one is a bounded computation)


def cmd_scheduler(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    url = resolve_url(args.database_url, args)
    definitions = _load(args.definitions, "--definitions") if args.definitions else None
    kwargs = connect_kwargs(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=args.migrate, flag=True)
    with connect(args) as conn:
        if args.maintenance:
            with conn.transaction():
                built_in = sync_maintenance(conn)
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


def _row(s: Schedule) -> str:
    nxt = s.next_run_at.isoformat() if s.next_run_at else "-"
    name = s.key or (f"subject={s.subject}" if s.subject else "-")
    rule = json.dumps({k: v for k, v in s.rule_json.items() if k != "version"})
    return (
        f"{s.id:>7} {name:<24} {s.job_type:<22} {s.zone:<20} {nxt:<26} "
        f"{'paused' if s.paused else 'active':<7} {rule}"
    )


def cmd_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        items = list_schedules(conn, limit=args.limit)
    print(f"{'id':>7} {'key/subject':<24} {'job_type':<22} {'zone':<20} {'next_run_at':<26} state")
    for s in items:
        print(_row(s))
    print(f"({len(items)} schedule(s))")
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
        "tzdb_version", "version", "source", "created_at", "updated_at", "max_lateness_seconds",
    ):  # fmt: skip
        print(f"{name:>22}: {getattr(s, name)}")
    print(f"{'rule':>22}: {json.dumps(s.rule_json)}")
    print(f"{'payload':>22}: {json.dumps(s.payload)}")
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
    p.add_argument(
        "--maintenance",
        action="store_true",
        help="sync the built-in maintenance definitions (lease recovery, retention, tzdb, "
        "attempt rollup)",
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
