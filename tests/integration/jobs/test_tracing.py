"""OpenTelemetry traces (jobs/tracing.py), read from the SDK's in-memory exporter.

Invariants: an enqueue inside a recording span stores that span's W3C context on the job, on
every path (one INSERT, both COPY formats, the keyed INSERT fallback, sync and async); each
attempt's execution span is the root of its own trace and links to that context, so a retried
job's spans all link to the one request; no payload, idempotency key or organization id is an
attribute value unless asked for; the tick and the relay have one span per round with its
counts, and the jobs they enqueue carry it; tracing off (disabled, or no API at all) writes NULL
and makes no span.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, StatusCode, Tracer

import jobs
import scheduler
from jobs import (
    Batch,
    Job,
    JobSpec,
    RetryPolicies,
    RetryPolicy,
    Worker,
    batch_handler,
    outbox,
    tracing,
)
from jobs.outbox import Projection, Projections
from jobs.relay import Relay
from scheduler import Scheduler
from timezones.clock import FrozenClock

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)
ORG = UUID("00000000-0000-0000-0000-00000000abcd")
SECRET = "s3cr3t-payload-value"
KEY = "key-that-names-user-77"
POLICY = RetryPolicies(default=RetryPolicy(base=timedelta(seconds=10), jitter=0.0))


@dataclass
class Traces:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    @property
    def app(self) -> Tracer:
        """The application's tracer: its spans are the "requests" that enqueue."""
        return self.provider.get_tracer("the-app")

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.fixture
def traces() -> Iterator[Traces]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(tracer_provider=provider)
    try:
        yield Traces(provider, exporter)
    finally:
        tracing.configure()
        provider.shutdown()


def traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def stored(conn: psycopg.Connection[Any], ids: list[int]) -> list[str | None]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT trace_parent FROM jobs_all WHERE id = ANY(%s) ORDER BY id", (ids,)
        ).fetchall()
    ]


def attr(item: ReadableSpan | Event | Link, name: str) -> Any:
    """An attribute of a span, an event or a link (which must have it)."""
    return (item.attributes or {})[name]


def linked(span: ReadableSpan) -> list[int]:
    return [link.context.span_id for link in span.links]


def all_values(span: ReadableSpan) -> str:
    """Every attribute value of a span, its links and its events, as one string."""
    values: list[Any] = list((span.attributes or {}).values())
    for link in span.links:
        values.extend((link.attributes or {}).values())
    for event in span.events:
        values.extend((event.attributes or {}).values())
    return json.dumps([v if isinstance(v, str | int | float) else list(v) for v in values])


def run_worker(
    db_url: str, handlers: dict[str, Any], clock: FrozenClock, queue: str = "default", **kw: Any
) -> None:
    worker = Worker(db_url, handlers, {queue: 2}, clock=clock, retry=POLICY, listen=False, **kw)
    worker.run_until_idle()


