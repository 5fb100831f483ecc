"""Issue 26 on the dashboard: the processes page, live workers per queue, the job page's actions,
search, a schedule's occurrences in a chosen window, the preview's 1,000 rows, attempts numbered
across a requeue, the refresh setting."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

import jobs
import scheduler
from jobs import processes
from jobs.processes import ProcessFacts
from scheduler.dashboard import create_app
from tests.integration.dashboard.conftest import (
    TOKEN,
    csrf_of,
    dead_jobs,
    fail_permanently,
    sign_in,
)
from tests.processes import wait_for
from timezones import FrozenClock
from timezones.errors import InvalidInput


def stale_since() -> datetime:
    """Five minutes ago: stale (three 10 s heartbeats missed), not yet pruned (15 minutes after
    that) by the heartbeat of the dashboard under test, which runs at the same time."""
    return datetime.now(UTC) - timedelta(minutes=5)


def _beat(db_url: str, facts: ProcessFacts, now: datetime | None = None) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        processes.beat(conn, facts, now=now)


def test_the_overview_counts_live_workers_and_flags_an_unserved_queue(
    db_url: str, browser: TestClient, api: TestClient
) -> None:
    _beat(db_url, ProcessFacts(kind="worker", name="w1", queues={"idle": 2, "mail": 1}))
    _beat(db_url, ProcessFacts(kind="worker", name="w2", queues={"mail": 3}))
    _beat(
        db_url,
        ProcessFacts(kind="worker", name="dead", queues={"orphan": 1}),
        now=stale_since(),
    )
    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, queue="mail")
        jobs.enqueue(conn, "send", {}, queue="orphan")
        jobs.set_queue_policy(conn, "fairq", fair=True)
        jobs.limits.set_limit(conn, jobs.RateLimit(queue="limitedq", per_second=5))
        jobs.limits.set_limit(conn, jobs.RateLimit(job_type="send", per_second=5))
    page = browser.get("/").text
    # Queues without unfinished jobs: served by a live worker, or with a policy or a limit.
    assert '<tr id="queue-fairq">' in page and '<tr id="queue-limitedq">' in page
    assert '<tr id="queue-send">' not in page  # a job type's limit names no queue
    row = {
        q: re.search(rf'<tr id="queue-{q}">(.*?)</tr>', page, re.S)
        for q in ("idle", "mail", "orphan")
    }
    assert all(row.values()), "every queue has its row, the one without jobs too"
    assert "2 (concurrency 4)" in row["mail"].group(1)  # type: ignore[union-attr]
    assert "1 (concurrency 2)" in row["idle"].group(1)  # type: ignore[union-attr]
    assert '<td class="ready">0</td>' in row["idle"].group(1)  # type: ignore[union-attr]
    orphan = row["orphan"].group(1)  # type: ignore[union-attr]
    assert 'class="workers warn"' in orphan and "ready jobs wait for a worker" in orphan
    # w1, w2 and this dashboard (which registers itself); "dead" is stale.
    assert "Processes: 3 live" in page
    by_queue = {q["queue"]: q for q in api.get("/api/queues").json()}
    assert (by_queue["orphan"]["unserved"], by_queue["mail"]["unserved"]) == (True, False)
    assert (by_queue["mail"]["workers"], by_queue["mail"]["concurrency"]) == (2, 4)
    overview = api.get("/api/overview").json()
    listed = {p["name"]: p["live"] for p in overview["processes"] if p["kind"] == "worker"}
    assert listed == {"w1": True, "w2": True, "dead": False}


def test_the_processes_page_and_api(db_url: str, browser: TestClient, api: TestClient) -> None:
    _beat(db_url, ProcessFacts(kind="scheduler", name="s1"))
    _beat(db_url, ProcessFacts(kind="relay", name="r-old"), now=stale_since())
    page = browser.get("/processes")
    assert page.status_code == 200
    table = re.search(r'<table id="processes">(.*?)</table>', page.text, re.S)
    assert table is not None
    rows = re.findall(r"<tr( class=\"stale\")?><td>(\w+)</td><td>([^<]+)</td>", table.group(1))
    rows = [r for r in rows if r[1] != "dashboard"]  # this dashboard registers itself too
    assert rows == [("", "scheduler", "s1"), (' class="stale"', "relay", "r-old")]
    assert "stale (no heartbeat)" in table.group(1)
    body = api.get("/api/processes").json()
    assert [(p["kind"], p["live"]) for p in body if p["kind"] != "dashboard"] == [
        ("scheduler", True),
        ("relay", False),
    ]


def test_the_dashboard_registers_itself_while_it_serves(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        with TestClient(create_app(db_url, token=TOKEN)):
            wait_for(conn, "SELECT count(*) = 1 FROM processes WHERE kind = 'dashboard'")
            [me] = processes.list_processes(conn, kind="dashboard")
            assert me.name.startswith("dashboard:") and me.queues == {}
        assert processes.list_processes(conn, include_stale=True) == []


def test_requeue_and_cancel_from_the_job_page_with_csrf_and_audit(
    db_url: str, browser: TestClient
) -> None:
    [job_id] = dead_jobs(db_url, 1)
    page = browser.get(f"/jobs/{job_id}")
    assert f'id="job-requeue">Requeue job {job_id}<' in page.text
    assert f'id="job-cancel">Cancel job {job_id}<' in page.text
    refused = browser.post(f"/jobs/{job_id}/requeue", data={"csrf": "forged"})
    assert refused.status_code == 403
    done = browser.post(f"/jobs/{job_id}/requeue", data={"csrf": csrf_of(page.text)})
    assert (done.status_code, done.headers["location"]) == (303, f"/jobs/{job_id}?done=requeue")
    page = browser.get(done.headers["location"])
    assert "requeue: done" in page.text and 'id="job-status">pending<' in page.text
    assert 'id="job-requeue"' not in page.text  # a pending job can be cancelled, not requeued
    # Run it into the dead letters again: two attempts, numbered 1 and 2, the second marked.
    jobs.Worker(db_url, {"send": fail_permanently}, {"mail": 1}, listen=False).run_until_idle()
    page = browser.get(f"/jobs/{job_id}")
    numbers = re.findall(
        r"<tr><td>(\d+)</td><td>(\d+)( <span class=\"badge\">after a requeue</span>)?</td>",
        page.text,
    )
    assert numbers == [("1", "1", ""), ("2", "1", ' <span class="badge">after a requeue</span>')]
    cancelled = browser.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert cancelled.headers["location"] == f"/jobs/{job_id}?done=cancel"
    again = browser.post(f"/jobs/{job_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert again.headers["location"] == f"/jobs/{job_id}?done=nothing"  # cancelled already
    with psycopg.connect(db_url) as conn:
        audit = conn.execute(
            "SELECT actor, action, affected, filter FROM dashboard_audit ORDER BY id"
        ).fetchall()
    assert [(a, act, n) for a, act, n, _ in audit] == [
        ("alice", "requeue", 1),
        ("alice", "cancel", 1),
        ("alice", "cancel", 0),
    ]
    assert audit[0][3] == {"ids": [job_id], "from": "job page"}


def test_search_by_job_id_idempotency_key_or_subject(db_url: str, browser: TestClient) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        keyed = jobs.enqueue(conn, "send", {}, idempotency_key="order-77").id
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@08:00", zone="Europe/Berlin", subject="user-9"
        )
        scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@09:00", zone="UTC", subject="user-both"
        )
        scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@10:00", zone="UTC", subject="user-both"
        )
    assert browser.get(f"/search?q={keyed}").headers["location"] == f"/jobs/{keyed}"
    assert browser.get("/search?q=order-77").headers["location"] == "/jobs?idempotency_key=order-77"
    assert browser.get("/search?q=user-9").headers["location"] == f"/schedules/{s.id}"
    # Two schedules of the subject: their list; a key and an id at once: the matches.
    both = browser.get("/search?q=user-both")
    assert both.headers["location"] == "/schedules?subject=user-both"
    with psycopg.connect(db_url) as conn, conn.transaction():
        jobs.enqueue(conn, "send", {}, idempotency_key=str(keyed))
    two = browser.get(f"/search?q={keyed}")
    assert two.status_code == 200 and 'href="/jobs/' in two.text and "1 job(s)</a>" in two.text
    none = browser.get("/search", params={"q": "999999"})
    assert none.status_code == 200 and 'id="no-match"' in none.text
    assert browser.get("/search").status_code == 200
    assert browser.get("/search", params={"q": "x" * 2000}).status_code == 400


def test_a_schedules_dst_marks_in_a_chosen_window(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    now = datetime(2026, 1, 10, tzinfo=UTC)
    with psycopg.connect(db_url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@02:30", zone="Europe/Berlin", now=now
        )
    client = app_client(clock=FrozenClock(now))
    sign_in(client)
    # The spring change (2026-03-29) is not in the next 10 occurrences: a window shows it.
    assert "gap_shifted" not in client.get(f"/schedules/{s.id}").text
    page = client.get(f"/schedules/{s.id}", params={"after": "2026-03-20T00:00Z", "count": "20"})
    assert page.status_code == 200 and page.text.count(">gap_shifted<") == 1
    only = client.get(f"/schedules/{s.id}", params={"count": "80", "marked": "1"})
    rows = re.findall(r"<code>(2026-03-29T02:30[^<]*)</code>", only.text)
    assert rows == ["2026-03-29T02:30"] and only.text.count("<tr><td>") == 1
    assert 'data-zone="Europe/Berlin"' in page.text
    for bad in ({"after": "yesterday"}, {"count": "1001"}, {"marked": "maybe"}):
        assert client.get(f"/schedules/{s.id}", params=bad).status_code == 400, bad


def test_the_preview_allows_1000_rows_and_keeps_its_input_on_an_error(
    browser: TestClient,
) -> None:
    page = browser.get("/preview", params={"rule": "every:1m", "zone": "UTC", "count": "1000"})
    assert page.status_code == 200, page.text
    assert page.text.count("<tr><td>") == 1000
    bad = browser.get(
        "/preview", params={"rule": "daily@25:00", "zone": "Asia/Tokyo", "count": "7"}
    )
    assert bad.status_code == 400 and 'id="preview-error"' in bad.text and "rule" in bad.text
    assert 'value="daily@25:00"' in bad.text and 'value="Asia/Tokyo"' in bad.text
    assert 'id="count" value="7"' in bad.text


def test_refresh_is_in_the_page_and_checked(
    db_url: str, app_client: Callable[..., TestClient]
) -> None:
    client = app_client(refresh=0)
    sign_in(client)
    assert '<body data-refresh="0">' in client.get("/").text
    client = app_client(refresh=2.5)
    sign_in(client)
    assert '<body data-refresh="2.5">' in client.get("/").text
    for bad in (-1, 3601, float("nan"), True):
        with pytest.raises(InvalidInput) as err:
            create_app(db_url, token=TOKEN, refresh=bad)
        assert err.value.field == "refresh"


def test_the_lateness_bars_carry_their_numbers_and_percentiles(
    db_url: str, browser: TestClient
) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        for _ in range(3):
            jobs.enqueue(
                conn, "send", {}, queue="mail", run_at=datetime.now(UTC) - timedelta(seconds=2)
            )
    jobs.Worker(db_url, {"send": lambda _j: None}, {"mail": 1}, listen=False).run_until_idle()
    page = browser.get("/lateness?window=1h").text
    assert re.search(r'id="mail-start-p50">p50 [^<]+<', page)
    assert re.search(r'id="mail-start-p99">p99 [^<]+<', page)
    assert re.search(r'<text class="count wide"[^>]*>3</text>', page)


def test_a_database_without_the_registry_serves_the_dashboard_with_a_warning(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP TABLE processes")
    with (
        caplog.at_level(logging.WARNING, logger="tockwork"),
        TestClient(create_app(db_url, token=TOKEN)) as client,
    ):
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        assert client.get("/api/jobs").status_code == 200
    warned = [r.getMessage() for r in caplog.records if "registry of processes" in r.getMessage()]
    assert len(warned) == 1 and "tockwork migrate" in warned[0]
