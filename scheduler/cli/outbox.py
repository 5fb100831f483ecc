"""``tockwork relay`` (project outbox events into jobs) and ``tockwork outbox dead|retry``.

See docs/outbox.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable

from jobs import Relay, RelayConfig, outbox
from jobs.internal import logs
from jobs.outbox import Projection, Projections
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
    event_id,
    import_attribute,
    listen_url,
    listen_url_arg,
    log_args,
    pooler,
    positive_int,
    resolve_url,
    text,
)


def load_projections(spec: str) -> Projections:
    """Import ``module:attribute``: a Projections registry, an iterable of Projection, or a
    callable returning either."""
    value = import_attribute(spec)
    projections: Projections | None = None
    if isinstance(value, Projections):
        projections = value
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
        if all(isinstance(p, Projection) for p in items):
            projections = Projections(items)
    if projections is None:
        raise InputError(
            f"--app {spec!r} must name a jobs.outbox.Projections or a list of "
            "jobs.outbox.Projection"
        )
    if not len(projections):  # a relay that projects nothing: refused, as an empty worker is
        raise InputError(
            f"--app {spec!r} has no projection: it must register at least one (issue 26)"
        )
    return projections


def cmd_relay(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, json_lines=args.log_json)
    url = resolve_url(args.database_url, args)
    # Projections that open their own connections (scheduler.webhooks.projection) find the
    # relay's database here, also when the app is loaded (so: before loading it), as a worker's do.
    os.environ["DATABASE_URL"] = url
    if args.lease <= args.poll_interval:
        raise InputError("--lease must be longer than --poll")
    projections = load_projections(args.app)
    kwargs = connect_kwargs(args)  # before ensure_schema: exports the pooler mode
    ensure_schema(url, apply=False)
    relay = Relay(
        url,
        projections,
        config=config_from_args(RelayConfig, args),
        name=args.name,
        connect_kwargs=kwargs,
        pooler=pooler(args),
        listen_conninfo=listen_url(args),
    )
    stats = relay.run()
    print(json.dumps(stats.__dict__), file=sys.stderr)
    return 0


def cmd_dead(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        events = outbox.dead_events(conn, limit=args.limit, after=args.after)
    if args.json:
        print(json.dumps([
            {"id": str(e.id), "event_type": e.event_type, "aggregate_type": e.aggregate_type,
             "aggregate_id": e.aggregate_id, "attempts": e.attempts, "last_error": e.last_error,
             "dead_at": e.dead_at.isoformat()}
            for e in events
        ]))  # fmt: skip
        return 0
    for e in events:
        where = f"{e.aggregate_type}:{e.aggregate_id}"
        print(
            f"{e.id}  {e.event_type:<28} {where:<32} attempts={e.attempts} "
            f"{e.dead_at:%Y-%m-%dT%H:%M:%SZ}  {e.last_error or ''}"
        )
    more = f"; next page: --after {events[-1].id}" if len(events) == args.limit else ""
    print(f"({len(events)} dead event(s){more})")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    if not args.id and not args.all:
        raise InputError("give --id EVENT_ID (repeatable) or --all")
    with connect(args) as conn:
        ids = outbox.retry_dead(conn, None if args.all else args.id)
    print(f"retried {len(ids)} event(s)")
    missing = [] if args.all else [i for i in dict.fromkeys(args.id) if i not in set(map(str, ids))]
    if missing:
        print(f"{args.prog}: failed: no dead event with --id {', '.join(missing[:20])}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Add ``tockwork relay`` and ``tockwork outbox dead|retry``."""
    box = sub.add_parser(
        "outbox",
        help="inspect and retry dead outbox events",
        description="Inspect outbox events set aside as dead, and put them back in the stream.",
    )
    bsub = box.add_subparsers(dest="outbox_command", required=True, metavar="ACTION")
    q = bsub.add_parser(
        "dead",
        help="list events set aside after their projections failed",
        description="List outbox events set aside after their projections failed.",
    )
    database_arg(q)
    q.add_argument(
        "--limit",
        type=positive_int("--limit", MAX_COUNT),
        default=100,
        metavar="N",
        help=f"at most this many (1 to {MAX_COUNT:,})",
    )
    q.add_argument(
        "--after",
        type=event_id,
        metavar="ID",
        help="the page after this event id (the last id of the previous page)",
    )
    q.add_argument("--json", action="store_true", help="print a JSON list")
    q.set_defaults(func=cmd_dead)
    q = bsub.add_parser(
        "retry",
        help="put dead events back in the stream (--id or --all is required)",
        description="Put dead events back in the stream with a fresh attempt budget. Give "
        "--id (repeatable) or --all; exits 1 when an --id matched no dead event.",
    )
    database_arg(q)
    q.add_argument(
        "--id", type=event_id, action="append", metavar="UUID", help="an event id (repeatable)"
    )
    q.add_argument("--all", action="store_true", help="every dead event")
    q.set_defaults(func=cmd_retry)

    p = sub.add_parser(
        "relay",
        help="project outbox events into jobs until stopped (SIGTERM/SIGINT)",
        description=(
            "Claim pending outbox events in bounded batches and enqueue the jobs their "
            "projections build, exactly once per (event, projection, index)."
        ),
    )
    database_arg(p, production=True)
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="the projections: a jobs.outbox.Projections, a list of Projection, or a callable "
        "returning either; modules resolve from the current directory (required)",
    )
    config_args(p, RelayConfig, "batch_size", "lease", "poll_interval", "max_attempts")
    p.add_argument(
        "--name",
        type=text("--name"),
        help="this relay's name in claimed_by (default: host:pid)",
    )
    config_args(p, RelayConfig, "listen")
    listen_url_arg(p)
    log_args(p)
    p.set_defaults(func=cmd_relay)
