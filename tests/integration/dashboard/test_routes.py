"""Every page and API route against the real PostgreSQL: data, filters, pages, actions, errors."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import jobs
import scheduler
from jobs import outbox
from jobs.metrics import REGISTRY
from scheduler.dashboard import close, create_app
from scheduler.tick import Scheduler
from tests.integration.dashboard.conftest import TOKEN, csrf_of, dead_jobs, sign_in, succeed
from timezones import FrozenClock

XSS = "<script>alert('x')</script>"


def status_of(db_url: str, ids: list[int]) -> list[str]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT status FROM jobs_all WHERE id = ANY(%s) ORDER BY id", [ids])
        return [r[0] for r in rows.fetchall()]


def audit_rows(db_url: str) -> list[tuple[str, str, int, dict[str, object]]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT actor, action, affected, filter FROM dashboard_audit ORDER BY id"
        )
        return rows.fetchall()


# -- overview and the queue API -------------------------------------------------------------------


def test_api_queues_has_the_figures_of_each_queue(db_url: str, api: TestClient) -> None:
    dead_jobs(db_url, 2, queue="mail")
    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, queue="push")
    body = api.get("/api/queues").json()
    assert [q["queue"] for q in body] == ["mail", "push"]
    assert set(body[0]) >= {
        "queue",
        "ready",
        "oldest_ready_age_s",
        "leased",
        "retrying",
        "dead",
        "scheduled",
    }
    assert body[0]["dead"] == 2 and body[1]["ready"] == 1


def test_the_overview_shows_queues_chart_workers_and_lags(db_url: str, browser: TestClient) -> None:
    dead_jobs(db_url, 3, queue="mail")
    page = browser.get("/")
    assert page.status_code == 200
    assert 'href="/dead?queue=mail">3</a>' in page.text
    assert "0 completed, 3 failed" in page.text  # the last hour's attempts
    assert "<svg" in page.text and "Scheduler lag" in page.text and "Outbox" in page.text
    assert "no leases held" in page.text
    assert '<p id="overdue">none</p>' in page.text


def test_the_overview_flags_overdue_schedules(db_url: str, browser: TestClient) -> None:
    """A schedule whose next occurrence is an hour past with no job (no scheduler ran): the
    overview counts it, as `tockwork schedules overdue` does."""
    with psycopg.connect(db_url) as conn, conn.transaction():
        scheduler.create_schedule(
            conn, job_type="m", rule="every:10m", zone="UTC", key="late",
            now=datetime.now(UTC) - timedelta(hours=1),
        )  # fmt: skip
    page = browser.get("/")
    assert (
        '<p id="overdue" class="warn">1 past their next occurrence by more than 60 s' in page.text
    )


# -- jobs -----------------------------------------------------------------------------------------


def test_api_jobs_filters_by_status_and_queue(db_url: str, api: TestClient) -> None:
    dead = dead_jobs(db_url, 2, queue="mail")
    dead_jobs(db_url, 1, queue="other")
    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, queue="mail")
    body = api.get("/api/jobs", params={"status": "dead", "queue": "mail"}).json()
    assert sorted(j["id"] for j in body["jobs"]) == dead
    assert body["count"] == 2 and not body["count_capped"] and body["next_before"] is None
    assert {j["status"] for j in body["jobs"]} == {"dead"}
    assert api.get("/api/jobs", params={"error_code": "E_TEST"}).json()["count"] == 3


def test_api_jobs_filters_by_key_organization_and_time(db_url: str, api: TestClient) -> None:
    org = uuid.uuid4()
    with psycopg.connect(db_url) as conn, conn.transaction():
        mine = jobs.enqueue(conn, "send", {}, idempotency_key="k-1", organization_id=org).id
        jobs.enqueue(conn, "send", {}, idempotency_key="k-2")
    assert [j["id"] for j in api.get("/api/jobs?idempotency_key=k-1").json()["jobs"]] == [mine]
    by_org = api.get("/api/jobs", params={"organization_id": str(org)}).json()["jobs"]
    assert [j["id"] for j in by_org] == [mine]
    future = api.get("/api/jobs", params={"since": "2999-01-01T00:00:00Z"}).json()
    assert future["jobs"] == [] and future["count"] == 0


def test_keyset_pages_walk_every_job_once(db_url: str, api: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = [jobs.enqueue(conn, "send", {"i": i}).id for i in range(7)]
    seen: list[int] = []
    before: int | None = None
    for _ in range(10):
        params = {"limit": "3", **({"before": str(before)} if before else {})}
        body = api.get("/api/jobs", params=params).json()
        seen += [j["id"] for j in body["jobs"]]
        before = body["next_before"]
        if before is None:
            break
    assert seen == sorted(ids, reverse=True)


def test_counts_are_bounded(db_url: str, api: TestClient, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO jobs (job_type, queue)"
            " SELECT 'bulk', 'bulk' FROM generate_series(1, 10050)"
        )
        conn.commit()
    body = api.get("/api/jobs", params={"queue": "bulk", "limit": "1"}).json()
    assert body["count"] == 10_000 and body["count_capped"]
    assert "10,000+ matching" in browser.get("/jobs?queue=bulk").text
    [bulk] = api.get("/api/queues").json()
    assert (bulk["ready"], bulk["capped"], bulk["dead"]) == (10_000, ["ready"], 0)
    assert '<td class="ready">10000+</td>' in browser.get("/").text


def test_the_jobs_page_filters_and_pages(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = [jobs.enqueue(conn, "send", {}, queue="mail").id for _ in range(55)]
    page = browser.get("/jobs?queue=mail&status=pending")
    assert page.status_code == 200 and "55 matching" in page.text
    assert f'href="/jobs/{ids[-1]}"' in page.text and f'href="/jobs/{ids[0]}"' not in page.text
    nxt = re.search(r'href="(/jobs\?[^"]+)" id="next-page"', page.text)
    assert nxt is not None and f"before={ids[5]}" in nxt.group(1)
    second = browser.get(nxt.group(1).replace("&amp;", "&"))
    assert f'href="/jobs/{ids[0]}"' in second.text and "next-page" not in second.text


def test_job_detail_shows_payload_and_attempts(
    db_url: str, browser: TestClient, api: TestClient
) -> None:
    [job_id] = dead_jobs(db_url, 1, payload={"to": "a@example.com"})
    page = browser.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "a@example.com" in page.text and "E_TEST" in page.text
    assert re.search(
        r"<td>1</td><td>1</td><td>[^<]+</td><td><time [^>]+>[^<]+</time></td>\s*<td>[\d.]+ ms</td>"
        r"\s*<td>dead</td>",
        page.text,
    )
    body = api.get(f"/api/jobs/{job_id}").json()
    assert body["payload"] == {"to": "a@example.com"}
    assert [a["outcome"] for a in body["attempts_history"]] == ["dead"]


def test_a_missing_job_is_404(browser: TestClient, api: TestClient) -> None:
    assert browser.get("/jobs/999999").status_code == 404
    response = api.get("/api/jobs/999999")
    assert response.status_code == 404 and "999999" in response.json()["error"]


def test_script_in_a_payload_or_error_shows_as_text(db_url: str, browser: TestClient) -> None:
    [job_id] = dead_jobs(db_url, 1, job_type=f"t{XSS}", payload={"error": XSS, "note": XSS})
    for path in [f"/jobs/{job_id}", "/dead", "/jobs"]:
        page = browser.get(path)
        assert page.status_code == 200
        assert "<script>alert" not in page.text, path
        assert "&lt;script&gt;alert(" in page.text, path


# -- bad parameters -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/jobs?status=bogus", "status"),
        ("/jobs?before=abc", "before"),
        ("/jobs?before=0", "before"),
        ("/jobs?queue=Not+A+Queue", "queue"),
        ("/jobs?organization_id=not-a-uuid", "organization_id"),
        ("/jobs?since=2026-01-01T00:00", "since"),
        ("/jobs?colour=red", "colour"),
        ("/jobs/abc", "job_id"),
        ("/dead?before=-1", "before"),
        ("/schedules?after=x", "after"),
        ("/preview?rule=daily@25:00&zone=UTC", "rule"),
        ("/preview?rule=daily@08:00&zone=Mars/Olympus", "zone"),
        ("/preview?rule=daily@08:00&zone=UTC&count=1001", "count"),
        ("/lateness?window=5x", "window"),
        ("/lateness?window=30d", "window"),
        ("/outbox?before=yesterday", "before"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(browser: TestClient, path: str, parameter: str) -> None:
    page = browser.get(path)
    assert page.status_code == 400
    assert parameter in page.text and "Traceback" not in page.text
    api_path = path.replace("/jobs", "/api/jobs", 1) if path.startswith("/jobs") else None
    if api_path:
        response = browser.get(api_path)
        assert response.status_code == 400
        assert response.json()["parameter"] == parameter


def test_api_post_bodies_are_checked(api: TestClient) -> None:
    for body, parameter in [
        ({"ids": "1,2"}, "ids"),
        ({"ids": [0]}, "ids"),
        ({}, "filter"),
        ({"queue": 5}, "queue"),
        ({"colour": "red"}, "colour"),
    ]:
        response = api.post("/api/jobs/requeue", json=body)
        assert response.status_code == 400, body
        assert response.json()["parameter"] == parameter
    assert api.post("/api/jobs/requeue", content=b"{not json").json()["parameter"] == "body"


# -- dead letters ---------------------------------------------------------------------------------


def test_requeue_selected_dead_jobs_with_confirmation_and_audit(
    db_url: str, browser: TestClient
) -> None:
    ids = dead_jobs(db_url, 3)
    page = browser.get("/dead")
    assert "3 dead" in page.text
    token = csrf_of(page.text)
    confirm = browser.post(
        "/dead/confirm",
        data={"csrf": token, "scope": "selected", "action": "requeue", "id": ids[:2]},
    )
    assert confirm.status_code == 200
    assert "This will requeue 2 dead jobs." in confirm.text
    assert status_of(db_url, ids) == ["dead"] * 3  # nothing happens before the confirmation
    apply = browser.post(
        "/dead/apply",
        data={
            "csrf": csrf_of(confirm.text),
            "action": "requeue",
            "ids": re.search(r'name="ids" value="([^"]+)"', confirm.text).group(1),  # type: ignore[union-attr]
            "selection": '{"ids": "ignored, replaced by the ids"}',
        },
    )
    assert apply.status_code == 303 and "done=2" in apply.headers["location"]
    assert "requeue: 2 jobs" in browser.get(apply.headers["location"]).text
    assert status_of(db_url, ids) == ["pending", "pending", "dead"]
    [(actor, action, affected, selection)] = audit_rows(db_url)
    assert (actor, action, affected, selection["ids"]) == ("alice", "requeue", 2, ids[:2])
    jobs.Worker(db_url, {"send": succeed}, {"mail": 1}, listen=False).run_until_idle()
    assert status_of(db_url, ids) == ["succeeded", "succeeded", "dead"]


def test_cancel_all_dead_jobs_matching_a_filter(db_url: str, browser: TestClient) -> None:
    mail = dead_jobs(db_url, 3, queue="mail")
    other = dead_jobs(db_url, 2, queue="other")
    page = browser.get("/dead?queue=mail")
    assert "3 dead" in page.text
    confirm = browser.post(
        "/dead/confirm",
        data={
            "csrf": csrf_of(page.text),
            "scope": "filter",
            "action": "cancel",
            "queue": "mail",
            "job_type": "",
            "error_code": "",
        },
    )
    assert "This will cancel 3 dead jobs." in confirm.text
    ids = re.search(r'name="ids" value="([^"]+)"', confirm.text)
    selection = re.search(r'name="selection" value="([^"]+)"', confirm.text)
    assert ids and selection
    response = browser.post(
        "/dead/apply",
        data={
            "csrf": csrf_of(confirm.text),
            "action": "cancel",
            "ids": ids.group(1),
            "selection": selection.group(1).replace("&#34;", '"'),
        },
    )
    assert response.status_code == 303
    assert status_of(db_url, mail) == ["cancelled"] * 3
    assert status_of(db_url, other) == ["dead"] * 2
    [(_, action, affected, recorded)] = audit_rows(db_url)
    assert (action, affected, recorded["filter"]) == ("cancel", 3, {"queue": "mail"})


def test_api_requeue_by_ids_and_by_filter(db_url: str, api: TestClient) -> None:
    a = dead_jobs(db_url, 2, queue="mail")
    b = dead_jobs(db_url, 2, queue="other")
    assert api.post("/api/jobs/requeue", json={"ids": a[:1]}).json() == {
        "requeued": a[:1],
        "count": 1,
    }
    body = api.post(
        "/api/jobs/requeue", json={"queue": "other"}, headers={"X-Tockwork-Actor": "ops-script"}
    ).json()
    assert sorted(body["requeued"]) == b
    assert status_of(db_url, a + b) == ["pending", "dead", "pending", "pending"]
    rows = audit_rows(db_url)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("api-token", "requeue", 1),
        ("ops-script", "requeue", 2),
    ]
    assert rows[1][3]["filter"] == {"queue": "other"}
    cancelled = api.post("/api/jobs/cancel", json={"ids": a[1:]}).json()
    assert cancelled == {"cancelled": a[1:], "count": 1}


# -- schedules ------------------------------------------------------------------------------------


BERLIN_SPRING = datetime(2026, 3, 25, 12, tzinfo=UTC)  # the clocks go forward on 29 March


def test_schedule_page_shows_the_next_10_with_offset_and_dst_mark(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    clock = FrozenClock(BERLIN_SPRING)
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn,
            job_type="reminder",
            rule="daily@02:30",
            zone="Europe/Berlin",
            subject="user-1",
            now=BERLIN_SPRING,
        )
    client = app_client(clock=clock)
    sign_in(client)
    page = client.get(f"/schedules/{s.id}")
    assert page.status_code == 200
    rows = re.findall(
        r"<tr><td>(\w{3} [\d-]+ [\d:]+)</td><td>([+-]\d\d:\d\d)</td><td>([^<]+)</td>"
        r"<td><code>[^<]+</code></td>\s*<td class=\"dst\">(.*?)</td></tr>",
        page.text,
        re.S,
    )
    assert len(rows) == 10
    assert rows[0][:3] == ("Thu 2026-03-26 02:30", "+01:00", "2026-03-26T01:30Z")
    assert rows[3][:3] == ("Sun 2026-03-29 03:30", "+02:00", "2026-03-29T01:30Z")
    assert "gap_shifted" in rows[3][3] and "gap_shifted" not in rows[2][3] + rows[4][3]
    assert rows[4][:3] == ("Mon 2026-03-30 02:30", "+02:00", "2026-03-30T00:30Z")
    listing = client.get("/schedules?subject=user-1")
    assert f'href="/schedules/{s.id}"' in listing.text and "daily@02:30" in listing.text
    api = client.get("/api/schedules", params={"subject": "user-1"}).json()
    assert [x["id"] for x in api["schedules"]] == [s.id]
    assert client.get("/api/schedules", params={"zone": "UTC"}).json()["schedules"] == []
    assert client.get("/schedules/99999").status_code == 404


def test_pause_and_resume_from_the_schedule_page(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="user-2"
        )
    page = browser.get(f"/schedules/{s.id}")
    assert (
        browser.post(f"/schedules/{s.id}/pause", data={"csrf": csrf_of(page.text)}).status_code
        == 303
    )
    page = browser.get(f"/schedules/{s.id}")
    assert 'id="paused"' in page.text and 'id="resume"' in page.text
    with psycopg.connect(db_url) as conn:
        assert scheduler.get_schedule(conn, s.id).paused
    browser.post(f"/schedules/{s.id}/resume", data={"csrf": csrf_of(page.text)})
    with psycopg.connect(db_url) as conn:
        assert not scheduler.get_schedule(conn, s.id).paused
    assert [(r[1], r[3]) for r in audit_rows(db_url)] == [
        ("pause", {"schedule_id": s.id}),
        ("resume", {"schedule_id": s.id}),
    ]


def test_pause_with_a_note_trigger_and_backfill_from_the_schedule_page(
    db_url: str, browser: TestClient
) -> None:
    """Issue 24: pause with a note and an end, trigger now, backfill preview and run; each
    action needs the page's CSRF token and is audited with the signed-in operator."""
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="maint", rule="every:30m", zone="UTC", key="nightly", now=start
        )
    page = browser.get(f"/schedules/{s.id}")
    csrf = csrf_of(page.text)
    assert 'id="overlap">skip' in page.text
    assert 'id="max-lateness">runs however late' in page.text
    assert browser.post(f"/schedules/{s.id}/trigger", data={}).status_code == 403
    until = "2031-01-01T00:00Z"
    form = {"csrf": csrf, "note": "disk <full>", "until": until}
    assert browser.post(f"/schedules/{s.id}/pause", data=form).status_code == 303
    page = browser.get(f"/schedules/{s.id}")
    assert 'id="pause-note"' in page.text and "disk &lt;full&gt;" in page.text
    listing = browser.get("/schedules")
    assert "disk &lt;full&gt;" in listing.text
    browser.post(f"/schedules/{s.id}/resume", data={"csrf": csrf})
    at = "2026-01-01T00:00Z"
    assert (
        browser.post(f"/schedules/{s.id}/trigger", data={"csrf": csrf, "at": at}).status_code == 303
    )
    end = (start + timedelta(hours=1)).isoformat()
    backfill = {"csrf": csrf, "start": start.isoformat(), "end": end, "overlap": ""}
    preview = browser.post(f"/schedules/{s.id}/backfill", data={**backfill, "action": "preview"})
    assert preview.status_code == 200 and "would_create 2" in preview.text
    metric = "tockwork_scheduler_backfilled_occurrences_total"
    counted = REGISTRY.get_sample_value(metric) or 0.0
    run = browser.post(f"/schedules/{s.id}/backfill", data={**backfill, "action": "run"})
    assert "created 2" in run.text
    again = browser.post(f"/schedules/{s.id}/backfill", data={**backfill, "action": "run"})
    assert "existing 2" in again.text
    assert REGISTRY.get_sample_value(metric) == counted + 2  # the preview and "existing": none
    bad = browser.post(f"/schedules/{s.id}/backfill", data={**backfill, "end": "later"})
    assert bad.status_code == 400
    actions = [(r[0], r[1], r[2]) for r in audit_rows(db_url)]
    assert actions == [
        ("alice", "pause", 1), ("alice", "resume", 1), ("alice", "trigger", 1),
        ("alice", "backfill", 2), ("alice", "backfill", 0),
    ]  # fmt: skip
    assert audit_rows(db_url)[0][3] == {"schedule_id": s.id, "note": "disk <full>",
                                        "until": "2031-01-01T00:00:00+00:00"}  # fmt: skip


