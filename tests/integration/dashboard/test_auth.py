"""Secure by default: no credentials, no data; every action needs CSRF; read-only refuses."""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

import scheduler
from scheduler.cli import main
from scheduler.dashboard import create_app
from tests.integration.dashboard.conftest import TOKEN, csrf_of, dead_jobs, sign_in
from timezones.errors import InvalidInput

API_ROUTES = [
    "/api/queues",
    "/api/jobs",
    "/api/jobs/1",
    "/api/schedules",
    "/api/overview",
    "/api/processes",
]
PAGES = [
    "/",
    "/jobs",
    "/jobs/1",
    "/dead",
    "/schedules",
    "/preview",
    "/lateness",
    "/outbox",
    "/processes",
    "/search",
    "/webhooks",
    "/webhooks/1",
]


@pytest.mark.parametrize("path", API_ROUTES)
def test_api_without_credentials_is_401(anon: TestClient, path: str) -> None:
    response = anon.get(path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "queue" not in response.text


@pytest.mark.parametrize("path", PAGES)
def test_pages_without_credentials_send_to_the_login_form(anon: TestClient, path: str) -> None:
    response = anon.get(path)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=")
    login = anon.get(response.headers["location"])
    assert login.status_code == 200 and 'name="token"' in login.text


def test_a_wrong_bearer_token_is_401_even_for_a_page(anon: TestClient) -> None:
    for path in ["/", "/api/queues"]:
        response = anon.get(path, headers={"Authorization": "Bearer wrong-token-wrong-token"})
        assert response.status_code == 401


def test_the_bearer_token_opens_every_route(api: TestClient) -> None:
    assert api.get("/api/queues").status_code == 200
    assert api.get("/").status_code == 200


def test_login_with_a_wrong_token_is_refused(anon: TestClient) -> None:
    page = anon.get("/login")
    response = anon.post("/login", data={"csrf": csrf_of(page.text), "token": "nope", "name": "x"})
    assert response.status_code == 401 and "wrong token" in response.text
    assert "tockwork_dashboard" not in response.cookies
    assert anon.get("/").status_code == 303


def test_login_sets_a_session_cookie_that_opens_the_pages(anon: TestClient) -> None:
    sign_in(anon, "alice")
    cookie = anon.cookies.get("tockwork_dashboard")
    assert cookie
    page = anon.get("/")
    assert page.status_code == 200 and "alice" in page.text
    assert anon.get("/api/queues").status_code == 200


def test_a_tampered_session_cookie_is_not_a_session(app_client: Callable[..., TestClient]) -> None:
    client = app_client()
    sign_in(client)
    value = client.cookies["tockwork_dashboard"]
    client.cookies.clear()
    client.cookies["tockwork_dashboard"] = value[:-2] + ("A" if value[-2] != "A" else "B") + "x"
    assert client.get("/").status_code == 303


def test_a_session_of_another_token_is_not_valid(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    client = app_client()
    sign_in(client)
    other = app_client(token="another-token-0123456789")
    other.cookies["tockwork_dashboard"] = client.cookies["tockwork_dashboard"]
    assert other.get("/").status_code == 303


def test_a_post_without_csrf_is_refused(db_url: str, browser: TestClient) -> None:
    ids = dead_jobs(db_url, 1)
    response = browser.post("/dead/apply", data={"action": "requeue", "ids": str(ids[0])})
    assert response.status_code == 403 and "CSRF" in response.text
    wrong = browser.post(
        "/dead/apply", data={"action": "requeue", "ids": str(ids[0]), "csrf": "forged"}
    )
    assert wrong.status_code == 403
    api = browser.post("/api/jobs/requeue", json={"ids": ids})
    assert api.status_code == 403
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT status FROM jobs WHERE id = %s", ids).fetchone() == ("dead",)


def test_the_session_api_post_takes_the_csrf_header(db_url: str, browser: TestClient) -> None:
    ids = dead_jobs(db_url, 1)
    token = csrf_of(browser.get("/dead").text)
    response = browser.post("/api/jobs/requeue", json={"ids": ids}, headers={"X-CSRF-Token": token})
    assert response.status_code == 200 and response.json()["requeued"] == ids


def test_logout_ends_the_session(browser: TestClient) -> None:
    token = csrf_of(browser.get("/").text)
    assert browser.post("/logout", data={"csrf": token}).status_code == 303
    assert browser.get("/").status_code == 303


def test_read_only_hides_and_refuses_actions(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    ids = dead_jobs(db_url, 2)
    client = app_client(read_only=True)
    sign_in(client)
    page = client.get("/dead")
    assert page.status_code == 200 and "read-only" in page.text
    assert "requeue-selected" not in page.text and 'type="checkbox"' not in page.text
    token = csrf_of(page.text)
    for path, data in [
        ("/dead/confirm", {"csrf": token, "action": "requeue", "id": str(ids[0])}),
        ("/dead/apply", {"csrf": token, "action": "requeue", "ids": str(ids[0])}),
        ("/schedules/1/pause", {"csrf": token}),
        ("/schedules/1/trigger", {"csrf": token}),
        (
            "/schedules/1/backfill",
            {
                "csrf": token,
                "start": "2026-01-01T00:00Z",
                "end": "2026-01-02T00:00Z",
                "action": "run",
            },
        ),
        ("/outbox/retry", {"csrf": token, "scope": "all"}),
    ]:
        response = client.post(path, data=data)
        assert response.status_code == 403, path
        assert "read-only" in response.text
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post("/api/jobs/requeue", json={"ids": ids}, headers=bearer).status_code == 403
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT DISTINCT status FROM jobs_all").fetchall()
        assert rows == [("dead",)]
        assert conn.execute("SELECT count(*) FROM dashboard_audit").fetchone() == (0,)


def test_no_auth_mode_serves_without_credentials_but_still_needs_csrf(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    ids = dead_jobs(db_url, 1)
    client = app_client(token=None, no_auth=True)
    page = client.get("/dead")
    assert page.status_code == 200
    refused = client.post("/dead/apply", data={"action": "requeue", "ids": str(ids[0])})
    assert refused.status_code == 403
    done = client.post(
        "/dead/apply", data={"action": "requeue", "ids": str(ids[0]), "csrf": csrf_of(page.text)}
    )
    assert done.status_code == 303


def test_create_app_refuses_a_missing_or_weak_token(db_url: str) -> None:
    with pytest.raises(InvalidInput) as missing:
        create_app(db_url, token=None)
    assert missing.value.field == "token"
    with pytest.raises(InvalidInput) as weak:
        create_app(db_url, token="short")
    assert weak.value.field == "token" and "short" not in str(weak.value)


def test_the_command_refuses_to_start_without_a_token(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TOCKWORK_DASHBOARD_TOKEN", raising=False)
    assert main(["dashboard", "--database-url", db_url]) == 2
    err = capsys.readouterr().err
    assert "TOCKWORK_DASHBOARD_TOKEN" in err and len(err.strip().splitlines()) == 1
    assert main(["dashboard", "--database-url", db_url, "--no-auth", "--host", "0.0.0.0"]) == 2
    assert "loopback" in capsys.readouterr().err
    monkeypatch.setenv("TOCKWORK_DASHBOARD_TOKEN", "short")
    assert main(["dashboard", "--database-url", db_url]) == 2
    assert "at least 16" in capsys.readouterr().err
    assert main(["dashboard", "--database-url", db_url, "--port", "70000"]) == 2


def _routes() -> list[tuple[str, str]]:
    """Every (method, path) of the app, path parameters filled with 1 (the static files aside)."""
    app = create_app("postgresql://unused", token=TOKEN)
    found = []
    for route in app.routes:
        if isinstance(route, Route):
            path = re.sub(r"\{[a-z_]+\}", "1", route.path)
            found += [(m, path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return found


ROUTES = _routes()
POSTS = [path for method, path in ROUTES if method == "POST"]


def _untouched(db_url: str, dead: list[int], schedule_id: int) -> None:
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT DISTINCT status FROM jobs_all").fetchall() == [("dead",)]
        assert conn.execute("SELECT count(*) FROM dashboard_audit").fetchone() == (0,)
        paused = conn.execute("SELECT paused FROM schedules WHERE id = %s", (schedule_id,))
        assert paused.fetchone() == (False,)
        assert len(dead) == 1


def _seeded(db_url: str) -> tuple[list[int], int]:
    dead = dead_jobs(db_url, 1)
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="user-1"
        )
    return dead, s.id


def test_the_route_list_is_the_apps() -> None:
    assert ("GET", "/api/queues") in ROUTES and "/dead/apply" in POSTS
    assert len(POSTS) == 16 and len(ROUTES) == 36


def test_no_route_serves_anything_without_credentials(db_url: str, anon: TestClient) -> None:
    """Every route but the login form: an API route is a 401, a page a redirect to the login
    form (GET) or the login form with a 401 (POST); nothing is served or done."""
    dead, schedule_id = _seeded(db_url)
    for method, path in ROUTES:
        if path == "/login":
            continue
        response = anon.request(method, path.replace("/1", f"/{schedule_id}", 1))
        if path.startswith("/api/"):
            assert response.status_code == 401, (method, path)
            assert response.json() == {"error": "unauthorized: send Authorization: Bearer <token>"}
        elif method == "GET":
            assert response.status_code == 303, (method, path)
            assert response.headers["location"].startswith("/login?next=")
        else:
            assert response.status_code == 401 and 'name="token"' in response.text, path
    _untouched(db_url, dead, schedule_id)


def test_every_post_needs_the_csrf_token_of_the_session(db_url: str, browser: TestClient) -> None:
    dead, schedule_id = _seeded(db_url)
    for route in POSTS:
        path = route.replace("/1/", f"/{schedule_id}/")
        data = {"action": "requeue", "ids": str(dead[0]), "id": str(dead[0]), "scope": "all"}
        if path.startswith("/api/"):
            response = browser.post(path, json={"ids": dead})
        else:
            response = browser.post(path, data=data)
        assert response.status_code == 403, path
        forged = browser.post(path, data=data | {"csrf": "forged"}, headers={"X-CSRF-Token": "x"})
        assert forged.status_code == 403, path
    _untouched(db_url, dead, schedule_id)
    assert browser.get("/").status_code == 200  # still signed in: logout was refused too


def test_read_only_hides_every_action_and_refuses_every_post(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    dead, schedule_id = _seeded(db_url)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload,"
            " occurred_at, dead_at) VALUES (gen_random_uuid(), 'order', '1', 'shipped', '{}',"
            " now(), now())"
        )
        conn.commit()
    client = app_client(read_only=True)
    sign_in(client)
    for page in ["/", "/jobs", "/dead", f"/schedules/{schedule_id}", "/outbox", "/schedules"]:
        html = client.get(page).text
        assert "read-only" in html and 'type="checkbox"' not in html, page
        assert [m for m in re.findall(r'<form method="post" action="([^"]+)"', html)] == [
            "/logout"
        ], page
    token = csrf_of(client.get("/dead").text)
    for route in POSTS:
        if route in ("/login", "/logout"):
            continue
        path = route.replace("/1/", f"/{schedule_id}/")
        data = {"csrf": token, "action": "requeue", "ids": str(dead[0]), "scope": "all"}
        response = client.post(path, data=data, headers={"X-CSRF-Token": token})
        assert response.status_code == 403 and "read-only" in response.text, path
    _untouched(db_url, dead, schedule_id)
    with psycopg.connect(db_url) as conn:
        still = conn.execute("SELECT count(*) FROM outbox_events WHERE dead_at IS NOT NULL")
        assert still.fetchone() == (1,)
