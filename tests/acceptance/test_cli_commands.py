"""What the ``tockwork`` command says about itself and how it ends: complete ``--help``,
``--version``, the exit codes of the top-level guard, actions by id that match nothing,
``--app`` from the current directory, the scheduler's start line, ``preview`` and ``zones``."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
from scheduler.cli import build_parser, version
from scheduler.cli.common import HelpFormatter
from tests.acceptance.cli_harness import run
from tests.acceptance.conftest import COUNTS
from tests.processes import start_tockwork

ROOT = Path(__file__).resolve().parents[2]


def _process(
    args: list[str], env: dict[str, str | None] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _all_parsers(child)
    return found


def test_every_option_has_help_and_says_its_default() -> None:
    """Every argument of every command has a help text; every option with a default other
    than None/False shows it in --help (with its unit where it is a duration)."""
    checked = 0
    for parser in _all_parsers(build_parser()):
        assert parser.description or parser.prog == "tockwork", parser.prog
        for action in parser._actions:
            if isinstance(
                action, argparse._HelpAction | argparse._SubParsersAction | argparse._VersionAction
            ):
                continue
            checked += 1
            assert action.help, f"{parser.prog} {action.option_strings or action.dest}: no help"
            if action.default not in (None, False) and action.option_strings:
                shown = HelpFormatter(parser.prog)._get_help_string(action) or ""
                assert "default" in shown, f"{parser.prog} {action.option_strings}: no default"
            if action.metavar == "SECONDS":
                assert "second" in (action.help or ""), action.dest
    COUNTS["CLI options with help checked"] = checked
    worker = run(["worker", "--help"])
    assert worker.code == 0
    assert re.search(r"--lease SECONDS\s+seconds a claimed job stays leased", worker.out)
    assert "(default: 30)" in worker.out and "(default: 20)" in worker.out


def test_requeue_and_cancel_say_a_filter_is_required() -> None:
    for action in ("requeue", "cancel"):
        result = run(["jobs", action, "--help"])
        assert result.code == 0
        assert "a filter is required" in " ".join(result.out.split()).lower()
        assert "at least one is required" in result.out


def test_version() -> None:
    result = run(["--version"])
    assert (result.code, result.out.strip()) == (0, f"tockwork {version()}")
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", version())


def test_an_action_by_id_that_matched_nothing_exits_1(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    dead = jobs.enqueue(conn, "t", {}, queue="q").id
    waiting = jobs.enqueue(conn, "t", {}, queue="q").id
    conn.execute("UPDATE jobs SET status = 'dead', completed_at = now() WHERE id = %s", (dead,))
    conn.commit()
    missing = run(["jobs", "requeue", "--id", "4711", "--database-url", db_url])
    assert missing.code == 1
    assert missing.err.strip() == "tockwork jobs requeue: failed: no dead job with --id 4711"
    assert missing.out.strip() == "requeued 0 job(s)"
    # One found, one not: the found one is requeued, the command still says what was missing.
    partly = run(["jobs", "requeue", "--id", str(dead), "--id", "4711", "--database-url", db_url])
    assert (partly.code, partly.out.strip()) == (1, f"requeued 1 job(s): {dead}")
    assert partly.err.strip() == "tockwork jobs requeue: failed: no dead job with --id 4711"
    assert jobs.get_job(conn, dead).status == "pending"
    conn.commit()
    cancel = run(["jobs", "cancel", "--id", "4711", "--id", str(waiting), "--database-url", db_url])
    assert cancel.code == 1 and "--id 4711" in cancel.err
    assert jobs.get_job(conn, waiting).status == "cancelled"
    conn.commit()
    by_filter = run(["jobs", "requeue", "--queue", "nothing-here", "--database-url", db_url])
    assert (by_filter.code, by_filter.err) == (0, "")  # a filter may match nothing
    retry = run(["outbox", "retry", "--id", "00000000-0000-0000-0000-000000000001",
                 "--database-url", db_url])  # fmt: skip
    assert retry.code == 1 and "no dead event" in retry.err


def test_requeue_by_id_of_a_waiting_job_is_nothing_to_do(
    db_url: str, conn: psycopg.Connection[Any]
) -> None:
    """Issue 26: requeueing a job that is already pending (or retrying, or running) exited 1;
    there is nothing to do, which is not a failure: it says so and exits 0. A missing id
    beside it still fails."""
    pending = jobs.enqueue(conn, "t", {}, queue="q").id
    retrying = jobs.enqueue(conn, "t", {}, queue="q").id
    conn.execute("UPDATE jobs SET status = 'retrying' WHERE id = %s", (retrying,))
    conn.commit()
    result = run(["jobs", "requeue", "--id", str(pending), "--id", str(retrying),
                  "--database-url", db_url])  # fmt: skip
    assert (result.code, result.err) == (0, ""), result.err
    assert result.out.splitlines() == [
        "requeued 0 job(s)",
        f"nothing to requeue, already waiting or running: {pending} (pending), "
        f"{retrying} (retrying)",
    ]
    assert jobs.get_job(conn, pending).status == "pending"
    conn.commit()
    mixed = run(["jobs", "requeue", "--id", str(pending), "--id", "4711", "--database-url", db_url])
    assert mixed.code == 1
    assert mixed.err.strip() == "tockwork jobs requeue: failed: no dead job with --id 4711"


def test_the_guard_exit_codes(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unreachable database: 1, one line. An unexpected exception: 1, one line naming its class;
    the traceback only with --debug or TOCKWORK_DEBUG=1. Ctrl-C: 130."""
    down = run(["jobs", "dead", "--database-url", "host=/nonexistent-socket-dir"])
    assert down.code == 1 and len(down.err.strip().splitlines()) == 1
    assert down.err.startswith("tockwork jobs dead: failed: ")

    def boom(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("something broke\nover two lines")

    monkeypatch.setattr(jobs, "list_jobs", boom)
    plain = run(["jobs", "dead", "--database-url", db_url])
    assert plain.code == 1 and "Traceback" not in plain.err
    assert plain.err.strip().splitlines() == [
        "tockwork jobs dead: unexpected error: RuntimeError: something broke over two lines "
        "(run with --debug or TOCKWORK_DEBUG=1 for the traceback)"
    ]
    for debug_argv, env in ((["--debug"], {}), ([], {"TOCKWORK_DEBUG": "1"})):
        debug = run([*debug_argv, "jobs", "dead", "--database-url", db_url], env)
        assert debug.code == 1 and "Traceback" in debug.err and "RuntimeError" in debug.err

    def interrupt(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs, "list_jobs", interrupt)
    assert run(["jobs", "dead", "--database-url", db_url]).code == 130


def test_app_resolves_from_the_current_directory(db_url: str, tmp_path: Path) -> None:
    """Quickstart step 5: ``--app myapp.handlers:HANDLERS`` from the folder holding myapp/."""
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "handlers.py").write_text("HANDLERS = 'not a mapping'\n")
    result = _process(
        ["worker", "--app", "myapp.handlers:HANDLERS", "--database-url", db_url], cwd=tmp_path
    )
    # It imported (what it found is the wrong shape): the module resolved from the cwd.
    assert result.returncode == 2, result.stderr
    assert "must name a mapping of job type to handler" in result.stderr
    assert "No module named" not in result.stderr


