"""``tockwork healthz | metrics-server``: health and metrics for operators and orchestrators."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from datetime import timedelta
from types import FrameType

from jobs.internal import logs
from jobs.primary import PrimaryWatch
from scheduler import health
from scheduler.cli.common import (
    SubParsers,
    database_arg,
    ensure_schema,
    log_args,
    pooler,
    port,
    positive_float,
    read_replica,
    read_url_arg,
    replication_arg,
    require_sync,
    resolve_url,
    seconds,
)


def _health(args: argparse.Namespace, read: str | None) -> health.Health:
    lag: timedelta = args.max_scheduler_lag
    replica_lag: timedelta = args.max_replica_lag
    return health.Health(
        resolve_url(args.database_url),
        poll_only=args.poll_only,
        max_scheduler_lag=lag or None,
        timeout=args.timeout,
        require_sync=require_sync(args),
        read_conninfo=read,
        max_replica_lag=replica_lag or None,
    )


def cmd_healthz(args: argparse.Namespace) -> int:
    resolve_url(args.database_url)  # a bad URL is a usage error before any connection
    pooler(args)  # exported: the checks connect in the pooler mode
    # A replica down is a failing check; a primary given as the replica is a usage error.
    read = read_replica(args, reachable=False, timeout=args.timeout)
    ok, details = _health(args, read)()
    print(json.dumps({"ok": ok, **details}, indent=None if args.compact else 2))
    return 0 if ok else 1


def cmd_metrics_server(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    url = resolve_url(args.database_url)
    pooler(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=False)
    read = read_replica(args)
    stop = threading.Event()

    def handle(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    # The handlers are in place before the server says it serves: a SIGTERM right after that
    # line stops it cleanly (exit 0) instead of killing it.
    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
    # This process has no service of its own: its scrapes follow the primary, and say once
    # when it changed (a failover), as the services do.
    watch = PrimaryWatch("metrics-server", logging.getLogger("tockwork.metrics"))
    server = health.serve(
        url,
        args.port,
        host=args.host,
        health=_health(args, read),
        read_conninfo=read,
        watch=watch,
    )
    try:
        stop.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        server.stop()
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    database_arg(p)
    replication_arg(p)
    p.add_argument(
        "--max-scheduler-lag",
        type=seconds("--max-scheduler-lag"),
        default=str(int(health.DEFAULT_MAX_SCHEDULER_LAG.total_seconds())),
        metavar="SECONDS",
        help="unhealthy when a schedule is overdue by more (seconds; 0: do not check)",
    )
    read_url_arg(p, health_checks=True)
    p.add_argument(
        "--max-replica-lag",
        type=seconds("--max-replica-lag"),
        default=str(int(health.DEFAULT_MAX_REPLICA_LAG.total_seconds())),
        metavar="SECONDS",
        help="with --read-url: unhealthy when the replica replays further behind the primary "
        "(seconds; 0: do not check)",
    )
    p.add_argument(
        "--poll-only",
        action="store_true",
        help="the workers run without LISTEN: do not check it",
    )
    p.add_argument(
        "--timeout",
        type=positive_float("--timeout", 300),
        default=2.0,
        metavar="SECONDS",
        help="connect and statement timeout of each check (seconds, above 0, at most 300)",
    )


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "healthz",
        help="check database, LISTEN and scheduler lag; exit 0 or 1",
        description="Check the database, LISTEN and the scheduler's lag (and, with --read-url, "
        "read what only reads from a replica and check its lag); print JSON; exit 0 when "
        "healthy, 1 when not, 2 on a usage error.",
    )
    _common(p)
    p.add_argument("--compact", action="store_true", help="one JSON line")
    p.set_defaults(func=cmd_healthz)

    p = sub.add_parser(
        "metrics-server",
        help="serve the database gauges on /metrics, and /healthz",
        description="Serve the database gauges on /metrics and the health check on /healthz "
        "until SIGTERM or SIGINT.",
    )
    _common(p)
    p.add_argument(
        "--port", type=port("--port"), required=True, help="port (0: any free port; required)"
    )
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    log_args(p)
    p.set_defaults(func=cmd_metrics_server)
