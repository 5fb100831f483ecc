"""Secure by default: no credentials, no data; every action needs CSRF; read-only refuses."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from starlette.testclient import TestClient

from scheduler.cli import main
from scheduler.dashboard import create_app
from tests.integration.dashboard.conftest import TOKEN, csrf_of, dead_jobs, sign_in
from timezones.errors import InvalidInput

API_ROUTES = ["/api/queues", "/api/jobs", "/api/jobs/1", "/api/schedules"]
PAGES = ["/", "/jobs", "/jobs/1", "/dead", "/schedules", "/preview", "/lateness", "/outbox"]


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
        ("/outbox/retry", {"csrf": token, "scope": "all"}),
    ]:
        response = client.post(path, data=data)
        assert response.status_code == 403, path
        assert "read-only" in response.text
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert client.post("/api/jobs/requeue", json={"ids": ids}, headers=bearer).status_code == 403
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT DISTINCT status FROM jobs").fetchall()
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
