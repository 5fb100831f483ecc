"""``tockwork policies set|list|clear``: what they write and print, their exit codes."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.acceptance.cli_harness import run


def rows(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as c:
        return c.execute(
            "SELECT queue, fair, concurrency_per_key FROM job_queue_policies ORDER BY 1"
        ).fetchall()


def test_set_list_and_clear(db_url: str) -> None:
    url = ["--database-url", db_url]
    done = run(["policies", "set", "--queue", "reports", "--fair", *url])
    assert (done.code, done.out.strip()) == (
        0,
        "policy set: queue reports, fair=yes, concurrency per key none",
    )
    done = run(["policies", "set", "--queue", "pushes", "--concurrency-per-key", "1", *url])
    assert done.code == 0, done.err
    assert rows(db_url) == [("pushes", False, 1), ("reports", True, None)]
    # Setting again replaces the whole policy.
    done = run(["policies", "set", "--queue", "reports", "--no-fair",
                "--concurrency-per-key", "3", *url])  # fmt: skip
    assert done.code == 0, done.err
    listed = run(["policies", "list", *url])
    assert listed.code == 0
    assert "(2 policies)" in listed.out and "reports" in listed.out
    assert json.loads(run(["policies", "list", "--json", *url]).out) == [
        {"queue": "pushes", "fair": False, "concurrency_per_key": 1},
        {"queue": "reports", "fair": False, "concurrency_per_key": 3},
    ]
    cleared = run(["policies", "clear", "--queue", "pushes", *url])
    assert (cleared.code, cleared.out.strip()) == (
        0,
        "policy cleared: queue pushes (claimed in plain order)",
    )
    again = run(["policies", "clear", "--queue", "pushes", *url])
    assert again.code == 1
    assert again.err.strip() == "tockwork policies clear: failed: no policy on queue pushes"
    assert rows(db_url) == [("reports", False, 3)]


def test_bad_input_exits_2_and_writes_nothing(db_url: str) -> None:
    url = ["--database-url", db_url]
    for argv in (
        ["set", "--queue", "Bad Queue", "--fair"],
        ["set", "--queue", "q", "--concurrency-per-key", "0"],
        ["set", "--queue", "q", "--concurrency-per-key", "x"],
        ["set", "--queue", "q", "--fair", "--no-fair"],
        ["set", "--fair"],
        ["clear", "--queue", "q/x"],
    ):
        done = run(["policies", *argv, *url])
        assert done.code == 2, (argv, done)
        assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err
    assert rows(db_url) == []
