"""``tockwork devices add|list|show|remove``: the device registry (scheduler.devices).

An operator identifies a device by its id, subject and platform: a token is a credential (it
lets anyone push to that phone), so no command prints one in full, ``--json`` included; each
shows it redacted (its last six characters). ``add`` is for tests and support, an application
registers tokens through :func:`scheduler.devices.add_device` in its own transaction.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from scheduler.cli.common import (
    MAX_COUNT,
    REFUSES,
    InputError,
    SubParsers,
    connect,
    database_arg,
    integer,
    job_id,
    positive_int,
)
from scheduler.devices import (
    MAX_LIST,
    Device,
    add_device,
    check_channel,
    check_platform,
    check_subject,
    check_token,
    get_device,
    list_devices,
    remove_device,
)
from scheduler.push import redact_token
from timezones.errors import shown


def organization(text: str) -> uuid.UUID:
    """An argparse type: an organization id (a UUID)."""
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--org must be a UUID, got {shown(text)}") from None


REFUSES[organization] = ("x", "", "1234", "0193a8e4-0000-7000-8000-00000000000")


def _view(device: Device) -> dict[str, Any]:
    """What the commands show of a device: every field, the token redacted."""
    return {
        "id": device.id,
        "organization_id": None if device.organization_id is None else str(device.organization_id),
        "subject": device.subject,
        "channel": device.channel,
        "token": redact_token(device.token),
        "platform": device.platform,
        "valid": device.valid,
        "created_at": device.created_at.isoformat(),
        "updated_at": device.updated_at.isoformat(),
        "last_success_at": _when(device.last_success_at),
        "invalidated_at": _when(device.invalidated_at),
        "invalid_reason": device.invalid_reason,
    }


def _when(value: Any) -> str | None:
    return None if value is None else str(value.isoformat())


def _print_device(device: Device) -> None:
    for name, value in _view(device).items():
        print(f"{name:>16}: {'-' if value is None else value}")


def cmd_add(args: argparse.Namespace) -> int:
    # The arguments are checked before connecting: bad input is refused without a database.
    check_subject(args.subject)
    check_channel(args.channel)
    check_token(args.token)
    check_platform(args.platform)
    with connect(args) as conn:
        device = add_device(
            conn, args.subject, args.channel, args.token, platform=args.platform,
            organization_id=args.org,
        )  # fmt: skip
    if args.json:
        print(json.dumps(_view(device)))
        return 0
    _print_device(device)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    # Without --org, every organization's devices (None would mean: of no organization).
    by_org = {} if args.org is None else {"organization_id": args.org}
    with connect(args) as conn:
        items = list_devices(
            conn,
            subject=args.subject,
            include_invalid=args.all,
            after=args.after,
            limit=args.limit,
            **by_org,
        )
    if args.json:
        print(json.dumps([_view(x) for x in items]))
        return 0
    print(
        f"{'id':>8} {'organization':<36} {'subject':<24} {'channel':<10} {'platform':<9} "
        f"{'token':<8} {'last_success_at':<25} state"
    )
    for x in items:
        org = str(x.organization_id) if x.organization_id else "-"
        last = x.last_success_at.isoformat() if x.last_success_at else "-"
        state = "valid" if x.valid else f"invalid: {(x.invalid_reason or '')[:60]}"
        print(
            f"{x.id:>8} {org:<36} {x.subject[:24]:<24} {x.channel:<10} "
            f"{(x.platform or '-')[:9]:<9} {redact_token(x.token):<8} {last:<25} {state}"
        )
    more = f"; next page: --after {items[-1].id}" if len(items) == args.limit else ""
    print(f"({len(items)} device(s){more})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        device = get_device(conn, args.id)
    if device is None:
        raise InputError(f"no device with id {args.id}")
    if args.json:
        print(json.dumps(_view(device)))
        return 0
    _print_device(device)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        removed = remove_device(conn, args.id)
    if not removed:
        print(f"{args.prog}: failed: no device with id {args.id}", file=sys.stderr)
        return 1
    print(f"removed device {args.id}")
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    devices = sub.add_parser(
        "devices",
        help="the devices reminders are pushed to",
        description="Register, list, show and remove the devices (push tokens) of subjects. "
        "Tokens are shown redacted.",
    )
    dsub = devices.add_subparsers(dest="devices_command", required=True, metavar="ACTION")

    q = dsub.add_parser(
        "add",
        help="register a device token for a subject",
        description="Register a device token for a subject (an existing token moves to this "
        "subject and is valid again). Applications call scheduler.devices.add_device instead.",
    )
    database_arg(q)
    q.add_argument("subject", metavar="SUBJECT", help="whose device (a schedule's subject)")
    q.add_argument("channel", metavar="CHANNEL", help="the push channel: fcm, apns, simulated...")
    q.add_argument("token", metavar="TOKEN", help="the device's registration token")
    q.add_argument("--platform", help="android, ios, web... (free text, at most 32 characters)")
    q.add_argument("--org", type=organization, metavar="UUID", help="the subject's organization")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_add)

    q = dsub.add_parser(
        "list",
        help="list devices, by id",
        description="List devices in id order, valid ones unless --all; page with --after.",
    )
    database_arg(q)
    q.add_argument("--subject", metavar="S", help="only this subject's devices")
    q.add_argument(
        "--org", type=organization, metavar="UUID", help="only this organization's devices"
    )
    q.add_argument("--all", action="store_true", help="invalidated devices too")
    q.add_argument(
        "--after",
        type=integer("--after", 0, 2**63 - 1),
        metavar="ID",
        help="the page after this device id (the last id of the previous page)",
    )
    q.add_argument(
        "--limit",
        type=positive_int("--limit", min(MAX_COUNT, MAX_LIST)),
        default=100,
        metavar="N",
        help=f"at most this many (1 to {min(MAX_COUNT, MAX_LIST):,})",
    )
    q.add_argument("--json", action="store_true", help="print a JSON list")
    q.set_defaults(func=cmd_list)

    q = dsub.add_parser(
        "show",
        help="one device by id",
        description="One device, by id; exit 2 when no device has this id.",
    )
    database_arg(q)
    q.add_argument("id", type=job_id("ID"), metavar="ID", help="the device's id")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_show)

    q = dsub.add_parser(
        "remove",
        help="delete a device by id",
        description="Delete a device by id; exit 1 when no device has this id.",
    )
    database_arg(q)
    q.add_argument("id", type=job_id("ID"), metavar="ID", help="the device's id")
    q.set_defaults(func=cmd_remove)
