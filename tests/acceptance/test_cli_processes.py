"""``tockwork processes``: the registry's table and JSON, live and stale, its bad input."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg

from jobs import processes
from jobs.processes import ProcessFacts
from tests.acceptance.cli_harness import run


def test_lists_live_processes_then_stale_ones_with_all(db_url: str) -> None:
    url = ["--database-url", db_url]
    with psycopg.connect(db_url, autocommit=True) as conn:
        facts = ProcessFacts(kind="worker", name="w1", queues={"mail": 4}, jobs_in_hand=2)
        processes.beat(conn, facts)
        processes.beat(conn, ProcessFacts(kind="scheduler", name="s1"))
        processes.beat(
            conn, ProcessFacts(kind="relay", name="gone"), beat_every=timedelta(seconds=1)
        )
        conn.execute(
            "UPDATE processes SET last_seen_at = now() - interval '1 minute' WHERE name = 'gone'"
        )
    done = run(["processes", *url])
    assert done.code == 0, done.err
    lines = done.out.splitlines()
    assert lines[0].split()[:4] == ["kind", "name", "host", "pid"]
    assert [line.split()[:2] for line in lines[1:3]] == [["scheduler", "s1"], ["worker", "w1"]]
    assert "mail=4" in lines[2] and lines[2].endswith("live")
    assert "(2 live process(es))" in done.out
    assert "live workers per queue: mail 1 (concurrency 4)" in done.out
    stale = run(["processes", "--all", *url])
    assert "(2 live process(es), 1 stale)" in stale.out
    [stale_line] = [line for line in stale.out.splitlines() if line.endswith("stale")]
    assert stale_line.startswith("relay")
    as_json = json.loads(run(["processes", "--json", "--kind", "worker", *url]).out)
    assert [(p["name"], p["queues"], p["jobs_in_hand"], p["live"]) for p in as_json] == [
        ("w1", {"mail": 4}, 2, True)
    ]


def test_bad_kind_exits_2(db_url: str) -> None:
    done = run(["processes", "--kind", "wroker", "--database-url", db_url])
    assert done.code == 2 and "--kind" in done.err and "Traceback" not in done.err
    assert len(done.err.strip().splitlines()) == 1