def test_the_execution_span_links_to_the_enqueue_and_is_current_in_the_handler(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    with traces.app.start_as_current_span("POST /orders") as request:
        job_id = jobs.enqueue(conn, "send_push", {}, queue="alerts", run_at=T0, now=T0).id
    conn.commit()
    request_ctx = request.get_span_context()
    assert stored(conn, [job_id]) == [traceparent(request_ctx)]

    def handler(_job: Job) -> None:
        with traces.app.start_as_current_span("provider call"):
            pass

    run_worker(db_url, {"send_push": handler}, FrozenClock(T0 + timedelta(seconds=30)), "alerts")
    (span,) = traces.named("tockwork.job")
    assert span.name == "tockwork.job send_push"
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is None  # a trace of its own...
    assert span.context.trace_id != request_ctx.trace_id
    assert linked(span) == [request_ctx.span_id]  # ...linked to the request
    assert span.links[0].context.trace_id == request_ctx.trace_id
    attributes = dict(span.attributes or {})
    handler_duration = attributes.pop("tockwork.job.handler_duration")
    assert isinstance(handler_duration, float) and handler_duration >= 0.0
    assert attributes == {
        "messaging.system": "tockwork",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "alerts",
        "messaging.message.id": str(job_id),
        "tockwork.job.type": "send_push",
        "tockwork.job.attempt": 1,
        "tockwork.job.max_attempts": 10,
        "tockwork.job.outcome": "succeeded",
        "tockwork.job.claim_wait": 30.0,
        "tockwork.worker": attributes["tockwork.worker"],
    }
    assert span.status.status_code is StatusCode.UNSET
    (child,) = traces.named("provider call")
    assert child.parent is not None and child.parent.span_id == span.context.span_id


def test_every_attempt_links_to_the_same_enqueue(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    with traces.app.start_as_current_span("POST /orders") as request:
        jobs.enqueue(conn, "flaky", {}, now=T0)
    conn.commit()
    attempts: list[int] = []

    def handler(job: Job) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise jobs.TransientError("provider 503", code="provider_503")

    clock = FrozenClock(T0)
    run_worker(db_url, {"flaky": handler}, clock)
    clock.advance(timedelta(seconds=10))
    run_worker(db_url, {"flaky": handler}, clock)
    assert attempts == [1, 2]
    first, second = traces.named("tockwork.job")
    assert linked(first) == linked(second) == [request.get_span_context().span_id]
    assert first.context.trace_id != second.context.trace_id
    assert [attr(s, "tockwork.job.attempt") for s in (first, second)] == [1, 2]
    assert attr(first, "tockwork.job.outcome") == "retry"
    assert attr(first, "tockwork.job.error_code") == "provider_503"
    assert first.status.status_code is StatusCode.ERROR
    (event,) = first.events
    assert event.name == "exception"
    assert attr(event, "exception.type") == "jobs.outcomes.TransientError"
    assert attr(second, "tockwork.job.outcome") == "succeeded"
    assert second.status.status_code is StatusCode.UNSET and not second.events
    # The claim wait of the retry counts from its new run_at, not from the first one.
    assert attr(second, "tockwork.job.claim_wait") == 0.0


def test_no_payload_key_or_organization_in_attributes_unless_asked(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    with traces.app.start_as_current_span("POST /orders"):
        jobs.enqueue(conn, "a", {"token": SECRET}, organization_id=ORG, idempotency_key=KEY, now=T0)
    conn.commit()
    run_worker(
        db_url,
        {"a": lambda _job: (_ for _ in ()).throw(jobs.PermanentError("no"))},
        FrozenClock(T0),
    )
    (span,) = traces.named("tockwork.job")
    assert attr(span, "tockwork.job.outcome") == "dead"
    assert span.status.status_code is StatusCode.ERROR
    text = all_values(span)
    for secret in (SECRET, KEY, str(ORG), ORG.hex):
        assert secret not in text

    tracing.configure(tracer_provider=traces.provider, organization_id=True)
    with traces.app.start_as_current_span("POST /orders"):
        jobs.enqueue(conn, "b", {"token": SECRET}, organization_id=ORG, now=T0)
    conn.commit()
    run_worker(db_url, {"b": lambda _job: None}, FrozenClock(T0))
    (opted,) = traces.named("tockwork.job b")
    assert attr(opted, "tockwork.organization_id") == str(ORG)
    assert SECRET not in all_values(opted)


# Specs that take each path of enqueue_many: the COPY of defaults, the binary COPY, the COPY of
# keys inside a savepoint, and the INSERT fallback (a key taken already).
PATHS: dict[str, list[JobSpec]] = {
    "copy_defaults": [JobSpec("t", {"i": i}) for i in range(3)],
    "copy_binary": [JobSpec("t", {"i": i}, priority=5) for i in range(3)],
    "copy_keys": [JobSpec("t", {"i": i}, idempotency_key=f"fresh-{i}") for i in range(3)],
    "insert_fallback": [JobSpec("t", {"i": i}, idempotency_key=f"taken-{i}") for i in range(3)],
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_every_enqueue_path_stores_the_context(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces, path: str, flavour: str
) -> None:
    taken = jobs.enqueue(conn, "t", {}, idempotency_key="taken-0").id  # before any span
    conn.commit()
    specs = PATHS[path]

    async def enqueue_async() -> list[int]:
        async with await psycopg.AsyncConnection.connect(db_url) as c, c.transaction():
            one = (await jobs.enqueue_async(c, "single", {})).id
            many = await jobs.enqueue_many_async(c, specs)
            return [one, *(e.id for e in many)]

    with traces.app.start_as_current_span("POST /batch") as request:
        if flavour == "sync":
            one = jobs.enqueue(conn, "single", {}).id
            ids = [one, *(e.id for e in jobs.enqueue_many(conn, specs))]
            conn.commit()
        else:
            ids = asyncio.run(enqueue_async())
    expected = traceparent(request.get_span_context())
    created = [i for i in ids if i != taken]
    assert len(created) == len(ids) - (path == "insert_fallback")
    assert stored(conn, created) == [expected] * len(created)
    assert stored(conn, [taken]) == [None]  # the holder of a taken key keeps its own (none)


def test_a_batch_span_links_to_each_job(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    requests = []
    for n in range(3):
        with traces.app.start_as_current_span(f"request {n}") as request:
            jobs.enqueue(conn, "push", {"n": n}, now=T0)
            requests.append(request.get_span_context().span_id)
    jobs.enqueue(conn, "push", {"n": 3}, now=T0)  # no span: no link
    conn.commit()

    @batch_handler
    def push(batch: Batch) -> None:
        for job in batch.jobs:
            if job.payload["n"] == 1:
                batch.retry(job, "provider 503")

    run_worker(db_url, {"push": push}, FrozenClock(T0), prefetch=8)  # one claim, one call
    (span,) = traces.named("tockwork.batch")
    assert span.name == "tockwork.batch push" and span.kind is SpanKind.CONSUMER
    assert sorted(linked(span)) == sorted(requests)
    assert attr(span, "messaging.batch.message_count") == 4
    outcomes = dict(
        zip(
            attr(span, "tockwork.job.ids"),
            attr(span, "tockwork.job.outcomes"),
            strict=True,
        )
    )
    by_n = {r[1]: r[0] for r in conn.execute("SELECT id, (payload->>'n')::int FROM jobs_all")}
    assert outcomes == {
        by_n[0]: "succeeded",
        by_n[1]: "retry",
        by_n[2]: "succeeded",
        by_n[3]: "succeeded",
    }
    assert {attr(link, "messaging.message.id") for link in span.links} == {
        str(by_n[n]) for n in range(3)
    }
    assert span.status.status_code is StatusCode.ERROR


def test_an_async_handler_runs_inside_its_span(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    with traces.app.start_as_current_span("POST /orders") as request:
        jobs.enqueue(conn, "coro", {}, now=T0)
    conn.commit()

    async def coro(_job: Job) -> None:
        await asyncio.sleep(0)
        with traces.app.start_as_current_span("inside"):
            pass

    run_worker(db_url, {"coro": coro}, FrozenClock(T0))
    (span,) = traces.named("tockwork.job coro")
    assert linked(span) == [request.get_span_context().span_id]
    (inside,) = traces.named("inside")
    assert inside.parent is not None and inside.parent.span_id == span.context.span_id


def test_the_tick_has_a_span_and_its_jobs_link_to_it(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    friday = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
    scheduler.create_schedule(conn, job_type="remind", rule="daily@08:00", zone="UTC", now=friday)
    conn.commit()
    saturday = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
    replica = Scheduler(db_url, clock=FrozenClock(saturday), lookahead=timedelta(minutes=5))
    try:
        assert replica.tick().enqueued == 1
        assert replica.tick().enqueued == 0
    finally:
        replica.close()
    first, second = traces.named("tockwork.scheduler tick")
    assert first.kind is SpanKind.INTERNAL
    assert attr(first, "tockwork.tick.enqueued") == 1
    assert attr(first, "tockwork.tick.schedules") == 1
    assert attr(second, "tockwork.tick.enqueued") == 0
    (job_id,) = [r[0] for r in conn.execute("SELECT id FROM jobs_all")]
    assert stored(conn, [job_id]) == [traceparent(first.context)]
    run_worker(db_url, {"remind": lambda _job: None}, FrozenClock(saturday + timedelta(minutes=2)))
    (execution,) = traces.named("tockwork.job remind")
    assert linked(execution) == [first.context.span_id]


PROJECTIONS = Projections(
    [
        Projection(
            "ship",
            frozenset({"order.placed"}),
            lambda e: [JobSpec("ship", {"order": e.aggregate_id})],
        )
    ]
)


def test_a_relay_batch_has_a_span_and_its_jobs_carry_it(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    for n in range(3):
        outbox.record(
            conn,
            aggregate_type="order",
            aggregate_id=f"o-{n}",
            event_type="order.placed",
            payload={},
            occurred_at=T0,
        )
    conn.commit()
    stats = Relay(db_url, PROJECTIONS, clock=FrozenClock(T0), listen=False).run_until_idle()
    assert stats.jobs_created == 3
    spans = traces.named("tockwork.relay batch")
    assert len(spans) == stats.batches >= 1
    assert sum(attr(s, "tockwork.relay.claimed") for s in spans) == 3
    assert sum(attr(s, "tockwork.relay.processed") for s in spans) == 3
    assert sum(attr(s, "tockwork.relay.jobs_created") for s in spans) == 3
    ids = [r[0] for r in conn.execute("SELECT id FROM jobs_all")]
    assert set(stored(conn, ids)) <= {traceparent(s.context) for s in spans}
    assert None not in stored(conn, ids)


def test_tracing_disabled_writes_null_and_makes_no_span(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    tracing.configure(tracer_provider=traces.provider, enabled=False)
    with traces.app.start_as_current_span("POST /orders"):
        one = jobs.enqueue(conn, "a", {}, now=T0).id
        many = [e.id for e in jobs.enqueue_many(conn, [JobSpec("a"), JobSpec("a", priority=1)])]
    conn.commit()
    run_worker(db_url, {"a": lambda _job: None}, FrozenClock(T0))
    assert stored(conn, [one, *many]) == [None] * 3
    assert [s.name for s in traces.exporter.get_finished_spans()] == ["POST /orders"]
    job = Job(1, "q", "a", {}, 1, 10, None, None, 0, T0, T0, 1)
    assert tracing.job_span(job, "w", T0) is tracing.OFF


def test_without_a_tracer_provider_nothing_is_traced(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """No provider configured (the API's proxy answers): no span, and no context is stored
    outside a recording span."""
    tracing.configure()
    jobs.enqueue(conn, "a", {}, now=T0)
    conn.commit()
    job = Job(1, "q", "a", {}, 1, 10, None, None, 0, T0, T0, 1)
    assert tracing.job_span(job, "w", T0) is tracing.OFF
    assert tracing.service_span("x", {}) is tracing.OFF
    assert conn.execute("SELECT trace_parent FROM jobs_all").fetchall() == [(None,)]


def test_a_malformed_stored_context_is_no_link(
    conn: psycopg.Connection[Any], db_url: str, traces: Traces
) -> None:
    job_id = jobs.enqueue(conn, "a", {}, now=T0).id
    conn.execute("UPDATE jobs SET trace_parent = 'not-a-traceparent' WHERE id = %s", (job_id,))
    conn.commit()
    done = threading.Event()
    run_worker(db_url, {"a": lambda _job: done.set()}, FrozenClock(T0))
    assert done.is_set()
    (span,) = traces.named("tockwork.job")
    assert span.links == ()


NO_OTEL = textwrap.dedent(
    """
    import os, sys
    sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
    import psycopg
    import jobs
    assert not jobs.tracing.available()
    url = os.environ["DATABASE_URL"]
    with psycopg.connect(url) as conn:
        jobs.enqueue(conn, "a", {})
        jobs.enqueue_many(conn, [jobs.JobSpec("a"), jobs.JobSpec("a", priority=1)])
        conn.commit()
        ran = []
        jobs.Worker(url, {"a": ran.append}, listen=False).run_until_idle()
        rows = conn.execute("SELECT status, trace_parent FROM jobs_all").fetchall()
        print(len(ran), sorted(set(rows)))
    """
)


def test_tockwork_runs_without_the_opentelemetry_api(db_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL],
        env={**os.environ, "DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3 [('succeeded', None)]"


GLOBAL_PROVIDER = textwrap.dedent(
    """
    import os
    import psycopg
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import jobs
    url = os.environ["DATABASE_URL"]
    with psycopg.connect(url) as conn:
        jobs.enqueue(conn, "a", {})
        conn.commit()
        jobs.Worker(url, {"a": lambda job: None}, listen=False).run_until_idle()  # before: none
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # as an application does at start-up
        with trace.get_tracer("app").start_as_current_span("request"):
            jobs.enqueue(conn, "b", {})
        conn.commit()
        jobs.Worker(url, {"b": lambda job: None}, listen=False).run_until_idle()
        print(sorted(s.name for s in exporter.get_finished_spans()))
    """
)


def test_the_global_tracer_provider_is_used_once_set(db_url: str) -> None:
    """In a process of its own: the global provider can be set only once per process."""
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER],
        env={**os.environ, "DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['request', 'tockwork.job b']"
