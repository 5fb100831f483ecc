"""Waiting for a session to wait: tests of races hold a lock in one session and need to know
that another session is queued behind it (the database's own wait, polled), never a sleep."""

from __future__ import annotations

import time

import psycopg


def wait_for_lock_wait(url: str, app: str) -> None:
    """Until the session named ``app`` waits on a lock (the database's own wait, polled)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as w:
        while time.monotonic() < deadline:
            row = w.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event_type = 'Lock'",
                (app,),
            ).fetchone()
            if row == (1,):
                return
    raise AssertionError(f"{app} never waited on a lock")
