"""The dashboard as a WSGI application, for Flask, Django under WSGI, or any WSGI server.

:func:`wsgi_app` wraps the ASGI app of :func:`~scheduler.dashboard.create_app` with a2wsgi's
``ASGIMiddleware``: each WSGI request is handed to the ASGI app on an event loop that runs in a
thread of its own, and the WSGI thread waits for the response. Everything else is the ASGI app's
(authentication, CSRF, read-only, the connection pool); ``SCRIPT_NAME`` becomes its root path,
so links, the login redirect and the cookie path follow the mount point. ``close()`` stops that
loop and closes the idle database connections: call it at the host application's shutdown.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Any, cast

from a2wsgi import ASGIMiddleware
from a2wsgi.asgi_typing import ASGIApp
from a2wsgi.wsgi_typing import Environ, StartResponse
from starlette.applications import Starlette

from scheduler.dashboard.app import close as close_asgi
from scheduler.dashboard.app import create_app
from timezones import Clock


class WSGIDashboard:
    """A WSGI callable over the dashboard's ASGI app (:attr:`asgi`), with its own event loop."""

    def __init__(self, app: Starlette) -> None:
        self.asgi = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tockwork-dashboard-wsgi", daemon=True
        )
        self._thread.start()
        self._wsgi = ASGIMiddleware(cast(ASGIApp, app), loop=self._loop)
        self._closed = False

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        return self._wsgi(cast(Environ, environ), cast(StartResponse, start_response))

    def close(self) -> None:
        """Stop the event loop and close the idle database connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        close_asgi(self.asgi)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def wsgi_app(
    database_url: str,
    *,
    token: str | None,
    read_only: bool = False,
    no_auth: bool = False,
    clock: Clock | None = None,
    pool_size: int = 4,
) -> WSGIDashboard:
    """The dashboard as a WSGI app over ``database_url``; the arguments are
    :func:`~scheduler.dashboard.create_app`'s (the same refusal of ``token=None`` without
    ``no_auth``)."""
    return WSGIDashboard(
        create_app(
            database_url,
            token=token,
            read_only=read_only,
            no_auth=no_auth,
            clock=clock,
            pool_size=pool_size,
        )
    )
