"""``tockwork limits set|list|clear``: what they write and print, their exit codes."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.acceptance.cli_harness import run


def rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as c:
        return c.execute(
            "SELECT scope, name, per_second, per_minute, pause_on_rate_limited "
            "FROM job_rate_limits ORDER BY 1, 2"
        ).fetchall()


def test_set_list_and_clear(db_url: str) -> None:
    url = ["--database-url", db_url]
    done = run(["limits", "set", "--queue", "push", "--per-second", "500", *url])
    assert (done.code, done.out.strip()) == (0, "limit set: queue push at 500/s")
    done = run(["limits", "set", "--job-type", "send_push", "--per-second", "500",
                "--per-minute", "30000", "--no-pause-on-rate-limited", *url])  # fmt: skip
    assert done.code == 0, done.err
    assert rows(db_url) == [
        ("job_type", "send_push", 500, 30000, False),
        ("queue", "push", 500, None, True),
    ]
    # Setting again replaces.
    assert run(["limits", "set", "--queue", "push", "--per-second", "7", *url]).code == 0
    listed = run(["limits", "list", *url])
    assert listed.code == 0
    assert "(2 limit(s))" in listed.out and " 7 " in listed.out
    as_json = json.loads(run(["limits", "list", "--json", *url]).out)
    assert [(d["scope"], d["name"], d["per_second"]) for d in as_json] == [
        ("job_type", "send_push", 500),
        ("queue", "push", 7),
    ]
    cleared = run(["limits", "clear", "--queue", "push", *url])
    assert (cleared.code, cleared.out.strip()) == (0, "limit cleared: queue push")
    again = run(["limits", "clear", "--queue", "push", *url])
    assert again.code == 1
    assert again.err.strip() == "tockwork limits clear: failed: no limit on queue push"
    assert rows(db_url) == [("job_type", "send_push", 500, 30000, False)]


def test_bad_input_exits_2_and_writes_nothing(db_url: str) -> None:
    url = ["--database-url", db_url]
    for argv in (
        ["set", "--queue", "Bad Queue", "--per-second", "5"],
        ["set", "--queue", "q", "--per-second", "0"],
        ["set", "--queue", "q", "--per-second", "1.5"],
        ["set", "--queue", "q", "--job-type", "t", "--per-second", "5"],
        ["set", "--per-second", "5"],
    ):
        done = run(["limits", *argv, *url])
        assert done.code == 2, (argv, done)
        assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err
    assert rows(db_url) == []
