"""Push delivery end to end (issue 22): a herd of reminders delivered to the FCM fake over HTTP/2.

One throwaway database (``tockwork_push_<pid>``, every migration component, dropped at the end)
and one run:

1. **Setup.** The FCM fake (``python -m scheduler.push.fakes.fcm``) starts in a process of its
   own (h2c on loopback). ``--size`` devices are registered, one per user (``user-<i>``, channel
   ``fcm``): a sample through :func:`scheduler.devices.add_device`, one transaction each (its
   rate is printed), the rest in one ``INSERT ... SELECT`` into ``devices`` (setup only: a
   registration through the API costs what the sample shows, and 200,000 of them would take
   minutes before the first figure).
2. **The herd.** 2 ``tockwork scheduler`` processes (no flags) and 2 ``tockwork worker --app
   scheduler.delivery:app --queue reminders=16`` processes start first (the real commands, the
   user's path: devices from the registry, FCM HTTP v1 through ``TOCKWORK_FCM_CREDENTIALS`` and
   ``TOCKWORK_FCM_URL``, and the app's default pacing of the ``reminder`` job type to FCM's
   quota, 600,000 a minute, i.e. 10,000/s, printed beside the figures); then ``--size``
   reminders due at one instant ``T`` in 300 zones are created (``bench.reminder_delivery``'s
   herd, ``T`` far enough ahead for the creation and the enqueue). The bench waits on database
   state (no reminder job pending, retrying or leased) with a timeout.
3. **(a) The HTTP limit.** ``h2load`` (Debian's ``nghttp2-client``) sends ``--size`` requests
   to the same fake with a body shaped like the herd's messages (same fields, a real token and
   key of the herd) and a valid bearer: 4 connections x 500 streams, one thread.
4. **(b) The database limit.** ``bench.reminder_delivery``'s raw batched-SQL pipeline at the
   same size on the same jobs (put back to pending): 2 processes, claim 100, the still-due read,
   the effect rows and push rows, completion (no HTTP, no device read).
5. **The jittered herd.** The same herd again with ``--jitter`` (300 s) of jitter: lateness
   against each job's jittered ``run_at`` (target p99 <= 2 s).

Every time figure comes from the fake's receive times (``Received.at``, ``time.time()`` in the
fake when it accepted a message; read through ``GET /_fake/fcm/received``), not from the
poller and not from ``job_effects.recorded_at`` (written after the send: how far it lags is
printed). Deliveries/s = messages received / (last receive - first receive). Duplicates: the
fake's per-(token, key) counts, jobs per (schedule, occurrence), and receipts whose key the
database did not record. Figures, not a test: nothing is asserted on time; the exit code is 1
when a target is missed. ``python -m bench.push_delivery [--size N] [--jitter S] [--quick]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds queue.py, which would shadow the standard library's ``queue`` (multiprocessing
# imports it) if this folder came first on sys.path: put the repository root there instead.
_BENCH_DIR = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _BENCH_DIR]
sys.path.insert(0, str(_BENCH_DIR.parent))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from typing import Any, LiteralString  # noqa: E402

import orjson  # noqa: E402
import psycopg  # noqa: E402

import jobs  # noqa: E402
from bench import reminder_delivery as rd  # noqa: E402
from bench.push_channel import Fake, bearer, server_cpu  # noqa: E402
from scheduler import devdb  # noqa: E402
from scheduler.devdb import database_url  # noqa: E402
from scheduler.devices import add_device  # noqa: E402
from scheduler.migrations import ALL_COMPONENTS  # noqa: E402
from scheduler.push.fcm import fcm_message  # noqa: E402
from scheduler.push.message import PushMessage  # noqa: E402

APP = "scheduler.delivery:app"
TARGET_RATIO = 0.5
TARGET_JITTER_P99 = 2.0
DEVICE_SAMPLE = 1000  # devices registered through add_device (one transaction each)
PAGE = 10_000  # receipts per /_fake/fcm/received call (about 1.4 MB)
H2LOAD_CONNECTIONS = 4
H2LOAD_STREAMS = 500

# -- SQL (the bench's own: setup, progress, figures) -------------------------------------------

# Tokens shaped like FCM registration tokens (the fake checks the format), one per user.
BULK_DEVICES: LiteralString = """
INSERT INTO devices (subject, channel, token, platform)
SELECT 'user-' || i, 'fcm', 'bench' || lpad(i::text, 9, '0') || ':APA91bBenchmarkDeviceToken',
       'android'
