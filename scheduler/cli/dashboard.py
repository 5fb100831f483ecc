"""``tockwork dashboard``: serve the operator dashboard (scheduler.dashboard) with uvicorn.

Authentication is on by default: the token comes from ``--token`` or, better (a flag shows in
``ps``), ``TOCKWORK_DASHBOARD_TOKEN``. Without one the command refuses to start, unless it binds
to a loopback address with an explicit ``--no-auth``. uvicorn's access log is off: a request's
query string may hold an organization id; the dashboard logs the path alone.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
from typing import Any

from scheduler.cli.common import (
    InputError,
    SubParsers,
    database_arg,
    ensure_schema,
    pooler,
    read_replica,
    read_url_arg,
    replication_arg,
    require_sync,
    resolve_url,
    seconds,
)
from timezones.errors import TockworkError

TOKEN_ENV = "TOCKWORK_DASHBOARD_TOKEN"


class DashboardUnavailable(TockworkError):
    """The dashboard's libraries are not installed."""


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add the ``dashboard`` sub-command."""
    parser = subparsers.add_parser(
        "dashboard",
        help="serve the operator dashboard (queues, jobs, dead letters, schedules, lateness)",
        description="Serve the operator dashboard over HTTP. Every page and API route needs "
        f"the token (${TOKEN_ENV} or --token): as 'Authorization: Bearer <token>', or once "
        "on the login form in a browser.",
    )
    database_arg(parser)
    read_url_arg(parser)
    replication_arg(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8089, help="port to bind (0: any free port)")
    parser.add_argument("--read-only", action="store_true", help="hide and refuse every action")
    parser.add_argument(
        "--refresh",
        type=seconds("--refresh", maximum=3600),
        default=None,
        metavar="SECONDS",
        help="seconds between refreshes of the pages' counts, charts and tables in the browser "
        "(default 5; 0: never)",
    )
    parser.add_argument(
        "--token", help=f"the access token (default: ${TOKEN_ENV}; a flag is visible in ps)"
    )
    parser.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without authentication (only on a loopback address)",
    )
    parser.set_defaults(func=run_dashboard)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_dashboard(args: argparse.Namespace) -> int:
    token: str | None = args.token or os.environ.get(TOKEN_ENV) or None
    if not 0 <= args.port <= 65535:
        raise InputError("--port", args.port, "must be from 0 (any free port) to 65535")
    if args.no_auth:
        if token is not None:
            raise InputError("--no-auth", True, f"a token is configured (--token or ${TOKEN_ENV})")
        if not _is_loopback(args.host):
            raise InputError(
                "--no-auth", args.host, "serving without authentication needs a loopback --host"
            )
    elif token is None:
        raise InputError(
            f"the dashboard needs a token: set ${TOKEN_ENV} or --token "
            "(or serve it with --no-auth, on a loopback --host only)"
        )
    try:
        import uvicorn  # noqa: F401 (the extra is installed)

        from scheduler.dashboard import create_app
    except ImportError as exc:
        raise DashboardUnavailable(
            f"the dashboard needs its extra: pip install 'tockwork[dashboard]' ({exc})"
        ) from None
    pooler(args)
    url = resolve_url(args.database_url)
    ensure_schema(url, apply=False)
    refresh = {} if args.refresh is None else {"refresh": args.refresh.total_seconds()}
    app = create_app(
        url,
        token=token,
        read_only=args.read_only,
        no_auth=args.no_auth,
        read_url=read_replica(args),
        **refresh,
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # The first connection says the replication mode (and refuses to start without synchronous
    # replication when it is required): before the server listens, as the services do.
    pool = app.state.dashboard.pool
    pool.primary.require_sync = require_sync(args)
    with pool.connection():
        pass
    return 0 if _serve(app, args.host, args.port) else 1


def _serve(app: Any, host: str, port: int) -> bool:
    """Serve until stopped; one line is printed once the server listens (scripts wait on it)."""
    import contextlib
    import signal
    import socket
    import threading
    from collections.abc import Iterator

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a captured SIGTERM after its graceful shutdown, so the process
            # would end "killed by SIGTERM"; like the other services, a requested stop is a
            # clean exit (0).
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            handlers = {
                s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                yield
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                bound = port
                for server in self.servers:  # --port 0: the port the system chose
                    for sock in server.sockets:
                        bound = sock.getsockname()[1]
                print(f"tockwork dashboard listening on http://{host}:{bound}/", flush=True)

    server = Server(
        uvicorn.Config(app, host=host, port=port, access_log=False, log_level="warning")
    )
    server.run()
    return server.started
