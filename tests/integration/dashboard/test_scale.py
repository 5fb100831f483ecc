"""What migration 0011 gives the dashboard: heartbeat ages per worker, and the filters its
partial indexes serve (right rows, newest first, read through the index)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

import jobs
from jobs.store import PgJobStore
from scheduler.dashboard import create_app, views
from scheduler.queries import query
from tests.integration.dashboard.conftest import TOKEN
from timezones import FrozenClock

T0 = datetime(2026, 11, 1, 5, 0, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def test_the_overview_shows_each_workers_heartbeat_age(db_url: str) -> None:
    with psycopg.connect(db_url) as conn, conn.transaction():
        ids = [jobs.enqueue(conn, "t", {"i": i}, now=T0).id for i in range(3)]
    with psycopg.connect(db_url, autocommit=True) as conn:
        a, b = PgJobStore(conn), PgJobStore(conn)
        leases_a = a.claim({"default": 2}, "worker-a", LEASE, T0)
        (lease_b,) = b.claim({"default": 1}, "worker-b", LEASE, T0 + timedelta(seconds=5))
        beat = leases_a[0]
        assert a.heartbeat([(beat.id, beat.lease_token)], LEASE, T0 + timedelta(seconds=20)) == {
            beat.id
        }
        row = conn.execute("SELECT heartbeat_at FROM jobs_all WHERE id = %s", (beat.id,)).fetchone()
        assert row == (T0 + timedelta(seconds=20),)
        # A heartbeat left by an earlier lease of the job never hides its fresh claim.
        conn.execute(
            "UPDATE jobs SET heartbeat_at = %s WHERE id = %s",
            (T0 - timedelta(hours=1), lease_b.id),
        )
        now = T0 + timedelta(seconds=30)
        workers = views.overview(conn, now)["workers"]
    assert sorted(ids) == sorted([*(j.id for j in leases_a), lease_b.id])
    assert [
        (w["worker"], w["leases"], w["heartbeat_age_s"], w["stalest_heartbeat_age_s"])
        for w in workers
    ] == [("worker-a", 2, 10.0, 30.0), ("worker-b", 1, 25.0, 25.0)]

    app = create_app(db_url, token=TOKEN, clock=FrozenClock(now))
    with TestClient(app) as client:
        page = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200
    assert '<td class="heartbeat">10.0 s ago</td>' in page.text
    assert '<td class="heartbeat">25.0 s ago</td>' in page.text


def _seed(conn: psycopg.Connection[Any], org: uuid.UUID) -> None:
    """20,000 finished jobs, a few of them with error codes or dead (some of ``org``)."""
    conn.execute(
        """
        INSERT INTO jobs (job_type, queue, status, last_error_code, organization_id,
                          completed_at)
        SELECT 'bulk', 'q' || (g %% 3),
               CASE WHEN g %% 1000 = 0 THEN 'dead' WHEN g %% 779 = 0 THEN 'retrying'
                    ELSE 'succeeded' END,
               CASE WHEN g %% 500 = 0 THEN 'E_RARE' END,
               CASE WHEN g %% 2000 = 0 THEN %(org)s::uuid END,
               now()
        FROM generate_series(1, 20000) AS g
        """,
        {"org": org},
    )
    conn.execute("ANALYZE jobs")


def test_error_code_and_organization_dead_filters_read_their_indexes(db_url: str) -> None:
    org = uuid.uuid4()
    with psycopg.connect(db_url, autocommit=True) as conn:
        _seed(conn, org)
        base: dict[str, Any] = {"before": None, "limit": 51, **views.JobFilter().params()}
        cases: list[tuple[dict[str, Any], str]] = [
            ({"error_code": "E_RARE"}, "jobs_error_code_idx"),
            ({"organization_id": org, "statuses": ["dead"]}, "jobs_dead_organization_idx"),
            ({"statuses": ["dead"]}, "jobs_dead_recent_idx"),
        ]
        for filters, index in cases:
            plan = conn.execute("EXPLAIN " + query("dashboard_job_page"), base | filters).fetchall()
            assert index in "\n".join(r[0] for r in plan), (filters, plan)

        rare, _ = views.job_page(conn, views.JobFilter(error_code="E_RARE"), None, limit=100)
        assert [j["id"] for j in rare] == sorted((j["id"] for j in rare), reverse=True) and len(
            rare
        ) == 40
        flt = views.JobFilter(organization_id=org, statuses=["dead"])
        page, nxt = views.job_page(conn, flt, None, limit=5)
        rows = conn.execute(
            "SELECT id FROM jobs WHERE status = 'dead' AND organization_id = %s ORDER BY id DESC",
            (org,),
        ).fetchall()
        assert [j["id"] for j in page] == [r[0] for r in rows][:5] and nxt is not None
        assert views.job_count(conn, flt).value == len(rows) == 10
        # A count with an error code reads the code's index, whatever the status asked for.
        coded = base | {"error_code": "E_RARE", "statuses": ["dead"]}
        explained = conn.execute("EXPLAIN " + query("dashboard_job_count_error_code"), coded)
        assert "jobs_error_code_idx" in "\n".join(r[0] for r in explained.fetchall())
        (dead_rare,) = conn.execute(
            "SELECT count(*) FROM jobs_all WHERE status = 'dead' AND last_error_code = 'E_RARE'"
        ).fetchone() or (None,)
        got = views.job_count(conn, views.JobFilter(error_code="E_RARE", statuses=["dead"]))
        assert got.value == dead_rare == 20


def test_the_retrying_count_per_queue(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _seed(conn, uuid.uuid4())
        by_queue = {q["queue"]: q["retrying"] for q in views.queues(conn, None)}
        rows = conn.execute(
            "SELECT queue, count(*) FROM jobs_all WHERE status = 'retrying' GROUP BY queue"
        ).fetchall()
    assert by_queue == dict(rows) and sum(by_queue.values()) == 25


def test_a_filter_no_index_serves_scans_a_bounded_window_per_page(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of an unindexed filter (an organization over every status) each read at most
    SCAN_WINDOW ids and go on below it; walking them finds every match once, newest first."""
    org = uuid.uuid4()
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO jobs (id, job_type, status, organization_id, completed_at)"
            " SELECT g, 'bulk', 'succeeded', CASE WHEN g IN (5, 800) THEN %s::uuid END, now()"
            " FROM generate_series(1, 1000) AS g",
            (org,),
        )
        conn.commit()
    monkeypatch.setattr(views, "SCAN_WINDOW", 300)
    app = create_app(db_url, token=TOKEN)
    walked: list[tuple[list[int], int | None, int | None]] = []
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        params: dict[str, str] = {"organization_id": str(org)}
        for _ in range(10):
            body = client.get("/api/jobs", params=params).json()
            walked.append(
                ([j["id"] for j in body["jobs"]], body["next_before"], body["scanned_down_to"])
            )
            assert body["count"] == 2
            if body["next_before"] is None:
                break
            params["before"] = str(body["next_before"])
        page = client.get("/jobs", params={"organization_id": str(org)}).text
    assert walked == [([800], 701, 701), ([], 401, 401), ([], 101, 101), ([5], None, None)]
    assert "Looked through job ids down to 701" in page


