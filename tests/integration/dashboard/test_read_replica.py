"""The dashboard reads from a streaming replica (``read_url``) and acts on the primary (issue 25).

A real primary and a streaming standby (tests/failover/servers.py). The pages are read from the
standby and say how far behind it is; pausing a schedule goes to the primary (on the standby it
would fail: a replica is read-only) and reaches the standby's pages once replayed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import psycopg
import pytest
from starlette.testclient import TestClient

import scheduler
from scheduler.dashboard import create_app
from scheduler.errors import ScheduleNotFound
from tests.failover.servers import LocalServer, migrated_primary_and_standby
from tests.integration.dashboard.conftest import TOKEN, csrf_of, sign_in


@pytest.fixture
def pair() -> Iterator[tuple[LocalServer, LocalServer]]:
    with migrated_primary_and_standby() as servers:
        yield servers


def _replayed(standby: LocalServer, schedule_id: int, paused: bool) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(standby.url) as conn, contextlib.suppress(ScheduleNotFound):
            if scheduler.get_schedule(conn, schedule_id).paused == paused:
                return True
        time.sleep(0.05)  # waiting for the standby's replay, an event of another process
    return False


def test_pages_read_the_replica_and_actions_go_to_the_primary(
    pair: tuple[LocalServer, LocalServer],
) -> None:
    primary, standby = pair
    with psycopg.connect(primary.url) as conn, conn.transaction():
        s = scheduler.create_schedule(
            conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="user-9"
        )
    assert _replayed(standby, s.id, False)
    app = create_app(primary.url, token=TOKEN, read_url=standby.url)
    with TestClient(app, follow_redirects=False) as client:
        sign_in(client)
        page = client.get(f"/schedules/{s.id}")
        assert page.status_code == 200
        assert 'id="replica"' in page.text and "s behind the primary" in page.text
        done = client.post(f"/schedules/{s.id}/pause", data={"csrf": csrf_of(page.text)})
        assert done.status_code == 303, done.text
        with psycopg.connect(primary.url) as conn:
            assert scheduler.get_schedule(conn, s.id).paused
        assert _replayed(standby, s.id, True)
        assert 'id="paused"' in client.get(f"/schedules/{s.id}").text
