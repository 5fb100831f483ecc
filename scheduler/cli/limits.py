"""``tockwork limits set|list|clear``: global rate limits per queue or job type.

A limit is read by the claim statement of every worker (:mod:`jobs.limits`), so a change here
applies to running workers at their next claim, within a second. See docs/operations.md.
"""

from __future__ import annotations

import argparse
import json
import sys

from jobs import RateLimit, limits
from scheduler.cli.common import SubParsers, connect, database_arg, positive_int, text


def _target(args: argparse.Namespace) -> str:
    return f"queue {args.queue}" if args.queue is not None else f"job type {args.job_type}"


def cmd_set(args: argparse.Namespace) -> int:
    limit = RateLimit(
        queue=args.queue,
        job_type=args.job_type,
        per_second=args.per_second,
        per_minute=args.per_minute,
        pause_on_rate_limited=not args.no_pause_on_rate_limited,
    )  # checked before anything is written
    with connect(args) as conn:
        limits.set_limit(conn, limit)
    minute = f", {limit.per_minute}/min" if limit.per_minute is not None else ""
    print(f"limit set: {_target(args)} at {limit.per_second}/s{minute}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        states = limits.list_limits(conn)
    if args.json:
        print(json.dumps([
            {"scope": s.limit.scope, "name": s.limit.name, "per_second": s.limit.per_second,
             "per_minute": s.limit.per_minute,
             "pause_on_rate_limited": s.limit.pause_on_rate_limited, "source": s.source,
             "paused_until": s.paused_until.isoformat() if s.paused_until else None,
             "second_tokens": round(s.second_tokens, 3),
             "minute_tokens": None if s.minute_tokens is None else round(s.minute_tokens, 3)}
            for s in states
        ]))  # fmt: skip
        return 0
    print(f"{'scope':<9} {'name':<32} {'per_s':>9} {'per_min':>10} {'source':<12} paused_until")
    for s in states:
        paused = f"{s.paused_until:%Y-%m-%dT%H:%M:%SZ}" if s.paused_until else "-"
        minute = "-" if s.limit.per_minute is None else str(s.limit.per_minute)
        print(f"{s.limit.scope:<9} {s.limit.name:<32} {s.limit.per_second:>9} {minute:>10} "
              f"{s.source:<12} {paused}")  # fmt: skip
    print(f"({len(states)} limit(s))")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        found = limits.clear_limit(conn, queue=args.queue, job_type=args.job_type)
    if not found:
        print(f"{args.prog}: failed: no limit on {_target(args)}", file=sys.stderr)
        return 1
    print(f"limit cleared: {_target(args)}")
    return 0


def _target_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--queue", type=text("--queue", 63), metavar="QUEUE", help="the limit of this queue"
    )
    group.add_argument(
        "--job-type",
        type=text("--job-type"),
        metavar="TYPE",
        help="the limit of this job type, in every queue",
    )


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Add ``tockwork limits set|list|clear``."""
    top = sub.add_parser(
        "limits",
        help="global rate limits per queue or job type",
        description="Limit how many jobs of a queue or of a job type start per second (and per "
        "minute) across every worker. Running workers apply a change at their next claim.",
    )
    lsub = top.add_subparsers(dest="limits_command", required=True, metavar="ACTION")
    p = lsub.add_parser(
        "set",
        help="create or replace a limit (--queue or --job-type, and --per-second)",
        description="Create or replace the limit of a queue or of a job type. A job held back "
        "by a limit waits in its queue without using an attempt.",
    )
    database_arg(p)
    _target_args(p)
    p.add_argument(
        "--per-second",
        type=positive_int("--per-second", limits.MAX_PER_SECOND),
        required=True,
        metavar="N",
        help=f"at most N starts per second (1 to {limits.MAX_PER_SECOND:,})",
    )
    p.add_argument(
        "--per-minute",
        type=positive_int("--per-minute", limits.MAX_PER_MINUTE),
        metavar="M",
        help=f"and at most M starts per minute (1 to {limits.MAX_PER_MINUTE:,})",
    )
    p.add_argument(
        "--no-pause-on-rate-limited",
        action="store_true",
        help="a handler's jobs.RateLimited retries its own job only (by default it pauses the "
        "whole limit for the retry delay)",
    )
    p.set_defaults(func=cmd_set)
    p = lsub.add_parser(
        "list", help="list the limits", description="List the limits and their pauses."
    )
    database_arg(p)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_list)
    p = lsub.add_parser(
        "clear",
        help="remove a limit (--queue or --job-type)",
        description="Remove the limit of a queue or of a job type; exits 1 when there is none.",
    )
    database_arg(p)
    _target_args(p)
    p.set_defaults(func=cmd_clear)