def test_a_status_filter_over_a_backlog_pages_through_bounded_windows(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status whose partial index holds more than STATUS_SORT_CAP rows (a backlog of ready
    jobs) is not read whole and sorted for every page: its pages walk the primary key a window
    at a time, and together they hold every match once, newest first. A small status set is
    still read through its index in one page."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO jobs (id, job_type, status, completed_at)"
            " SELECT g, CASE WHEN g % 20 = 0 THEN 'a' ELSE 'b' END,"
            "        CASE WHEN g % 10 = 0 THEN 'pending' WHEN g % 97 = 0 THEN 'retrying'"
            "             ELSE 'succeeded' END,"
            "        CASE WHEN g % 10 <> 0 AND g % 97 <> 0 THEN now() END"
            " FROM generate_series(1, 1000) AS g"
        )
        conn.commit()
        monkeypatch.setattr(views, "STATUS_SORT_CAP", 50)
        monkeypatch.setattr(views, "SCAN_WINDOW", 300)
        assert views.job_plan(conn, views.JobFilter(statuses=["pending"])) == "window"
        assert views.job_plan(conn, views.JobFilter(statuses=["retrying"])) == "window"  # ready
        assert views.job_plan(conn, views.JobFilter(statuses=["leased"])) == "status"
        assert views.job_plan(conn, views.JobFilter(statuses=["pending"], queue="x")) == "status"
    app = create_app(db_url, token=TOKEN)
    seen: list[int] = []
    scanned: list[int | None] = []
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        params = {"status": "pending", "job_type": "a"}
        for _ in range(20):
            body = client.get("/api/jobs", params=params).json()
            seen += [j["id"] for j in body["jobs"]]
            scanned.append(body["scanned_down_to"])
            if body["next_before"] is None:
                break
            params["before"] = str(body["next_before"])
    assert seen == list(range(1000, 0, -20))
    assert scanned[0] == 701 and scanned[-1] is None


