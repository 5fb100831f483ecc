"""The pure helpers of the benches that decide what a run measures (no database, no timing)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from bench.queue import asyncpg_conninfo
from bench.reminder_delivery import (
    ZONE_COUNT,
    Sample,
    Writes,
    describe_writes,
    herd_lead,
    herd_zones,
    median,
    phase_end,
    schedule_items,
    timeline,
)
from timezones import next_after, parse_rule


@pytest.mark.parametrize(
    "due",
    [
        datetime(2026, 1, 14, 8, 0, 0, tzinfo=UTC),
        # 07:00Z on 2026-03-08 is 02:00 in New York, skipped that night: the zones whose
        # local time does not exist (or exists twice) at the due instant are passed over.
        datetime(2026, 3, 8, 7, 0, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 1, 30, 17, tzinfo=UTC),
    ],
)
def test_every_herd_zone_fires_exactly_at_the_due_instant(due: datetime) -> None:
    zones = herd_zones(due)
    assert len(zones) == ZONE_COUNT
    assert len({zone for zone, _ in zones}) == ZONE_COUNT
    for zone, rule in zones:
        occ = next_after(parse_rule(rule), zone, due - timedelta(hours=1))
        assert occ is not None
        assert occ.at.timestamp() == due.timestamp(), (zone, rule)


def test_a_zone_whose_local_time_is_the_second_pass_of_a_fold_is_passed_over() -> None:
    # 06:30Z on 2026-11-01 is the second 01:30 in New York; daily@01:30 fires at the first.
    due = datetime(2026, 11, 1, 6, 30, 0, tzinfo=UTC)
    picked = dict(herd_zones(due, 500))
    assert len(picked) == 500
    assert "America/New_York" not in picked
    assert picked["Europe/Paris"] == "daily@07:30:00"


def test_schedule_items_spread_the_herd_over_the_zones_round_robin() -> None:
    due = datetime(2026, 1, 14, 8, 0, 0, tzinfo=UTC)
    zones = herd_zones(due, 3)
    items = schedule_items(7, zones, 300)
    assert [i["zone"] for i in items] == [z for z, _ in zones] * 2 + [zones[0][0]]
    assert {i["jitter"] for i in items} == {300}
    assert {i["queue"] for i in items} == {"reminders"}
    assert len({i["subject"] for i in items}) == 7


def test_asyncpg_conninfo_from_a_url_and_from_a_conninfo_string() -> None:
    assert asyncpg_conninfo("postgresql://bob:pw@db.example:6543/tockwork_bench_1") == {
        "host": "db.example",
        "port": 6543,
        "user": "bob",
        "password": "pw",
        "database": "tockwork_bench_1",
    }
    assert asyncpg_conninfo("host=/tmp/sock port=5433 user=postgres dbname=x") == {
        "host": "/tmp/sock",
        "port": 5433,
        "user": "postgres",
        "database": "x",
    }


def test_the_timeline_dates_inserts_by_poll_and_counts_the_backlog() -> None:
    """Jobs 1-4 due at T+0..T+3 (s), seen in the table by the polls at T-10 (ids up to 2) and
    T+1.5 (ids up to 4), delivered 0.5 s late except job 4 (2 s). Two buckets of 1.5 s: jobs 1
    and 2 were in 10-11 s ahead, none left at T+1.5; jobs 3 and 4 0.5 and 1.5 s ahead, and at
    T+3 job 4 was due and not yet delivered."""
    rows = [(1, 0.0, 0.1, 0.5), (2, 1.0, 1.1, 1.5), (3, 2.0, 2.1, 2.5), (4, 3.0, 4.0, 5.0)]
    lines = timeline(rows, [(-10.0, 2), (1.5, 4)], buckets=2)
    assert len(lines) == 1 + 2
    cells = [[c.strip() for c in line.split(";")] for line in lines[1:]]
    assert cells[0][0].endswith(" 2") and cells[1][0].endswith(" 2")  # jobs per bucket
    assert [c[1].replace(" ", "") for c in cells] == ["-11.0/-10.0", "-1.5/-0.5"]
    assert [c[3].replace(" ", "") for c in cells] == ["0.50/0.50", "0.50/2.00"]
    assert [c[4] for c in cells] == ["0", "1"]
    assert timeline([], []) == []


def test_the_herd_lead_covers_the_start_the_creation_and_the_enqueue() -> None:
    assert herd_lead(1000, 1000.0) == 15.0 + 2.0 + 60.0
    assert herd_lead(1_000_000, 5000.0) == 15.0 + 400.0 + 200.0


def test_a_timed_phase_ends_at_the_first_sample_at_or_after_its_last_delivery() -> None:
    t0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    samples = [
        Sample(t0 + timedelta(seconds=k / 10), f"0/{k}", {}, float(k), 0.0) for k in range(6)
    ]
    # Between two samples: the next one (the phase is charged up to 0.1 s after its end).
    assert phase_end(samples, t0 + timedelta(seconds=0.25)) is samples[3]
    # On a sample: that one.
    assert phase_end(samples, t0 + timedelta(seconds=0.2)) is samples[2]
    # After the last sample (the bench stopped first), or nothing delivered: the last one.
    assert phase_end(samples, t0 + timedelta(seconds=9)) is samples[-1]
    assert phase_end(samples, None) is samples[-1]


def test_the_median_of_the_pairs_leaves_out_a_pair_without_figures() -> None:
    assert median([0.9, 0.6, 0.7]) == 0.7
    assert median([0.9, 0.6, 0.7, 0.8]) == pytest.approx(0.75)
    assert median([0.9, float("nan"), 0.6]) == pytest.approx(0.75)
    assert math.isnan(median([]))


def test_the_writes_table_splits_full_page_images_by_cause() -> None:
    # records, bytes, fpi, leaf entries, inserts, multi, updates, hot, deletes, locks, fpi of
    # hint bits, fpi of pruning/vacuum: per delivery over 10 deliveries.
    w = Writes(10, wal={"simulated_pushes": (20, 3000, 900, 0, 10, 0, 0, 0, 0, 0, 600, 300)})
    lines = describe_writes([("tockwork", w)])
    assert any("of hint bits" in line and line.endswith("60.00, 30.00") for line in lines), lines
    rel = [line for line in lines if "WAL simulated_pushes:" in line]
    assert rel and rel[0].endswith("300.00 (90.00: 60.00, 30.00); 0.00"), rel