def test_the_scheduler_says_when_it_starts(db_url: str) -> None:
    proc = start_tockwork(db_url, "scheduler", "--lookahead", "45", "--name", "replica-7")
    try:
        assert proc.stderr is not None
        # Its first lines: the replication mode of the primary (jobs/primary.py), then the
        # start; read them as they come (no sleep).
        line = ""
        for _ in range(5):
            line = proc.stderr.readline().decode()
            if " started: " in line:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert "scheduler replica-7 started: lookahead 45.0s" in line, line
    assert "every 1.0s" in line and "tz database" in line


def test_preview_prints_seconds_and_marks_skipped_slots() -> None:
    every = run(["preview", "every:2m@2026-12-01T08:00:30Z", "--zone", "UTC",
                 "--after", "2026-12-01T08:37Z", "--count", "1"])  # fmt: skip
    assert every.code == 0
    assert "Tue 2026-12-01 08:38:30 +00:00  2026-12-01T08:38:30Z" in every.out
    whole = run(["preview", "daily@08:00", "--zone", "UTC", "--after", "2026-12-01T00:00Z",
                 "--count", "1"])  # fmt: skip
    assert "2026-12-01 08:00 +00:00  2026-12-01T08:00Z" in whole.out
    skip = run(["preview", "daily@02:30", "--zone", "America/New_York", "--gap", "skip",
                "--after", "2026-03-06T12:00Z", "--count", "3"])  # fmt: skip
    lines = [line for line in skip.out.splitlines() if line[:3] in {"Sat", "Sun", "Mon", "Tue"}]
    assert [line[:14] for line in lines] == [
        "Sat 2026-03-07", "Sun 2026-03-08", "Mon 2026-03-09", "Tue 2026-03-10",
    ]  # fmt: skip
    assert "skipped" in lines[1] and "skipped" not in lines[0] + lines[2] + lines[3]
    as_json = run(["preview", "daily@02:30", "--zone", "America/New_York", "--gap", "skip",
                   "--after", "2026-03-06T12:00Z", "--count", "2", "--json"])  # fmt: skip
    rows = json.loads(as_json.out)
    assert [(r["nominal"], r["adjusted"], r["utc"]) for r in rows] == [
        ("2026-03-07T02:30:00", None, "2026-03-07T07:30:00Z"),
        ("2026-03-08T02:30:00", "gap_skipped", None),
        ("2026-03-09T02:30:00", None, "2026-03-09T06:30:00Z"),
    ]
    shifted = run(["preview", "daily@02:30", "--zone", "America/New_York",
                   "--after", "2026-03-07T12:00Z", "--count", "1"])  # fmt: skip
    assert "gap_shifted" in shifted.out and "skipped" not in shifted.out