def test_a_schedule_page_shows_its_maximum_lateness(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="pill", rule="daily@08:00", zone="UTC", subject="u", max_lateness=900
        )
    page = browser.get(f"/schedules/{s.id}")
    assert 'id="max-lateness">a job not started within 900 s' in page.text


def test_the_preview_form_marks_dst_as_tockwork_preview_does(browser: TestClient) -> None:
    page = browser.get(
        "/preview",
        params={
            "rule": "daily@01:30",
            "zone": "America/New_York",
            "after": "2026-11-01T00:00Z",
            "count": "3",
            "fold": "both",
        },
    )
    assert page.status_code == 200
    # As `tockwork preview daily@01:30 --zone America/New_York --fold both` prints them.
    rows = re.findall(
        r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td><td><code>([^<]+)"
        r"</code></td>\s*<td class=\"dst\">(.*?)</td></tr>",
        page.text,
        re.S,
    )
    assert [r[:4] for r in rows] == [
        ("Sun 2026-11-01 01:30", "-04:00", "2026-11-01T05:30Z", "2026-11-01T01:30"),
        ("Sun 2026-11-01 01:30", "-05:00", "2026-11-01T06:30Z", "2026-11-01T01:30#1"),
        ("Mon 2026-11-02 01:30", "-05:00", "2026-11-02T06:30Z", "2026-11-02T01:30"),
    ]
    assert "fold_first" in rows[0][4] and "fold_second" in rows[1][4]
    assert "repeated hour" in rows[1][4] and rows[2][4] == ""
    gap = browser.get(
        "/preview",
        params={
            "rule": "daily@02:30",
            "zone": "America/New_York",
            "after": "2026-03-07T12:00Z",
            "count": "2",
        },
    )
    assert "gap_shifted" in gap.text and "03:30" in gap.text
    assert browser.get("/preview").status_code == 200  # the empty form


