"""Definitions as code: TOML sync by key, idempotent, never touching API schedules."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import scheduler
from scheduler.definitions import load_file, sync

T0 = datetime(2026, 6, 1, tzinfo=UTC)

FILE_V1 = """
[[schedule]]
key = "retention"
rule = "cron:0 3 * * *"
zone = "UTC"
job_type = "tockwork.retention"

[[schedule]]
key = "partitions"
rule = "daily@01:00"
zone = "Europe/Paris"
job_type = "tockwork.partitions"
"""

FILE_V2 = """
[[schedule]]
key = "retention"
rule = "cron:30 3 * * *"
zone = "UTC"
job_type = "tockwork.retention"
"""


def test_sync_creates_updates_and_removes_by_key(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    user = scheduler.create_schedule(
        conn, job_type="r", rule="daily@08:00", zone="UTC", subject="u", now=T0
    )
    v1, v2 = tmp_path / "v1.toml", tmp_path / "v2.toml"
    v1.write_text(FILE_V1)
    v2.write_text(FILE_V2)
    first = sync(conn, load_file(v1), now=T0)
    assert sorted(first.created) == ["partitions", "retention"]
    again = sync(conn, load_file(v1), now=T0)
    assert (again.created, again.updated, again.deleted) == ([], [], [])
    second = sync(conn, load_file(v2), now=T0)
    assert (second.updated, second.deleted) == (["retention"], ["partitions"])
    retention = scheduler.get_schedule(conn, key="retention")
    assert retention.rule_json["expr"] == "30 3 * * *"
    assert retention.queue == "maintenance" and retention.catch_up == "all"
    assert retention.next_run_at == datetime(2026, 6, 1, 3, 30, tzinfo=UTC)
    assert scheduler.get_schedule(conn, user.id).subject == "u"  # API schedules untouched


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[[schedule]]\nkey = "x"\nrule = "daily@08:00"\n', "schedule[0].job_type"),
        ('[[schedule]]\nkey = "x"\nrule = "x"\njob_type = "t"\nbogus = 1\n', "schedule[0].bogus"),
        ("[[schedule]\n", "file"),
        ('[[schedule]]\nkey = "x"\nrule = "cron:61 * * * *"\njob_type = "t"\n', "x.rule"),
        (
            '[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\noverlap = "queue"\n',
            "x.overlap",
        ),
        (
            '[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\nmax_runs = 0\n',
            "x.max_runs",
        ),
        (
            '[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\n'
            "start_at = 2026-07-01T00:00:00Z\nend_at = 2026-06-01T00:00:00Z\n",
            "x.end_at",
        ),
    ],
)
def test_bad_files_name_the_field(
    conn: psycopg.Connection[Any], tmp_path: Path, text: str, field: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(scheduler.InvalidSchedule) as info:
        sync(conn, load_file(path), now=T0)
    assert info.value.field == field


FILE_PAYLOAD = """
[[schedule]]
key = "report"
rule = {kind = "weekly", days = ["mon", "thu"], at = "06:30"}
zone = "Europe/Paris"
job_type = "report"
jitter = 30
catch_up_grace = 600
gap = "skip"
payload = {succeeded_days = 7, dead = 1, attempts_days = 30}
"""


def test_sync_compares_what_is_stored_and_updates_only_what_changed(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    path = tmp_path / "defs.toml"
    path.write_text(FILE_PAYLOAD)
    assert sync(conn, load_file(path), now=T0).created == ["report"]
    stored = scheduler.get_schedule(conn, key="report")
    assert (stored.jitter_seconds, stored.catch_up_grace_seconds, stored.gap) == (30, 600, "skip")
    assert (stored.queue, stored.catch_up, stored.source) == ("maintenance", "all", "definitions")
    # jsonb keeps the payload's keys in its own order: still no change.
    again = sync(conn, load_file(path), now=T0)
    assert (again.updated, again.unchanged) == ([], ["report"])
    path.write_text(FILE_PAYLOAD.replace("dead = 1", "dead = 2").replace("jitter = 30", ""))
    changed = sync(conn, load_file(path), now=T0)
    assert changed.updated == ["report"]
    after = scheduler.get_schedule(conn, key="report")
    assert (after.payload["dead"], after.jitter_seconds, after.version) == (2, 0, 2)


FILE_OPERATIONS = """
[[schedule]]
key = "cleanup"
rule = "every:15m"
job_type = "cleanup"
overlap = "buffer_one"
start_at = 2026-06-02T00:00:00Z
end_at = 2026-12-31T00:00:00+01:00
max_runs = 500
"""


def test_definitions_set_the_overlap_policy_and_the_lifetime(
    conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """Issue 24: a definition skips overlapping runs by default; a file can set the policy,
    the start, the end (a TOML offset date-time) and a run limit, and a sync changes them."""
    path = tmp_path / "defs.toml"
    path.write_text(FILE_V2)
    sync(conn, load_file(path), now=T0)
    assert scheduler.get_schedule(conn, key="retention").overlap is scheduler.Overlap.SKIP
    path.write_text(FILE_OPERATIONS)
    assert sync(conn, load_file(path), now=T0).created == ["cleanup"]
    s = scheduler.get_schedule(conn, key="cleanup")
    assert s.overlap is scheduler.Overlap.BUFFER_ONE and s.max_runs == 500
    assert s.start_at == datetime(2026, 6, 2, tzinfo=UTC)
    assert s.end_at == datetime(2026, 12, 30, 23, tzinfo=UTC)
    assert s.next_run_at == datetime(2026, 6, 2, tzinfo=UTC)
    path.write_text(FILE_OPERATIONS.replace("max_runs = 500", "max_runs = 7"))
    assert sync(conn, load_file(path), now=T0).updated == ["cleanup"]
    assert scheduler.get_schedule(conn, key="cleanup").remaining_runs == 7