def test_zones_lists_where_an_old_name_went() -> None:
    kiev = run(["zones", "kiev"])
    assert kiev.out.splitlines() == ["Europe/Kiev -> Europe/Kyiv", "Europe/Kyiv"]
    assert "Asia/Calcutta -> Asia/Kolkata" in run(["zones", "calcutta"]).out
    assert run(["zones", "no-such-zone-name"]).out == ""


def test_messages_name_the_subcommand_and_the_flag() -> None:
    show = run(["jobs", "show", "abc"])
    assert show.err.startswith("tockwork jobs show: error: ID must be an integer, got 'abc'")
    requeue = run(["jobs", "requeue", "--database-url", "dbname=x"])
    assert requeue.err.startswith("tockwork jobs requeue: error: give at least one filter: --id")
    assert "job_type" not in requeue.err and "ids" not in requeue.err


def test_an_invalid_rule_is_named_once(db_url: str, tmp_path: Path) -> None:
    """Not ``invalid rule 'x': invalid rule 'x': rule: 'x' is not a valid rule: ...``."""
    path = tmp_path / "bad.toml"
    path.write_text(
        '[[schedule]]\nkey = "x"\nrule = "cron:0 0 31 2 *"\nzone = "UTC"\njob_type = "t"\n'
    )
    result = run(["schedules", "sync", str(path), "--database-url", db_url])
    assert result.code == 2
    assert result.err.strip() == (
        "tockwork schedules sync: error: invalid x.rule 'cron:0 0 31 2 *': expr: cron expr: day "
        "of month and month never meet in '0 0 31 2 *' (got '0 0 31 2 *')"
    )
    preview = run(["preview", "cron:61 * * * *", "--zone", "UTC"])
    assert preview.err.count("cron:61") == 1 and "is not a valid rule" not in preview.err
