"""A government changes a zone's rules: the tz database recompute moves the right schedules.

The new database is a real one, loaded through ``use_tz_database("system", path=...)``: a
directory of TZif files whose ``Europe/Lisbon`` abolishes daylight saving time and stays on
UTC+1 all year (compiled here, in TZif version 2 with its footer, as ``zic`` writes one; RFC
8536), every other zone copied from the pinned ``tzdata``, and a ``tzdata.zi`` naming a release
of its own. Only the Lisbon schedules move, to the new offset; the Paris one keeps its instant;
all of them record the new release; running it again changes nothing.
"""

from __future__ import annotations

import importlib.resources
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import scheduler
import timezones
from scheduler import Scheduler
from scheduler.schedules import preview
from timezones import FrozenClock

T0 = datetime(2027, 1, 10, 12, 0, tzinfo=UTC)  # winter: Lisbon is UTC+0 under the real rules
RELEASE = "2099z"


def fixed_offset_tzif(seconds: int, name: bytes) -> bytes:
    """A TZif v2 file of a zone that is ``seconds`` east of UTC at every instant: no
    transitions, one local time type, the footer's POSIX TZ string for times beyond."""
    designation = name + b"\x00"

    def block() -> bytes:
        header = b"TZif2" + b"\x00" * 15 + struct.pack(">6l", 0, 0, 0, 0, 1, len(designation))
        return header + struct.pack(">lBB", seconds, 0, 0) + designation

    hours = -seconds // 3600  # POSIX TZ strings count west of UTC as positive
    footer = b"\n<" + name + b">" + str(hours).encode() + b"\n"
    return block() + block() + footer


@pytest.fixture
def altered_database(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "zoneinfo"
    source = importlib.resources.files("tzdata.zoneinfo")
    for key in ("UTC", "Europe/Paris", "America/Chicago"):
        target = root.joinpath(*key.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.joinpath(*key.split("/")).read_bytes())
    (root / "Europe" / "Lisbon").write_bytes(fixed_offset_tzif(3600, b"+01"))
    (root / "tzdata.zi").write_text(f"# version {RELEASE}\n", encoding="ascii")
    yield root
    timezones.use_tz_database("tzdata")


def create(conn: psycopg.Connection[Any], zone: str, subject: str) -> Any:
    return scheduler.create_schedule(
        conn, job_type="r", rule="daily@09:00", zone=zone, subject=subject, jitter=0, now=T0
    )


def test_a_changed_zone_moves_only_its_schedules(
    conn: psycopg.Connection[Any], db_url: str, altered_database: Path
) -> None:
    lisbon = [create(conn, "Europe/Lisbon", f"l{i}") for i in range(3)]
    paris = create(conn, "Europe/Paris", "p")
    chicago = create(conn, "America/Chicago", "c")
    conn.commit()
    first = datetime(2027, 1, 11, 9, 0, tzinfo=UTC)  # 09:00 in Lisbon, UTC+0 in winter
    assert {s.next_run_at for s in lisbon} == {first}
    before = {s.id: s.next_run_at for s in (paris, chicago)}
    old_release = lisbon[0].tzdb_version
    assert old_release != RELEASE

    timezones.use_tz_database("system", path=str(altered_database))
    assert timezones.tzdb_version() == RELEASE
    sched = Scheduler(db_url, clock=FrozenClock(T0))
    try:
        assert sched.recompute_stale_tzdb() == 3  # the Lisbon ones, and only those
        assert sched.recompute_stale_tzdb() == 0  # idempotent
    finally:
        sched.close()
    after = {s.id: s for s in scheduler.list_schedules(conn)}
    for s in lisbon:
        moved = after[s.id].next_run_at
        assert moved == first - timedelta(hours=1)  # 09:00 at UTC+1 all year
        assert moved is not None
        assert moved.astimezone(timezones.get_zone("Europe/Lisbon")).hour == 9
    assert {sid: after[sid].next_run_at for sid in before} == before
    assert {s.tzdb_version for s in after.values()} == {RELEASE}
    # A summer occurrence too: under the old rules Lisbon was UTC+1 in July as well, under the
    # new ones it still is; the recompute follows the rule, not a shifted copy of old instants.
    summer = preview(after[lisbon[0].id], datetime(2027, 7, 1, tzinfo=UTC), 1)
    assert summer[0].at == datetime(2027, 7, 1, 8, 0, tzinfo=UTC)
