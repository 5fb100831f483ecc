"""Webhooks end to end against real local receivers (real sockets): outbox fact -> relay fan-out
-> ``webhook.deliver`` jobs -> a worker with :class:`WebhookHandler` -> an HTTP receiver.

The receiver is the fakes' :class:`FakeServer` (HTTP/1.1 over a loopback socket) with one
behaviour per path; it verifies every request's signature with the Standard Webhooks reference
library (``standardwebhooks``), never with our code. The worker's clock is frozen so that a
retry comes due when the test advances it (no sleeping); the signatures carry the real time
(the reference library checks them against its own clock).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

import jobs
from jobs.outbox import record
from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer
from scheduler.webhooks import (
    Fanout,
    WebhookHandler,
    add_endpoint,
    enable_endpoint,
    get_endpoint,
    recent_attempts,
    redeliver_event,
    redeliver_failed,
    rotate_secret,
)
from scheduler.webhooks.ssrf import Guard, networks
from timezones import FrozenClock

# The frozen clocks start a minute ahead of the real one: the facts (recorded at the database's
# time) are then due for the relay, and the jobs (enqueued at the frozen time) for the worker.
AHEAD = timedelta(minutes=1)
ORG = uuid.UUID("0193a8e4-0000-7000-8000-000000000001")
LOCAL = Guard(allow=networks(["127.0.0.1/32"]))
FAST_BACKOFF = jobs.RetryPolicy(
    base=timedelta(milliseconds=100), cap=timedelta(seconds=1), jitter=0
)


@dataclass
class Receiver:
    """Answers by path; records each request (path, headers, body) in arrival order."""

    requests: list[FakeRequest] = field(default_factory=list)
    answers: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    hang: float = 5.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, path: str, *answers: tuple[int, dict[str, str]]) -> None:
        """The answers of ``path``, in order; the last one repeats."""
        self.answers[path] = list(answers)

    async def __call__(self, request: FakeRequest) -> FakeResponse:
        with self.lock:
            self.requests.append(request)
        if request.path.startswith("/hang"):
            await asyncio.sleep(self.hang)
        script = self.answers.get(request.path, [(200, {})])
        status, headers = script.pop(0) if len(script) > 1 else script[0]
        return FakeResponse(
            status, list(headers.items()), b'{"ok": true}' * (1 if status < 300 else 5000)
        )

    def to(self, path: str) -> list[FakeRequest]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, FakeServer]]:
    app = Receiver()
    server = FakeServer(app).start_in_thread()
    try:
        yield app, server
    finally:
        server.stop_thread()


@dataclass
class Pipeline:
    db_url: str
    clock: FrozenClock
    handler: WebhookHandler
    fanout: Fanout
    types: tuple[str, ...] = ("order.paid", "order.refunded", "endpoint.disabled")

    def fact(
        self, event_type: str = "order.paid", data: Any = None, org: uuid.UUID | None = ORG
    ) -> uuid.UUID:
        with psycopg.connect(self.db_url) as conn:
            event_id = record(
                conn,
                aggregate_type="order",
                aggregate_id=str(uuid.uuid4()),
                event_type=event_type,
                payload=data if data is not None else {"amount": 12},
                organization_id=org,
            )
        return event_id

    def relay(self) -> jobs.Relay:
        return jobs.Relay(
            self.db_url,
            [jobs.outbox.Projection("webhooks", frozenset(self.types), self.fanout)],
            listen=False,
            clock=self.clock,
        )

    def run(self) -> None:
        """Project every pending fact, then run every delivery that is due."""
        self.relay().run_until_idle()
        jobs.Worker(
            self.db_url,
            {"webhook.deliver": self.handler},
            {"webhooks": 8},
            clock=self.clock,
            listen=False,
        ).run_until_idle()

    def job(self, job_id: int) -> jobs.JobRecord:
        with psycopg.connect(self.db_url) as conn:
            return jobs.get_job(conn, job_id)

    def jobs_of(self, event_id: uuid.UUID) -> list[jobs.JobRecord]:
        with psycopg.connect(self.db_url) as conn:
            rows = conn.execute(
                "SELECT id FROM jobs_all WHERE idempotency_key LIKE %s ORDER BY id",
                (f"webhook:{event_id}:%",),
            ).fetchall()
            return [jobs.get_job(conn, r[0]) for r in rows]


@pytest.fixture
def pipeline(db_url: str) -> Iterator[Pipeline]:
    clock = FrozenClock(datetime.now(UTC) + AHEAD)
    handler = WebhookHandler(db_url, guard=LOCAL, backoff=FAST_BACKOFF, timeout=1.0)
    fanout = Fanout(db_url, refresh=timedelta(0))
    try:
        yield Pipeline(db_url, clock, handler, fanout)
    finally:
        fanout.close()
        asyncio.run(handler.aclose())


def endpoint(db_url: str, server: FakeServer, path: str, **kwargs: Any) -> tuple[int, str]:
    with psycopg.connect(db_url) as conn:
        created = add_endpoint(conn, server.url + path, organization_id=ORG, guard=LOCAL, **kwargs)
    return created.endpoint.id, created.secret


def verify(secret: str, request: FakeRequest) -> Any:
    """The reference library's verdict on one received request."""
    return Webhook(secret).verify(request.body, dict(request.headers))


