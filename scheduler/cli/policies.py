"""``tockwork policies set|list|clear``: how each queue is claimed (fairness, per-key limits).

A policy is read by the claim statement of every worker (:mod:`jobs.policy`); setting or
clearing one notifies running workers at commit, so a change applies at their next claim
(within a second even when a notification is lost). See docs/jobs.md, "Fairness and per-key
concurrency".
"""

from __future__ import annotations

import argparse
import json
import sys

import jobs
from jobs import MAX_CONCURRENCY_PER_KEY
from scheduler.cli.common import SubParsers, connect, database_arg, positive_int, text


def _shown(policy: jobs.QueuePolicy) -> str:
    k = "none" if policy.concurrency_per_key is None else str(policy.concurrency_per_key)
    return f"queue {policy.queue}, fair={'yes' if policy.fair else 'no'}, concurrency per key {k}"


def cmd_set(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        # Checked before anything is written (jobs.InvalidJob names the field: exit 2).
        policy = jobs.set_queue_policy(
            conn, args.queue, fair=args.fair, concurrency_per_key=args.concurrency_per_key
        )
    print(f"policy set: {_shown(policy)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        policies = jobs.queue_policies(conn)
    if args.json:
        print(json.dumps([
            {"queue": p.queue, "fair": p.fair, "concurrency_per_key": p.concurrency_per_key}
            for p in policies
        ]))  # fmt: skip
        return 0
    print(f"{'queue':<32} {'fair':<5} concurrency_per_key")
    for p in policies:
        k = "-" if p.concurrency_per_key is None else str(p.concurrency_per_key)
        print(f"{p.queue:<32} {'yes' if p.fair else 'no':<5} {k}")
    print(f"({len(policies)} polic{'y' if len(policies) == 1 else 'ies'})")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        found = jobs.clear_queue_policy(conn, args.queue)
    if not found:
        print(f"{args.prog}: failed: no policy on queue {args.queue}", file=sys.stderr)
        return 1
    print(f"policy cleared: queue {args.queue} (claimed in plain order)")
    return 0


def _queue_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--queue", type=text("--queue", 63), required=True, metavar="QUEUE", help=help_text
    )


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Add ``tockwork policies set|list|clear``."""
    top = sub.add_parser(
        "policies",
        help="how queues are claimed: fairness across organizations, per-key concurrency",
        description="Set how a queue is claimed, for every worker: round robin across "
        "organizations (--fair) and at most K running jobs per concurrency key. Running "
        "workers apply a change at their next claim.",
    )
    psub = top.add_subparsers(dest="policies_command", required=True, metavar="ACTION")
    p = psub.add_parser(
        "set",
        help="set (replace) a queue's policy",
        description="Set a queue's policy, replacing the one it had: what is not given is off "
        "(plain order, no per-key limit).",
    )
    database_arg(p)
    _queue_arg(p, "the queue whose claims follow the policy")
    fair = p.add_mutually_exclusive_group()
    fair.add_argument(
        "--fair",
        dest="fair",
        action="store_true",
        help="claim round robin across the organizations with ready jobs",
    )
    fair.add_argument(
        "--no-fair", dest="fair", action="store_false", help="claim in plain order (the default)"
    )
    p.add_argument(
        "--concurrency-per-key",
        type=positive_int("--concurrency-per-key", MAX_CONCURRENCY_PER_KEY),
        metavar="K",
        help=f"at most K leased jobs per concurrency_key in the queue (1 to "
        f"{MAX_CONCURRENCY_PER_KEY:,}; jobs without a key are not limited)",
    )
    p.set_defaults(func=cmd_set, fair=False)
    p = psub.add_parser(
        "list", help="list the queue policies", description="List every queue's policy."
    )
    database_arg(p)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=cmd_list)
    p = psub.add_parser(
        "clear",
        help="remove a queue's policy",
        description="Remove a queue's policy (plain claims again); exits 1 when it has none.",
    )
    database_arg(p)
    _queue_arg(p, "the queue whose policy to remove")
    p.set_defaults(func=cmd_clear)
