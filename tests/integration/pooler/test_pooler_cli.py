"""The operator's commands through a transaction-mode PgBouncer: ``migrate``, ``jobs
dead|list|show|requeue|cancel``, ``stats``, ``schedules sync|list|show|preview``, ``outbox
dead|retry``, ``healthz``; and the pooler settings' own input errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
from jobs import PermanentError, Worker, outbox
from scheduler.cli import main
from tests.processes import ROOT


@pytest.fixture
def cli(pooler_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Run ``tockwork ARGS --database-url <pooler> --pooler transaction`` in this process.

    The CLI exports its pooler mode as ``TOCKWORK_POOLER``: monkeypatch puts it back after.
    """
    monkeypatch.setenv("TOCKWORK_POOLER", "session")

    def run(*args: str) -> int:
        return main([*args, "--database-url", pooler_url, "--pooler", "transaction"])

    yield run


def _dead_jobs(db_url: str, n: int) -> list[int]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        ids = [jobs.enqueue(conn, "fail", {"n": i}, max_attempts=1).id for i in range(n)]

    def fail(_job: jobs.Job) -> None:
        raise PermanentError("no such user")

    Worker(db_url, {"fail": fail}, listen=False).run_until_idle()
    return ids


def test_admin_commands_through_the_pooler(
    cli: Any,
    db_url: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    dead = _dead_jobs(db_url, 6)
    with psycopg.connect(db_url, autocommit=True) as c:
        waiting = [jobs.enqueue(c, "later", {"n": i}).id for i in range(3)]
        outbox.record(c, aggregate_type="o", aggregate_id="1", event_type="x", payload={})
    definitions = tmp_path / "defs.toml"
    definitions.write_text(
        '[[schedule]]\nkey = "nightly"\njob_type = "report"\nrule = "daily@02:00"\n'
        'zone = "Europe/Paris"\n'
    )
    capsys.readouterr()

    assert cli("migrate") == 0
    assert "up to date" in capsys.readouterr().out
    for _ in range(6):  # past psycopg's prepare threshold, were it one connection
        assert cli("jobs", "dead", "--json") == 0
        assert sorted(j["id"] for j in json.loads(capsys.readouterr().out)) == dead
    assert cli("jobs", "list", "--status", "pending") == 0
    assert "(3 job(s))" in capsys.readouterr().out
    assert cli("jobs", "show", str(dead[0]), "--json") == 0
    assert json.loads(capsys.readouterr().out)["job"]["status"] == "dead"
    assert cli("jobs", "requeue", "--id", str(dead[0]), "--id", str(dead[1])) == 0
    assert "requeued 2 job(s)" in capsys.readouterr().out
    assert cli("jobs", "cancel", "--id", str(waiting[0]), "--reason", "not needed") == 0
    assert "cancelled 1 job(s)" in capsys.readouterr().out
    assert cli("stats") == 0
    out = capsys.readouterr().out
    assert "default" in out and "outbox: pending 1" in out
    assert cli("stats", "--json") == 0
    assert {s["queue"] for s in json.loads(capsys.readouterr().out)} == {"default"}
    assert cli("schedules", "sync", str(definitions)) == 0
    assert "create: nightly" in capsys.readouterr().out
    assert cli("schedules", "list") == 0
    assert "nightly" in capsys.readouterr().out
    assert cli("schedules", "show", "nightly") == 0
    assert cli("schedules", "preview", "nightly", "--count", "3", "--json") == 0
    assert len(json.loads(capsys.readouterr().out.splitlines()[-1])) == 3
    assert cli("outbox", "dead") == 0
    assert "(0 dead event(s))" in capsys.readouterr().out
    assert cli("outbox", "retry", "--all") == 0
    assert cli("healthz", "--compact", "--max-scheduler-lag", "0") == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["ok"] is True
    assert "transaction-mode pooler" in report["checks"]["listen"]["detail"]

    statuses = dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())
    assert statuses == {"dead": 4, "pending": 2 + 2, "cancelled": 1}


def test_stats_process_with_the_environment_variable(pooler_url: str) -> None:
    """``TOCKWORK_POOLER=transaction`` alone (no flag), in a real process."""
    env = {**os.environ, "PYTHONPATH": ROOT, "TOCKWORK_POOLER": "transaction"}
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "stats", "--json", "--database-url", pooler_url],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout) == []


@pytest.mark.parametrize("value", ["transactoin", "TRANSACTION", "statement"])
def test_a_bad_pooler_setting_is_an_input_error(
    value: str, db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The environment variable is checked like a flag: exit 2, one line naming it."""
    monkeypatch.setenv("TOCKWORK_POOLER", value)
    assert main(["jobs", "dead", "--database-url", db_url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "TOCKWORK_POOLER" in err and repr(value) in err, err
    with pytest.raises(SystemExit) as exit_info:
        main(["jobs", "dead", "--database-url", db_url, "--pooler", value])
    assert exit_info.value.code == 2
    assert "--pooler" in capsys.readouterr().err
