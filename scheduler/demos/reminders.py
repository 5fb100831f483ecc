"""``make demo``: 20,000 user reminders in 50 zones, due within two minutes, delivered to phones.

From a fresh database: 3 scheduler replicas and 2 workers run as separate processes (the real
``tockwork scheduler`` and ``tockwork worker --app scheduler.delivery:app`` commands), and the
reminders reach devices through FCM HTTP v1, over real HTTP/2 on loopback, to the project's
protocol-faithful FCM fake (``scheduler.push.fakes.fcm``, its own process: it checks the OAuth
grant, the bearer token and every message as Google does). One device per user is registered in
the device registry; a few tokens are dead (the fake answers ``UNREGISTERED``) and 2% of
requests meet a 503 with Retry-After, so retries and token invalidation show. The local times
all fall due at one instant (a herd), spread by 30 s of deterministic jitter.

Progress is printed while it runs; at the end a report says what was expected, enqueued and
delivered, what the fake received (and counted twice: 0), the tokens invalidated, the lateness
against the nominal time, and what to run next.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

import scheduler
from scheduler.cli.common import demo_url, redact
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
TIMEOUT = timedelta(seconds=150)
DEAD_EVERY = 250  # every 250th user's token is dead (the fake answers UNREGISTERED)
STORM = 0.02  # of FCM requests answered 503 with Retry-After: 1


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


def _token(i: int) -> str:
    """An FCM-shaped registration token for user ``i`` (the fake checks the format)."""
    return f"demo{i:07d}:APA91b" + f"{i * 2654435761 % 2**64:016x}" * 8


def _create(url: str, due: datetime, n: int) -> None:
    """``n`` daily reminders (one per user, 50 zones, local times all due at ``due``) and one
    device per user in the registry, in one transaction."""
    from scheduler.devices import add_device

    zones = _zones()
    items: list[dict[str, Any]] = []
    for i in range(n):
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
                "payload": {
                    "subject": f"user-{i}",
                    "title": "Stretch",
                    "body": "Time to stretch: {time} in {zone}",
                    "data": {"screen": "exercises"},
                },
            }
        )
    with psycopg.connect(url) as conn, conn.transaction():
        scheduler.create_schedules(conn, items)
        for i in range(n):
            add_device(conn, f"user-{i}", "fcm", _token(i), platform="android")


class Fake:
    """The FCM fake, a process of its own (``python -m scheduler.push.fakes.fcm``)."""

    def __init__(self, folder: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler.push.fakes.fcm", "--dir", str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the FCM fake did not start")
        info = json.loads(line)
        self.url: str = info["url"]
        self.credentials: str = info["credentials"]

    def _call(self, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method="POST" if data else "GET"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def configure(self, n: int) -> list[str]:
        dead = [_token(i) for i in range(0, n, DEAD_EVERY)]
        self._call("/_fake/fcm/config", {"unregistered": dead})
        storm = {"storm_status": 503, "storm_retry_after": 1, "storm_fraction": STORM,
                 "storm_path_prefix": "/v1/"}  # fmt: skip
        self._call("/_fake/faults", storm)
        return dead

    def summary(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("/_fake/fcm/summary")
        return result

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", *args], env=env, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip


def _counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    row = conn.execute(
        "SELECT count(*),"
        " count(*) FILTER (WHERE status IN ('pending', 'retrying', 'leased')),"
        " count(*) FILTER (WHERE status = 'retrying'),"
        " count(*) FILTER (WHERE status = 'dead'),"
        " count(*) FILTER (WHERE status = 'succeeded')"
        " FROM jobs_all WHERE job_type = 'reminder'"
    ).fetchone()
    assert row is not None
    return dict(zip(("enqueued", "open", "retrying", "dead", "done"), row, strict=True))


def _percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.demos.reminders",
        description="Deliver a herd of user reminders, due at one instant in 50 zones, to an "
        "FCM fake over HTTP/2, with the real scheduler and worker commands, in a scratch "
        f"database ({DEMO_DB}) on the server of DATABASE_URL (else the embedded one).",
    )
    parser.add_argument(
        "--reminders", type=int, default=REMINDERS, metavar="N",
        help=f"how many users with a reminder (1 to 200000; default {REMINDERS})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if not 1 <= args.reminders <= 200_000:
        parser.error(f"--reminders {args.reminders}: must be from 1 to 200000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    n: int = args.reminders
    started = time.monotonic()
    server = demo_url()
    print(
        f"tockwork demo: {n:,} reminders in {ZONES} zones, delivered through FCM HTTP v1 to a "
        f"local fake, in a scratch database {DEMO_DB} (created by this demo, dropped by its next "
        f"run) on {redact(server)}"
    )
    try:
        url = scratch_database(server, DEMO_DB, components=ALL_COMPONENTS)
    except NotAScratchDatabase as exc:
        print(f"tockwork demo: refused: {exc}", file=sys.stderr)
        return 1
    folder = Path(tempfile.mkdtemp(prefix="tockwork-demo-"))
    fake = Fake(folder)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        dead = fake.configure(n)
        print(f"  FCM fake on {fake.url} (HTTP/2; service account {fake.credentials}); "
              f"{len(dead)} tokens dead, {STORM:.0%} of sends answered 503")  # fmt: skip
        # The next whole minute at least 60 s away: time to create the schedules and start up.
        due = (datetime.now(UTC) + timedelta(seconds=60 + n / 1000)).replace(
            second=0, microsecond=0
        ) + timedelta(minutes=1)
        _create(url, due, n)
        print(
            f"  created {n:,} schedules and {n:,} devices in {time.monotonic() - started:.1f}s; "
            f"local times due at {due:%H:%M:%S}Z ({(due - datetime.now(UTC)).seconds}s from "
            f"now), e.g. daily@{due.astimezone(get_zone('Asia/Kathmandu')):%H:%M} in "
            "Asia/Kathmandu"
        )
        env = {
            **os.environ,
            "DATABASE_URL": url,
            "TOCKWORK_FCM_CREDENTIALS": fake.credentials,
            "TOCKWORK_FCM_URL": fake.url,
        }
        procs = [
            _spawn(["scheduler", "--lookahead", "20", "--interval", "0.5", "--batch-size", "1000"],
                   env, folder / f"scheduler{i}.log")
            for i in range(REPLICAS)
        ] + [
            _spawn(["worker", "--app", "scheduler.delivery:app", "--queue", "reminders=16",
                    "--poll", "0.5"], env, folder / f"worker{i}.log")
            for i in range(WORKERS)
        ]  # fmt: skip
        print(f"  started {REPLICAS} scheduler replicas and {WORKERS} workers (logs in {folder})")
        with psycopg.connect(url, autocommit=True) as conn:
            _watch(conn, fake, procs, due, n)
            _report(conn, fake, started, due, n, url)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        fake.stop()
    return 0


def _watch(
    conn: psycopg.Connection[Any],
    fake: Fake,
    procs: list[subprocess.Popen[bytes]],
    due: datetime,
    n: int,
) -> None:
    """Progress until every reminder is done (or the timeout): a line when something changed,
    at most every 2 s."""
    last = ""
    while True:
        c = _counts(conn)
        received = fake.summary()["delivered"]
        clock = datetime.now(UTC)
        to_go = (due - clock).total_seconds()
        when = f"T{'-' if to_go > 0 else '+'}{abs(to_go):4.0f}s"
        if c["enqueued"] == 0:
            line = f"  [{when}] waiting for the due instant; the schedulers enqueue ahead of it"
        else:
            line = (
                f"  [{when}] enqueued {c['enqueued']:>6,}  done {c['done']:>6,}  "
                f"received by FCM {received:>6,}  retrying {c['retrying']:>4}  dead {c['dead']:>3}"
            )
        if line.split("]", 1)[1] != last:
            print(line, flush=True)
            last = line.split("]", 1)[1]
        if c["enqueued"] >= n and c["open"] == 0:
            return
        if clock > due + TIMEOUT:
            print("  timed out waiting for the last deliveries")
            return
        for p in procs:
            if p.poll() is not None:
                print(f"  a process exited early ({p.args!r}: {p.returncode})")
                return
        time.sleep(2.0 if to_go > 3 else 1.0)


def _report(
    conn: psycopg.Connection[Any], fake: Fake, started: float, due: datetime, n: int, url: str
) -> None:
    c = _counts(conn)
    got = fake.summary()
    dup_jobs = conn.execute(
        "SELECT count(*) FROM (SELECT payload->'tockwork_schedule'->>'id',"
        " payload->'tockwork_schedule'->>'occurrence' FROM jobs_all GROUP BY 1, 2"
        " HAVING count(*) > 1) d"
    ).fetchone()
    rows = conn.execute(
        "SELECT extract(epoch FROM e.recorded_at - (j.payload->'tockwork_schedule'->>'at')"
        "::timestamptz), extract(epoch FROM e.recorded_at - j.run_at), j.attempts"
        " FROM job_effects e JOIN jobs_all j ON j.id = e.job_id WHERE e.effect_key LIKE 'push:%'"
    ).fetchall()
    lateness = [float(r[0]) for r in rows]
    queue_delay = [float(r[1]) for r in rows if r[2] == 1]
    invalidated = conn.execute(
        "SELECT count(*) FROM devices WHERE invalidated_at IS NOT NULL"
    ).fetchone()
    facts = conn.execute(
        "SELECT count(*) FROM outbox_events WHERE event_type = 'device.invalidated'"
    ).fetchone()
    retried = conn.execute(
        "SELECT outcome, count(*) FROM job_attempts WHERE outcome <> 'succeeded' GROUP BY 1"
    ).fetchall()
    print("\nreport")
    print(f"  occurrences expected   {n:>8,}")
    print(f"  enqueued               {c['enqueued']:>8,}  (jobs per occurrence > 1: "
          f"{dup_jobs[0] if dup_jobs else 0})")  # fmt: skip
    print(f"  jobs done              {c['done']:>8,}  dead {c['dead']}, retrying {c['retrying']}")
    print(f"  received by the fake   {got['delivered']:>8,}  (counted twice: {got['duplicates']}; "
          f"answers refused: {got['errors'] or 'none'})")  # fmt: skip
    print(f"  OAuth tokens issued    {got['tokens_issued']:>8,}")
    print(f"  tokens invalidated     {invalidated[0] if invalidated else 0:>8,}  (outbox facts "
          f"device.invalidated: {facts[0] if facts else 0})")  # fmt: skip
    print(f"  retried attempts       {', '.join(f'{o} {k}' for o, k in retried) or '0'}")
    print(
        "  lateness vs nominal    "
        f"p50 {_percentile(lateness, 50):.2f}s  p95 {_percentile(lateness, 95):.2f}s  "
        f"p99 {_percentile(lateness, 99):.2f}s  (the {JITTER}s jitter included)"
    )
    print(
        "  delivery vs run_at     "
        f"p50 {_percentile(queue_delay, 50) * 1000:.0f}ms  "
        f"p95 {_percentile(queue_delay, 95) * 1000:.0f}ms  "
        f"p99 {_percentile(queue_delay, 99) * 1000:.0f}ms  (first attempts: the queue's delay)"
    )
    print(f"  done in {time.monotonic() - started:.0f}s")
    print(
        "\nnext, on the demo's database:\n"
        f"  export DATABASE_URL='{redact(url)}'\n"
        "  tockwork stats                              # the queues at a glance\n"
        "  tockwork devices list --all --subject user-0   # a device the fake declared dead\n"
        "  tockwork jobs dead                          # nothing is dead, or why\n"
        "  tockwork dashboard --no-auth                # the operator dashboard, on loopback\n"
        "  python -m scheduler.push.fakes.fcm --help   # the fake, for your own pipeline's tests"
    )


if __name__ == "__main__":
    sys.exit(main())
