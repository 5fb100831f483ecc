"""The FastAPI and Django examples in examples/, exercised as their users would run them.

FastAPI: an async endpoint creates a user's reminder schedule in its own async transaction;
the scheduler enqueues the occurrence and a worker delivers it through the simulated provider.
Django: a signup view commits the user row and its welcome job together, or neither.
Each app runs in a subprocess of its own (Django's settings are process-wide).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run(script: str, cwd: Path, db_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_fastapi_reminders_end_to_end(db_url: str) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    result = _run(
        """
        import os
        from datetime import UTC, datetime, timedelta

        import psycopg
        from fastapi.testclient import TestClient

        import jobs
        from reminders_api import app
        from scheduler import Scheduler
        from scheduler.delivery import simulated_app
        from timezones import FrozenClock

        client = TestClient(app)
        bad = client.post("/users/42/reminders",
                          json={"rule": "daily@25:00", "zone": "UTC", "message": "x"})
        assert bad.status_code == 422 and bad.json()["detail"]["field"] == "rule", bad.text
        bad = client.post("/users/42/reminders",
                          json={"rule": "daily@08:00", "zone": "Mars/Olympus", "message": "x"})
        assert bad.status_code == 422 and bad.json()["detail"]["field"] == "zone", bad.text
        made = client.post("/users/42/reminders",
                           json={"rule": "every:1m", "zone": "America/Chicago",
                                 "message": "stand up"})
        assert made.status_code == 201, made.text
        assert [r["rule"] for r in client.get("/users/42/reminders").json()] == ["every:1m"]
        due = datetime.fromisoformat(made.json()["next_run_at"])
        clock = FrozenClock(due + timedelta(seconds=1))
        Scheduler(os.environ["DATABASE_URL"], clock=clock).run_until_idle()
        stats = jobs.Worker(os.environ["DATABASE_URL"], simulated_app(), {"reminders": 2},
                            clock=clock, listen=False).run_until_idle()
        assert stats.outcomes == {"succeeded": 1}, stats
        with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
            rows = conn.execute("SELECT count(*) FROM simulated_pushes").fetchone()
        assert rows == (1,), rows
        print("fastapi example: ok")
        """,
        EXAMPLES / "fastapi_reminders",
        db_url,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fastapi example: ok" in result.stdout


def test_django_signup_commits_the_user_and_its_job_together(db_url: str) -> None:
    pytest.importorskip("django")
    result = _run(
        """
        import os
        os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
        import django
        django.setup()
        from django.core.management import call_command
        call_command("migrate", verbosity=0)
        from django.test import Client
        import psycopg, jobs

        client = Client(raise_request_exception=False)
        ok = client.post("/signup", {"username": "ada", "email": "ada@example.com"},
                         content_type="application/json")
        assert ok.status_code == 201, ok.content
        failed = client.post("/signup", {"username": "bob", "email": "b@example.com",
                                         "fail": True}, content_type="application/json")
        assert failed.status_code == 500
        with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
            users = [r[0] for r in conn.execute("SELECT username FROM auth_user ORDER BY 1")]
            queued = jobs.list_jobs(conn, statuses=["pending"])
        assert users == ["ada"], users
        assert [j.payload for j in queued] == [{"user_id": ok.json()["id"]}]
        print("django example: ok")
        """,
        EXAMPLES / "django_signup",
        db_url,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "django example: ok" in result.stdout
