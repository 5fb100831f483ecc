"""``tockwork dev-db url|status|stop``: the embedded development PostgreSQL.

Without ``DATABASE_URL``, commands run against a server whose data lives in ``./.pgdata``
(``scheduler/devdb.py``); this is how to see it and stop it (``make db-stop`` does the same).
"""

from __future__ import annotations

import argparse

from scheduler import devdb
from scheduler.cli.common import SubParsers


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