def test_signed_requests_verify_with_the_reference_library_through_a_rotation(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer], caplog: pytest.LogCaptureFixture
) -> None:
    app, server = receiver
    endpoint_id, old = endpoint(pipeline.db_url, server, "/ok")
    first = pipeline.fact(data={"amount": 12, "note": "héllo"})
    caplog.set_level(logging.DEBUG)
    pipeline.run()
    assert caplog.records and old not in caplog.text  # the secret is never logged
    [request] = app.to("/ok")
    body = verify(old, request)
    assert body["type"] == "order.paid" and body["data"] == {"amount": 12, "note": "héllo"}
    assert request.headers["webhook-id"] == str(first)
    assert request.headers["content-type"] == "application/json"

    # During the overlap both secrets sign: a receiver holding either accepts the request.
    with psycopg.connect(pipeline.db_url) as conn:
        new = rotate_secret(conn, endpoint_id, overlap=timedelta(hours=1)).secret
    pipeline.fact()
    pipeline.run()
    second = app.to("/ok")[1]
    assert len(second.headers["webhook-signature"].split(" ")) == 2
    verify(old, second)
    verify(new, second)

    # Overlap 0: the previous secrets stop at once; only the newest signs.
    with psycopg.connect(pipeline.db_url) as conn:
        newest = rotate_secret(conn, endpoint_id, overlap=timedelta(0)).secret
    pipeline.fact()
    pipeline.run()
    third = app.to("/ok")[2]
    verify(newest, third)
    for stale in (old, new):
        with pytest.raises(WebhookVerificationError):
            verify(stale, third)
    # A tampered body fails too (the check is not vacuous).
    with pytest.raises(WebhookVerificationError):
        Webhook(newest).verify(third.body + b" ", dict(third.headers))


def test_each_response_class(pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]) -> None:
    app, server = receiver
    app.script("/redirect", (302, {"location": server.url + "/ok"}))
    app.script("/e400", (400, {}))
    app.script("/e500", (500, {}))
    app.script("/limited", (429, {"retry-after": "120"}))
    app.script("/unavailable", (503, {"retry-after": "30"}))
    ids = {p: endpoint(pipeline.db_url, server, p)[0] for p in
           ("/ok", "/redirect", "/e400", "/e500", "/limited", "/unavailable")}  # fmt: skip
    event = pipeline.fact()
    pipeline.run()
    by_endpoint = {j.payload["endpoint_id"]: j for j in pipeline.jobs_of(event)}
    assert by_endpoint[ids["/ok"]].status == jobs.JobStatus.SUCCEEDED
    assert app.to("/ok") and len(app.to("/ok")) == 1  # the redirect was not followed
    for path, code in (("/redirect", "http_302"), ("/e400", "http_400"), ("/e500", "http_500"),
                       ("/limited", "http_429"), ("/unavailable", "http_503")):  # fmt: skip
        job = by_endpoint[ids[path]]
        assert (job.status, job.last_error_code) == (jobs.JobStatus.RETRYING, code), path
    now = pipeline.clock.now()
    # Retry-After is a floor: 120 s and 30 s, not the 0.1 s back-off.
    assert by_endpoint[ids["/limited"]].run_at >= now + timedelta(seconds=119)
    assert by_endpoint[ids["/unavailable"]].run_at >= now + timedelta(seconds=29)
    assert by_endpoint[ids["/e500"]].run_at < now + timedelta(seconds=5)
    with psycopg.connect(pipeline.db_url) as conn:
        [attempt] = recent_attempts(conn, ids["/e500"])
        endpoint_row = get_endpoint(conn, ids["/e500"])
    assert (attempt.outcome, attempt.status, attempt.event_id) == ("failed", 500, event)
    assert attempt.response is not None and len(attempt.response) <= 1000  # bounded summary
    assert attempt.duration_ms is not None and attempt.duration_ms >= 0
    assert endpoint_row is not None and endpoint_row.consecutive_failures == 1