# -- lateness, outbox -----------------------------------------------------------------------------


def test_lateness_histograms_per_queue(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        for _ in range(4):
            jobs.enqueue(conn, "send", {}, queue="mail")
    jobs.Worker(db_url, {"send": succeed}, {"mail": 1}, listen=False).run_until_idle()
    page = browser.get("/lateness?window=1h")
    assert page.status_code == 200
    assert "mail: start (4 jobs)" in page.text
    assert "nominal" not in re.sub(r"<p class=\"legend\">.*?</p>", "", page.text, flags=re.S)
    assert "no first attempts" in browser.get("/lateness?queue=other").text


def test_outbox_page_and_retry(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        event = outbox.record(
            conn,
            aggregate_type="order",
            aggregate_id=1,
            event_type="shipped",
            payload={"secret": XSS},
        )
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outbox_events SET dead_at = now(), last_error = %s", [XSS])
        conn.commit()
    page = browser.get("/outbox")
    assert page.status_code == 200 and str(event) in page.text and "1 dead" in page.text
    assert "<script>alert" not in page.text
    done = browser.post(
        "/outbox/retry", data={"csrf": csrf_of(page.text), "scope": "selected", "id": str(event)}
    )
    assert done.status_code == 303 and done.headers["location"].endswith("done=1")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT dead_at FROM outbox_events").fetchone() == (None,)
    assert audit_rows(db_url)[0][1:3] == ("outbox_retry", 1)


# -- logs and mounting ----------------------------------------------------------------------------


def test_logs_hold_no_payload_and_no_organization_id(
    db_url: str, api: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    org = uuid.uuid4()
    with psycopg.connect(db_url) as conn, conn.transaction():
        job_id = jobs.enqueue(conn, "send", {"secret": "s3cr3t"}, organization_id=org).id
    with caplog.at_level(logging.DEBUG):
        api.get("/api/jobs", params={"organization_id": str(org)})
        api.get(f"/api/jobs/{job_id}")
        api.get("/api/jobs", params={"organization_id": "bad-" + str(org)})
    # Everything logged on the server side (the test's HTTP client logs its own URLs).
    text = "\n".join(r.getMessage() for r in caplog.records if not r.name.startswith("httpx"))
    assert "GET /api/jobs 200" in text and "GET /api/jobs 400" in text
    assert str(org) not in text and "s3cr3t" not in text


def test_the_app_mounts_under_a_prefix(db_url: str) -> None:
    inner = create_app(db_url, token=TOKEN)
    outer = Starlette(routes=[Mount("/ops", app=inner)])
    with TestClient(outer, follow_redirects=False) as client:
        first = client.get("/ops/jobs")
        assert first.status_code == 303 and first.headers["location"].startswith("/ops/login?")
        login = client.get("/ops/login")
        assert 'action="/ops/login"' in login.text and 'href="/ops/static/style.css"' in login.text
        assert client.get("/ops/static/style.css").status_code == 200
        response = client.post(
            "/ops/login",
            data={"csrf": csrf_of(login.text), "token": TOKEN, "name": "bob", "next": "/jobs"},
        )
        assert response.headers["location"] == "/ops/jobs"
        assert response.headers["set-cookie"].count("Path=/ops") == 1
        page = client.get("/ops/jobs")
        assert page.status_code == 200 and 'href="/ops/dead"' in page.text
    close(inner)  # a mounted app's lifespan does not run


def test_lateness_against_the_nominal_occurrence_and_a_schedules_jitter(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    start = datetime(2026, 6, 1, 7, 59, 30, tzinfo=UTC)
    clock = FrozenClock(start)
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn,
            job_type="reminder",
            rule="daily@08:00",
            zone="UTC",
            subject="user-9",
            queue="reminders",
            jitter=60,
            now=start,
        )
    Scheduler(db_url, clock=clock).run_until_idle()
    clock.advance(minutes=3)
    jobs.Worker(
        db_url, {"reminder": succeed}, {"reminders": 1}, clock=clock, listen=False
    ).run_until_idle()
    client = app_client(clock=clock)
    sign_in(client)
    lateness = client.get("/lateness?window=1h&queue=reminders").text
    assert "reminders: start (1 jobs)" in lateness and "reminders: nominal (1 jobs)" in lateness
    # Started at 08:02:30, 150 s after the nominal 08:00: the 60s-5m bucket.
    assert re.search(r"<title>1m-5m: 1</title>", lateness), lateness
    page = client.get(f"/schedules/{s.id}").text
    spread = re.search(r'id="jitter-spread">jitter spread: ([\d.]+) s to ([\d.]+) s', page)
    assert spread is not None
    assert 0 <= float(spread.group(1)) == float(spread.group(2)) <= 60
    assert "<code>2026-06-01T08:00</code>" in page


def test_every_page_says_when_acknowledged_work_can_be_lost_at_failover(
    browser: TestClient,
) -> None:
    # The test server replicates asynchronously (no synchronous standby): jobs/primary.py.
    for path in ("/", "/jobs", "/schedules"):
        page = browser.get(path).text
        assert 'id="replication"' in page, path
        assert "acknowledged work can be lost at failover" in page
