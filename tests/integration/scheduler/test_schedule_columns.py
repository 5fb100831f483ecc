"""Every statement that reads whole schedules selects the one column list (the
``schedule_columns`` fragment of scheduler/sql/schedule.sql), in the order
:func:`scheduler.model.schedule_from_row` reads positionally: a schedule whose every column
holds a value of its own comes back with each value in its own field."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any
from uuid import UUID

import psycopg
import pytest

from scheduler.model import CatchUp, QuietAction, QuietHours, schedule_from_row
from scheduler.queries import query

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
ORG = UUID(int=7)

# Every column of a schedule, a value each field can only get from its own column.
ROW: dict[str, Any] = {
    "organization_id": ORG, "key": "k-1", "subject": "user-9", "job_type": "remind",
    "queue": "reminders", "payload": {"p": 1}, "rule": {"kind": "daily", "at": "08:00"},
    "zone": "America/Chicago", "gap_policy": "later", "fold_policy": "earlier",
    "jitter_seconds": 3, "catch_up": "all", "catch_up_grace_seconds": 4, "catch_up_max": 5,
    "quiet_start": time(22, 0), "quiet_end": time(7, 0), "quiet_action": "skip",
    "paused": False, "cursor_at": datetime(2026, 3, 1, tzinfo=UTC),
    "next_run_at": datetime(2026, 3, 2, tzinfo=UTC), "next_occurrence_key": "nk",
    "last_occurrence_key": "lk", "last_occurrence_at": datetime(2026, 2, 28, tzinfo=UTC),
    "last_job_id": 99, "enqueued_count": 11, "missed_count": 12, "skipped_count": 13,
    "tzdb_version": "2026a-test", "version": 7, "source": "api",
    "created_at": datetime(2026, 1, 1, tzinfo=UTC), "updated_at": datetime(2026, 1, 2, tzinfo=UTC),
    "overlap": "buffer_one", "overlap_skipped_count": 14, "pause_note": "why",
    "paused_until": datetime(2026, 1, 3, tzinfo=UTC), "start_at": datetime(2025, 1, 4, tzinfo=UTC),
    "end_at": datetime(2027, 1, 5, tzinfo=UTC), "max_runs": 15,
    "finished_at": datetime(2026, 1, 6, tzinfo=UTC), "overlap_job_ids": [16, 17],
    "max_lateness_seconds": 900,
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("schedule_get", {"id": None, "key": "k-1", "organization_id": ORG}),
        ("schedule_get_for_update", {"id": None, "key": "k-1", "organization_id": ORG}),
        ("schedule_get_many", {"ids": None}),
        (
            "schedule_list",
            {
                "by_organization": True,
                "organization_id": ORG,
                "subject": None,
                "source": None,
                "limit": 10,
                "after": None,
            },
        ),
        ("schedule_due_lock", {"horizon": T0, "now": T0, "limit": 10, "lock_class": 1}),
        ("schedule_stale_tzdb", {"tzdb": "other", "limit": 10}),
    ],
)
def test_each_query_reads_every_column_into_its_field(
    conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
) -> None:
    columns = ", ".join(ROW)
    values = ", ".join(f"%({c})s" for c in ROW)
    json_row = {**ROW, "payload": psycopg.types.json.Jsonb(ROW["payload"]),
                "rule": psycopg.types.json.Jsonb(ROW["rule"])}  # fmt: skip
    row = conn.execute(
        f"INSERT INTO schedules ({columns}) VALUES ({values}) RETURNING id",  # noqa: S608
        json_row,
    ).fetchone()
    assert row is not None
    if "ids" in params:
        params = {"ids": [row[0]]}
    found = conn.execute(query(name), params).fetchall()
    assert len(found) == 1
    schedule = schedule_from_row(found[0][: len(ROW) + 1])
    assert schedule.id == row[0]
    assert (schedule.payload_raw, schedule.rule_raw) == (ROW["payload"], ROW["rule"])
    assert (schedule.gap, schedule.fold) == ("later", "earlier")
    assert schedule.catch_up is CatchUp.ALL
    assert schedule.quiet_hours == QuietHours(time(22, 0), time(7, 0), QuietAction.SKIP)
    # payload and rule are properties that decode the raw fields checked above.
    same_name = {
        c: getattr(schedule, c)
        for c in ROW
        if c not in ("payload", "rule") and hasattr(schedule, c)
    }
    assert same_name == {c: v for c, v in ROW.items() if c in same_name}
    assert len(same_name) == len(ROW) - 7  # the 7 columns checked above by their own fields
