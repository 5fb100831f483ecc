"""``make demo``: 20,000 user reminders in 50 zones, due within the next minute, end to end.

From a fresh database: 3 scheduler replicas and 2 workers run as separate processes (the real
``tockwork scheduler`` and ``tockwork worker`` commands). The reminders' local times all fall due
at the next whole minute (a herd), spread by 30 s of deterministic jitter, and are delivered
through the simulated push provider, which fails transiently or rate-limits a few attempts.
Live progress is printed while it runs; at the end a report says: occurrences expected,
enqueued, delivered, duplicates (0), dead, deliveries per second and the time of the last
delivery (relative to the due instant), lateness against the nominal time (p50/p95/p99) and the
spread jitter produced.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

import scheduler
from scheduler.cli.common import redact, resolve_url
from scheduler.devdb import NotAScratchDatabase, scratch_database
from scheduler.migrations import ALL_COMPONENTS
from timezones import available_zones, get_zone

# The demo's own database on the server of DATABASE_URL (or the embedded one): created by the
# demo and marked so (scheduler.devdb.scratch_database); a database of this name that a demo
# did not make is never dropped.
DEMO_DB = "tockwork_demo_scratch"
REMINDERS = 20_000
ZONES = 50
JITTER = 30
REPLICAS = 2 + 1
WORKERS = 2
TIMEOUT = timedelta(seconds=100)


def _zones() -> list[str]:
    """50 real zones with varied offsets (half-hour and 45-minute ones included)."""
    picked = [
        "America/Chicago", "America/New_York", "America/Los_Angeles", "America/Sao_Paulo",
        "America/St_Johns", "Europe/London", "Europe/Berlin", "Europe/Kyiv", "Asia/Kolkata",
        "Asia/Kathmandu", "Australia/Adelaide", "Australia/Lord_Howe", "Pacific/Chatham",
        "Pacific/Kiritimati", "Asia/Tokyo", "Africa/Casablanca",
    ]  # fmt: skip
    rest = sorted(available_zones() - set(picked))
    step = max(1, len(rest) // (ZONES - len(picked)))
    picked += [z for z in rest[::step] if "/" in z and not z.startswith("Etc/")]
    return picked[:ZONES]


def _fresh_database(server_url: str) -> str:
    return scratch_database(server_url, DEMO_DB, components=ALL_COMPONENTS)


def _create(url: str, due: datetime) -> None:
    zones = _zones()
    items: list[dict[str, Any]] = []
    for i in range(REMINDERS):
        zone = zones[i % len(zones)]
        local = due.astimezone(get_zone(zone))
        items.append(
            {
                "job_type": "reminder",
                "rule": f"daily@{local:%H:%M}",
                "zone": zone,
                "subject": f"user-{i}",
                "queue": "reminders",
                "jitter": JITTER,
                "payload": {"subject": f"user-{i}", "message": "time to stretch"},
            }
        )
    with psycopg.connect(url) as conn, conn.transaction():
        scheduler.create_schedules(conn, items)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    row = conn.execute(
        "SELECT count(*),"
        " count(*) FILTER (WHERE status IN ('pending', 'retrying', 'leased')),"
        " count(*) FILTER (WHERE status = 'retrying'),"
        " count(*) FILTER (WHERE status = 'dead'),"
        " (SELECT count(*) FROM simulated_pushes)"
        " FROM jobs"
    ).fetchone()
    assert row is not None
    return dict(zip(("enqueued", "open", "retrying", "dead", "delivered"), row, strict=True))


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> int:
    started = time.monotonic()
    server = resolve_url(None)
    print(
        f"tockwork demo: {REMINDERS:,} reminders in {ZONES} zones, in a scratch database "
        f"{DEMO_DB} (created by this demo, dropped by its next run) on {redact(server)}"
    )
    try:
        url = _fresh_database(server)
    except NotAScratchDatabase as exc:
        print(f"tockwork demo: refused: {exc}", file=sys.stderr)
        return 1
    now = datetime.now(UTC)
    # The next whole minute at least 45 s away: time to create the schedules and start up.
    due = (now + timedelta(seconds=105)).replace(second=0, microsecond=0)
    _create(url, due)
    print(
        f"  created {REMINDERS:,} schedules in {time.monotonic() - started:.1f}s; "
        f"local times due at {due:%H:%M:%S}Z ({(due - datetime.now(UTC)).seconds}s from now), "
        f"e.g. daily@{due.astimezone(get_zone('Asia/Kathmandu')):%H:%M} in Asia/Kathmandu"
    )
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "TOCKWORK_SIM_TRANSIENT": "0.03",
        "TOCKWORK_SIM_RATE_LIMIT": "0.01",
        "TOCKWORK_SIM_RETRY_AFTER": "2",
    }
    procs = [
        _spawn(["scheduler", "--lookahead", "20", "--interval", "0.5", "--batch-size", "1000"],
               env)
        for _ in range(REPLICAS)
    ] + [
        _spawn(["worker", "--app", "scheduler.delivery:simulated_app", "--queue",
                "reminders=16", "--poll", "0.5"], env)
        for _ in range(WORKERS)
    ]  # fmt: skip
    print(f"  started {REPLICAS} scheduler replicas and {WORKERS} workers (separate processes)")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            while True:
                c = _counts(conn)
                clock = datetime.now(UTC)
                to_go = (due - clock).total_seconds()
                when = f"T{'-' if to_go > 0 else '+'}{abs(to_go):4.0f}s"
                print(
                    f"  [{when}] enqueued {c['enqueued']:>6,}  delivered {c['delivered']:>6,}  "
                    f"retrying {c['retrying']:>4}  dead {c['dead']:>3}",
                    flush=True,
                )
                if c["enqueued"] >= REMINDERS and c["open"] == 0:
                    break
                if clock > due + TIMEOUT:
                    print("  timed out waiting for the last deliveries")
                    break
                time.sleep(1.0 if to_go > 3 else 0.5)
            _report(conn, started, due)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    return 0


def _report(conn: psycopg.Connection[Any], started: float, due: datetime) -> None:
    c = _counts(conn)
    dup_jobs = conn.execute(
        "SELECT count(*) FROM (SELECT payload->'tockwork_schedule'->>'id',"
        " payload->'tockwork_schedule'->>'occurrence' FROM jobs GROUP BY 1, 2"
        " HAVING count(*) > 1) d"
    ).fetchone()
    dup_push = conn.execute(
        "SELECT count(*) FROM (SELECT schedule_id, occurrence_key FROM simulated_pushes"
        " GROUP BY 1, 2 HAVING count(*) > 1) d"
    ).fetchone()
    lateness = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM delivered_at - occurrence_at) FROM simulated_pushes"
        ).fetchall()
    ]
    spread = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM run_at - (payload->'tockwork_schedule'->>'at')::timestamptz)"
            " FROM jobs WHERE attempts <= 1"  # a retry moves run_at
        ).fetchall()
    ]
    start_delay = [
        float(r[0])
        for r in conn.execute(
            "SELECT extract(epoch FROM p.delivered_at - j.run_at) FROM simulated_pushes p"
            " JOIN jobs j ON j.id = p.job_id WHERE j.attempts = 1"
        ).fetchall()
    ]
    span = conn.execute(
        "SELECT count(*), min(delivered_at), max(delivered_at) FROM simulated_pushes"
    ).fetchone()
    retried = conn.execute(
        "SELECT outcome, count(*) FROM job_attempts WHERE outcome <> 'succeeded' GROUP BY 1"
    ).fetchall()
    print("\nreport")
    print(f"  occurrences expected   {REMINDERS:>8,}")
    print(f"  enqueued               {c['enqueued']:>8,}")
    print(f"  delivered              {c['delivered']:>8,}")
    duplicates = (dup_jobs[0] if dup_jobs else 0) + (dup_push[0] if dup_push else 0)
    print(f"  duplicates             {duplicates:>8,}")
    print(f"  dead                   {c['dead']:>8,}")
    if span is not None and span[1] is not None:
        seconds = (span[2] - span[1]).total_seconds()
        rate = f"{span[0] / seconds:,.0f}/s" if seconds > 0 else "-"
        print(
            f"  deliveries/s           {rate:>8}  (first to last delivery, {seconds:.1f}s; "
            f"the jitter window spreads them over {JITTER}s)"
        )
        print(
            f"  last delivery          T{(span[2] - due).total_seconds():+.1f}s  "
            f"(after the due instant {due:%H:%M:%S}Z)"
        )
    print(f"  retried attempts       {', '.join(f'{o} {n}' for o, n in retried) or '0'}")
    print(
        "  lateness vs nominal    "
        f"p50 {_percentile(lateness, 50):.2f}s  p95 {_percentile(lateness, 95):.2f}s  "
        f"p99 {_percentile(lateness, 99):.2f}s  (jitter included)"
    )
    print(
        "  delivery vs run_at     "
        f"p50 {_percentile(start_delay, 50) * 1000:.0f}ms  "
        f"p95 {_percentile(start_delay, 95) * 1000:.0f}ms  "
        f"p99 {_percentile(start_delay, 99) * 1000:.0f}ms  (first attempts: the queue's delay)"
    )
    print(
        "  jitter spread          "
        f"min {min(spread, default=0):.1f}s  p50 {_percentile(spread, 50):.1f}s  "
        f"max {max(spread, default=0):.1f}s  (window {JITTER}s)"
    )
    buckets = [0] * 6
    for s in spread:
        buckets[min(5, int(s // (JITTER / 6)))] += 1
    width = max(buckets) or 1
    for i, n in enumerate(buckets):
        lo = i * JITTER / 6
        print(f"    {lo:4.0f}-{lo + JITTER / 6:<4.0f}s {'#' * round(40 * n / width):<40} {n:,}")
    print(f"  done in {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
