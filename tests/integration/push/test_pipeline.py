"""Push delivery end to end: the database, a real ``tockwork worker --app scheduler.delivery:app``
process, the FCM and APNs channels over real HTTP/2 sockets, and the protocol-faithful fakes.

The channel-level behaviour (each answer of the error tables, GOAWAY, refreshes) is tested in
``test_fcm_channel.py`` and ``test_apns.py``; here the same faults meet the whole pipeline, and
what is checked is what a user sees: every reminder job ends ``succeeded``, each (device,
``tockwork_key``) reaches the fake once (the fakes count deliveries per pair), dead tokens are
invalidated once and never sent to again, and no secret reaches the worker's output.

The fakes run on a thread of the test process (:meth:`FakeServer.start_in_thread`), so a test
reads their counts and sets their faults directly; ``tockwork dev fake-push`` runs as its own
process. A test waits on the database (or the fakes' counts) with a deadline, never for a
fixed time; the only durations are the faults' own (a storm's length, a latency).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
from scheduler.delivery import DeliveryHandler, Device
from scheduler.devices import add_device
from scheduler.push import PushStatus
from scheduler.push.fakes.apns import ApnsFake, ApnsKey
from scheduler.push.fakes.fcm import FcmFake
from scheduler.push.fakes.server import FakeServer
from tests.processes import ROOT, LoggedProcess, tockwork_argv, tracebacks
from timezones import FrozenClock

TOPIC = "com.example.tockwork"


def fcm_token(i: int) -> str:
    """An FCM-shaped registration token (the fake checks the alphabet and length)."""
    return f"pipe{i:06d}:APA91b" + hashlib.sha256(f"fcm{i}".encode()).hexdigest() * 2


def apns_token(i: int) -> str:
    """An APNs device token: 64 hex digits."""
    return hashlib.sha256(f"apns{i}".encode()).hexdigest()


@dataclass
class Fakes:
    """The FCM and APNs fakes on a thread each, with their credentials written."""

    fcm: FcmFake
    fcm_server: FakeServer
    credentials: Path
    apns: ApnsFake
    apns_server: FakeServer
    apns_key: ApnsKey
    key_file: Path

    def env(self, db_url: str) -> dict[str, str]:
        """The worker's environment pointing the delivery app at both fakes."""
        return {
            "DATABASE_URL": db_url,
            "TOCKWORK_FCM_CREDENTIALS": str(self.credentials),
            "TOCKWORK_FCM_URL": self.fcm_server.url,
            "TOCKWORK_APNS_KEY_FILE": str(self.key_file),
            "TOCKWORK_APNS_KEY_ID": self.apns_key.key_id,
            "TOCKWORK_APNS_TEAM_ID": self.apns_key.team_id,
            "TOCKWORK_APNS_TOPIC": TOPIC,
            "TOCKWORK_APNS_URL": self.apns_server.url,
        }


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[Fakes]:
    fcm = FcmFake()
    fcm_server = FakeServer(fcm.handle).start_in_thread()
    credentials = Path(fcm.write_credentials(tmp_path / "service-account.json", fcm_server.url))
    key = ApnsKey.generate()
    apns = ApnsFake(keys=[key], topic=TOPIC)
    apns_server = FakeServer(apns.app).start_in_thread()
    key_file = key.write(tmp_path / f"AuthKey_{key.key_id}.p8")
    try:
        yield Fakes(fcm, fcm_server, credentials, apns, apns_server, key, key_file)
    finally:
        fcm_server.stop_thread()
        apns_server.stop_thread()


@pytest.fixture
def auto(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., LoggedProcess]]:
    """Start delivery worker processes (logs in files); each is stopped after the test."""
    started: list[LoggedProcess] = []

    def start(db_url: str, env: dict[str, str], *args: str) -> LoggedProcess:
        argv = tockwork_argv(
            db_url, "worker", "--app", "scheduler.delivery:app", "--poll", "0.1",
            "--name", f"w{len(started)}-{{gen}}", *args,
        )  # fmt: skip
        proc = LoggedProcess(f"worker{len(started)}", argv, tmp_path, env=env)
        proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.alive():
            proc.terminate()


def devices(conn: psycopg.Connection[Any], rows: list[tuple[str, str, str]]) -> None:
    """Register (subject, channel, token) devices, in one transaction."""
    with conn.transaction():
        for subject, channel, token in rows:
            add_device(conn, subject, channel, token, platform=channel)


