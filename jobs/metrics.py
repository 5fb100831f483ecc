"""Prometheus metrics: in-process instruments, database gauges computed on scrape, and /metrics.

Two kinds of figures, kept apart on purpose:

* **Instruments** (:class:`Metrics`): counters and histograms the worker (and the scheduler)
  update as things happen: claim time, execution time and outcome by job type, retries by error
  class, lease expirations, wake-ups, database time per batch. Updating one is a lock and an
  add, never a query.
* **Database gauges** (:class:`DatabaseCollector`): queue depth, oldest ready age, leased,
  retrying, dead and scheduled counts by queue, outbox backlog and lag. They are read from the
  tables by a handful of cheap, index-served statements *when Prometheus scrapes*, on the
  collector's own short-lived connection, inside a read-only transaction with a statement
  timeout. A scrape while the database is down does not fail: it reports
  ``tockwork_database_up 0``.

Everything registers in :data:`REGISTRY`, our own registry rather than prometheus_client's
global one, so an application can mount it beside its own metrics::

    app = jobs.metrics.make_wsgi_app()           # WSGI: /metrics (and /healthz if given)
    jobs.metrics.register_database(DATABASE_URL) # the scrape-time gauges

Labels are bounded and never carry tenant data: ``queue``, ``job_type`` (a registered handler
name, else ``_unregistered``), ``outcome``, ``error_class`` (the error code's prefix before
``:``, normalised, at most :data:`MAX_ERROR_CLASSES` distinct values, the rest ``other``) and
``operation``. No organization id, subject, idempotency key or payload value is ever a label.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from math import isnan
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import make_wsgi_app as _prometheus_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.values import MutexValue

from jobs.admin import queue_stats
from jobs.connection import connect
from jobs.primary import PrimaryWatch, replication_families
from jobs.queries import query

log = logging.getLogger("tockwork.metrics")

REGISTRY = CollectorRegistry()
"""Tockwork's registry (not prometheus_client's global default)."""

MAX_ERROR_CLASSES = 50
UNREGISTERED = "_unregistered"
OTHER = "other"

# Label names any tockwork series may carry (``le`` comes with histograms).
LABELS = frozenset({"queue", "job_type", "outcome", "error_class", "operation", "le"})

_CLASS_CHARS = re.compile(r"[^a-z0-9_.\-]+")
_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_JOB = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
# Lateness of occurrences: from well under a second (on time) to hours (an outage).
_LATE = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
HealthCheck = Callable[[], tuple[bool, Mapping[str, Any]]]


def error_class(code: str | None) -> str:
    """A bounded label value for an error code: its prefix before ``:``, normalised.

    Codes are developer-chosen, but a code like ``provider_timeout:acme-42`` would otherwise
    leak an identifier into a label and explode cardinality.
    """
    if not code:
        return "none"
    prefix = code.split(":", 1)[0].strip().lower()
    cleaned = _CLASS_CHARS.sub("_", prefix)[:40].strip("_")
    return cleaned or OTHER


def observe_many(histogram: Histogram, amount: float, n: int) -> None:
    """Record ``n`` observations of ``amount`` (:func:`observe_all` of ``n`` times ``amount``).

    For the jobs of a batch, which share their handler time: ``observe`` costs about a
    microsecond, a fast job's largest piece of bookkeeping.
    tests/unit/jobs/test_metrics_batched.py compares the expositions.
    """
    if n > 0:
        observe_all(histogram, [amount] * n)


def observe_all(histogram: Histogram, values: Sequence[float]) -> None:
    """``histogram.observe(v)`` for each of ``values`` (a labelled child, or a histogram
    without labels), in order, with exactly the exposition it would give: the sum added to
    value by value (``n * amount`` can differ from ``n`` additions in the last digit the
    exposition prints), each distinct value's bucket found once and counted at once. A batch's
    values (its jobs' delays, their shared handler time) are a few distinct ones.

    This reads prometheus_client's own fields of a histogram (``_sum``, ``_buckets``,
    ``_upper_bounds``, stable since its first releases); a histogram without them, or whose
    values are not the in-process ones (the library's multiprocess mode), is observed value
    by value."""
    fields: Any = histogram  # prometheus_client's own fields, untyped there
    try:
        check, total, buckets, bounds = (
            fields._raise_if_not_observable,
            fields._sum,
            fields._buckets,
            fields._upper_bounds,
        )
    except AttributeError:
        total = None
    if (
        total is None
        or type(total) is not MutexValue
        or len(values) == 1
        or any(type(b) is not MutexValue for b in buckets)
    ):
        for value in values:
            histogram.observe(value)
        return
    check()  # a histogram with labels refuses, as observe does
    counts = [0] * len(bounds)
    index: dict[float, int] = {}
    with total._lock:  # other threads' workers may observe the same child
        added = total._value
        for value in values:
            added += value
            if isnan(value):  # added to the sum, counted in no bucket, as observe() does
                continue
            i = index.get(value)
            if i is None:
                i = index[value] = bisect_left(bounds, value)  # observe(): first bound >= value
            counts[i] += 1
        total._value = added
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


class Metrics:
    """The in-process instruments of one registry; get them with :meth:`for_registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._classes: set[str] = set()
        self._lock = threading.Lock()
        self.claim_duration = Histogram(
            "tockwork_claim_duration_seconds",
            "Time of one claim statement (with the outcomes written in the same round trip).",
            buckets=_FAST,
            registry=registry,
        )
        self.claimed = Counter(
            "tockwork_jobs_claimed", "Jobs claimed by this process.", ["queue"], registry=registry
        )
        self.execution_duration = Histogram(
            "tockwork_job_execution_duration_seconds",
            "Handler run time of one attempt.",
            ["queue", "job_type"],
            buckets=_JOB,
            registry=registry,
        )
        self.outcomes = Counter(
            "tockwork_job_outcomes",
            "Attempts finished, by the outcome written (fenced: the lease was lost).",
            ["queue", "job_type", "outcome"],
            registry=registry,
        )
        self.retries = Counter(
            "tockwork_job_retries",
            "Attempts that will be retried, by error class (the error code's prefix).",
            ["queue", "job_type", "error_class"],
            registry=registry,
        )
        self.lease_expirations = Counter(
            "tockwork_lease_expirations",
            "Expired leases recovered by this process's reaper (a worker died or stalled).",
            ["queue"],
            registry=registry,
        )
        self.leases_lost = Counter(
            "tockwork_leases_lost",
            "Leases this process held and found taken over at heartbeat.",
            registry=registry,
        )
        self.wakeups = Counter(
            "tockwork_listener_wakeups",
            "Notifications received on the LISTEN connection.",
            registry=registry,
        )
        self.wakeup_failures = Counter(
            "tockwork_listener_failures",
            "LISTEN connection failures (the worker polls until it is back).",
            registry=registry,
        )
        self.listening = Gauge(
            "tockwork_listener_up",
            "1 while LISTEN is active in this process, else 0 (poll-only).",
            registry=registry,
        )
        self.db_duration = Histogram(
            "tockwork_db_batch_duration_seconds",
            "Database time of one worker batch statement, by operation.",
            ["operation"],
            buckets=_FAST,
            registry=registry,
        )
        self.occurrences = Counter(
            "tockwork_scheduler_occurrences",
            "Schedule occurrences decided by this process's scheduler.",
            ["outcome"],
            registry=registry,
        )
        self.expired = Counter(
            "tockwork_jobs_expired",
            "Jobs claimed after their expires_at (max_lateness) and ended 'expired' unrun.",
            ["queue", "job_type"],
            registry=registry,
        )
        # The health of schedules (issue 24): how late occurrences are enqueued and started.
        self.occurrence_enqueue_delay = Histogram(
            "tockwork_scheduler_occurrence_enqueue_delay_seconds",
            "Occurrence time to enqueue, of occurrences enqueued after their time (a catch-up, "
            "a slow or stopped scheduler); those enqueued ahead, the usual case, are not "
            "observed.",
            buckets=_LATE,
            registry=registry,
        )
        self.occurrence_start_delay = Histogram(
            "tockwork_scheduler_occurrence_start_delay_seconds",
            "Occurrence time to the start of its job's handler (reminders), by job type.",
            ["job_type"],
            buckets=_LATE,
            registry=registry,
        )
        self.overlap_skips = Counter(
            "tockwork_scheduler_overlap_skips",
            "Occurrences not enqueued because the previous one's job was still active "
            "(the schedule's overlap policy).",
            registry=registry,
        )
        self.backfilled = Counter(
            "tockwork_scheduler_backfilled_occurrences",
            "Occurrences enqueued by a backfill.",
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> Metrics:
        """The instruments registered in ``registry`` (default :data:`REGISTRY`)."""
        registry = REGISTRY if registry is None else registry
        with _instances_lock:
            found = _instances.get(registry)
            if found is None:
                found = _instances[registry] = cls(registry)
            return found

    def error_class(self, code: str | None) -> str:
        """:func:`error_class`, capped at :data:`MAX_ERROR_CLASSES` distinct values."""
        value = error_class(code)
        with self._lock:
            if value in self._classes:
                return value
            if len(self._classes) >= MAX_ERROR_CLASSES:
                return OTHER
            self._classes.add(value)
            return value


# Per-registry singletons: registering a metric twice in one registry is an error.
_instances: weakref.WeakKeyDictionary[CollectorRegistry, Metrics] = weakref.WeakKeyDictionary()
_instances_lock = threading.Lock()


def metrics(registry: CollectorRegistry | None = None) -> Metrics:
    """Shorthand for :meth:`Metrics.for_registry`."""
    return Metrics.for_registry(registry)


# -- database gauges --------------------------------------------------------------------------

Probe = Callable[[psycopg.Connection[Any], datetime | None], Iterable[Metric]]
"""Extra scrape-time figures read on the collector's connection, inside its read-only transaction.

The hook by which a package above the queue adds gauges from its own tables with its own SQL:
``scheduler.health.register_metrics`` adds ``tockwork_scheduler_lag_seconds`` this way.
"""


class DatabaseCollector(Collector):
    """Queue and outbox gauges, read when scraped, on a connection of its own.

    Each scrape opens a connection (``connect_timeout``), runs the queries in one read-only
    transaction under ``statement_timeout``, and closes it: no connection is held between
    scrapes, and a slow or absent database costs a scrape at most ``timeout`` seconds and
    reports ``tockwork_database_up 0`` rather than an error.

    ``primary``: ``conninfo`` is a read replica (``--read-url``), and the replication gauges
    are read on a connection to the primary instead, since a replica's settings and timeline
    are not the primary's; the primary unreachable leaves them out of the scrape (logged).

    ``watch``: a process whose only connections are the scrapes' (``tockwork metrics-server``)
    follows the primary through them, and logs a change of primary once
    (:class:`jobs.primary.PrimaryWatch`); a worker's or scheduler's service has its own.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        timeout: float = 2.0,
        probes: Sequence[Probe] = (),
        now: Callable[[], datetime] | None = None,
        connect_kwargs: Mapping[str, Any] | None = None,
        primary: str | None = None,
        watch: PrimaryWatch | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.primary = primary
        self.watch = watch
        self.timeout = timeout
        self.probes = list(probes)
        self.now = now
        self.connect_kwargs = dict(connect_kwargs or {})

    def describe(self) -> list[Metric]:
        # Registering must not query the database.
        return []

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        up = GaugeMetricFamily(
            "tockwork_database_up", "1 if the last scrape could read the database, else 0."
        )
        scrape = GaugeMetricFamily(
            "tockwork_database_scrape_duration_seconds", "Time the database scrape took."
        )
        try:
            families = self._read()
        except (psycopg.Error, OSError) as exc:
            log.warning("metrics scrape: database unavailable (%s)", exc)
            families = []
            up.add_metric([], 0.0)
        else:
            up.add_metric([], 1.0)
        scrape.add_metric([], time.perf_counter() - started)
        yield up
        yield scrape
        yield from families

    def _read(self) -> list[Metric]:
        now = self.now() if self.now is not None else None
        kwargs = {"connect_timeout": max(1, round(self.timeout)), **self.connect_kwargs}
        with (
            connect(self.conninfo, autocommit=True, **kwargs) as conn,
            conn.transaction(),
        ):
            self._begin(conn)
            families = self._queue_families(conn, now)
            if self.primary is None:
                families.extend(self._replication_families(conn))
            if conn.execute(query("outbox_event_table_exists")).fetchone() == (True,):
                families.extend(self._outbox_families(conn, now))
            for probe in self.probes:
                families.extend(probe(conn, now))
        if self.primary is not None:
            try:
                with (
                    connect(self.primary, autocommit=True, **kwargs) as conn,
                    conn.transaction(),
                ):
                    self._begin(conn)
                    families.extend(self._replication_families(conn))
            except (psycopg.Error, OSError) as exc:
                log.warning(
                    "metrics scrape: the primary is unavailable for the replication gauges (%s)",
                    exc,
                )
        return families

    def _replication_families(self, conn: psycopg.Connection[Any]) -> list[Metric]:
        found = self.watch.observe(conn) if self.watch is not None else None
        return replication_families(conn, found)

    def _begin(self, conn: psycopg.Connection[Any]) -> None:
        """Read-only, under the scrape's statement timeout (local to the transaction)."""
        conn.execute(query("pg_set_transaction_read_only"))
        conn.execute(
            query("pg_set_local_statement_timeout"),
            {"timeout": f"{int(self.timeout * 1000)}ms"},
        )

    @staticmethod
    def _queue_families(conn: psycopg.Connection[Any], now: datetime | None) -> list[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["queue"])

        ready = gauge("tockwork_queue_ready", "Jobs pending or retrying and due now.")
        oldest = gauge(
            "tockwork_queue_oldest_ready_age_seconds",
            "How long the oldest due job has waited past its run_at (0 when none is due).",
        )
        leased = gauge("tockwork_queue_leased", "Jobs leased (running).")
        retrying = gauge("tockwork_queue_retrying", "Jobs waiting for a retry.")
        dead = gauge("tockwork_queue_dead", "Dead jobs awaiting a person.")
        scheduled = gauge("tockwork_queue_scheduled", "Jobs pending or retrying, due later.")
        for s in queue_stats(conn, now=now):
            ready.add_metric([s.queue], s.ready)
            oldest.add_metric([s.queue], s.oldest_ready_age)
            leased.add_metric([s.queue], s.leased)
            retrying.add_metric([s.queue], s.retrying)
            dead.add_metric([s.queue], s.dead)
            scheduled.add_metric([s.queue], s.scheduled)
        return [ready, oldest, leased, retrying, dead, scheduled]

    @staticmethod
    def _outbox_families(conn: psycopg.Connection[Any], now: datetime | None) -> list[Metric]:
        row = conn.execute(query("outbox_event_gauges"), {"now": now}).fetchone()
        assert row is not None
        pending = GaugeMetricFamily(
            "tockwork_outbox_pending", "Outbox events waiting to be projected (not set aside)."
        )
        pending.add_metric([], row[0])
        lag = GaugeMetricFamily(
            "tockwork_outbox_lag_seconds",
            "High-watermark lag: age of the oldest pending outbox event (0 when none).",
        )
        lag.add_metric([], row[1])
        dead = GaugeMetricFamily(
            "tockwork_outbox_dead", "Outbox events set aside after failing, awaiting a person."
        )
        dead.add_metric([], row[2])
        return [pending, lag, dead]


_collectors: weakref.WeakKeyDictionary[CollectorRegistry, DatabaseCollector] = (
    weakref.WeakKeyDictionary()
)


def register_database(
    conninfo: str,
    registry: CollectorRegistry | None = None,
    *,
    timeout: float = 2.0,
    probes: Sequence[Probe] = (),
    now: Callable[[], datetime] | None = None,
    primary: str | None = None,
    watch: PrimaryWatch | None = None,
) -> DatabaseCollector:
    """Add the scrape-time database gauges to ``registry`` (replacing an earlier one);
    ``primary``: ``conninfo`` is a read replica; ``watch``: log a change of primary
    (:class:`DatabaseCollector`)."""
    registry = REGISTRY if registry is None else registry
    collector = DatabaseCollector(
        conninfo, timeout=timeout, probes=probes, now=now, primary=primary, watch=watch
    )
    previous = _collectors.get(registry)
    if previous is not None:
        registry.unregister(previous)
    registry.register(collector)
    _collectors[registry] = collector
    return collector


# -- HTTP -------------------------------------------------------------------------------------


def make_wsgi_app(
    registry: CollectorRegistry | None = None, *, health: HealthCheck | None = None
) -> WSGIApp:
    """A WSGI app serving ``/metrics`` from ``registry`` and, if given, ``/healthz``.

    ``health()`` returns ``(ok, details)``; ``/healthz`` answers 200 or 503 with the details as
    JSON. Mount it in your own app, or serve it with :func:`serve`.
    """
    metrics_app = _prometheus_wsgi_app(REGISTRY if registry is None else registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz" and health is not None:
            try:
                ok, details = health()
            except Exception as exc:  # a broken check is an unhealthy answer, not a 500
                log.exception("health check failed")
                ok, details = False, {"error": type(exc).__name__}
            body = json.dumps({"ok": ok, **details}, default=str).encode()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        if path in ("/metrics", "/"):
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a background thread; ``port=0`` picks a free port."""

    def __init__(self, app: WSGIApp, port: int, host: str = "0.0.0.0") -> None:
        self._server = make_server(
            host, port, app, server_class=_Server, handler_class=_QuietHandler
        )
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tockwork-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        if self._thread.ident is None:  # not started yet
            self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def serve(
    port: int,
    registry: CollectorRegistry | None = None,
    *,
    health: HealthCheck | None = None,
    host: str = "0.0.0.0",
) -> MetricsServer:
    """Start serving :func:`make_wsgi_app` on ``host:port`` in a daemon thread."""
    return MetricsServer(make_wsgi_app(registry, health=health), port, host).start()
