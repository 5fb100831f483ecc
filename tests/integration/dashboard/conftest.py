"""Fixtures of the dashboard's tests: the app over this test's database, clients, seeded jobs."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

import jobs
from scheduler.dashboard import create_app

TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def app_client(db_url: str) -> Iterator[Callable[..., TestClient]]:
    """``app_client(**create_app options)``: a TestClient without credentials."""
    clients: list[TestClient] = []

    def make(**options: Any) -> TestClient:
        options.setdefault("token", TOKEN)
        client = TestClient(create_app(db_url, **options), follow_redirects=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def anon(app_client: Callable[..., TestClient]) -> TestClient:
    """No credentials."""
    return app_client()


@pytest.fixture
def api(app_client: Callable[..., TestClient]) -> TestClient:
    """The bearer token on every request."""
    client = app_client()
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client


def sign_in(client: TestClient, name: str = "alice") -> None:
    """Sign in on the login form (the session cookie stays in the client)."""
    page = client.get("/login")
    response = client.post(
        "/login", data={"csrf": csrf_of(page.text), "token": TOKEN, "name": name, "next": "/"}
    )
    assert response.status_code == 303, response.text


@pytest.fixture
def browser(app_client: Callable[..., TestClient]) -> TestClient:
    """Signed in with the session cookie, as a browser is."""
    client = app_client()
    sign_in(client)
    return client


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def fail_permanently(job: jobs.Job) -> None:
    raise jobs.PermanentError(job.payload.get("error", "boom"), code="E_TEST")


def succeed(job: jobs.Job) -> None:
    return None


def dead_jobs(
    db_url: str, n: int, *, queue: str = "mail", job_type: str = "send", payload: Any = None
) -> list[int]:
    """``n`` jobs enqueued and run into the dead-letter state by a permanent failure."""
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = [jobs.enqueue(conn, job_type, payload or {"n": i}, queue=queue).id for i in range(n)]
    jobs.Worker(db_url, {job_type: fail_permanently}, {queue: 1}, listen=False).run_until_idle()
    return ids
