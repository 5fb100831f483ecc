"""``[[limit]]`` tables in a definitions file: checked with the file, synced like schedules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs import RateLimit
from jobs.limits import list_limits
from scheduler.definitions import load_file, load_limits, sync
from scheduler.errors import InvalidSchedule
from tests.acceptance.cli_harness import run

FILE = """
[[schedule]]
key = "retention"
rule = "cron:0 3 * * *"
job_type = "tockwork.retention"

[[limit]]
job_type = "send_push"
per_second = 500
per_minute = 30000

[[limit]]
queue = "webhooks"
per_second = 20
pause_on_rate_limited = false
"""


def test_a_file_declares_limits_and_sync_keeps_them_in_step(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = tmp_path / "definitions.toml"
    path.write_text(FILE, encoding="utf-8")
    assert [d.key for d in load_file(path)] == ["retention"]
    declared = load_limits(path)
    assert declared == [
        RateLimit(job_type="send_push", per_second=500, per_minute=30000),
        RateLimit(queue="webhooks", per_second=20, pause_on_rate_limited=False),
    ]
    with conn.transaction():
        result = sync(conn, load_file(path), limits=declared)
    assert result.limits is not None
    assert result.limits.set == ["job_type:send_push", "queue:webhooks"]
    with conn.transaction():
        again = sync(conn, load_file(path), limits=declared[:1])
    assert again.limits is not None and again.limits.cleared == ["queue:webhooks"]
    assert [(s.limit.name, s.source) for s in list_limits(conn)] == [("send_push", "definitions")]


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("queue = 'q'\nper_second = 0", "limit[0].per_second"),
        ("queue = 'q'\nper_second = -1", "limit[0].per_second"),
        ("queue = 'q'\nper_second = 'ten'", "limit[0].per_second"),
        ("queue = 'q'\nper_second = 2.5", "limit[0].per_second"),
        ("queue = 'Bad Queue'\nper_second = 5", "limit[0].queue"),
        ("queue = 'q'\njob_type = 't'\nper_second = 5", "limit[0].queue"),
        ("per_second = 5", "limit[0].queue"),
        ("queue = 'q'", "limit[0].per_second"),
        ("queue = 'q'\nper_second = 5\nburst = 3", "limit[0].burst"),
    ],
)
def test_a_bad_limit_fails_the_whole_file(
    db_url: str, tmp_path: Path, table: str, field: str
) -> None:
    path = tmp_path / "definitions.toml"
    head = FILE.partition("[[limit]]")[0]
    path.write_text(head + "[[limit]]\n" + table + "\n", encoding="utf-8")
    with pytest.raises(InvalidSchedule) as raised:
        load_file(path)
    assert raised.value.field == field
    done = run(["schedules", "sync", str(path), "--database-url", db_url])
    assert done.code == 2 and field in done.err
    with psycopg.connect(db_url) as c:  # nothing written: not even the good schedule
        assert c.execute("SELECT count(*) FROM schedules").fetchone() == (0,)
        assert c.execute("SELECT count(*) FROM job_rate_limits").fetchone() == (0,)


def test_schedules_sync_prints_what_it_did_to_the_limits(db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "definitions.toml"
    path.write_text(FILE, encoding="utf-8")
    done = run(["schedules", "sync", str(path), "--database-url", db_url])
    assert done.code == 0, done.err
    assert "set limits: job_type:send_push, queue:webhooks; clear limits: -" in done.out
