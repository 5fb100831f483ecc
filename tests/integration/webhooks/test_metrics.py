"""Webhook metrics as Prometheus reads them (scheduler/webhooks/metrics.py): deliveries by
outcome and error class, the request time histogram, disables, and the scrape-time gauges of
endpoints and held deliveries, in the exposition text of a registry of the test's own.

The deliveries go to a real local receiver (one behaviour per path) through a real worker; the
text must carry the expected samples and none of the URLs, ports, hosts or secrets.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import jobs
from jobs import JobSpec
from jobs.metrics import LABELS
from scheduler.devdb import throwaway_database
from scheduler.health import register_metrics
from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer
from scheduler.webhooks import WebhookHandler, add_endpoint, rotate_secret
from scheduler.webhooks.fanout import JOB_TYPE, QUEUE, concurrency_key, idempotency_key
from scheduler.webhooks.metrics import WebhookMetrics, error_class
from scheduler.webhooks.ssrf import Guard, networks

LOCAL = Guard(allow=networks(["127.0.0.1/32"]))
T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


async def answer(request: FakeRequest) -> FakeResponse:
    status = {"/ok": 200, "/gone": 410, "/e500": 500, "/e404": 404, "/slow": 429}
    return FakeResponse(status.get(request.path.split("?")[0], 200), [], b"body")


@pytest.fixture
def server() -> Iterator[FakeServer]:
    running = FakeServer(answer).start_in_thread()
    try:
        yield running
    finally:
        running.stop_thread()


def _delivery(endpoint_id: int) -> JobSpec:
    event_id = uuid.uuid4()
    payload = {"event_id": str(event_id), "endpoint_id": endpoint_id, "type": "order.paid",
               "timestamp": T0.isoformat(), "data": {}}  # fmt: skip
    return JobSpec(
        JOB_TYPE,
        payload,
        queue=QUEUE,
        idempotency_key=idempotency_key(event_id, endpoint_id),
        concurrency_key=concurrency_key(endpoint_id),
        max_attempts=2,
    )


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_deliveries_are_counted_by_outcome_and_class_and_the_gauges_read_the_tables(
    db_url: str, server: FakeServer
) -> None:
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    secrets: list[str] = []
    urls = {
        "ok": server.url + "/ok?token=s3cr3t-in-query",
        "gone": server.url + "/gone",
        "e500": server.url + "/e500",
        "e404": server.url + "/e404",
        "slow": server.url + "/slow",
        "closed": f"http://127.0.0.1:{free_port()}/nobody",
        "ssrf": server.url + "/ssrf",
    }
    ids: dict[str, int] = {}
    with psycopg.connect(db_url) as conn:
        for name, url in urls.items():
            created = add_endpoint(conn, url, guard=LOCAL)
            ids[name] = created.endpoint.id
            secrets.append(created.secret)
        secrets.append(rotate_secret(conn, ids["ok"]).secret)
        jobs.enqueue_many(conn, [_delivery(i) for i in ids.values()])
        # The last attempt of a second delivery to the failing endpoint: it goes dead.
        last = concurrency_key(ids["e500"])
        dead = jobs.enqueue(
            conn, JOB_TYPE, _delivery(ids["e500"]).payload, queue=QUEUE, max_attempts=1,
            concurrency_key=last,
        )  # fmt: skip
    # The handler's guard allows the receiver except through the "ssrf" endpoint's port...
    # which is the same port: so that endpoint is delivered by a handler whose guard refuses
    # loopback, as a guard without the allow-list does.
    handler = WebhookHandler(db_url, guard=LOCAL, metrics=metrics, timeout=2.0)
    strict = WebhookHandler(db_url, guard=Guard(), metrics=metrics, timeout=2.0)

    async def route(job: jobs.Job) -> None:
        chosen = strict if job.payload["endpoint_id"] == ids["ssrf"] else handler
        await chosen(job)

    try:
        jobs.Worker(db_url, {JOB_TYPE: route}, {QUEUE: 8}, listen=False).run_until_idle()
    finally:
        asyncio.run(handler.aclose())
        asyncio.run(strict.aclose())
    with psycopg.connect(db_url) as conn:
        assert jobs.get_job(conn, dead.id).status == jobs.JobStatus.DEAD
        # One more delivery to the endpoint 410 disabled: held.
        jobs.enqueue_many(conn, [_delivery(ids["gone"])])
    held_handler = WebhookHandler(db_url, guard=LOCAL, metrics=metrics)
    try:
        jobs.Worker(db_url, {JOB_TYPE: held_handler}, {QUEUE: 8}, listen=False).run_until_idle()
    finally:
        asyncio.run(held_handler.aclose())

    register_metrics(db_url, registry)
    got = samples(registry)

    def count(outcome: str, error: str) -> float:
        key = (("error_class", error), ("outcome", outcome))
        return got.get(("tockwork_webhook_deliveries_total", key), 0.0)

    assert count("delivered", "none") == 1
    assert count("held", "410") == 1
    assert count("held", "disabled") == 1
    assert count("retried", "5xx") == 1 and count("dead", "5xx") == 1
    assert count("retried", "4xx") == 1
    assert count("retried", "429") == 1
    assert count("retried", "connect") == 1
    assert count("retried", "ssrf") == 1
    assert got[("tockwork_webhook_endpoint_disables_total", (("error_class", "410"),))] == 1
    # Every request that got an answer or an error was timed (the held one sent nothing).
    histogram = "tockwork_webhook_attempt_duration_seconds_count"
    timed = sum(v for (name, _), v in got.items() if name == histogram)
    assert timed == 8
    assert got[("tockwork_webhook_endpoints_enabled", ())] == len(ids) - 1
    assert got[("tockwork_webhook_endpoints_disabled", ())] == 1
    # Both deliveries to the gone endpoint are held: the one that got the 410, the later one.
    assert got[("tockwork_webhook_deliveries_held", ())] == 2

    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert set(sample.labels) <= LABELS, sample
    for secret in secrets:
        assert secret not in text
    for url in urls.values():
        assert url not in text
    for leak in ("s3cr3t", "127.0.0.1", "/ok", "/gone", "/nobody"):
        assert leak not in text, leak


def test_the_error_classes_are_a_fixed_set() -> None:
    assert [error_class(s) for s in (301, 400, 404, 410, 429, 500, 503, 600)] == [
        "3xx", "4xx", "4xx", "410", "429", "5xx", "5xx", "other",
    ]  # fmt: skip
    kinds = ("timeout", "connect_timeout", "connect", "resolve", "refused", "protocol", "?")
    assert [error_class(None, k) for k in kinds] == [
        "timeout", "connect_timeout", "connect", "resolve", "ssrf", "protocol", "other",
    ]  # fmt: skip
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    metrics.attempt("delivered", "https://leak.example/")  # not a class: counted as other
    metrics.attempt("https://leak.example/", "none")
    assert "leak.example" not in generate_latest(registry).decode()
    got = samples(registry)
    total = "tockwork_webhook_deliveries_total"
    assert got[(total, (("error_class", "other"), ("outcome", "delivered")))] == 1
    assert got[(total, (("error_class", "none"), ("outcome", "other")))] == 1


def test_the_gauges_are_absent_without_the_webhook_tables(server_url: str) -> None:
    """A database with only the queue's migrations: the probe reports nothing (no error)."""
    name = f"tockwork_t_wh_{uuid.uuid4().hex[:8]}"
    with throwaway_database(server_url, name, components=("jobs",)) as url:
        registry = CollectorRegistry()
        register_metrics(url, registry)
        got: Any = samples(registry)
    assert got[("tockwork_database_up", ())] == 1
    assert not any(name.startswith("tockwork_webhook") for name, _ in got)
