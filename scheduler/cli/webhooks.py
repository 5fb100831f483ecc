"""``tockwork webhooks add|list|show|disable|enable|rotate-secret|set-rate-limit|remove|redeliver``:
outbound webhook endpoints (scheduler.webhooks, docs/webhooks.md).

A signing secret is printed once, by ``add`` and ``rotate-secret`` (the receiver needs it);
no other command prints one, ``--json`` included. Every argument is checked before the database
is reached, the URL by the SSRF guard too (``TOCKWORK_WEBHOOK_ALLOW`` lets local receivers in).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scheduler.cli.common import (
    MAX_COUNT,
    REFUSES,
    InputError,
    SubParsers,
    connect,
    database_arg,
    event_id,
    instant,
    integer,
    job_id,
    positive_int,
    seconds,
    text,
)
from scheduler.cli.devices import organization
from scheduler.webhooks import endpoints as api
from scheduler.webhooks.delivery import redeliver_event, redeliver_failed
from scheduler.webhooks.ssrf import Guard
from timezones.errors import shown


def event_type(value: str) -> str:
    """An argparse type: an event type or a prefix pattern (``order.paid``, ``order.*``)."""
    if len(value) > 200 or not api.EVENT_TYPE.match(value):
        raise argparse.ArgumentTypeError(
            f"--event-type must be an event type such as order.paid or a pattern such as "
            f"order.*, got {shown(value)}"
        )
    return value


REFUSES[event_type] = ("", "*", "a..b", "order.*.x", "has space", "x" * 201, ".a")


def _when(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def _view(endpoint: api.Endpoint) -> dict[str, Any]:
    """What the commands show of an endpoint (it holds no secret)."""
    return {
        "id": endpoint.id,
        "organization_id": (
            None if endpoint.organization_id is None else str(endpoint.organization_id)
        ),
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": endpoint.event_types,
        "rate_limit": endpoint.rate_limit,
        "enabled": endpoint.enabled,
        "disabled_at": _when(endpoint.disabled_at),
        "disabled_reason": endpoint.disabled_reason,
        "consecutive_failures": endpoint.consecutive_failures,
        "failing_since": _when(endpoint.failing_since),
        "last_success_at": _when(endpoint.last_success_at),
        "last_failure_at": _when(endpoint.last_failure_at),
        "created_at": _when(endpoint.created_at),
        "updated_at": _when(endpoint.updated_at),
    }


def _print(view: dict[str, Any]) -> None:
    for name, value in view.items():
        shown_value = "-" if value is None else value
        if isinstance(value, list):
            shown_value = ", ".join(str(v) for v in value)
        print(f"{name:>20}: {shown_value}")


def cmd_add(args: argparse.Namespace) -> int:
    # Checked before connecting: bad input (and an unsafe URL) never reaches the database.
    api.check_description(args.description)
    event_types = api.check_event_types(args.event_type)
    Guard.from_env().check_url(args.url)
    with connect(args) as conn:
        created = api.add_endpoint(
            conn,
            args.url,
            organization_id=args.org,
            description=args.description,
            event_types=event_types,
            rate_limit=args.rate_limit,
        )
    view = _view(created.endpoint)
    if args.json:
        print(json.dumps({**view, "secret": created.secret}))
        return 0
    _print(view)
    print(f"{'secret':>20}: {created.secret}")
    print("(the secret is shown this once: give it to the receiver now)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    by_org = {} if args.org is None else {"organization_id": args.org}
    with connect(args) as conn:
        items = api.list_endpoints(
            conn,
            include_disabled=not args.enabled_only,
            after=args.after,
            limit=args.limit,
            **by_org,
        )
    if args.json:
        print(json.dumps([_view(x) for x in items]))
        return 0
    print(f"{'id':>8} {'organization':<36} {'state':<9} {'failures':>8}  url")
    for x in items:
        org = str(x.organization_id) if x.organization_id else "-"
        state = "enabled" if x.enabled else "disabled"
        print(f"{x.id:>8} {org:<36} {state:<9} {x.consecutive_failures:>8}  {x.url}")
    more = f"; next page: --after {items[-1].id}" if len(items) == args.limit else ""
    print(f"({len(items)} endpoint(s){more})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        endpoint = api.get_endpoint(conn, args.id)
        if endpoint is None:
            print(f"{args.prog}: failed: no webhook endpoint {args.id}", file=sys.stderr)
            return 1
        secrets = api.endpoint_secrets(conn, args.id)
        attempts = api.recent_attempts(conn, args.id, limit=args.attempts)
    view = _view(endpoint)
    secret_views = [
        {"id": s.id, "created_at": _when(s.created_at), "expires_at": _when(s.expires_at)}
        for s in secrets
    ]
    attempt_views = [
        {
            "at": _when(a.attempted_at),
            "event_id": str(a.event_id),
            "job_id": a.job_id,
            "attempt": a.attempt,
            "outcome": a.outcome,
            "status": a.status,
            "duration_ms": None if a.duration_ms is None else round(a.duration_ms, 1),
            "error": a.error,
            "response": a.response,
        }
        for a in attempts
    ]
    if args.json:
        print(json.dumps({**view, "secrets": secret_views, "attempts": attempt_views}))
        return 0
    _print(view)
    for s in secret_views:
        print(f"{'secret':>20}: #{s['id']} since {s['created_at']}, until {s['expires_at'] or '-'}")
    print(f"recent attempts ({len(attempt_views)}):")
    for a in attempt_views:
        print(
            f"  {a['at']} {a['outcome']:<9} {a['status'] or '-':>4} "
            f"{a['duration_ms'] if a['duration_ms'] is not None else '-':>8} ms  "
            f"event {a['event_id']} job {a['job_id']}#{a['attempt']}  {a['error'] or ''}"
        )
    return 0


def cmd_disable(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        endpoint = api.disable_endpoint(conn, args.id, reason=args.reason)
    print(f"endpoint {endpoint.id} disabled: {endpoint.disabled_reason}")
    return 0


def cmd_enable(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        enabled = api.enable_endpoint(conn, args.id)
    print(
        f"endpoint {enabled.endpoint.id} enabled; "
        f"{len(enabled.requeued)} held delivery(ies) requeued"
    )
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        rotated = api.rotate_secret(conn, args.id, overlap=args.overlap)
    if args.json:
        print(
            json.dumps(
                {
                    "endpoint_id": rotated.endpoint_id,
                    "secret": rotated.secret,
                    "others_expire_at": _when(rotated.others_expire_at),
                }
            )
        )
        return 0
    print(f"new secret of endpoint {rotated.endpoint_id}: {rotated.secret}")
    print(f"(shown this once; the previous secrets sign until {_when(rotated.others_expire_at)})")
    return 0


def cmd_set_rate_limit(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        endpoint = api.set_rate_limit(conn, args.id, None if args.none else args.per_second)
    limit = "no rate limit" if endpoint.rate_limit is None else f"{endpoint.rate_limit}/s"
    print(f"endpoint {endpoint.id}: {limit}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        removed = api.remove_endpoint(conn, args.id)
    if not removed:
        print(f"{args.prog}: failed: no webhook endpoint {args.id}", file=sys.stderr)
        return 1
    print(f"removed webhook endpoint {args.id}")
    return 0


def cmd_redeliver(args: argparse.Namespace) -> int:
    if args.event is None and (args.endpoint is None or args.since is None):
        raise InputError("give --event, or --endpoint with --since")
    with connect(args) as conn:
        if args.event is not None:
            ids = redeliver_event(conn, args.event, endpoint_id=args.endpoint)
            print(f"{len(ids)} delivery job(s) enqueued for event {args.event}")
        else:
            ids = redeliver_failed(conn, args.endpoint, since=args.since)
            print(f"{len(ids)} failed delivery(ies) of endpoint {args.endpoint} requeued")
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    webhooks = sub.add_parser(
        "webhooks",
        help="outbound webhook endpoints",
        description="Register, list, show, disable, enable and remove webhook endpoints; rotate "
        "their signing secrets; change their rate limits; redeliver events. Secrets are shown "
        "once.",
    )
    wsub = webhooks.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")
    endpoint_id = job_id("ID")

    q = wsub.add_parser(
        "add",
        help="register an endpoint (prints its signing secret once)",
        description="Register a webhook endpoint; the URL must be http(s), without credentials, "
        "and must not point at an internal address. Prints the signing secret once.",
    )
    database_arg(q)
    q.add_argument("url", metavar="URL", help="where the events are POSTed")
    q.add_argument("--org", type=organization, metavar="UUID", help="the endpoint's organization")
    q.add_argument("--description", type=text("--description", 500), help="free text")
    q.add_argument(
        "--event-type",
        type=event_type,
        action="append",
        metavar="TYPE",
        help="an event type (or a pattern such as order.*) to send; repeat for more; none: all",
    )
    q.add_argument(
        "--rate-limit",
        type=integer("--rate-limit", 1, api.MAX_RATE_LIMIT),
        metavar="N",
        help=f"deliveries a second at most (1 to {api.MAX_RATE_LIMIT:,}; none: no limit)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_add)

    q = wsub.add_parser("list", help="list endpoints, by id", description="List endpoints.")
    database_arg(q)
    q.add_argument("--org", type=organization, metavar="UUID", help="only this organization's")
    q.add_argument("--enabled-only", action="store_true", help="leave out disabled endpoints")
    q.add_argument(
        "--after",
        type=integer("--after", 0, 2**63 - 1),
        metavar="ID",
        help="the page after this endpoint id",
    )
    q.add_argument(
        "--limit",
        type=positive_int("--limit", min(MAX_COUNT, api.MAX_LIST)),
        default=100,
        metavar="N",
        help=f"at most this many (1 to {min(MAX_COUNT, api.MAX_LIST):,})",
    )
    q.add_argument("--json", action="store_true", help="print a JSON list")
    q.set_defaults(func=cmd_list)

    q = wsub.add_parser(
        "show",
        help="one endpoint, its secrets' dates and its recent attempts",
        description="One endpoint with its health, when its secrets stop signing (never the "
        "secrets), and its recent delivery attempts; exit 1 when there is none.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    q.add_argument(
        "--attempts",
        type=positive_int("--attempts", 1000),
        default=20,
        metavar="N",
        help="recent attempts to show (1 to 1,000)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_show)

    q = wsub.add_parser(
        "disable",
        help="stop sending to an endpoint (its deliveries are held)",
        description="Disable an endpoint: nothing more is sent, its deliveries are held until "
        "it is enabled, and an endpoint.disabled fact is recorded.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    q.add_argument(
        "--reason",
        type=text("--reason", api.MAX_REASON),
        default="disabled by an operator",
        help="why (shown by show and in the endpoint.disabled fact)",
    )
    q.set_defaults(func=cmd_disable)

    q = wsub.add_parser(
        "set-rate-limit",
        help="change an endpoint's rate limit (deliveries a second; none: no limit)",
        description="Change an endpoint's rate limit, shared by every worker process: at most "
        "--per-second deliveries a second, or --none to lift it. Applies at the endpoint's "
        "next delivery.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    rate = q.add_mutually_exclusive_group(required=True)
    rate.add_argument(
        "--per-second",
        type=integer("--per-second", 1, api.MAX_RATE_LIMIT),
        metavar="N",
        help=f"at most N deliveries a second (1 to {api.MAX_RATE_LIMIT:,})",
    )
    rate.add_argument("--none", action="store_true", help="lift the endpoint's limit")
    q.set_defaults(func=cmd_set_rate_limit)

    q = wsub.add_parser(
        "enable",
        help="send to an endpoint again (its held deliveries are requeued)",
        description="Enable an endpoint again; its held deliveries are requeued.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    q.set_defaults(func=cmd_enable)

    q = wsub.add_parser(
        "rotate-secret",
        help="add a new signing secret (printed once); the old ones sign on for an overlap",
        description="Add a new signing secret, printed once; the previous secrets keep signing "
        "for --overlap seconds so the receiver can switch without refusing a request.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    q.add_argument(
        "--overlap",
        type=seconds("--overlap", maximum=api.MAX_OVERLAP.total_seconds()),
        default=api.DEFAULT_OVERLAP,
        metavar="SECONDS",
        help="seconds the previous secrets still sign (default 86400, a day; 0: stop them now)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_rotate)

    q = wsub.add_parser(
        "remove",
        help="delete an endpoint, its secrets and its attempts",
        description="Delete an endpoint; exit 1 when there is none.",
    )
    database_arg(q)
    q.add_argument("id", type=endpoint_id, metavar="ID", help="the endpoint's id")
    q.set_defaults(func=cmd_remove)

    q = wsub.add_parser(
        "redeliver",
        help="send an event again, or requeue an endpoint's failed deliveries since a time",
        description="--event UUID [--endpoint ID]: send that event again (a new delivery per "
        "endpoint). --endpoint ID --since INSTANT: requeue the endpoint's dead or held "
        "deliveries attempted since then.",
    )
    database_arg(q)
    q.add_argument("--event", type=event_id, metavar="UUID", help="the event to send again")
    q.add_argument("--endpoint", type=endpoint_id, metavar="ID", help="only to this endpoint")
    q.add_argument(
        "--since", type=instant, metavar="INSTANT", help="failed deliveries since (ISO 8601)"
    )
    q.set_defaults(func=cmd_redeliver)