FROM generate_series(%(first)s::int, %(last)s::int) AS i
"""
PROGRESS: LiteralString = """
SELECT count(*), count(*) FILTER (WHERE status IN ('pending', 'retrying', 'leased'))
FROM jobs_all WHERE queue = 'reminders'
"""
RECEIPTS_TABLE: LiteralString = """
CREATE TABLE IF NOT EXISTS bench_receipts (at float8 NOT NULL, token text NOT NULL, key text)
"""
RECEIPTS_TRUNCATE: LiteralString = "TRUNCATE bench_receipts"
RECEIPTS_COPY: LiteralString = "COPY bench_receipts (at, token, key) FROM STDIN"
RECEIPTS_ANALYZE: LiteralString = "ANALYZE bench_receipts"
# Each receipt against its job (the key is the effect key the delivery records with the job's
# id): lateness against the nominal occurrence (the job's payload) and against the job's run_at
# (first attempts only: a retried job's run_at moves); how long after the receipt the effect was
# recorded; receipts the database has no record of.
RECEIPT_FIGURES: LiteralString = """
WITH r AS (
    SELECT r.at,
           r.at - extract(epoch FROM (j.payload -> 'tockwork_schedule' ->> 'at')::timestamptz)
               AS nominal,
           CASE WHEN j.attempts = 1 THEN r.at - extract(epoch FROM j.run_at) END AS run_at,
           extract(epoch FROM e.recorded_at) - r.at AS recorded,
           e.effect_key IS NULL AS unrecorded
    FROM bench_receipts AS r
    LEFT JOIN job_effects AS e ON e.effect_key = r.key
    LEFT JOIN jobs_all AS j ON j.id = e.job_id
)
SELECT count(*), min(at), max(at),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY nominal), max(nominal),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY run_at), max(run_at),
       percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY recorded),
       count(*) FILTER (WHERE unrecorded)
FROM r
"""
RECEIPT_DUPLICATES: LiteralString = """
SELECT count(*) FROM (SELECT 1 FROM bench_receipts GROUP BY token, key HAVING count(*) > 1) AS d
"""
JOB_DUPLICATES: LiteralString = """
SELECT count(*) FROM (SELECT 1 FROM jobs_all WHERE queue = 'reminders'
    GROUP BY payload -> 'tockwork_schedule' ->> 'id',
             payload -> 'tockwork_schedule' ->> 'occurrence'
    HAVING count(*) > 1) AS d