def test_410_disables_once_sends_nothing_more_and_enable_replays(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    app.script("/gone", (410, {}), (200, {}))
    gone, _ = endpoint(pipeline.db_url, server, "/gone")
    first = pipeline.fact()
    pipeline.run()
    assert len(app.to("/gone")) == 1
    with psycopg.connect(pipeline.db_url) as conn:
        row = get_endpoint(conn, gone)
        facts = conn.execute(
            "SELECT payload FROM outbox_events WHERE event_type = 'endpoint.disabled'"
        ).fetchall()
    assert row is not None and not row.enabled and "410" in (row.disabled_reason or "")
    assert [f[0]["endpoint_id"] for f in facts] == [gone]
    [held] = pipeline.jobs_of(first)
    assert held.status == jobs.JobStatus.CANCELLED
    # Later facts: no delivery for the disabled endpoint, nothing sent.
    pipeline.fact()
    pipeline.fact()
    pipeline.run()
    assert len(app.to("/gone")) == 1
    # Enabled again: the held delivery is requeued and delivered (the receiver answers 200 now).
    with psycopg.connect(pipeline.db_url) as conn:
        enabled = enable_endpoint(conn, gone)
    assert enabled.requeued == [held.id]
    pipeline.run()
    assert len(app.to("/gone")) == 2
    assert pipeline.job(held.id).status == jobs.JobStatus.SUCCEEDED
    assert app.to("/gone")[1].headers["webhook-id"] == str(first)


def test_a_hanging_receiver_times_out_and_is_retried(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    app.hang = 3.0
    endpoint(pipeline.db_url, server, "/hang")
    event = pipeline.fact()
    pipeline.run()  # the handler's total timeout is 1 s
    [job] = pipeline.jobs_of(event)
    assert (job.status, job.last_error_code) == (jobs.JobStatus.RETRYING, "send")
    assert "timeout" in (job.last_error_summary or "")


def test_a_flapping_503_is_retried_after_its_retry_after(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    app.script("/flap", (503, {"retry-after": "2"}), (503, {"retry-after": "2"}), (200, {}))
    endpoint_id, secret = endpoint(pipeline.db_url, server, "/flap")
    event = pipeline.fact()
    pipeline.run()
    [job] = pipeline.jobs_of(event)
    assert job.status == jobs.JobStatus.RETRYING
    assert job.run_at >= pipeline.clock.now() + timedelta(seconds=2)
    pipeline.run()  # not due yet: nothing sent
    assert len(app.to("/flap")) == 1
    for expected in (2, 3):
        pipeline.clock.advance(timedelta(seconds=3))
        pipeline.run()
        assert len(app.to("/flap")) == expected
    assert pipeline.job(job.id).status == jobs.JobStatus.SUCCEEDED
    assert len({r.headers["webhook-id"] for r in app.to("/flap")}) == 1  # one id, three tries
    for request in app.to("/flap"):
        verify(secret, request)
    with psycopg.connect(pipeline.db_url) as conn:
        outcomes = [a.outcome for a in recent_attempts(conn, endpoint_id)]
        row = get_endpoint(conn, endpoint_id)
    assert outcomes == ["delivered", "failed", "failed"]
    assert row is not None and row.consecutive_failures == 0 and row.last_success_at is not None


def test_consecutive_failures_spanning_the_period_disable_and_deliveries_are_kept(
    db_url: str, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    app.script("/down", (500, {}))
    clock = FrozenClock(datetime.now(UTC) + AHEAD)
    handler = WebhookHandler(
        db_url, guard=LOCAL, clock=clock, backoff=FAST_BACKOFF, disable_after_failures=3,
        disable_after=timedelta(hours=1),
    )  # fmt: skip
    pipeline = Pipeline(db_url, clock, handler, Fanout(db_url, refresh=timedelta(0)))
    try:
        down, _ = endpoint(db_url, server, "/down")
        events = [pipeline.fact() for _ in range(3)]
        pipeline.run()  # three failures within a minute: not disabled (the period is 1 h)
        for _ in range(2):
            clock.advance(timedelta(seconds=2))
            pipeline.run()
        with psycopg.connect(db_url) as conn:
            row = get_endpoint(conn, down)
        assert row is not None and row.enabled and row.consecutive_failures == 9
        clock.advance(timedelta(hours=2))
        pipeline.run()
        with psycopg.connect(db_url) as conn:
            row = get_endpoint(conn, down)
            [fact] = conn.execute(
                "SELECT payload FROM outbox_events WHERE event_type = 'endpoint.disabled'"
            ).fetchall()
        assert row is not None and not row.enabled
        assert "consecutive failed deliveries" in (row.disabled_reason or "")
        assert fact[0]["endpoint_id"] == down and fact[0]["host"] == "127.0.0.1"
        sent = len(app.to("/down"))
        # The pending deliveries are kept, held (not sent, not dropped), while it is disabled.
        clock.advance(timedelta(minutes=5))
        pipeline.run()
        assert len(app.to("/down")) == sent
        statuses = {j.status for e in events for j in pipeline.jobs_of(e)}
        assert statuses == {jobs.JobStatus.CANCELLED}
        app.script("/down", (200, {}))
        with psycopg.connect(db_url) as conn:
            assert len(enable_endpoint(conn, down, now=clock.now()).requeued) == 3
        pipeline.run()
        assert {j.status for e in events for j in pipeline.jobs_of(e)} == {jobs.JobStatus.SUCCEEDED}
    finally:
        pipeline.fanout.close()
        asyncio.run(handler.aclose())


def test_filters_and_organizations_choose_the_endpoints(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    endpoint(pipeline.db_url, server, "/paid", event_types=["order.paid"])
    endpoint(pipeline.db_url, server, "/orders", event_types=["order.*"])
    endpoint(pipeline.db_url, server, "/all")
    with psycopg.connect(pipeline.db_url) as conn:
        add_endpoint(conn, server.url + "/other", organization_id=uuid.uuid4(), guard=LOCAL)
    pipeline.fact("order.paid")
    pipeline.fact("order.refunded")
    pipeline.fact("order.paid", org=None)
    pipeline.run()
    assert (len(app.to("/paid")), len(app.to("/orders")), len(app.to("/all"))) == (1, 2, 2)
    assert app.to("/other") == []


def test_redeliver_an_event_and_the_failed_deliveries_since(
    pipeline: Pipeline, receiver: tuple[Receiver, FakeServer]
) -> None:
    app, server = receiver
    ok, _ = endpoint(pipeline.db_url, server, "/ok")
    bad, _ = endpoint(pipeline.db_url, server, "/bad", event_types=["order.refunded"])
    app.script("/bad", (400, {}), (200, {}))
    event = pipeline.fact()
    pipeline.run()
    with psycopg.connect(pipeline.db_url) as conn:
        assert len(redeliver_event(conn, event, endpoint_id=ok)) == 1
    pipeline.run()
    assert [r.headers["webhook-id"] for r in app.to("/ok")] == [str(event)] * 2
    # A delivery that died (one attempt allowed) is requeued by redeliver --since.
    start = datetime.now(UTC) - timedelta(minutes=1)
    pipeline.fanout.max_attempts = 1
    refund = pipeline.fact("order.refunded")
    pipeline.run()
    dead = [j for j in pipeline.jobs_of(refund) if j.payload["endpoint_id"] == bad]
    assert [j.status for j in dead] == [jobs.JobStatus.DEAD]
    with psycopg.connect(pipeline.db_url) as conn:
        assert redeliver_failed(conn, bad, since=start) == [dead[0].id]
    pipeline.run()
    assert pipeline.job(dead[0].id).status == jobs.JobStatus.SUCCEEDED


def test_a_relay_crash_mid_fan_out_doubles_and_loses_nothing(
    db_url: str, receiver: tuple[Receiver, FakeServer]
) -> None:
    _, server = receiver
    for i in range(3):
        endpoint(db_url, server, f"/e{i}")
    clock = FrozenClock(datetime.now(UTC) + AHEAD)
    events = []
    with psycopg.connect(db_url) as conn:
        for i in range(10):
            event_id = record(
                conn, aggregate_type="order", aggregate_id=str(i), event_type="order.paid",
                payload={"i": i}, organization_id=ORG,
            )  # fmt: skip
            events.append(event_id)
    fanout = Fanout(db_url, refresh=timedelta(0))
    built: list[uuid.UUID] = []

    class Crash(BaseException):
        pass

    def crashing(event: jobs.outbox.Event) -> list[jobs.JobSpec]:
        built.append(event.id)
        if len(built) == 5:
            raise Crash  # the process dies half-way through building a batch
        return fanout(event)

    project = jobs.outbox.Projection("webhooks", frozenset({"order.paid"}), crashing)
    with pytest.raises(Crash):
        jobs.Relay(
            db_url, [project], listen=False, clock=clock, lease=timedelta(seconds=5)
        ).run_until_idle()
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM jobs_all").fetchone() == (0,)
    # Another relay takes the claims over once the lease has expired, and a third replays.
    clock.advance(timedelta(seconds=10))
    real = jobs.outbox.Projection("webhooks", frozenset({"order.paid"}), fanout)
    jobs.Relay(db_url, [real], listen=False, clock=clock).run_until_idle()
    again = [
        fanout(jobs.outbox.Event(e, ORG, "order", "x", "order.paid", 1, {}, clock.now()))
        for e in events
    ]
    with psycopg.connect(db_url) as conn:
        jobs.enqueue_many(conn, [spec for specs in again for spec in specs])
        rows = conn.execute("SELECT idempotency_key, count(*) FROM jobs_all GROUP BY 1").fetchall()
    fanout.close()
    assert len(rows) == 30 and all(count == 1 for _, count in rows)
    assert {key.split(":")[1] for key, _ in rows} == {str(e) for e in events}


def test_a_stuck_endpoint_takes_only_its_own_slots(db_url: str) -> None:
    """The ``webhooks`` queue runs 4 deliveries at once, and the per-endpoint limit is 2: with
    one endpoint that answers nothing until the test says so, every delivery to the other
    endpoint arrives meanwhile. Without the per-key limit, the stuck endpoint's 10 jobs would
    take all 4 slots and nothing else would arrive (the wait below would run out)."""
    release = threading.Event()
    lock = threading.Lock()
    arrived: list[str] = []

    async def app(request: FakeRequest) -> FakeResponse:
        with lock:
            arrived.append(request.path)
        if request.path == "/stuck":
            await asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return FakeResponse(204)

    server = FakeServer(app).start_in_thread()
    handler = WebhookHandler(db_url, guard=LOCAL, timeout=60.0)
    fanout = Fanout(db_url, refresh=timedelta(0))
    worker = jobs.Worker(db_url, {"webhook.deliver": handler}, {"webhooks": 4}, listen=False,
                         poll_interval=timedelta(milliseconds=50))  # fmt: skip
    try:
        with psycopg.connect(db_url) as conn:
            jobs.set_queue_policy(conn, "webhooks", concurrency_per_key=2)
            stuck = add_endpoint(conn, server.url + "/stuck", organization_id=ORG, guard=LOCAL,
                                 event_types=["order.paid"])  # fmt: skip
            fast = add_endpoint(conn, server.url + "/fast", organization_id=ORG, guard=LOCAL,
                                event_types=["order.refunded"])  # fmt: skip
            for i in range(10):
                record(conn, aggregate_type="order", aggregate_id=f"s{i}",
                       event_type="order.paid", payload={}, organization_id=ORG)  # fmt: skip
            for i in range(20):
                record(conn, aggregate_type="order", aggregate_id=f"f{i}",
                       event_type="order.refunded", payload={}, organization_id=ORG)  # fmt: skip
        project = jobs.outbox.Projection("webhooks", frozenset({"order.paid", "order.refunded"}),
                                         fanout)  # fmt: skip
        jobs.Relay(db_url, [project], listen=False).run_until_idle()
        worker.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if arrived.count("/fast") == 20:
                    break
            time.sleep(0.02)
        with lock:
            assert arrived.count("/fast") == 20
            assert 1 <= arrived.count("/stuck") <= 2  # at most the per-key limit in flight
        assert fast.endpoint.id != stuck.endpoint.id
    finally:
        release.set()
        worker.stop()
        worker.wait(60)
        server.stop_thread()
        fanout.close()
