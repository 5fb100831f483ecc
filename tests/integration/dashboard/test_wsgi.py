"""The dashboard as a WSGI app (scheduler.dashboard.wsgi_app), served by a real WSGI server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from email.message import Message
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import shift_path_info

import psycopg
import pytest

from scheduler.dashboard import WSGIDashboard, wsgi_app
from tests.integration.dashboard.conftest import TOKEN, dead_jobs
from timezones.errors import InvalidInput

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextmanager
def served(app: WSGIApp) -> Iterator[str]:
    """``app`` on wsgiref's server on a free loopback port, for the block: its base URL."""
    server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def dashboard(db_url: str) -> Iterator[WSGIDashboard]:
    app = wsgi_app(db_url, token=TOKEN)
    yield app
    app.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def request(url: str, *, token: str | None = TOKEN, body: Any = None) -> tuple[int, Message, str]:
    """One HTTP request (POST when ``body`` is given): status, headers, text. No redirects."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers), timeout=30) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_a_wsgi_server_serves_the_api_and_its_actions(
    db_url: str, dashboard: WSGIDashboard
) -> None:
    ids = dead_jobs(db_url, 2, queue="mail")
    with served(dashboard) as base:
        status, _, text = request(f"{base}/api/queues")
        assert status == 200
        assert [(q["queue"], q["dead"]) for q in json.loads(text)] == [("mail", 2)]

        status, _, text = request(f"{base}/api/jobs/requeue", body={"ids": ids[:1]})
        assert status == 200, text
        assert json.loads(text) == {"requeued": ids[:1], "count": 1}

        status, headers, text = request(f"{base}/api/queues", token=None)
        assert status == 401 and "mail" not in text
        assert headers["WWW-Authenticate"].startswith("Bearer")
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT id, status FROM jobs_all ORDER BY id").fetchall()
        audit = conn.execute("SELECT actor, action, affected FROM dashboard_audit").fetchall()
    assert rows == [(ids[0], "pending"), (ids[1], "dead")]
    assert audit == [("api-token", "requeue", 1)]


def test_mounted_under_a_prefix_of_a_wsgi_application(db_url: str) -> None:
    dashboard = wsgi_app(db_url, token=TOKEN)

    def host(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        """A WSGI application of the user's that hands /tockwork/... to the dashboard."""
        if environ.get("PATH_INFO", "").startswith("/tockwork/"):
            shift_path_info(environ)  # SCRIPT_NAME=/tockwork, PATH_INFO=/...
            return dashboard(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the host application"]

    try:
        with served(host) as base:
            assert request(f"{base}/")[2] == "the host application"
            status, headers, _ = request(f"{base}/tockwork/jobs?status=dead", token=None)
            assert status == 303
            assert headers["location"].startswith("/tockwork/login?next=")
            status, _, page = request(f"{base}/tockwork/")
            assert status == 200 and 'href="/tockwork/jobs' in page
    finally:
        dashboard.close()
        dashboard.close()  # idempotent


def test_wsgi_app_refuses_a_missing_token(db_url: str) -> None:
    with pytest.raises(InvalidInput) as info:
        wsgi_app(db_url, token=None)
    assert info.value.field == "token"