def enqueue(conn: psycopg.Connection[Any], subjects: list[str], **payload: Any) -> None:
    jobs.enqueue_many(
        conn,
        [
            jobs.JobSpec("reminder", {"subject": s, "title": "Hi {subject}", **payload})
            for s in subjects
        ],
    )


def statuses(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute("SELECT status, count(*) FROM jobs_all GROUP BY 1").fetchall())


def settle(
    conn: psycopg.Connection[Any], proc: LoggedProcess, n: int, timeout: float = 60.0
) -> dict[str, int]:
    """Wait until the ``n`` jobs have all ended (succeeded, dead or cancelled); their
    statuses. Fails early, with its logs, if the worker exits."""
    deadline = time.monotonic() + timeout
    while True:
        counts = statuses(conn)
        if sum(counts.get(s, 0) for s in ("succeeded", "dead", "cancelled")) >= n:
            return counts
        assert proc.alive(), proc.tail()
        assert time.monotonic() < deadline, f"jobs not done in {timeout}s: {counts}"
        time.sleep(0.05)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def fcm_counts(fcm: FcmFake) -> dict[tuple[str, str | None], int]:
    return dict(fcm.counts)


def effects_recorded(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM job_effects WHERE effect_key LIKE 'push:%'").fetchone()
    assert row is not None
    return int(row[0])


def failed_attempts(conn: psycopg.Connection[Any]) -> dict[tuple[str, str | None], int]:
    rows = conn.execute(
        "SELECT outcome, error_code, count(*) FROM job_attempts WHERE outcome <> 'succeeded'"
        " GROUP BY 1, 2"
    ).fetchall()
    return {(o, c): n for o, c, n in rows}


# -- 1. a 503 storm with Retry-After ---------------------------------------------------------


def storm_run(
    db_url: str,
    auto: psycopg.Connection[Any],
    fakes: Fakes,
    workers: Callable[..., LoggedProcess],
    *,
    n: int,
    seconds: float,
) -> dict[str, Any]:
    """``n`` reminders, one FCM device each, through a 503 storm (Retry-After: 1) of
    ``seconds`` on the send path (the token endpoint keeps answering)."""
    subjects = [f"u{i}" for i in range(n)]
    devices(auto, [(s, "fcm", fcm_token(i)) for i, s in enumerate(subjects)])
    enqueue(auto, subjects)
    fakes.fcm_server.faults.storm(503, retry_after=1, seconds=seconds, path_prefix="/v1/")
    started = time.monotonic()
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    counts = settle(auto, proc, n, timeout=seconds + 60)
    elapsed = time.monotonic() - started
    assert counts == {"succeeded": n}, failed_attempts(auto)
    got = fcm_counts(fakes.fcm)
    # Nothing lost, nothing doubled: each device once, with its job's key.
    assert len(got) == n and set(got.values()) == {1}
    assert {token for token, _ in got} == {fcm_token(i) for i in range(n)}
    assert effects_recorded(auto) == n
    storm = fakes.fcm_server.counters["storm_responses"]
    assert storm >= n  # every job met the storm at least once
    assert proc.terminate() == 0, proc.tail()
    assert not tracebacks(proc.logs)
    return {"elapsed": elapsed, "storm_503": storm, "retries": failed_attempts(auto)}


def test_every_reminder_is_delivered_once_through_a_5_second_503_storm(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    figures = storm_run(db_url, auto, fakes, workers, n=200, seconds=5)
    print(f"storm 5 s: {figures}")


@pytest.mark.slow
def test_every_reminder_is_delivered_once_through_a_30_second_503_storm(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    figures = storm_run(db_url, auto, fakes, workers, n=400, seconds=30)
    print(f"storm 30 s: {figures}")
    assert figures["elapsed"] >= 30


def test_a_retry_after_shorter_than_the_backoff_does_not_shorten_it(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """What makes the 30 s storm pass (the fast form of it): a transient answer's Retry-After
    is a floor under the handler's backoff, so the retries of a long storm spread out."""
    from tests.integration.scheduler.test_delivery import (
        SAT_0800,
        FakeResolver,
        ScriptedChannel,
        claim,
        create,
    )
    from tests.integration.scheduler.test_reminders_batch import RecordingBatch

    create(conn, "ada")
    (job,) = claim(conn, db_url)
    one_second = (PushStatus.TRANSIENT, "http_503", timedelta(seconds=1))
    channel = ScriptedChannel(script={"tok": [one_second] * 10})
    policy = jobs.RetryPolicy(base=timedelta(seconds=2), jitter=0)
    handler = DeliveryHandler(
        db_url, [channel], resolver=FakeResolver({"ada": [Device("fake", "tok")]}),
        clock=FrozenClock(SAT_0800), backoff=policy,
    )  # fmt: skip
    try:
        delays = []
        for attempt in (1, 2, 6):
            batch = RecordingBatch([dataclasses.replace(job, attempt=attempt)])
            asyncio.run(handler(batch))
            delays.append(batch.outcome(batch.jobs[0]))
    finally:
        asyncio.run(handler.aclose())
    seconds = [timedelta(seconds=s) for s in (2, 4, 64)]
    assert delays == [("retry", "http_503", d) for d in seconds]


def test_a_long_run_of_429s_does_not_use_up_a_job_s_attempts(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    """The FCM fake answers 429 (Retry-After: 1) to every send until it has answered more
    429s than the jobs have attempts: a rate-limited answer is the provider's pace, not a
    failure (``RetryPolicy.rate_limited_for``), so every job still succeeds, once."""
    n, max_attempts = 3, 2
    subjects = [f"u{i}" for i in range(n)]
    devices(auto, [(s, "fcm", fcm_token(i)) for i, s in enumerate(subjects)])
    jobs.enqueue_many(
        auto,
        [jobs.JobSpec("reminder", {"subject": s}, max_attempts=max_attempts) for s in subjects],
    )
    fakes.fcm_server.faults.storm(429, retry_after=1, path_prefix="/v1/")
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    # Each job meets at least max_attempts + 1 of them (they are answered to every send).
    wait_until(
        lambda: fakes.fcm_server.counters["storm_responses"] >= n * (max_attempts + 1),
        "a run of 429s longer than the jobs' attempts",
        timeout=60,
    )
    fakes.fcm_server.faults.clear()
    counts = settle(auto, proc, n)
    assert counts == {"succeeded": n}, failed_attempts(auto)
    per_job = auto.execute(
        "SELECT job_id, count(*) FROM job_attempts WHERE outcome = 'rate_limited' GROUP BY 1"
    ).fetchall()
    assert max(k for _, k in per_job) > max_attempts  # more 429s than attempts, none fatal
    assert set(fcm_counts(fakes.fcm).values()) == {1} and len(fcm_counts(fakes.fcm)) == n
    rows = auto.execute("SELECT attempts FROM jobs_all").fetchall()
    assert {a for (a,) in rows} == {1}  # the 429s used no attempt: the success used one
    assert proc.terminate() == 0, proc.tail()


# -- 2. a worker SIGKILLed mid-batch ---------------------------------------------------------


def test_a_worker_killed_mid_batch_loses_nothing_and_doubles_only_the_unrecorded(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    n = 300
    subjects = [f"u{i}" for i in range(n)]
    # FCM only: the kill is about what was in flight, one provider is enough.
    devices(auto, [(s, "fcm", fcm_token(i)) for i, s in enumerate(subjects)])
    enqueue(auto, subjects)
    fakes.fcm_server.faults.latency = 1.0
    first = workers(db_url, fakes.env(db_url), "--queue", "default=16", "--lease", "2")
    # Killed while requests are at the fake, before most of their answers have come back.
    wait_until(lambda: fakes.fcm_server.counters["requests_http2"] >= 40, "requests at the fake")
    assert first.kill() == -9
    recorded_at_kill = effects_recorded(auto)
    # Sends that reached the fake (the token grant aside) and were not recorded: in flight.
    arrived = fakes.fcm_server.counters["requests_http2"] - fakes.fcm.token_requests
    in_flight = arrived - recorded_at_kill
    assert in_flight > 0 and recorded_at_kill < n  # killed mid-batch
    fakes.fcm_server.faults.latency = 0.0
    # A new worker takes the jobs over once their 2 s leases expire (its reaper).
    second = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    counts = settle(auto, second, n, timeout=90)
    assert counts == {"succeeded": n}, failed_attempts(auto)
    got = fcm_counts(fakes.fcm)
    wanted = {fcm_token(i) for i in range(n)}
    assert {token for token, _ in got} == wanted  # nothing lost
    assert len(got) == n  # one key per device: the retry kept the job's key
    doubled = sum(c - 1 for c in got.values())
    # At least once: only a message answered to the killed worker (or after its death) and
    # not recorded can be sent again, so at most those in flight at the kill.
    assert doubled <= in_flight
    assert effects_recorded(auto) == n
    lease_expired = failed_attempts(auto)
    assert lease_expired.get(("lease_expired", "lease_expired"), 0) >= 1  # taken over
    print(
        f"kill: in flight {in_flight}, recorded before the kill {recorded_at_kill}, "
        f"duplicates {doubled}, attempts {lease_expired}"
    )
    assert second.terminate() == 0, second.tail()


def test_a_second_worker_process_delivers_through_apns_at_once(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    """A restart (or a second replica) sends the provider token the first process signed:
    the processes of one key share it through the database (``apns_provider_tokens``), and
    the APNs fake, stricter than Apple's documented per-connection rule, answers a new token
    of one key within 20 minutes 429 TooManyProviderTokenUpdates."""
    devices(auto, [("ann", "apns", apns_token(1)), ("bob", "apns", apns_token(2))])
    enqueue(auto, ["ann"])
    first = workers(db_url, fakes.env(db_url), "--queue", "default=1")
    assert settle(auto, first, 1) == {"succeeded": 1}
    assert first.terminate() == 0, first.tail()
    # A restart (or a second replica): a new process, a new provider token of the same key.
    enqueue(auto, ["bob"])
    second = workers(db_url, fakes.env(db_url), "--queue", "default=1")
    wait_until(lambda: sum(failed_attempts(auto).values()) + statuses(auto)["succeeded"] >= 2,
               "the second job's first attempt")  # fmt: skip
    assert failed_attempts(auto) == {}, fakes.apns.reasons
    assert statuses(auto) == {"succeeded": 2}
    assert sum(fakes.apns.token_updates.values()) == 0  # one token for both processes
    assert second.terminate() == 0, second.tail()


# -- 3. GOAWAY with streams in flight --------------------------------------------------------


def test_a_goaway_with_streams_in_flight_through_the_worker_doubles_nothing(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    n = 300
    subjects = [f"u{i}" for i in range(n)]
    devices(
        auto,
        [(s, "fcm", fcm_token(i)) if i % 2 else (s, "apns", apns_token(i))
         for i, s in enumerate(subjects)],
    )  # fmt: skip
    enqueue(auto, subjects)
    # Each fake's connection processes 40 streams, then GOAWAY and refuses the rest in flight.
    for server in (fakes.fcm_server, fakes.apns_server):
        server.faults.goaway(40, times=2)
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    counts = settle(auto, proc, n)
    assert counts == {"succeeded": n}, failed_attempts(auto)
    for server in (fakes.fcm_server, fakes.apns_server):
        assert server.counters["goaways"] >= 1
        assert server.counters["streams_refused"] >= 1  # streams were in flight
    got = {**fcm_counts(fakes.fcm), **dict(fakes.apns.counts)}
    assert len(got) == n and set(got.values()) == {1}
    assert proc.terminate() == 0, proc.tail()


# -- 4. the OAuth token refreshed under load, and revoked mid-run -----------------------------


def test_access_tokens_refreshed_and_revoked_under_load_fail_no_job(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    n = 400
    # Access tokens live 4 s: the channel replaces one after half its life (2 s).
    fakes.fcm.access_token_ttl = 4
    subjects = [f"u{i}" for i in range(n)]
    devices(auto, [(s, "fcm", fcm_token(i)) for i, s in enumerate(subjects)])
    # Due over 6 s (in the database's time): the worker sends batch after batch meanwhile.
    row = auto.execute("SELECT now()").fetchone()
    assert row is not None
    start: datetime = row[0]
    jobs.enqueue_many(
        auto,
        [
            jobs.JobSpec("reminder", {"subject": s}, run_at=start + timedelta(milliseconds=15 * i))
            for i, s in enumerate(subjects)
        ],
    )
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    wait_until(lambda: len(fakes.fcm.received) >= n // 2, "half the reminders", timeout=60)
    fakes.fcm.revoke_access_tokens()
    counts = settle(auto, proc, n)
    assert counts == {"succeeded": n}, failed_attempts(auto)
    assert fakes.fcm.tokens_issued > 1
    # No 401 became a job's outcome: not a retry, not a death.
    assert not [k for k in failed_attempts(auto) if k[1] and "UNAUTH" in k[1].upper()]
    got = fcm_counts(fakes.fcm)
    assert len(got) == n and set(got.values()) == {1}
    print(
        f"tokens: issued {fakes.fcm.tokens_issued}, 401 answered {fakes.fcm.unauthorized}, "
        f"failed attempts {failed_attempts(auto)}"
    )
    assert proc.terminate() == 0, proc.tail()


# -- 5. and 6. dead tokens ------------------------------------------------------------------


def invalidated_facts(conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    rows = conn.execute(
        "SELECT payload->>'subject', payload->>'channel' FROM outbox_events"
        " WHERE event_type = 'device.invalidated' ORDER BY 1, 2"
    ).fetchall()
    return [(s, c) for s, c in rows]


def test_dead_tokens_are_invalidated_once_and_never_sent_to_again(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    live = [f"u{i}" for i in range(20)]
    devices(
        auto,
        [(s, "fcm", fcm_token(i)) if i % 2 else (s, "apns", apns_token(i))
         for i, s in enumerate(live)]
        + [("dead-fcm", "fcm", fcm_token(900)), ("dead-apns", "apns", apns_token(901))],
    )  # fmt: skip
    fakes.fcm.unregistered = {fcm_token(900)}
    fakes.apns.unregister(apns_token(901))
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4")
    enqueue(auto, [*live, "dead-fcm", "dead-apns"])
    assert settle(auto, proc, 22) == {"succeeded": 22}, failed_attempts(auto)
    assert invalidated_facts(auto) == [("dead-apns", "apns"), ("dead-fcm", "fcm")]
    rows = auto.execute(
        "SELECT subject, invalid_reason IS NOT NULL FROM devices"
        " WHERE invalidated_at IS NOT NULL ORDER BY 1"
    ).fetchall()
    assert rows == [("dead-apns", True), ("dead-fcm", True)]
    assert fakes.fcm.errors["UNREGISTERED"] == 1
    assert fakes.apns.reasons["Unregistered"] == 1
    # A second reminder to each subject: the dead tokens are not asked again.
    enqueue(auto, [*live, "dead-fcm", "dead-apns"], body="again")
    assert settle(auto, proc, 44) == {"succeeded": 44}, failed_attempts(auto)
    assert fakes.fcm.errors["UNREGISTERED"] == 1
    assert fakes.apns.reasons["Unregistered"] == 1
    assert not [c for c in fakes.fcm.counts if c[0] == fcm_token(900)]
    assert not [c for c in fakes.apns.counts if c[0] == apns_token(901)]
    assert len(invalidated_facts(auto)) == 2
    got = {**fcm_counts(fakes.fcm), **dict(fakes.apns.counts)}
    assert len(got) == 40 and set(got.values()) == {1}  # the live ones, twice each, once a key
    assert proc.terminate() == 0, proc.tail()


def test_a_subject_with_three_devices_one_dead(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    devices(
        auto,
        [("ann", "fcm", fcm_token(1)), ("ann", "apns", apns_token(2)),
         ("ann", "fcm", fcm_token(3))],
    )  # fmt: skip
    fakes.fcm.unregistered = {fcm_token(3)}
    enqueue(auto, ["ann"])
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=1")
    assert settle(auto, proc, 1) == {"succeeded": 1}, failed_attempts(auto)
    assert [t for t, _ in fakes.fcm.counts] == [fcm_token(1)]
    assert [t for t, _ in fakes.apns.counts] == [apns_token(2)]
    assert set(fakes.fcm.counts.values()) == set(fakes.apns.counts.values()) == {1}
    assert invalidated_facts(auto) == [("ann", "fcm")]
    rows = auto.execute(
        "SELECT channel, right(token, 6), invalidated_at IS NOT NULL FROM devices ORDER BY id"
    ).fetchall()
    assert rows == [
        ("fcm", fcm_token(1)[-6:], False),
        ("apns", apns_token(2)[-6:], False),
        ("fcm", fcm_token(3)[-6:], True),
    ]
    assert failed_attempts(auto) == {}  # succeeded at its first attempt
    assert proc.terminate() == 0, proc.tail()


# -- 7. no secret in the worker's output ----------------------------------------------------


def pem_body(pem: str) -> list[str]:
    """The base64 lines of a PEM block (not its BEGIN/END lines)."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----")]


def test_no_secret_reaches_the_worker_s_debug_output(
    db_url: str, auto: psycopg.Connection[Any], fakes: Fakes, workers: Any
) -> None:
    n = 60
    subjects = [f"u{i}" for i in range(n)]
    tokens = [fcm_token(i) if i % 2 else apns_token(i) for i in range(n)]
    devices(
        auto,
        [(s, "fcm" if i % 2 else "apns", tokens[i]) for i, s in enumerate(subjects)],
    )
    # Errors of every kind on the way: dead tokens, a bad one, a storm, a revoked bearer.
    fakes.fcm.unregistered = {fcm_token(1)}
    fakes.fcm.internal = {fcm_token(3)}  # 500: retried until the test clears it
    fakes.apns.unregister(apns_token(0))
    fakes.apns.bad_tokens = {apns_token(2)}
    proc = workers(db_url, fakes.env(db_url), "--queue", "default=4", "--log-level", "debug")
    assert proc.wait_started()
    fakes.fcm_server.faults.storm(503, retry_after=1, seconds=1, path_prefix="/v1/")
    enqueue(auto, subjects)
    wait_until(lambda: fakes.fcm.errors["INTERNAL"] >= 1, "a 500")
    fakes.fcm.revoke_access_tokens()
    fakes.fcm.internal = set()
    counts = settle(auto, proc, n)
    assert counts == {"succeeded": n}, failed_attempts(auto)
    assert proc.terminate() == 0, proc.tail()
    assert fakes.fcm_server.counters["storm_responses"] >= 1
    output = "".join(Path(p).read_text(errors="replace") for p in proc.logs)
    # The run logged something about its errors (a test of silence would prove nothing).
    assert "DEBUG" in output or "debug" in output, output[-2000:]
    service_account = json.loads(fakes.credentials.read_text())
    secrets = {
        **{f"service account key line {i}": line
           for i, line in enumerate(pem_body(service_account["private_key"]))},
        **{f".p8 line {i}": line
           for i, line in enumerate(pem_body(fakes.key_file.read_text()))},
        **{f"provider token {i}": t for i, t in enumerate(fakes.apns.provider_tokens())},
        **{f"device token {i}": t for i, t in enumerate(tokens)},
        "private_key_id": service_account["private_key_id"],
    }  # fmt: skip
    assert fakes.apns.provider_tokens()  # the APNs JWTs to look for
    found = sorted(name for name, value in secrets.items() if value in output)
    assert found == []
    # Bearer access tokens ('ya29.' at Google and at the fake) and any JWT ('eyJ' is the
    # base64 of its '{"'): none anywhere.
    assert not re.search(r"ya29\.|[Bb]earer [A-Za-z0-9]|eyJ[A-Za-z0-9_-]{10,}", output)
    assert fakes.fcm.tokens_issued >= 2  # a revoked token was replaced: one was in play


# -- 8. tockwork dev fake-push as a process ---------------------------------------------------


def test_dev_fake_push_exports_drive_a_worker_to_both_fakes(
    db_url: str, auto: psycopg.Connection[Any], tmp_path: Path, workers: Any
) -> None:
    fake = subprocess.Popen(
        [sys.executable, "-m", "scheduler.cli", "dev", "fake-push", "--dir", str(tmp_path / "f")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        env: dict[str, str] = {}
        for line in fake.stdout:
            if line.startswith("serving until"):
                break
            if match := re.match(r"\s*export (TOCKWORK_[A-Z_]+)=(.*)$", line):
                env[match.group(1)] = match.group(2)
        assert set(env) == {
            "TOCKWORK_FCM_CREDENTIALS", "TOCKWORK_FCM_URL", "TOCKWORK_APNS_KEY_FILE",
            "TOCKWORK_APNS_KEY_ID", "TOCKWORK_APNS_TEAM_ID", "TOCKWORK_APNS_TOPIC",
            "TOCKWORK_APNS_URL",
        }  # fmt: skip
        devices(auto, [("ann", "fcm", fcm_token(1)), ("ann", "apns", apns_token(1))])
        enqueue(auto, ["ann"])
        proc = workers(db_url, {**env, "DATABASE_URL": db_url}, "--queue", "default=1")
        assert settle(auto, proc, 1) == {"succeeded": 1}, failed_attempts(auto)
        assert effects_recorded(auto) == 2
        assert proc.terminate() == 0, proc.tail()
        fake.send_signal(signal.SIGTERM)
        out, err = fake.communicate(timeout=30)
    finally:
        if fake.poll() is None:
            fake.kill()
            fake.communicate()
    assert fake.returncode == 0, err
    summaries = {
        name: json.loads(rest)
        for name, _, rest in (line.partition(": ") for line in out.splitlines())
        if name in ("fcm", "apns")
    }
    assert summaries["fcm"]["delivered"] == 1 and summaries["fcm"]["duplicates"] == 0
    assert summaries["apns"]["delivered"] == 1 and summaries["apns"]["duplicates"] == 0
    assert "Traceback" not in err
