"""Webhook metrics: what the delivery handler counts as it goes, and the gauges read on scrape.

Instruments (:class:`WebhookMetrics`, in :data:`jobs.metrics.REGISTRY` unless another registry
is given), updated by :class:`scheduler.webhooks.WebhookHandler` in the worker process:

* ``tockwork_webhook_deliveries_total{outcome, error_class}``: each delivery attempt by what
  became of it, ``outcome`` one of :data:`OUTCOMES` (``delivered``; ``retried``; ``dead``, its
  last attempt failed; ``held``, its endpoint was disabled or answered 410; ``snoozed``, held
  back by the endpoint's rate limit, no attempt used; ``cancelled``, its endpoint was removed)
  and ``error_class`` one of :data:`ERROR_CLASSES` (``none`` for a delivery);
* ``tockwork_webhook_attempt_duration_seconds{outcome}``: the time of each request sent, from
  the connection (or its reuse) to the end of the bounded response, ``outcome`` ``delivered``,
  ``failed`` or ``held``;
* ``tockwork_webhook_endpoint_disables_total{error_class}``: endpoints this process's
  deliveries disabled, ``410`` (the endpoint answered 410 Gone) or ``failures`` (too many
  consecutive failures). An operator's ``disable`` is not counted here; the gauge below
  shows every disabled endpoint whoever disabled it.

Gauges read from the tables when Prometheus scrapes (:func:`webhook_probe`, one of the probes of
:func:`scheduler.health.register_metrics`): ``tockwork_webhook_endpoints_enabled``,
``tockwork_webhook_endpoints_disabled`` and ``tockwork_webhook_deliveries_held`` (deliveries
held while their endpoint is disabled, replayed when it is enabled; counted up to
:data:`HELD_COUNT_LIMIT`).

Labels are bounded: both label values come from fixed sets, never a URL, a host, an endpoint
id, an organization or a response: an endpoint's own figures are its attempts
(``tockwork webhooks show``, the dashboard).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from jobs.metrics import REGISTRY
from scheduler.queries import query

OUTCOMES = ("delivered", "retried", "dead", "held", "snoozed", "cancelled")
ERROR_CLASSES = (
    "none",
    "timeout",  # no complete response within the total timeout
    "connect_timeout",
    "connect",  # the connection failed (refused, reset, TLS)
    "resolve",  # the host did not resolve
    "ssrf",  # the SSRF guard refused the address resolved or connected to
    "protocol",  # not a valid HTTP response
    "3xx",  # redirects are not followed
    "4xx",
    "410",
    "429",
    "5xx",
    "no_secret",  # no signing secret signs now
    "disabled",  # the endpoint was disabled
    "rate_limit",  # snoozed by the endpoint's rate limit
    "removed",  # the endpoint was removed
    "other",
)
_SEND_CLASSES = {
    "timeout": "timeout",
    "connect_timeout": "connect_timeout",
    "connect": "connect",
    "resolve": "resolve",
    "refused": "ssrf",
    "protocol": "protocol",
}
HELD_COUNT_LIMIT = 1_000_000
# A request's time: from a few milliseconds (a local receiver) to the total timeout.
_HTTP = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def error_class(status: int | None, send_error: str | None = None) -> str:
    """The bounded class of a failed attempt: its status's class, or the kind of
    :class:`scheduler.webhooks.http.SendError` that ended it."""
    if status is None:
        return _SEND_CLASSES.get(send_error or "", "other")
    if status in (410, 429):
        return str(status)
    if 300 <= status < 400:
        return "3xx"
    if 400 <= status < 500:
        return "4xx"
    if 500 <= status < 600:
        return "5xx"
    return "other"


class WebhookMetrics:
    """The webhook instruments of one registry; get them with :meth:`for_registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deliveries = Counter(
            "tockwork_webhook_deliveries",
            "Webhook delivery attempts by outcome and error class (bounded sets: "
            "scheduler/webhooks/metrics.py).",
            ["outcome", "error_class"],
            registry=registry,
        )
        self.attempt_duration = Histogram(
            "tockwork_webhook_attempt_duration_seconds",
            "Time of one webhook request, connection to bounded response, by outcome.",
            ["outcome"],
            buckets=_HTTP,
            registry=registry,
        )
        self.disables = Counter(
            "tockwork_webhook_endpoint_disables",
            "Webhook endpoints disabled by this process's deliveries: 410 Gone, or too many "
            "consecutive failures (error_class 410 or failures).",
            ["error_class"],
            registry=registry,
        )
        # The labelled children looked up once: labels() takes a lock and checks its values
        # at every call, some microseconds a delivery.
        self._deliveries: dict[tuple[str, str], Any] = {}
        self._durations: dict[str, Any] = {}

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> WebhookMetrics:
        """The instruments registered in ``registry`` (default :data:`jobs.metrics.REGISTRY`)."""
        registry = REGISTRY if registry is None else registry
        with _lock:
            found = _instances.get(registry)
            if found is None:
                found = _instances[registry] = cls(registry)
            return found

    def attempt(self, outcome: str, error: str = "none") -> None:
        """Count one attempt (``outcome`` in :data:`OUTCOMES`, ``error`` in
        :data:`ERROR_CLASSES`; anything else counts as ``other``, so no value can grow the
        label set)."""
        child = self._deliveries.get((outcome, error))
        if child is None:
            child = self.deliveries.labels(
                outcome if outcome in OUTCOMES else "other",
                error if error in ERROR_CLASSES else "other",
            )
            if outcome in OUTCOMES and error in ERROR_CLASSES:  # a bounded set of keys
                self._deliveries[(outcome, error)] = child
        child.inc()

    def duration(self, outcome: str, seconds: float) -> None:
        """Observe one request's time under ``outcome`` (delivered, failed or held)."""
        child = self._durations.get(outcome)
        if child is None:
            child = self._durations[outcome] = self.attempt_duration.labels(outcome)
        child.observe(seconds)


_instances: weakref.WeakKeyDictionary[CollectorRegistry, WebhookMetrics] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def webhook_probe(conn: psycopg.Connection[Any], now: datetime | None) -> Iterable[Metric]:
    """A :data:`jobs.metrics.Probe`: the endpoints enabled and disabled, and the deliveries
    held (nothing on a database without the webhook tables)."""
    if conn.execute(query("webhook_endpoint_table_exists")).fetchone() != (True,):
        return []
    row = conn.execute(query("webhook_endpoint_gauges"), {"limit": HELD_COUNT_LIMIT}).fetchone()
    assert row is not None
    enabled = GaugeMetricFamily(
        "tockwork_webhook_endpoints_enabled", "Webhook endpoints enabled (deliveries are sent)."
    )
    enabled.add_metric([], row[0])
    disabled = GaugeMetricFamily(
        "tockwork_webhook_endpoints_disabled",
        "Webhook endpoints disabled (by an operator, a 410 Gone or too many failures).",
    )
    disabled.add_metric([], row[1])
    held = GaugeMetricFamily(
        "tockwork_webhook_deliveries_held",
        "Webhook deliveries held while their endpoint is disabled (requeued when it is enabled); "
        f"counted up to {HELD_COUNT_LIMIT:,}.",
    )
    held.add_metric([], row[2])
    return [enabled, disabled, held]