"""
# The handler's start against run_at (first attempts): a late start is the queue's (claims,
# pacing), a late receipt after an early start is the handler's and the HTTP path's.
STARTS: LiteralString = """
SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM a.started_at - j.run_at)::float8)
FROM job_attempts AS a JOIN jobs_all AS j ON j.id = a.job_id
WHERE a.attempt = 1 AND j.queue = 'reminders'
"""
STATUSES: LiteralString = (
    "SELECT status, count(*) FROM jobs_all WHERE queue = 'reminders' GROUP BY 1 ORDER BY 1"
)
ATTEMPTS: LiteralString = (
    "SELECT outcome, count(*) FROM job_attempts WHERE queue = 'reminders' GROUP BY 1 ORDER BY 1"
)
ONE_SENT: LiteralString = """
SELECT j.payload -> 'tockwork_schedule' ->> 'id', j.payload -> 'tockwork_schedule' ->> 'occurrence'
FROM job_effects AS e JOIN jobs_all AS j ON j.id = e.job_id WHERE e.effect_key = %(key)s
"""
SERVER: LiteralString = (
    "SELECT current_setting('server_version'), current_setting('fsync'), "
    "current_setting('synchronous_commit')"
)


# -- the fake -----------------------------------------------------------------------------------


def start_fake(directory: Path, max_records: int) -> Fake:
    """The FCM fake in its own process (h2c), keeping ``max_records`` receipts."""
    command = [
        sys.executable,
        "-m",
        "scheduler.push.fakes.fcm",
        "--dir",
        str(directory),
        "--max-concurrent-streams",
        "1000",
        "--max-records",
        str(max_records),
    ]
    log_path = directory / "fake.log"
    with log_path.open("w") as log_file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log_file, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise SystemExit("the FCM fake did not start:\n" + log_path.read_text())
    info = json.loads(line)
    return Fake(process, info["url"], info["credentials"], info["ca_file"])


def receipts(fake: Fake) -> list[tuple[float, str, str | None]]:
    """Every receipt the fake kept, oldest first."""
    out: list[tuple[float, str, str | None]] = []
    while True:
        page = fake.control(f"/_fake/fcm/received?offset={len(out)}&limit={PAGE}")
        out.extend((float(a), str(t), k) for a, t, k in page["received"])
        if not page["received"] or len(out) >= int(page["total"]):
            return out


# -- devices ------------------------------------------------------------------------------------


def token(i: int) -> str:
    return f"bench{i:09d}:APA91bBenchmarkDeviceToken"


def register_devices(url: str, n: int) -> float:
    """One device per user: a sample through ``add_device`` (its rate returned, devices/s), the
    rest with one ``INSERT ... SELECT``."""
    sample = min(n, DEVICE_SAMPLE)
    with psycopg.connect(url) as conn:
        start = time.perf_counter()
        for i in range(sample):
            with conn.transaction():
                add_device(conn, f"user-{i}", "fcm", token(i), platform="android")
        seconds = time.perf_counter() - start
        if n > sample:
            with conn.transaction():
                conn.execute(BULK_DEVICES, {"first": sample, "last": n - 1})
    return sample / seconds if seconds > 0 else math.nan


# -- the herd -----------------------------------------------------------------------------------


@dataclass
class PushHerd:
    name: str
    n: int
    jitter: int
    completed: bool = False
    create_seconds: float = 0.0
    received: int = 0
    rate: float = math.nan
    first: float = math.nan  # first receipt, seconds relative to T
    last: float = math.nan
    nominal: tuple[float, ...] = (math.nan,) * 4  # p50, p95, p99, max
    run_at: tuple[float, ...] = (math.nan,) * 4
    recorded: tuple[float, ...] = (math.nan,) * 2  # job_effects.recorded_at - receipt, p50/p99
    starts: tuple[float, ...] = (math.nan,) * 2  # handler start - run_at, p50/p99
    unrecorded: int = 0
    fake_duplicates: int = 0
    receipt_duplicates: int = 0
    job_duplicates: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    fake_cpu: float = math.nan
    fake_summary: dict[str, Any] = field(default_factory=dict)
    pacing: str = "-"
    sample: tuple[str, str, str, str] | None = None  # token, key, schedule id, occurrence key

    @property
    def duplicates(self) -> int:
        return self.fake_duplicates + self.receipt_duplicates + self.job_duplicates

    @property
    def dead(self) -> int:
        return self.statuses.get("dead", 0)


def wait_done(
    url: str, n: int, due: datetime, timeout: float, procs: rd.Processes, fake: Fake
) -> bool:
    """Poll (every second; a condition with a timeout) until the ``n`` reminder jobs are all in
    the table and none is pending, retrying or leased; False at ``timeout`` s after ``due``."""
    deadline = time.monotonic() + (due - datetime.now(UTC)).total_seconds() + timeout
    next_report = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(PROGRESS).fetchone()
            assert row is not None
            total, open_ = int(row[0]), int(row[1])
            if total >= n and open_ == 0:
                return True
            if time.monotonic() >= next_report:
                to_go = (due - datetime.now(UTC)).total_seconds()
                received = fake.control("/_fake/fcm/summary")["delivered"]
                print(
                    f"    [T{'-' if to_go > 0 else '+'}{abs(to_go):4.0f}s] enqueued {total:>9,}"
                    f"  open {open_:>9,}  received by the fake {received:>9,}",
                    flush=True,
                )
                next_report = time.monotonic() + 5.0
                procs.check()
            if time.monotonic() > deadline:
                return False
            time.sleep(1.0)


def pacing(url: str) -> str:
    with jobs.connect(url) as conn:
        limits = [s.limit for s in jobs.limits.list_limits(conn) if s.limit.job_type == "reminder"]
    if not limits:
        return "none"
    limit = limits[0]
    minute = f", {limit.per_minute:,}/min" if limit.per_minute else ""
    return f"{limit.per_second:,}/s{minute} (job type reminder)"


def run_herd(url: str, args: argparse.Namespace, jitter: int, fake: Fake, logs: Path) -> PushHerd:
    """One fresh herd of ``args.size`` reminders delivered by the real commands to the fake."""
    result = PushHerd(f"herd, jitter {jitter} s", args.size, jitter)
    rd.reset(url)  # schedules, jobs, attempts, effects (not the devices)
    fake.control("/_fake/fcm/reset", {})
    rate = rd.creation_rate(url)
    due = (datetime.now(UTC) + timedelta(seconds=rd.herd_lead(args.size, rate))).replace(
        microsecond=0
    )
    zones = rd.herd_zones(due)
    items = rd.schedule_items(args.size, zones, jitter)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PYTHONUNBUFFERED": "1",
        "TOCKWORK_FCM_CREDENTIALS": fake.credentials,
        "TOCKWORK_FCM_URL": fake.url,
    }
    for var in list(env):  # the app's defaults, nothing else configured
        if var.startswith(("TOCKWORK_PUSH_", "TOCKWORK_APNS_", "TOCKWORK_SIM_")) or var in (
            "TOCKWORK_FCM_QUOTA",
        ):
            env.pop(var)
    procs = rd.Processes(logs)
    fake_cpu0 = server_cpu(fake.process.pid)
    try:
        for i in range(2):
            # The herd alone: no built-in maintenance in the figures (issue 26 made it default).
            procs.start(
                f"scheduler{i}", ["scheduler", "--no-maintenance", *args.scheduler_args], env
            )
        for i in range(2):
            procs.start(
                f"worker{i}", ["worker", "--app", APP, "--no-maintenance", *args.worker_args], env
            )
        print(
            f"  {result.name}: started 2 replicas and 2 workers ({APP} "
            f"{' '.join(args.worker_args)}); creating {args.size:,} reminders in {len(zones)} "
            f"zones due at {due:%H:%M:%S}Z at about {rate:,.0f}/s ...",
            flush=True,
        )
        result.create_seconds = rd.create(url, items)
        del items
        ahead = (due - datetime.now(UTC)).total_seconds()
        print(f"    created in {result.create_seconds:.1f}s; T-{ahead:.0f}s", flush=True)
        procs.check()
        timeout = args.timeout if args.timeout else 600.0 + args.size / 500.0 + jitter
        result.completed = wait_done(url, args.size, due, timeout, procs, fake)
        result.cpu = procs.cpu()
    finally:
        procs.stop()
    result.fake_cpu = server_cpu(fake.process.pid) - fake_cpu0
    result.fake_summary = fake.control("/_fake/fcm/summary")
    result.fake_duplicates = int(result.fake_summary["duplicates"])
    result.pacing = pacing(url)
    measure(url, result, due, receipts(fake))
    print(describe(result), flush=True)
    return result


def measure(
    url: str, result: PushHerd, due: datetime, rows: list[tuple[float, str, str | None]]
) -> None:
    """Fill ``result`` from the receipts (loaded into the database beside the jobs)."""
    t = due.timestamp()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(RECEIPTS_TABLE)
        conn.execute(RECEIPTS_TRUNCATE)
        with conn.cursor() as cur, cur.copy(RECEIPTS_COPY) as copy:
            for row in rows:
                copy.write_row(row)
        conn.execute(RECEIPTS_ANALYZE)
        f = conn.execute(RECEIPT_FIGURES).fetchone()
        assert f is not None
        result.received = int(f[0])
        if result.received:
            result.first, result.last = f[1] - t, f[2] - t
            span = f[2] - f[1]
            result.rate = result.received / span if span > 0 else math.nan
            result.nominal = (*f[3], f[4])
            if f[5] is not None:
                result.run_at = (*f[5], f[6])
            if f[7] is not None:
                result.recorded = tuple(f[7])
            result.unrecorded = int(f[8])
        dup = conn.execute(RECEIPT_DUPLICATES).fetchone()
        result.receipt_duplicates = int(dup[0]) if dup else 0
        dup = conn.execute(JOB_DUPLICATES).fetchone()
        result.job_duplicates = int(dup[0]) if dup else 0
        starts = conn.execute(STARTS).fetchone()
        if starts is not None and starts[0] is not None:
            result.starts = tuple(starts[0])
        result.statuses = {s: int(c) for s, c in conn.execute(STATUSES).fetchall()}
        result.attempts = {o: int(c) for o, c in conn.execute(ATTEMPTS).fetchall()}
        for _, tok, key in rows[:1]:
            found = conn.execute(ONE_SENT, {"key": key}).fetchone()
            if key is not None and found is not None:
                result.sample = (tok, key, str(found[0]), str(found[1]))


def f2(values: tuple[float, ...]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def describe(r: PushHerd) -> str:
    return "\n".join(
        (
            f"    {r.name}: {'done' if r.completed else 'TIMED OUT'}; the fake received "
            f"{r.received:,} of {r.n:,}; jobs {r.statuses}; attempts {r.attempts}",
            f"      schedules created in {r.create_seconds:.1f}s; deliveries {r.rate:,.0f}/s "
            f"from T{r.first:+.2f}s to T{r.last:+.2f}s (the fake's receive times); pacing "
            f"{r.pacing}",
            f"      lateness vs nominal p50/p95/p99/max {f2(r.nominal)} s; vs run_at "
            f"{f2(r.run_at)} s; handler start - run_at p50/p99 {f2(r.starts)} s; "
            f"job_effects.recorded_at - received p50/p99 {f2(r.recorded)} s (the batch's "
            "clock, read before the send: not a delivery time)",
            f"      duplicates: fake (token, key) {r.fake_duplicates}, kept receipts "
            f"{r.receipt_duplicates}, jobs per occurrence {r.job_duplicates}; received but not "
            f"recorded {r.unrecorded}; fake errors {r.fake_summary.get('errors', {})}",
            "      CPU "
            + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(r.cpu.items()))
            + f", fake {r.fake_cpu:.1f}s",
        )
    )


# -- (a) h2load -------------------------------------------------------------------------------


def run_h2load(fake: Fake, n: int, herd: PushHerd, directory: Path) -> tuple[float | None, str]:
    """``n`` requests like the herd's messages to the same fake: the HTTP limit."""
    exe = shutil.which("h2load")
    if exe is None:
        return None, "h2load not installed (apt-get install nghttp2-client)"
    tok, key, schedule, occurrence = herd.sample or (token(0), "push:bench", "1", "bench")
    now = datetime.now(UTC)
    message = PushMessage(
        key=key,
        channel="fcm",
        token=tok,
        title="Reminder",
        body="time to stretch",
        data={"tockwork_schedule": schedule, "tockwork_occurrence": occurrence},
        collapse_key=f"tockwork-{schedule}",
        expires_at=now + timedelta(hours=1),
    )
    body_file = directory / "body.json"
    body_file.write_bytes(orjson.dumps({"message": fcm_message(message, now)}))
    project = json.loads(Path(fake.credentials).read_text())["project_id"]
    bearer_token = asyncio.run(bearer(fake))
    fake.control("/_fake/fcm/reset", {})
    command = [
        exe,
        "-n",
        str(n),
        "-c",
        str(H2LOAD_CONNECTIONS),
        "-m",
        str(H2LOAD_STREAMS),
        "-t",
        "1",
        "-H",
        f"authorization: Bearer {bearer_token}",
        "-H",
        "content-type: application/json; charset=UTF-8",
        "-d",
        str(body_file),
        f"{fake.url}/v1/projects/{project}/messages:send",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    # the command line carries the bearer: never print it, only the figures
    match = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", done.stdout)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", done.stdout)
    if match is None or codes is None:
        return None, f"h2load failed (exit {done.returncode})"
    if int(codes.group(1)) != n:
        return None, f"h2load: only {codes.group(1)} of {n} answered 2xx"
    seconds = float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)
    accepted = fake.control("/_fake/fcm/summary")["delivered"]
    note = f"{H2LOAD_CONNECTIONS} connections x {H2LOAD_STREAMS} streams, 1 thread"
    if accepted != n:
        note += f"; the fake accepted {accepted} of {n}"
    return n / seconds, note


