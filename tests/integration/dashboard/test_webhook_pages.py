"""The dashboard's webhook pages: endpoints with their health, one endpoint with its attempts
(never a secret), and its actions (disable, enable, redeliver) behind the CSRF token, audited."""

from __future__ import annotations

import uuid

import psycopg
from starlette.testclient import TestClient

from scheduler.webhooks import add_endpoint
from scheduler.webhooks.ssrf import Guard
from tests.integration.dashboard.conftest import csrf_of

PUBLIC = Guard(resolver=lambda host, port: ["93.184.216.34"])
XSS = "<script>alert(1)</script>"


def test_webhook_pages_and_actions(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn:
        created = add_endpoint(conn, "https://hooks.example/in", organization_id=uuid.uuid4(),
                               description=XSS, guard=PUBLIC)  # fmt: skip
        endpoint_id = created.endpoint.id
        conn.execute(
            "INSERT INTO webhook_attempts (endpoint_id, event_id, job_id, attempt, attempted_at,"
            " outcome, status, error, response) VALUES (%s, %s, 7, 1, now(), 'failed', 500,"
            " '500', %s)",
            (endpoint_id, uuid.uuid4(), XSS),
        )
    listing = browser.get("/webhooks")
    assert listing.status_code == 200 and "https://hooks.example/in" in listing.text
    page = browser.get(f"/webhooks/{endpoint_id}")
    assert page.status_code == 200 and "failed" in page.text
    assert created.secret not in listing.text + page.text
    assert "<script>alert" not in page.text
    assert browser.get("/webhooks/999999").status_code == 404
    # An action without the CSRF token is refused and changes nothing.
    refused = browser.post(f"/webhooks/{endpoint_id}/disable", data={})
    assert refused.status_code == 403
    done = browser.post(f"/webhooks/{endpoint_id}/disable", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    page = browser.get(f"/webhooks/{endpoint_id}")
    assert "disabled" in page.text
    done = browser.post(f"/webhooks/{endpoint_id}/enable", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    done = browser.post(
        f"/webhooks/{endpoint_id}/redeliver",
        data={"csrf": csrf_of(page.text), "since": "2026-01-01T00:00Z"},
    )
    assert done.status_code == 303 and done.headers["location"].endswith("done=0")
    bad = browser.post(
        f"/webhooks/{endpoint_id}/redeliver", data={"csrf": csrf_of(page.text), "since": "x"}
    )
    assert bad.status_code == 400
    with psycopg.connect(db_url) as conn:
        actions = [r[0] for r in conn.execute("SELECT action FROM dashboard_audit ORDER BY id")]
    assert actions == ["webhook_disable", "webhook_enable", "webhook_redeliver"]
