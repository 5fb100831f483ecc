"""``tockwork migrate | worker``: bring the schema up to date, run handlers."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping

import jobs
from jobs import migrate
from jobs.internal import collect_less, logs, validate
from scheduler import health
from scheduler.cli.common import (
    MAX_CONCURRENCY,
    InputError,
    SubParsers,
    config_args,
    config_from_args,
    connect,
    connect_kwargs,
    database_arg,
    ensure_schema,
    import_attribute,
    listen_url,
    listen_url_arg,
    log_args,
    metrics_args,
    pooler,
    resolve_url,
    text,
)
from scheduler.maintenance import QUEUE as MAINTENANCE_QUEUE
from scheduler.maintenance import with_maintenance
from scheduler.migrations import COMPONENTS, OPTIONAL
from timezones.errors import shown


def _queue(text: str) -> tuple[str, int]:
    name, sep, n = text.partition("=")
    if name != name.strip() or not name.isprintable():
        # The queue name pattern's "$" would let "default\n" through to the table's CHECK.
        raise argparse.ArgumentTypeError(f"--queue: invalid queue name {shown(name)}")
    try:
        validate.queue_name(name, "--queue")
    except jobs.InvalidJob as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not sep:
        return name, 1
    if not (n.isascii() and n.isdigit()) or not 1 <= int(n) <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(
            f"--queue {name}: the concurrency must be an integer from 1 to {MAX_CONCURRENCY}, "
            f"got {shown(n)} (NAME=CONCURRENCY)"
        )
    return name, int(n)


def _queues(given: list[tuple[str, int]]) -> dict[str, int]:
    """The ``--queue`` flags as a mapping; a queue given two concurrencies is refused (the last
    one won silently: issue 26). The same value repeated is harmless."""
    queues: dict[str, int] = {}
    for name, concurrency in given:
        if queues.setdefault(name, concurrency) != concurrency:
            raise InputError(
                f"--queue {name} given twice, with {queues[name]} and {concurrency} threads"
            )
    return queues


def load_app(spec: str) -> Mapping[str, jobs.Handler]:
    """Import ``module:attribute``: a mapping of job type to handler, or a function making one."""
    value = import_attribute(spec)
    if not isinstance(value, Mapping) or not all(callable(h) for h in value.values()):
        raise InputError(f"--app {spec!r} must name a mapping of job type to handler")
    if not value:  # a worker that serves nothing: refused before anything is written
        raise InputError(f"--app {spec!r} has no handler: it must map at least one job type")
    return value


def cmd_migrate(args: argparse.Namespace) -> int:
    components = (*COMPONENTS, *(OPTIONAL[name] for name in args.with_components or ()))
    with connect(args, schema=False) as conn:
        applied = migrate(conn, components)
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    url = resolve_url(args.database_url, args)
    # Apps that open their own connections (scheduler.maintenance:app, the simulated reminders)
    # find the worker's database here, also when their factory runs (so: before loading them);
    # pooler() exports the pooler mode for them the same way.
    os.environ["DATABASE_URL"] = url
    mode = pooler(args)
    listen_on = listen_url(args)
    # Behind a transaction pooler without a direct --listen-url the worker polls only (the
    # worker says so once in its log), and /healthz knows it.
    poll_only = args.no_listen or (mode == "transaction" and listen_on is None)
    queues = _queues(args.queue) if args.queue else dict(jobs.WorkerConfig().queues)
    if args.migrate:
        # Before the app: its factory may open connections and install a component of its own
        # on top of the core schema (the simulated provider's table, scheduler.simulated).
        ensure_schema(url, apply=True, flag=True)
    handlers = load_app(args.app)
    if not args.no_maintenance:
        # The built-in maintenance needs no extra process (scheduler/maintenance.py): one
        # thread of every worker serves its queue, which holds nothing else.
        handlers, queues = with_maintenance(handlers, queues, url)
    config = config_from_args(jobs.WorkerConfig, args, queues=queues)
    if not args.migrate:
        ensure_schema(url, apply=False, flag=True)
    worker = jobs.Worker(
        url,
        handlers,
        config=config,
        name=args.name,
        connect_kwargs=connect_kwargs(args),
        pooler=mode,
        listen_conninfo=listen_on,
    )
    # The process is the worker's: its garbage collector set for batches (jobs.worker).
    collect_less()
    server = None
    if args.metrics_port is not None:
        check = health.Health(
            url,
            listening=lambda: worker.listening,
            poll_only=poll_only,
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


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "migrate",
        help="apply the database migrations (safe to run concurrently)",
        description="Apply the database migrations; safe to run concurrently.",
    )
    database_arg(p)
    p.add_argument(
        "--with",
        dest="with_components",
        action="append",
        choices=sorted(OPTIONAL),
        help="also apply an opt-in component (repeatable): simulated = the simulated push "
        "provider's table",
    )
    p.set_defaults(func=cmd_migrate)

    p = sub.add_parser(
        "worker",
        help="run handlers for jobs of the given queues",
        description="Claim jobs of the given queues and run their handlers until SIGTERM or "
        "SIGINT (then running handlers get --grace seconds to finish).",
    )
    database_arg(p, production=True)
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="a mapping {job_type: handler}, or a function returning one; modules resolve from "
        "the current directory (required)",
    )
    default_queues = ",".join(f"{q}={n}" for q, n in jobs.WorkerConfig().queues.items())
    p.add_argument(
        "--queue",
        action="append",
        type=_queue,
        metavar="NAME=N",
        help=f"a queue and its concurrency, 1 to {MAX_CONCURRENCY} handler threads "
        f"(repeatable; default: {default_queues})",
    )
    p.add_argument(
        "--name", type=text("--name"), help="worker name recorded in leases and history "
        "(default: host:pid)"
    )  # fmt: skip
    config_args(p, jobs.WorkerConfig, "lease", "grace", "poll_interval", "listen")
    listen_url_arg(p)
    p.add_argument("--migrate", action="store_true", help="apply migrations before starting")
    p.add_argument(
        "--no-maintenance",
        action="store_true",
        help=f"do not serve the built-in maintenance jobs (queue {MAINTENANCE_QUEUE}, one "
        "thread, added to the queues given); by default every worker does",
    )
    metrics_args(p, health.DEFAULT_MAX_SCHEDULER_LAG)
    log_args(p)
    p.set_defaults(func=cmd_worker)