# -- report -------------------------------------------------------------------------------------


def rows_for(
    herd: PushHerd | None,
    h2load: tuple[float | None, str] | None,
    raw: rd.HerdResult | None,
    jittered: PushHerd | None,
) -> list[rd.Row]:
    rows: list[rd.Row] = []
    if herd is not None:
        rows.append(
            rd.Row(
                "deliveries/s (2 workers, FCM fake over h2c)",
                f"{herd.rate:,.0f}/s",
                f"pacing {herd.pacing}",
                None,
            )
        )
        limits: list[float] = []
        if h2load is not None:
            value = "n/a" if h2load[0] is None else f"{h2load[0]:,.0f}/s"
            rows.append(rd.Row("(a) h2load, same fake", value, h2load[1], None))
            if h2load[0]:
                limits.append(h2load[0])
        if raw is not None:
            rows.append(
                rd.Row("(b) raw batched SQL x2", f"{raw.rate:,.0f}/s", "no HTTP, no devices", None)
            )
            if not math.isnan(raw.rate):
                limits.append(raw.rate)
        if limits:
            ratio = herd.rate / min(limits)
            rows.append(
                rd.Row(
                    "ours / min(a, b)",
                    rd.percent(ratio),
                    f">= {rd.percent(TARGET_RATIO)}",
                    ratio >= TARGET_RATIO,
                )
            )
        else:
            rows.append(rd.Row("ours / min(a, b)", "n/a", f">= {rd.percent(TARGET_RATIO)}", None))
        rows += [
            rd.Row(
                f"{herd.n:,} due at T: last delivery",
                f"T{herd.last:+.1f} s",
                "-",
                None,
            ),
            rd.Row("lateness vs nominal p50/p95/p99", rd.p3(herd.nominal), "-", None),
            rd.Row(
                "duplicates, dead, received",
                f"{herd.duplicates}, {herd.dead}, {herd.received:,}",
                f"0, 0, {herd.n:,}",
                herd.completed
                and herd.duplicates == 0
                and herd.dead == 0
                and herd.received == herd.n,
            ),
        ]
    if jittered is not None:
        rows += [
            rd.Row(
                f"jitter {jittered.jitter} s: lateness vs run_at p50/p95/p99",
                rd.p3(jittered.run_at),
                f"p99 <= {TARGET_JITTER_P99:g} s",
                jittered.completed and jittered.run_at[2] <= TARGET_JITTER_P99,
            ),
            rd.Row(
                f"jitter {jittered.jitter} s: last delivery; duplicates, dead, received",
                f"T{jittered.last:+.1f} s; {jittered.duplicates}, {jittered.dead}, "
                f"{jittered.received:,}",
                f"-; 0, 0, {jittered.n:,}",
                jittered.completed
                and jittered.duplicates == 0
                and jittered.dead == 0
                and jittered.received == jittered.n,
            ),
        ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000, help="reminders (and devices)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1,000, jitter 20 s")
    parser.add_argument("--jitter", type=int, default=300, help="jitter of the second herd (s)")
    parser.add_argument("--no-jitter-run", action="store_true", help="skip the jittered herd")
    parser.add_argument("--no-raw", action="store_true", help="skip (b), the raw pipeline")
    parser.add_argument("--no-h2load", action="store_true", help="skip (a), h2load")
    parser.add_argument("--raw-batch", type=int, default=100, help="raw pipeline claim size")
    parser.add_argument(
        "--worker-args",
        default=f"--queue {rd.QUEUE}=16",
        help="arguments of each `tockwork worker` after --app (default: '%(default)s')",
    )
    parser.add_argument(
        "--scheduler-args", default="", help="arguments of each `tockwork scheduler` (none)"
    )
    parser.add_argument(
        "--timeout", type=float, default=0.0, help="seconds after T before giving up a herd"
    )
    args = parser.parse_args()
    if args.quick:
        args.size, args.jitter = 1000, 20
    args.worker_args = args.worker_args.split()
    args.scheduler_args = args.scheduler_args.split()

    began = time.perf_counter()
    logs = Path(tempfile.mkdtemp(prefix="tockwork-push-delivery-"))
    herd: PushHerd | None = None
    h2load: tuple[float | None, str] | None = None
    raw: rd.HerdResult | None = None
    jittered: PushHerd | None = None
    name = f"tockwork_push_{os.getpid()}"
    with devdb.throwaway_database(database_url(), name, components=ALL_COMPONENTS) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            settings = conn.execute(SERVER).fetchone()
        assert settings is not None
        print(
            f"push delivery: PostgreSQL {settings[0]} (fsync={settings[1]}, "
            f"synchronous_commit={settings[2]}), {os.cpu_count()} CPUs, load average "
            f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}, database {name}, logs in {logs}",
            flush=True,
        )
        fake = start_fake(logs, max_records=2 * args.size + 1000)
        try:
            started = time.perf_counter()
            per_second = register_devices(url, args.size)
            print(
                f"  {args.size:,} devices in {time.perf_counter() - started:.1f}s: "
                f"{min(args.size, DEVICE_SAMPLE):,} through add_device ({per_second:,.0f}/s, "
                "one transaction each), the rest in one INSERT ... SELECT",
                flush=True,
            )
            herd = run_herd(url, args, 0, fake, logs)
            if not args.no_h2load:
                print(f"  (a) h2load, {args.size:,} requests ...", flush=True)
                h2load = run_h2load(fake, args.size, herd, logs)
                print(f"    {h2load[0] or 0:,.0f}/s; {h2load[1]}", flush=True)
            if not args.no_raw:
                print(f"  (b) raw batched SQL x2, claim {args.raw_batch} ...", flush=True)
                raw = rd.run_raw(url, args.size, 2, args.raw_batch, datetime.now(UTC))
            if not args.no_jitter_run:
                jittered = run_herd(url, args, args.jitter, fake, logs)
        finally:
            fake.stop()
    print()
    rows = rows_for(herd, h2load, raw, jittered)
    rd.print_table(rows)
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    # the sample's device token is left out: no token in any output
    summary = {
        "size": args.size,
        "herd": {k: v for k, v in herd.__dict__.items() if k != "sample"} if herd else None,
        "h2load": h2load,
        "raw": {"rate": raw.rate, "delivered": raw.delivered} if raw else None,
        "jittered": (
            {k: v for k, v in jittered.__dict__.items() if k != "sample"} if jittered else None
        ),
        "load_end": load,
    }
    print("\njson: " + json.dumps(summary, default=str))
    print(f"load average at the end {load}; total {time.perf_counter() - began:.0f}s")
    ok = all(r.ok is not False for r in rows)
    if ok:
        shutil.rmtree(logs, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
