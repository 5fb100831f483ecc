"""``tockwork dev-db url|status|stop`` and ``tockwork dev fake-push``: development helpers.

Without ``DATABASE_URL``, commands run against a server whose data lives in ``./.pgdata``
(``scheduler/devdb.py``); ``dev-db`` is how to see it and stop it (``make db-stop`` does the
same). ``dev fake-push`` serves the protocol-faithful FCM and APNs fakes
(``scheduler.push.fakes``) on loopback and prints the settings that point
``tockwork worker --app scheduler.delivery:app`` at them, so an application tests its own
reminder pipeline end to end with no provider account.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
from pathlib import Path

from scheduler import devdb
from scheduler.cli.common import SubParsers, port, text


def cmd_url(args: argparse.Namespace) -> int:
    print(devdb.ensure_embedded(devdb.DEFAULT_DIR))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    print(devdb.status())
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    was = devdb.stop_embedded(devdb.DEFAULT_DIR)
    print(
        f"stopped the embedded server (data kept in {devdb.DEFAULT_DIR.resolve()})"
        if was
        else "the embedded server was not running"
    )
    return 0


def cmd_fake_push(args: argparse.Namespace) -> int:
    from scheduler.push.fakes.apns import start_apns_fake
    from scheduler.push.fakes.fcm import start_fcm_fake

    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="tockwork-fakes-"))

    async def serve() -> None:
        fcm = await start_fcm_fake(tls=args.tls, directory=folder / "fcm", port=args.fcm_port)
        apns = await start_apns_fake(
            topic=args.topic, tls=args.tls, directory=folder / "apns", port=args.apns_port
        )
        lines = [
            f"FCM HTTP v1 fake on {fcm.url} (and its OAuth token endpoint; HTTP/1.1 and HTTP/2)",
            f"APNs fake on {apns.url} (HTTP/2)",
            "control: GET /_fake/fcm/summary, POST /_fake/fcm/config, POST /_fake/faults",
            "point the delivery worker at them (tockwork worker --app scheduler.delivery:app):",
            f"  export TOCKWORK_FCM_CREDENTIALS={fcm.credentials}",
            f"  export TOCKWORK_FCM_URL={fcm.url}",
            f"  export TOCKWORK_APNS_KEY_FILE={apns.key_file}",
            f"  export TOCKWORK_APNS_KEY_ID={apns.key.key_id}",
            f"  export TOCKWORK_APNS_TEAM_ID={apns.key.team_id}",
            f"  export TOCKWORK_APNS_TOPIC={args.topic}",
            f"  export TOCKWORK_APNS_URL={apns.url}",
        ]
        if args.tls:
            bundle = folder / "ca-bundle.pem"
            bundle.write_text(
                "".join(Path(str(f)).read_text() for f in (fcm.server.ca_file, apns.server.ca_file))
            )
            lines.append(f"  export TOCKWORK_PUSH_CA_FILE={bundle}")
        lines.append("serving until Ctrl-C (SIGINT or SIGTERM)")
        print("\n".join(lines), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await fcm.server.stop()
        await apns.server.stop()
        print("fcm: " + json.dumps(fcm.fake.summary()), flush=True)
        print("apns: " + json.dumps(apns.fake.summary(), default=str), flush=True)

    asyncio.run(serve())
    return 0


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dev-db",
        help="the embedded development PostgreSQL in ./.pgdata: url, status, stop",
        description="The embedded PostgreSQL that commands use when neither DATABASE_URL nor "
        "--database-url is given: a development convenience (data in ./.pgdata, or "
        "$TOCKWORK_PGDATA), never meant for production.",
    )
    dsub = p.add_subparsers(dest="dev_db_command", required=True, metavar="ACTION")
    q = dsub.add_parser(
        "url",
        help="print its URL (starting it if needed)",
        description="Print the embedded server's URL, starting it (and creating its data "
        "folder) if needed.",
    )
    q.set_defaults(func=cmd_url)
    q = dsub.add_parser(
        "status",
        help="say whether it runs and where its data lives",
        description="Say whether the embedded server runs and where its data lives.",
    )
    q.set_defaults(func=cmd_status)
    q = dsub.add_parser(
        "stop",
        help="stop it (its data stays)",
        description="Stop the embedded server; its data stays (delete the folder to drop it).",
    )
    q.set_defaults(func=cmd_stop)

    p = sub.add_parser(
        "dev",
        help="development helpers: fake-push (local FCM and APNs fakes)",
        description="Development helpers.",
    )
    dsub = p.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    q = dsub.add_parser(
        "fake-push",
        help="serve local FCM and APNs fakes and print the settings that point a worker at them",
        description="Serve the protocol-faithful FCM HTTP v1 and APNs fakes on loopback (they "
        "check credentials, headers and bodies as the providers do and answer with their "
        "documented errors), print the TOCKWORK_FCM_* and TOCKWORK_APNS_* settings for "
        "'tockwork worker --app scheduler.delivery:app', and serve until Ctrl-C.",
    )
    q.add_argument("--fcm-port", type=port("--fcm-port"), default=0, metavar="PORT",
                   help="the FCM fake's port (0: any free port)")  # fmt: skip
    q.add_argument("--apns-port", type=port("--apns-port"), default=0, metavar="PORT",
                   help="the APNs fake's port (0: any free port)")  # fmt: skip
    q.add_argument("--tls", action="store_true",
                   help="TLS with a generated CA (TOCKWORK_PUSH_CA_FILE trusts it)")  # fmt: skip
    q.add_argument("--dir", type=text("--dir", 4096), metavar="DIR",
                   help="where to write the credentials, key and certificates "
                   "(default: a new temporary folder)")  # fmt: skip
    q.add_argument("--topic", type=text("--topic"), default="com.example.tockwork",
                   help="the APNs fake's bundle id (apns-topic)")  # fmt: skip
    q.set_defaults(func=cmd_fake_push)
