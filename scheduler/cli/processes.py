"""``tockwork processes``: the registry of running workers, schedulers, relays and dashboards.

Each long-running process upserts its row at its heartbeat and deletes it when it stops
(:mod:`jobs.processes`); a process not seen for three heartbeats is stale (it died without
saying so), shown with ``--all`` until it is pruned. See docs/operations.md.
"""

from __future__ import annotations

import argparse
import json

from jobs import processes
from scheduler.cli.common import SubParsers, connect, database_arg


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def cmd_processes(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        found = processes.list_processes(conn, kind=args.kind, include_stale=args.all)
        served = processes.queue_workers(conn)
    if args.json:
        print(json.dumps([p.as_json() for p in found]))
        return 0
    print(
        f"{'kind':<10} {'name':<36} {'host':<20} {'pid':>7} {'version':<9} "
        f"{'queues':<28} {'jobs':>5} {'up':>6} {'seen':>6}  state"
    )
    for p in found:
        queues = ",".join(f"{q}={n}" for q, n in p.queues.items()) or "-"
        up = _age(max(0.0, (p.last_seen_at - p.started_at).total_seconds() + p.seen_age))
        print(
            f"{p.kind:<10} {p.name:<36} {p.host:<20} {p.pid:>7} {p.version or '-':<9} "
            f"{queues:<28} {p.jobs_in_hand:>5} {up:>6} {_age(p.seen_age):>6}  "
            f"{'live' if p.live else 'stale'}"
        )
    live = sum(1 for p in found if p.live)
    line = f"({live} live process(es)"
    if args.all:
        line += f", {len(found) - live} stale"
    print(line + ")")
    if served and args.kind in (None, "worker"):
        print("live workers per queue: " + ", ".join(
            f"{s.queue} {s.workers} (concurrency {s.concurrency})" for s in served
        ))  # fmt: skip
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Add ``tockwork processes``."""
    p = sub.add_parser(
        "processes",
        help="list the running workers, schedulers, relays and dashboards",
        description="List the processes registered by their heartbeats: host, pid, version, "
        "the queues a worker serves with their concurrency, the jobs it holds, how long it has "
        "been up and when it was last seen. A process not seen for three heartbeats is stale.",
    )
    database_arg(p)
    p.add_argument(
        "--kind",
        choices=processes.KINDS,
        help="only processes of this kind (worker, scheduler, relay, dashboard)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="also list stale processes (not seen for three heartbeats, not yet pruned)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_processes)
