"""Metrics: what a worker and a scheduler tick export, and what they must never export."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import jobs
import scheduler
from jobs.metrics import LABELS, MAX_ERROR_CLASSES, DatabaseCollector, Metrics, error_class
from scheduler import Scheduler, health
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
MARKER = "zqx7marker"
ORG = "7e57ab1e-0000-4000-8000-00000000c0de"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def value(text: str, name: str, **labels: str) -> float:
    found = [v for n, ls, v in samples(text) if n == name and ls == labels]
    assert found, f"no sample {name}{labels}"
    return found[0]


def handlers() -> dict[str, jobs.Handler]:
    def ok(_job: jobs.Job) -> None:
        return None

    def flaky(job: jobs.Job) -> None:
        raise jobs.TransientError(f"timeout for {job.payload}", code=f"provider_timeout:{MARKER}")

    def poison(job: jobs.Job) -> None:
        raise jobs.PermanentError(f"bad payload {job.payload}", code="invalid_payload")

    return {"ok": ok, "flaky": flaky, "poison": poison, "remind": ok}


def test_no_tenant_data_in_any_exported_series(conn: psycopg.Connection[Any], db_url: str) -> None:
    """Org ids, subjects, idempotency keys, payloads and error details never reach a label."""
    registry = CollectorRegistry()
    metrics = Metrics.for_registry(registry)
    scheduler.create_schedule(
        conn, job_type="remind", rule="daily@08:00", zone="America/Chicago",
        subject=f"user-{MARKER}", organization_id=ORG, payload={"note": MARKER},
        key=f"key-{MARKER}", now=T0,
    )  # fmt: skip
    for job_type in ("ok", "flaky", "poison"):
        jobs.enqueue(
            conn, job_type, {"secret": MARKER}, organization_id=ORG,
            idempotency_key=f"{job_type}-{MARKER}", now=T0,
        )  # fmt: skip
    jobs.enqueue(conn, "nohandler", {"secret": MARKER}, organization_id=ORG, now=T0)
    conn.commit()

    later = T0 + timedelta(hours=2, seconds=1)  # the reminder is due (08:00 Chicago = 14:00Z)
    s = Scheduler(db_url, clock=FrozenClock(later), metrics=metrics)
    try:
        assert s.tick().enqueued == 1
    finally:
        s.close()
    worker = jobs.Worker(db_url, handlers(), clock=FrozenClock(later), metrics=metrics)
    stats = worker.run_until_idle()
    assert stats.claimed == 5

    check = health.Health(db_url, poll_only=True)
    with health.serve(db_url, 0, host="127.0.0.1", registry=registry, health=check) as server:
        assert server.port > 0
        text = scrape(server.port)

    for needle in (MARKER, ORG, ORG.replace("-", ""), "user-", "secret"):
        assert needle not in text
    for name, labels, _ in samples(text):
        assert set(labels) <= LABELS, (name, labels)
        assert name.startswith("tockwork_"), name

    assert value(text, "tockwork_database_up") == 1.0
    assert value(text, "tockwork_job_outcomes_total", queue="default", job_type="ok",
                 outcome="succeeded") == 1.0  # fmt: skip
    assert value(text, "tockwork_job_outcomes_total", queue="default", job_type="remind",
                 outcome="succeeded") == 1.0  # fmt: skip
    assert value(text, "tockwork_job_outcomes_total", queue="default", job_type="poison",
                 outcome="dead") == 1.0  # fmt: skip
    assert value(text, "tockwork_job_outcomes_total", queue="default",
                 job_type="_unregistered", outcome="retry") == 1.0  # fmt: skip
    assert value(text, "tockwork_job_retries_total", queue="default", job_type="flaky",
                 error_class="provider_timeout") == 1.0  # fmt: skip
    assert value(text, "tockwork_jobs_claimed_total", queue="default") == 5.0
    assert value(text, "tockwork_claim_duration_seconds_count") >= 1.0
    assert value(text, "tockwork_db_batch_duration_seconds_count", operation="claim") >= 1.0
    assert value(text, "tockwork_job_execution_duration_seconds_count", queue="default",
                 job_type="ok") == 1.0  # fmt: skip
    assert value(text, "tockwork_scheduler_occurrences_total", outcome="enqueued") == 1.0
    assert value(text, "tockwork_queue_dead", queue="default") == 1.0
    assert value(text, "tockwork_queue_retrying", queue="default") == 2.0
    assert value(text, "tockwork_listener_up") == 0.0  # the worker stopped listening
    assert "tockwork_scheduler_lag_seconds" in text


def test_queue_and_outbox_gauges_are_read_on_scrape(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    registry = CollectorRegistry()
    health.register_metrics(db_url, registry, now=lambda: T0)
    for _ in range(3):
        jobs.enqueue(conn, "a", {}, queue="mail", run_at=T0 - timedelta(minutes=2), now=T0)
    jobs.enqueue(conn, "a", {}, queue="mail", run_at=T0 - timedelta(seconds=30), now=T0)
    jobs.enqueue(conn, "a", {}, queue="mail", run_at=T0 + timedelta(hours=1), now=T0)
    dead = jobs.enqueue(conn, "a", {}, queue="reports", now=T0).id
    conn.execute("UPDATE jobs SET status = 'dead', completed_at = %s WHERE id = %s", (T0, dead))
    conn.commit()

    def get(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert get("tockwork_database_up") == 1.0
    assert get("tockwork_queue_ready", queue="mail") == 4.0
    assert get("tockwork_queue_oldest_ready_age_seconds", queue="mail") == 120.0
    assert get("tockwork_queue_scheduled", queue="mail") == 1.0
    assert get("tockwork_queue_dead", queue="reports") == 1.0
    assert get("tockwork_queue_leased", queue="mail") == 0.0
    # The figures are the ones `tockwork stats` shows.
    (mail,) = [s for s in jobs.queue_stats(conn, now=T0) if s.queue == "mail"]
    assert (mail.ready, mail.oldest_ready_age) == (4, 120.0)

    for age, processed in ((30, None), (10, None), (300, T0)):
        conn.execute(
            "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type,"
            " schema_version, payload, occurred_at, processed_at)"
            " VALUES (gen_random_uuid(), 'trip', gen_random_uuid(), 'trip.ended', 1, '{}',"
            " %s, %s)",
            (T0 - timedelta(seconds=age), processed),
        )
    conn.commit()
    assert get("tockwork_outbox_pending") == 2.0
    assert get("tockwork_outbox_lag_seconds") == 30.0
    assert get("tockwork_outbox_dead") == 0.0
    # An event set aside is no longer pending: it must not hold the lag up forever.
    conn.execute(
        "UPDATE outbox_events SET dead_at = %s"
        " WHERE occurred_at = (SELECT min(occurred_at) FROM outbox_events"
        " WHERE processed_at IS NULL)",
        (T0,),
    )
    conn.commit()
    assert get("tockwork_outbox_pending") == 1.0
    assert get("tockwork_outbox_lag_seconds") == 10.0
    assert get("tockwork_outbox_dead") == 1.0


def test_a_database_without_the_outbox_or_the_scheduler_still_scrapes(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """Each package probes its own table: no outbox_events, no outbox series; no schedules,
    no scheduler lag (and a passing lag check); the queue gauges are there, and no error."""
    registry = CollectorRegistry()
    health.register_metrics(db_url, registry, now=lambda: T0)
    jobs.enqueue(conn, "a", {}, queue="mail", now=T0)
    conn.commit()
    text = generate_latest(registry).decode()
    assert "tockwork_outbox_pending" in text and "tockwork_scheduler_lag_seconds" in text
    conn.execute("DROP TABLE outbox_events")
    conn.execute("DROP TABLE schedules")
    conn.commit()
    text = generate_latest(registry).decode()
    assert value(text, "tockwork_database_up") == 1.0
    assert value(text, "tockwork_queue_ready", queue="mail") == 1.0
    assert "tockwork_outbox" not in text
    assert "tockwork_scheduler_lag_seconds" not in text
    ok, details = health.Health(db_url, poll_only=True)()
    assert ok and details["checks"]["scheduler_lag"]["detail"] == "no schedules table"


def test_a_scrape_with_the_database_down_reports_up_zero() -> None:
    registry = CollectorRegistry()
    registry.register(DatabaseCollector("postgresql://nobody@127.0.0.1:1/nothing", timeout=1.0))
    text = generate_latest(registry).decode()
    assert value(text, "tockwork_database_up") == 0.0
    assert "tockwork_queue_ready" not in text


def test_error_classes_are_bounded() -> None:
    assert error_class("provider_timeout:acme-42") == "provider_timeout"
    assert error_class("unknown.ValueError") == "unknown.valueerror"
    assert error_class(None) == "none"
    assert error_class("x" * 500) == "x" * 40
    assert error_class("Bad Token / user 7") == "bad_token_user_7"
    assert error_class(":only-detail") == "other"
    metrics = Metrics.for_registry(CollectorRegistry())
    seen = {metrics.error_class(f"code{i}") for i in range(MAX_ERROR_CLASSES + 20)}
    assert len(seen) == MAX_ERROR_CLASSES + 1
    assert "other" in seen


def test_instruments_are_one_set_per_registry() -> None:
    registry = CollectorRegistry()
    assert Metrics.for_registry(registry) is Metrics.for_registry(registry)
    assert Metrics.for_registry() is Metrics.for_registry(jobs.metrics.REGISTRY)


@pytest.mark.parametrize("path", ["/metrics", "/"])
def test_the_wsgi_app_serves_the_registry(path: str) -> None:
    registry = CollectorRegistry()
    Metrics.for_registry(registry).claimed.labels("mail").inc(3)
    app = jobs.metrics.make_wsgi_app(registry)
    status: list[str] = []
    body = b"".join(app({"PATH_INFO": path, "REQUEST_METHOD": "GET"},
                        lambda s, _h: status.append(s)))  # fmt: skip
    assert status == ["200 OK"]
    assert b'tockwork_jobs_claimed_total{queue="mail"} 3.0' in body
