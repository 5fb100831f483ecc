"""The embedded development server says what it is; the demos' scratch database.

``tockwork dev-db`` on a data folder of its own (``TOCKWORK_PGDATA``): the first command that
starts the server says where the data lives and how to stop it; the next one says nothing;
``status`` and ``stop`` work. The demos never drop a database a demo did not create.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from scheduler.devdb import NotAScratchDatabase, drop_database, scratch_database

ROOT = Path(__file__).resolve().parents[2]


def _dev_db(pgdata: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "TOCKWORK_DEV_DB"}}
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "dev-db", *args],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "TOCKWORK_PGDATA": str(pgdata)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture
def pgdata() -> Iterator[Path]:
    # Beside the project's .pgdata (the server may run as another user, who must reach it).
    path = ROOT / f".pgdata-test-{os.getpid()}"
    try:
        yield path
    finally:
        _dev_db(path, "stop")
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(path.parent / (path.name + "-run"), ignore_errors=True)


def test_the_embedded_server_says_where_it_lives_and_how_to_stop_it(pgdata: Path) -> None:
    before = _dev_db(pgdata, "status")
    assert before.stdout.strip() == f"not created (it would live in {pgdata})"
    first = _dev_db(pgdata, "url")
    assert first.returncode == 0, first.stderr
    assert "created and started the embedded development PostgreSQL" in first.stderr
    assert str(pgdata) in first.stderr and "tockwork dev-db stop" in first.stderr
    assert "make db-stop" in first.stderr
    url = first.stdout.strip()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    again = _dev_db(pgdata, "url")
    assert (again.stdout.strip(), again.stderr) == (url, "")  # running: nothing to announce
    assert _dev_db(pgdata, "status").stdout.strip() == f"running (data in {pgdata})"
    stopped = _dev_db(pgdata, "stop")
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped the embedded server")
    assert _dev_db(pgdata, "status").stdout.strip() == f"stopped (data in {pgdata})"
    assert _dev_db(pgdata, "stop").stdout.strip() == "the embedded server was not running"


def test_the_demo_database_is_dropped_only_when_a_demo_made_it(server_url: str) -> None:
    name = f"tockwork_scratch_test_{os.getpid()}"
    foreign = f"tockwork_foreign_test_{os.getpid()}"
    try:
        url = scratch_database(server_url, name)
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE kept_until_the_next_run (x int)")
            conn.commit()
        again = scratch_database(server_url, name)  # its own: recreated, empty
        with psycopg.connect(again) as conn:
            row = conn.execute("SELECT to_regclass('kept_until_the_next_run')").fetchone()
            assert row == (None,)
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{foreign}"')
        with pytest.raises(NotAScratchDatabase, match="was not created by a tockwork demo"):
            scratch_database(server_url, foreign)
        with psycopg.connect(server_url, autocommit=True) as admin:
            exists = admin.execute(
                "SELECT count(*) FROM pg_database WHERE datname = %s", (foreign,)
            ).fetchone()
        assert exists == (1,)  # left alone
    finally:
        drop_database(server_url, name)
        drop_database(server_url, foreign)


def test_a_command_without_a_database_does_not_start_a_server(tmp_path: Path) -> None:
    """Issue 26: in a new shell, `tockwork migrate` in the quickstart's folder started a second,
    empty server there. Only what says so starts it (`tockwork dev-db url`, `--dev-db`); the
    others say how to, on one line, exit 2, and create nothing."""
    pgdata = tmp_path / "project" / ".pgdata"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "TOCKWORK_DEV_DB"}}
    for args in (["migrate"], ["stats"], ["schedules", "list"]):
        result = subprocess.run(
            [sys.executable, "-m", "scheduler.cli", *args],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": str(ROOT), "TOCKWORK_PGDATA": str(pgdata)},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert "no database given: set DATABASE_URL" in line
        assert f"'tockwork dev-db url' starts the embedded server in {pgdata}" in line
    assert not pgdata.exists()
