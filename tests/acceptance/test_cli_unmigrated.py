"""Every command on a database nobody migrated, or one behind the code (issue 26): one line
naming the database and ``tockwork migrate``, exit code 2, nothing written; ``healthz`` (the
probe) exits 1 with the same reason in its ``schema`` check; ``migrate`` brings it up to date.

The commands are every leaf of the parser that takes ``--database-url`` (a new command is
covered without editing this test), run in-process with the minimal arguments of the bad-input
suite, a real app where the command loads one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobs.internal import pending_migrations
from scheduler.cli import build_parser
from scheduler.devdb import throwaway_database
from scheduler.migrations import COMPONENTS
from tests.acceptance.cli_harness import run
from tests.acceptance.test_cli_bad_input import MINIMAL, _takes_url, leaves

# The probe and the command that fixes it answer otherwise (see the module docstring).
OWN_ANSWER = {"tockwork migrate", "tockwork healthz"}
REAL_APPS = {
    "tockwork worker": ["--app", "tests.integration.jobs.apps:handlers"],
    "tockwork relay": ["--app", "tests.integration.outbox.apps:projections"],
    "tockwork dashboard": ["--port", "0"],  # with a token (below), as deployed
}


@pytest.fixture(params=["empty", "behind"])
def stale_db(request: pytest.FixtureRequest, server_url: str) -> Iterator[tuple[str, str]]:
    """A database with no schema, or migrated except the last jobs migration.

    Its name carries the process id: two suites sharing a server (worktrees, CI jobs) each
    drop their own database, never the other's.
    """
    state: str = request.param
    name = f"tockwork_stale_{state}_{os.getpid()}"
    components = COMPONENTS if state == "behind" else ()
    with throwaway_database(server_url, name, components=components) as url:
        if state == "behind":
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    "DELETE FROM tockwork_migrations WHERE component = 'jobs' AND version = "
                    "(SELECT max(version) FROM tockwork_migrations WHERE component = 'jobs')"
                )
        yield state, url


def _commands(defs: Path) -> list[list[str]]:
    found = []
    for leaf in leaves(build_parser()):
        if leaf.prog in OWN_ANSWER or not _takes_url(leaf):
            continue
        args = REAL_APPS.get(leaf.prog, MINIMAL[leaf.prog])
        found.append([*leaf.prog.split()[1:], *[str(defs) if a == "<defs>" else a for a in args]])
    return found


def _state(url: str) -> tuple[list[str], list[str]]:
    """The tables, and the migrations recorded: what a command must leave as it found it."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
        return [t for (t,) in tables], pending_migrations(conn, COMPONENTS)


def test_every_command_says_what_to_run(stale_db: tuple[str, str], tmp_path: Path) -> None:
    state, url = stale_db
    defs = tmp_path / "defs.toml"
    defs.write_text('[[schedule]]\nkey = "k"\nrule = "daily@08:00"\nzone = "UTC"\njob_type = "t"\n')
    expected = "has no Tockwork schema" if state == "empty" else "is behind this version"
    before = _state(url)
    first_missing = before[1][0]  # jobs/0001_jobs, or the last jobs migration
    commands = _commands(defs)
    assert len(commands) >= 25 and ["scheduler"] in commands and ["stats"] in commands
    failures = []
    for argv in commands:
        result = run([*argv, "--database-url", url], {"TOCKWORK_DASHBOARD_TOKEN": "t" * 32})
        lines = result.err.strip().splitlines()
        ok = (
            result.code == 2
            and len(lines) == 1
            and expected in lines[0]
            and f"'tockwork_stale_{state}_{os.getpid()}'" in lines[0]
            and "run 'tockwork migrate'" in lines[0]
            and "Traceback" not in result.err
            and result.out == ""
        )
        if not ok:
            failures.append(f"{argv}: exit {result.code}\n{result.err}{result.out}")
    assert not failures, "\n".join(failures)
    assert _state(url) == before  # nothing written, nothing migrated behind the user's back

    health = run(["healthz", "--database-url", url, "--compact", "--max-scheduler-lag", "0"])
    assert health.code == 1
    schema = json.loads(health.out)["checks"]["schema"]
    assert schema["ok"] is False and "run 'tockwork migrate'" in schema["detail"]
    assert first_missing in schema["detail"], schema
    if state == "behind":
        assert f"first {first_missing}" in lines[0]

    assert run(["migrate", "--database-url", url]).code == 0
    assert run(["stats", "--database-url", url]).code == 0
    assert run(["healthz", "--database-url", url, "--max-scheduler-lag", "0"]).code == 0


@pytest.fixture
def empty_db(server_url: str) -> Iterator[str]:
    with throwaway_database(server_url, f"tockwork_empty_sim_{os.getpid()}", components=()) as url:
        yield url


def _has_simulated_pushes(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regclass('simulated_pushes') IS NOT NULL").fetchone()
        return bool(row and row[0])


def test_the_simulated_app_leaves_an_empty_database_to_tockwork_migrate(empty_db: str) -> None:
    """The simulated app's factory installs its table only on top of the core schema: made
    first, it failed the core's first migration ("relation simulated_pushes already exists")."""
    app = ["worker", "--app", "scheduler.delivery:simulated_app", "--queue", "reminders=1"]
    result = run([*app, "--database-url", empty_db])
    assert result.code == 2 and "has no Tockwork schema" in result.err, result.err
    assert not _has_simulated_pushes(empty_db)
    migrated = run(["migrate", "--database-url", empty_db])
    assert migrated.code == 0, migrated.err


def test_a_worker_with_migrate_starts_the_simulated_app_on_an_empty_database(
    empty_db: str,
) -> None:
    """``--migrate`` applies the core schema before the app's factory runs (it installs the
    simulated provider's table on top of it); the worker then starts and stops on SIGTERM."""
    import signal
    import subprocess
    import sys
    import threading

    tockwork = str(Path(sys.executable).with_name("tockwork"))
    argv = [tockwork, "worker", "--app", "scheduler.delivery:simulated_app", "--migrate"]
    lines: list[str] = []
    with subprocess.Popen(
        [*argv, "--queue", "reminders=1", "--database-url", empty_db],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    ) as proc:  # fmt: skip
        assert proc.stderr is not None
        watchdog = threading.Timer(60, proc.kill)  # a worker that never starts ends the read
        watchdog.start()
        try:
            for line in proc.stderr:  # ends when the process does
                lines.append(line)
                if " started" in line and "worker " in line:
                    proc.send_signal(signal.SIGTERM)
                    break
            code = proc.wait(timeout=60)
            lines.append(proc.stderr.read())
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
    assert code == 0, "".join(lines)
    assert _has_simulated_pushes(empty_db)
    with psycopg.connect(empty_db) as conn:
        assert pending_migrations(conn, COMPONENTS) == []