def test_filters_beside_an_id_ordered_index_read_a_bounded_run_of_it(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With filters besides the ones its index holds (a job type of the dead letters, a queue
    with an error code), a page reads at most SCAN_ENTRIES entries of that index below its
    cursor and goes on below them: the pages together hold every match once, newest first, and
    each says how far it looked (a filter that matches rarely never reads the whole index)."""
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO jobs (id, job_type, queue, status, last_error_code, completed_at)"
            " SELECT g, CASE WHEN g IN (30, 40, 990) THEN 'rare' ELSE 'b' END,"
            "        CASE WHEN g IN (20, 500) THEN 'q2' ELSE 'q1' END,"
            "        CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'succeeded' END,"
            "        CASE WHEN g % 10 = 0 THEN 'E' END, now()"
            " FROM generate_series(1, 1000) AS g"
        )
        conn.commit()
        plans = {
            "dead": views.JobFilter(statuses=["dead"]),
            "dead, organization": views.JobFilter(statuses=["dead"], organization_id=uuid.uuid4()),
            "dead, job type": views.JobFilter(statuses=["dead"], job_type="rare"),
            "code": views.JobFilter(error_code="E"),
            "code, queue": views.JobFilter(error_code="E", queue="q2"),
            "key": views.JobFilter(idempotency_key="k", queue="q2"),
        }
        assert {k: views.job_plan(conn, f) for k, f in plans.items()} == {
            "dead": "index",
            "dead, organization": "index",
            "dead, job type": "dead",
            "code": "index",
            "code, queue": "error_code",
            "key": "index",
        }
    monkeypatch.setattr(views, "SCAN_ENTRIES", 20)
    app = create_app(db_url, token=TOKEN)
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"

        def walk(params: dict[str, str]) -> tuple[list[int], list[int | None]]:
            seen: list[int] = []
            scanned: list[int | None] = []
            for _ in range(20):
                body = client.get("/api/jobs", params=params).json()
                seen += [j["id"] for j in body["jobs"]]
                scanned.append(body["scanned_down_to"])
                if body["next_before"] is None:
                    return seen, scanned
                params = params | {"before": str(body["next_before"])}
            raise AssertionError("the pages did not end")

        # 100 dead jobs (every tenth id): 20 a page, the last 20 down to id 10 with none left.
        assert walk({"status": "dead", "job_type": "rare"}) == (
            [990, 40, 30],
            [810, 610, 410, 210, None],
        )
        assert walk({"error_code": "E", "queue": "q2"}) == ([500, 20], [810, 610, 410, 210, None])
        page = client.get("/dead", params={"job_type": "rare", "before": "810"}).text
    assert "Looked through job ids down to 610" in page and "at most 20 dead jobs" in page


def test_dead_ids_selects_exactly_the_filtered_dead_letters_through_their_index(
    db_url: str,
) -> None:
    """Each filter combination of an action over dead letters picks its own statement
    (views.dead_ids): the ids are exactly the matching dead jobs, oldest first. (Which index
    each reads shows only at scale: bench.dashboard's database, docs/dashboard.md.)"""
    rows = []
    with psycopg.connect(db_url) as conn, conn.transaction():
        for i in range(48):
            queue, job_type, code = f"q{i % 2}", f"t{i % 3}", f"E_{i % 4}"
            status = "dead" if i % 5 else "retrying"  # a retrying job carries a code too
            job_id = jobs.enqueue(conn, job_type, {"i": i}, queue=queue, now=T0).id
            conn.execute(
                "UPDATE jobs SET status = %s, last_error_code = %s WHERE id = %s",
                (status, code, job_id),
            )
            rows.append((job_id, queue, job_type, code, status))
    with psycopg.connect(db_url, autocommit=True) as conn:
        filters: list[tuple[str | None, str | None, str | None]] = [
            (q, t, c) for q in (None, "q1", "q9") for t in (None, "t2") for c in (None, "E_3")
        ]
        for want_queue, want_type, want_code in filters:
            expected = [
                r[0]
                for r in rows
                if r[4] == "dead"
                and want_queue in (None, r[1])
                and want_type in (None, r[2])
                and want_code in (None, r[3])
            ]
            got = views.dead_ids(conn, want_queue, want_type, want_code)
            assert got == sorted(expected), (want_queue, want_type, want_code)
