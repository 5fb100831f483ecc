"""Webhook delivery: the ``webhook.deliver`` handler, redelivery, and the worker app.

:class:`WebhookHandler` is an ``async`` handler of one job: the worker runs as many at once on
its event loop as the ``webhooks`` queue's concurrency (``--queue webhooks=256``), so one slow
delivery holds one slot and nothing else. For a delivery it

1. reads the endpoint's URL, state, rate limit and the secrets that sign now (kept for
   ``refresh``, one second by default, and read once for the concurrent deliveries to one
   endpoint);
2. holds it if the endpoint is disabled (the job is cancelled and recorded ``held``;
   :func:`scheduler.webhooks.enable_endpoint` requeues it); under the endpoint's rate limit,
   reserves a send slot shared by every worker process and waits for it (at most
   ``rate_horizon``), or snoozes the job when the next free slot is farther (no attempt used;
   "Rate limits" below);
3. sends it signed per Standard Webhooks (:mod:`.signing`) through one
   :class:`~.http.HttpClient` per event loop (keep-alive connections per origin, the SSRF guard
   at each connection, connect and total timeouts, a bounded response body);
4. writes an attempt row (status, duration, a bounded summary of the response or the error)
   and the endpoint's health, in one transaction with the results of the deliveries that
   finished meanwhile (group commit: a few transactions a second whatever the rate). That
   statement disables an endpoint that answered 410 Gone, or whose consecutive failures
   reached ``disable_after_failures`` spanning at least ``disable_after``, and records its
   ``endpoint.disabled`` fact in the same transaction;
5. ends with the job's outcome by the response's class:

=======================================  ===============================================
answer                                   outcome
=======================================  ===============================================
2xx                                      delivered (succeeded)
410 Gone                                 the endpoint is disabled at once; the delivery is
                                         held (replayed when the endpoint is enabled)
429, 503                                 retried after ``Retry-After`` (seconds or an HTTP
                                         date, capped at :data:`MAX_RETRY_AFTER`), and at
                                         least the back-off
3xx (never followed), other 4xx and 5xx  retried with the back-off
timeout, connection error, SSRF refusal  retried with the back-off
=======================================  ===============================================

The back-off is ``backoff`` (default :data:`DEFAULT_BACKOFF`: 5 s doubling to 2 h); a job that
fails its last attempt (:data:`scheduler.webhooks.fanout.MAX_ATTEMPTS`) is dead with its error,
and :func:`redeliver_failed` requeues it. Delivery is at least once: a worker that dies between
a receiver's answer and the outcome sends again, with the same ``webhook-id`` (the event id),
the receiver's idempotency key.

Rate limits: an endpoint's ``rate_limit`` (deliveries a second) holds across every worker
process. Its sends are slots ``1/rate_limit`` seconds apart in ``webhook_endpoint_rates``
(scheduler/sql/webhook_endpoint_rate.sql): a delivery reserves the next free slot in one
statement (the database's clock, or ``clock``), then sleeps until it, which spaces the sends of
all processes evenly; one whose slot is more than ``rate_horizon`` away reserves nothing and is
snoozed until it could reserve. The sleep holds one of the worker's slots, and a limited
endpoint holds at most its per-key concurrency of them (below), so it does not slow the others.
The jobs' own rate limits (:mod:`jobs.limits`) are per queue or job type, not per key, so they
could not express a limit per endpoint.

Per-endpoint concurrency: each delivery job carries the concurrency key of its endpoint, and
:func:`app` sets the ``webhooks`` queue's per-key limit (:data:`DEFAULT_PER_ENDPOINT` leased
deliveries per endpoint, unless one is set: ``tockwork policies``), so a slow endpoint holds
at most that many of the worker's slots.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import ssl
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg

import jobs
from jobs import Job
from jobs.internal import steps
from scheduler.errors import InvalidWebhook
from scheduler.http_headers import retry_after as parse_retry_after
from scheduler.queries import query
from scheduler.webhooks.endpoints import (
    _aware,
    check_endpoint_id,
    disabled_fact_steps,
)
from scheduler.webhooks.fanout import DEFAULT_REFRESH, JOB_TYPE, QUEUE
from scheduler.webhooks.http import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BODY,
    DEFAULT_TIMEOUT,
    HttpClient,
    Response,
    SendError,
)
from scheduler.webhooks.metrics import WebhookMetrics, error_class
from scheduler.webhooks.signing import headers as signed_headers
from scheduler.webhooks.signing import secret_key
from scheduler.webhooks.ssrf import Guard, WebhookUrl, parse_url
from timezones import Clock

log = logging.getLogger("tockwork.webhooks")

DEFAULT_BACKOFF = jobs.RetryPolicy(base=timedelta(seconds=5), cap=timedelta(hours=2))
MAX_RETRY_AFTER = timedelta(hours=1)
DISABLE_AFTER_FAILURES = 20
DISABLE_AFTER = timedelta(hours=24)
DEFAULT_PER_ENDPOINT = 8
DEFAULT_RATE_HORIZON = timedelta(seconds=1)
MAX_RATE_HORIZON = timedelta(minutes=1)
SUMMARY_CHARS = 1000
# A healthy endpoint's last_success_at is written at most this often (its batches of
# successes change nothing else: webhook_endpoint_record_health).
SUCCESS_EVERY = timedelta(seconds=1)
HELD = "endpoint_disabled"  # the cancel reason (error code) of a held delivery


@dataclass(frozen=True, slots=True)
class _Target:
    url: WebhookUrl
    enabled: bool
    rate_limit: int | None
    keys: tuple[bytes, ...]
    read_at: float  # time.monotonic() of the read


@dataclass(slots=True)
class _Result:
    job: Job
    endpoint_id: int
    event_id: uuid.UUID
    outcome: str  # delivered, failed, held
    status: int | None = None
    duration_ms: float | None = None
    error: str | None = None
    response: str | None = None
    retry_after: timedelta | None = None
    send_error: str | None = None  # the SendError kind of a request without a response


@dataclass
class _Loop:
    """What the handler keeps on one event loop: its HTTP client, its database connections,
    the endpoints read lately, the results waiting to be written, and
    the keeper that closes it all when the loop shuts down."""

    loop: asyncio.AbstractEventLoop
    client: HttpClient
    connections: asyncio.Semaphore
    idle: list[psycopg.AsyncConnection[Any]] = field(default_factory=list)
    targets: dict[int, _Target | None] = field(default_factory=dict)
    reading: dict[int, asyncio.Future[_Target | None]] = field(default_factory=dict)
    pending: list[tuple[_Result, asyncio.Future[bool]]] = field(default_factory=list)
    flushing: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    keeper: AsyncGenerator[None, None] | None = None

    async def aclose(self) -> None:
        idle, self.idle = self.idle, []
        for conn in idle:
            await conn.close()
        await self.client.aclose()


async def _keeper(state: _Loop) -> AsyncGenerator[None, None]:
    """Closes ``state`` when its loop shuts down: a worker ends its loop with
    ``shutdown_asyncgens()``, which closes this generator (a ``run_until_idle`` runs a new
    loop each time, and sockets must not outlive theirs)."""
    try:
        yield
    finally:
        await state.aclose()


def summary(text: str | bytes | None) -> str | None:
    """A bounded one-line summary of a response body or an error."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if text.isprintable():  # the usual answer: nothing to replace, one pass in C
        cleaned = " ".join(text.split())
    else:
        cleaned = "".join(c if c.isprintable() else " " for c in text.replace("\x00", ""))
        cleaned = " ".join(cleaned.split())
    return cleaned[:SUMMARY_CHARS] or None


def retry_after(value: str | None, now: datetime) -> timedelta | None:
    """A ``Retry-After`` header (seconds or an HTTP date) as a delay capped at
    :data:`MAX_RETRY_AFTER`; None when absent or malformed."""
    delay = parse_retry_after(value, now)
    return None if delay is None else min(delay, MAX_RETRY_AFTER)


def body_of(payload: Mapping[str, Any]) -> bytes:
    """The request body of a delivery job's payload: ``type``, ``timestamp`` and ``data``.

    Compact JSON, UTF-8: orjson for what it takes (a payload read from jsonb: JSON's types),
    the standard library for the rest (integers beyond 64 bits, nesting beyond 255 levels)."""
    body = {"type": payload["type"], "timestamp": payload["timestamp"], "data": payload["data"]}
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


class WebhookHandler:
    """The ``async`` handler of ``webhook.deliver`` jobs (module docstring).

    ``guard`` (default from the environment: ``TOCKWORK_WEBHOOK_ALLOW``); ``clock`` for the
    signature timestamps and the database writes (default: the system's and the database's);
    ``connect_timeout``, ``timeout`` (seconds) and ``max_body`` (bytes of a response read);
    ``backoff``; ``disable_after_failures`` consecutive failures spanning at least
    ``disable_after`` disable an endpoint; ``refresh``: how long an endpoint's state and
    secrets read for one delivery serve the next ones; ``connections``: database connections
    at most (the writes of concurrent deliveries share transactions); ``rate_horizon``: how far
    ahead a delivery to a rate-limited endpoint may reserve its send slot and wait for it in
    the process (farther: snoozed); ``metrics``: where the deliveries are counted
    (:mod:`.metrics`; default: in :data:`jobs.metrics.REGISTRY`).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        guard: Guard | None = None,
        clock: Clock | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        max_body: int = DEFAULT_MAX_BODY,
        backoff: jobs.RetryPolicy | None = None,
        disable_after_failures: int = DISABLE_AFTER_FAILURES,
        disable_after: timedelta = DISABLE_AFTER,
        ssl_context: ssl.SSLContext | None = None,
        refresh: timedelta = DEFAULT_REFRESH,
        connections: int = 4,
        rate_horizon: timedelta = DEFAULT_RATE_HORIZON,
        metrics: WebhookMetrics | None = None,
    ) -> None:
        for name, value in (("connect_timeout", connect_timeout), ("timeout", timeout)):
            if not isinstance(value, int | float) or not 0 < value <= 3600 or math.isnan(value):
                raise InvalidWebhook(name, value, "must be seconds above 0, at most 3600")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise InvalidWebhook("max_body", max_body, "must be a number of bytes, at least 0")
        if (
            isinstance(disable_after_failures, bool)
            or not isinstance(disable_after_failures, int)
            or disable_after_failures < 1
        ):
            raise InvalidWebhook(
                "disable_after_failures", disable_after_failures, "must be a positive integer"
            )
        if not isinstance(disable_after, timedelta) or disable_after < timedelta(0):
            raise InvalidWebhook("disable_after", disable_after, "must be a timedelta >= 0")
        if not isinstance(refresh, timedelta) or refresh < timedelta(0):
            raise InvalidWebhook("refresh", refresh, "must be a timedelta >= 0")
        if isinstance(connections, bool) or not isinstance(connections, int) or connections < 1:
            raise InvalidWebhook("connections", connections, "must be a positive integer")
        if not isinstance(rate_horizon, timedelta) or not (
            timedelta(0) <= rate_horizon <= MAX_RATE_HORIZON
        ):
            raise InvalidWebhook(
                "rate_horizon", rate_horizon, f"must be a timedelta from 0 to {MAX_RATE_HORIZON}"
            )
        self.conninfo = conninfo
        self.guard = guard if guard is not None else Guard.from_env()
        self.clock = clock
        self.connect_timeout = float(connect_timeout)
        self.timeout = float(timeout)
        self.max_body = max_body
        self.backoff = backoff if backoff is not None else DEFAULT_BACKOFF
        self.disable_after_failures = disable_after_failures
        self.disable_after = disable_after
        self.ssl_context = ssl_context
        self.refresh = refresh.total_seconds()
        self.connections = connections
        self.rate_horizon = rate_horizon
        self.metrics = metrics if metrics is not None else WebhookMetrics.for_registry()
        self._loop: _Loop | None = None

    def __repr__(self) -> str:
        return f"WebhookHandler(guard={self.guard!r}, timeout={self.timeout:g})"

    async def aclose(self) -> None:
        """Close the handler's connections (database and HTTP) on the running loop."""
        state, self._loop = self._loop, None
        if state is not None:
            if state.keeper is not None:
                await state.keeper.aclose()
            else:
                await state.aclose()

    async def _state(self) -> _Loop:
        # Connections, caches and buckets belong to the loop that made them (a new loop: anew).
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop.loop is not loop:
            client = HttpClient(
                self.guard,
                connect_timeout=self.connect_timeout,
                timeout=self.timeout,
                max_body=self.max_body,
                ssl_context=self.ssl_context,
            )
            state = _Loop(loop, client, asyncio.Semaphore(self.connections))
            state.keeper = _keeper(state)
            await anext(state.keeper)
            self._loop = state
        return self._loop

    @asynccontextmanager
    async def _connection(self, state: _Loop) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with state.connections:
            conn = None
            while state.idle and conn is None:
                conn = state.idle.pop()
                if conn.closed or conn.broken:
                    conn = None
            if conn is None:
                conn = await psycopg.AsyncConnection.connect(
                    self.conninfo, autocommit=True, **jobs.connect_kwargs(jobs.pooler_mode())
                )
            try:
                yield conn
            except psycopg.OperationalError:
                await conn.close()
                raise
            if not conn.closed and not conn.broken:
                state.idle.append(conn)

    async def __call__(self, job: Job) -> None:
        state = await self._state()
        parsed = _parse(job)
        if isinstance(parsed, str):
            raise jobs.PermanentError(parsed, code="bad_payload")
        endpoint_id, event_id, payload = parsed
        try:
            target = await self._target(state, endpoint_id)
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc
        if target is None:
            self.metrics.attempt("cancelled", "removed")
            raise jobs.Cancel("the endpoint was removed", code="endpoint_removed")
        result = _Result(job, endpoint_id, event_id, "failed")
        if not target.enabled:
            result.outcome = "held"
            result.error = "the endpoint is disabled"
        elif target.keys:
            if target.rate_limit is not None:
                later = await self._reserve(state, endpoint_id, target.rate_limit)
                if later is not None:
                    self.metrics.attempt("snoozed", "rate_limit")
                    raise jobs.Snooze(later)
            await self._send(state.client, result, target, body_of(payload))
        else:
            result.error = "the endpoint has no signing secret that signs now"
        try:
            disabled = await self._recorded(state, result)
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc
        if disabled:
            state.targets.pop(endpoint_id, None)  # read it anew: it is disabled now
        self._count(result)
        self._outcome(result)

    async def _target(self, state: _Loop, endpoint_id: int) -> _Target | None:
        """The endpoint's URL, state and signing keys, read at most ``refresh`` ago; the reads
        of concurrent deliveries to one endpoint are one."""
        cached = state.targets.get(endpoint_id)
        if cached is not None and time.monotonic() - cached.read_at < self.refresh:
            return cached
        waiting = state.reading.get(endpoint_id)
        if waiting is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[_Target | None] = state.loop.create_future()
        state.reading[endpoint_id] = future
        try:
            hint = self.clock.now() if self.clock is not None else None
            async with self._connection(state) as conn:
                cur = await conn.execute(
                    query("webhook_endpoint_for_delivery"), {"ids": [endpoint_id], "now": hint}
                )
                rows = await cur.fetchall()
            target = None
            if rows:
                _, url, enabled, rate, secrets = rows[0]
                keys = tuple(secret_key(s) for s in secrets)
                target = _Target(parse_url(url), enabled, rate, keys, time.monotonic())
            state.targets[endpoint_id] = target
            future.set_result(target)
            return target
        except BaseException as exc:
            _fail(future, exc)
            raise
        finally:
            del state.reading[endpoint_id]

    async def _reserve(self, state: _Loop, endpoint_id: int, rate: int) -> timedelta | None:
        """Reserve this delivery's send slot in the endpoint's shared rate limit and sleep until
        it (module docstring, "Rate limits"); or, when the next free slot is more than
        ``rate_horizon`` away, the delay to snooze for (nothing reserved)."""
        params = {
            "id": endpoint_id,
            "horizon": self.rate_horizon,
            "now": self.clock.now() if self.clock is not None else None,
        }
        try:
            async with self._connection(state) as conn:
                cur = await conn.execute(query("webhook_endpoint_rate_reserve"), params)
                row = await cur.fetchone()
                if row is None:  # no rate row yet (or no limit any more)
                    await conn.execute(query("webhook_endpoint_rate_ensure"), {"id": endpoint_id})
                    cur = await conn.execute(query("webhook_endpoint_rate_reserve"), params)
                    row = await cur.fetchone()
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc
        if row is None:
            return None  # the limit was lifted since the endpoint was read
        wait, reserved = float(row[0]), bool(row[1])
        if not reserved:
            # Back when the slot it saw is within the horizon (other deliveries may take it).
            return timedelta(seconds=max(wait - self.rate_horizon.total_seconds(), 1.0 / rate))
        if wait > 0:
            await asyncio.sleep(wait)
        return None

    async def _send(
        self, client: HttpClient, result: _Result, target: _Target, body: bytes
    ) -> None:
        wall = time.time() if self.clock is None else self.clock.now().timestamp()
        headers = signed_headers(target.keys, str(result.event_id), int(wall), body)
        start = time.monotonic()
        try:
            response = await client.post(target.url, headers, body)
        except SendError as exc:
            result.duration_ms = (time.monotonic() - start) * 1000.0
            result.error = f"{exc.kind}: {exc}"
            result.send_error = exc.kind
            return
        result.duration_ms = (time.monotonic() - start) * 1000.0
        self._classify(result, response)

    def _classify(self, result: _Result, response: Response) -> None:
        result.status = response.status
        result.response = summary(response.body)
        if 200 <= response.status < 300:
            result.outcome = "delivered"
            return
        result.outcome = "failed"
        if response.status == 410:
            result.outcome = "held"
            result.error = "410 Gone: the endpoint is disabled"
        elif 300 <= response.status < 400:
            result.error = f"{response.status}: redirects are not followed"
        elif response.status in (429, 503):
            result.retry_after = retry_after(
                response.header("retry-after"),
                self.clock.now() if self.clock is not None else datetime.now(UTC),
            )
            result.error = f"{response.status}"
        else:
            result.error = f"{response.status}"

    async def _recorded(self, state: _Loop, result: _Result) -> bool:
        """Write ``result`` with those of the deliveries that finished meanwhile, in one
        transaction (group commit); whether that transaction disabled its endpoint."""
        future: asyncio.Future[bool] = state.loop.create_future()
        state.pending.append((result, future))
        if not state.flushing:
            await self._flush(state)
        return await future

    async def _flush(self, state: _Loop) -> None:
        """Write the pending results, batch after batch, until none is left (one flusher a
        loop; a flusher cancelled halfway hands what is left to a task of its own)."""
        state.flushing = True
        try:
            while state.pending:
                taken, state.pending = state.pending, []
                try:
                    disabled = await self._record(state, [r for r, _ in taken])
                except BaseException as exc:
                    for _, f in taken:
                        _fail(f, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for r, f in taken:
                    if not f.done():
                        f.set_result(r.endpoint_id in disabled)
        finally:
            state.flushing = False
            if state.pending and not state.loop.is_closed():
                task = state.loop.create_task(self._flush(state))
                state.tasks.add(task)
                task.add_done_callback(state.tasks.discard)

    async def _record(self, state: _Loop, results: Sequence[_Result]) -> set[int]:
        """Attempts and health in one transaction; the endpoints it disabled."""
        health: dict[int, list[int]] = {}  # endpoint -> [succeeded, failures, gone]
        for r in results:
            entry = health.setdefault(r.endpoint_id, [0, 0, 0])
            if r.outcome == "delivered":
                entry[0] = 1
            elif r.status == 410:
                entry[2] = 1
            elif r.outcome == "failed":
                entry[1] += 1
        ids = sorted(i for i, entry in health.items() if any(entry))
        disabled: set[int] = set()
        # Both statements read the instant as coalesce(now, now()): without a pinned clock, the
        # transaction's start, the same for both (no statement of its own to read it). They go
        # to the server together (a pipeline), so a batch costs three round trips (BEGIN, the
        # two statements, COMMIT) instead of five.
        now = self.clock.now() if self.clock is not None else None
        async with self._connection(state) as conn, conn.transaction():
            async with conn.pipeline():
                await conn.execute(
                    query("webhook_attempt_insert"),
                    {"attempts": _attempt_rows(results), "now": now},
                )
                if not ids:
                    return disabled
                cur = await conn.execute(
                    query("webhook_endpoint_record_health"),
                    {
                        "ids": ids,
                        "succeeded": [bool(health[i][0]) for i in ids],
                        "failures": [0 if health[i][0] else health[i][1] for i in ids],
                        "gone": [bool(health[i][2]) for i in ids],
                        "threshold": self.disable_after_failures,
                        "success_every": SUCCESS_EVERY,
                        "period": self.disable_after,
                        "now": now,
                    },
                )
                rows = await cur.fetchall()
            # The facts of the endpoints this disabled, in the same transaction (rare: outside
            # the pipeline, as steps read their rows at once).
            for endpoint_id, organization_id, url, reason, at, newly in rows:
                if not newly:
                    continue
                disabled.add(endpoint_id)
                self.metrics.disables.labels("410" if health[endpoint_id][2] else "failures").inc()
                log.warning("webhook endpoint %d disabled: %s", endpoint_id, reason)
                await steps.on_async(
                    conn, disabled_fact_steps(endpoint_id, organization_id, url, reason, at)
                )
        return disabled

    def _count(self, r: _Result) -> None:
        """Count an attempt recorded (:mod:`.metrics`: bounded labels only)."""
        if r.duration_ms is not None:
            self.metrics.duration(r.outcome, r.duration_ms / 1000.0)
        if r.outcome == "delivered":
            self.metrics.attempt("delivered")
        elif r.outcome == "held":
            self.metrics.attempt("held", "410" if r.status == 410 else "disabled")
        else:
            if r.status is None and r.send_error is None:
                why = "no_secret"
            else:
                why = error_class(r.status, r.send_error)
            last = r.job.attempt >= r.job.max_attempts
            self.metrics.attempt("dead" if last else "retried", why)

    def _outcome(self, r: _Result) -> None:
        """Return (delivered) or raise the job's outcome (the table in the module docstring)."""
        if r.outcome == "delivered":
            return
        if r.outcome == "held":
            raise jobs.Cancel(r.error or "held", code=HELD)
        delay = self.backoff.backoff(r.job.attempt)
        if r.retry_after is not None:
            # Retry-After is the least to wait, under a back-off that still grows.
            delay = max(r.retry_after, delay)
        code = "http_" + str(r.status) if r.status is not None else "send"
        raise jobs.Retry(r.error or "failed", after=delay, code=code)


def _attempt_rows(results: Sequence[_Result]) -> str:
    """The attempt rows of ``results`` as one JSON array of objects (webhook_attempt_insert):
    serialised by orjson in one call, where nine typed arrays cost psycopg a few
    microseconds a value to dump."""
    return orjson.dumps(
        [
            {
                "endpoint_id": r.endpoint_id,
                "event_id": r.event_id,
                "job_id": r.job.id,
                "attempt": r.job.attempt,
                "outcome": r.outcome,
                "status": r.status,
                "duration_ms": r.duration_ms,
                "error": summary(r.error),
                "response": r.response,
            }
            for r in results
        ]
    ).decode()


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    """Hand ``exc`` to a future's waiters (a cancellation cancels it)."""
    if future.done():
        return
    if isinstance(exc, asyncio.CancelledError):
        future.cancel()
        return
    future.set_exception(exc)
    future.exception()  # retrieved here: each waiter re-raises it


def _parse(job: Job) -> tuple[int, uuid.UUID, Mapping[str, Any]] | str:
    payload = job.payload
    if not isinstance(payload, Mapping):
        return "the payload is not an object"
    try:
        endpoint_id = check_endpoint_id(payload.get("endpoint_id"))
        event_id = uuid.UUID(str(payload.get("event_id")))
    except (InvalidWebhook, ValueError):
        return "the payload has no valid endpoint_id or event_id"
    if not isinstance(payload.get("type"), str) or "data" not in payload:
        return "the payload has no type or data"
    return endpoint_id, event_id, payload


# -- redelivery ------------------------------------------------------------------------------


def _event_id(value: Any) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        raise InvalidWebhook("event_id", value, "must be an event id (a UUID)") from None


def redeliver_event(
    conn: psycopg.Connection[Any],
    event_id: uuid.UUID | str,
    *,
    endpoint_id: int | None = None,
    now: datetime | None = None,
) -> list[int]:
    """Send one event again to each endpoint it was attempted to (or to ``endpoint_id``): a
    new delivery job per endpoint, with the payload of the last one and fresh attempts, in the
    caller's transaction. Returns the new jobs' ids (none for an event never attempted)."""
    eid = _event_id(event_id)
    wanted = None if endpoint_id is None else check_endpoint_id(endpoint_id)
    at = _aware("now", now)
    rows = conn.execute(
        query("webhook_attempt_event_jobs"), {"event_id": eid, "endpoint_id": wanted}
    ).fetchall()
    created: list[int] = []
    for endpoint, job_id in rows:
        try:
            record = jobs.get_job(conn, job_id)
        except jobs.JobNotFound:
            continue  # the queue's retention deleted it
        enqueued = jobs.enqueue(
            conn,
            JOB_TYPE,
            record.payload,
            queue=QUEUE,
            organization_id=record.organization_id,
            max_attempts=record.max_attempts,
            concurrency_key=f"webhook:{endpoint}",
            now=at,
        )
        created.append(enqueued.id)
    return created


def redeliver_failed(
    conn: psycopg.Connection[Any],
    endpoint_id: int,
    *,
    since: datetime,
    now: datetime | None = None,
) -> list[int]:
    """Requeue every delivery of ``endpoint_id`` that failed (dead) or was held (cancelled)
    with an attempt at or after ``since``, in the caller's transaction; the requeued job ids.
    Deliveries still being retried are left to their schedule."""
    eid = check_endpoint_id(endpoint_id)
    after = _aware("since", since)
    if after is None:
        raise InvalidWebhook("since", since, "must be an aware datetime")
    rows = conn.execute(
        query("webhook_attempt_failed_jobs"), {"endpoint_id": eid, "since": after}
    ).fetchall()
    ids = [row[0] for row in rows]
    if not ids:
        return []
    return list(jobs.requeue(conn, ids=ids, statuses=("dead", "cancelled"), now=_aware("now", now)))


# -- the worker app --------------------------------------------------------------------------

SETTINGS = {
    "DATABASE_URL": "the database",
    "TOCKWORK_WEBHOOK_ALLOW": "networks webhooks may reach despite the SSRF guard (none)",
    "TOCKWORK_WEBHOOK_TIMEOUT": f"seconds a request may take in all (default {DEFAULT_TIMEOUT:g})",
    "TOCKWORK_WEBHOOK_CONNECT_TIMEOUT": (
        f"seconds a connection may take (default {DEFAULT_CONNECT_TIMEOUT:g})"
    ),
    "TOCKWORK_WEBHOOK_PER_ENDPOINT": (
        f"deliveries in flight per endpoint (default {DEFAULT_PER_ENDPOINT}), unless the "
        "webhooks queue has a policy already"
    ),
    "TOCKWORK_WEBHOOK_CA_FILE": "a CA bundle to trust besides the system's (a local receiver's)",
}


def _number(env: Mapping[str, str], name: str, default: float, maximum: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidWebhook(name, raw, "must be a number") from None
    if not 0 < value <= maximum or math.isnan(value):
        raise InvalidWebhook(name, raw, f"must be above 0 and at most {maximum:g}")
    return value


def handler_from_env(conninfo: str, env: Mapping[str, str]) -> WebhookHandler:
    """The handler the environment configures (:data:`SETTINGS`); raises
    :class:`InvalidWebhook` naming the setting."""
    context = None
    if ca := env.get("TOCKWORK_WEBHOOK_CA_FILE", "").strip():
        try:
            context = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidWebhook("TOCKWORK_WEBHOOK_CA_FILE", ca, type(exc).__name__) from None
    return WebhookHandler(
        conninfo,
        guard=Guard.from_env(env),
        timeout=_number(env, "TOCKWORK_WEBHOOK_TIMEOUT", DEFAULT_TIMEOUT, 3600),
        connect_timeout=_number(
            env, "TOCKWORK_WEBHOOK_CONNECT_TIMEOUT", DEFAULT_CONNECT_TIMEOUT, 3600
        ),
        ssl_context=context,
    )


def bound_endpoints(conninfo: str, per_endpoint: int) -> bool:
    """Set the ``webhooks`` queue's per-key concurrency to ``per_endpoint`` unless the queue has
    a policy (an operator's wins); whether it was set."""
    with jobs.connect(conninfo) as conn:
        if any(p.queue == QUEUE for p in jobs.queue_policies(conn)):
            return False
        jobs.set_queue_policy(conn, QUEUE, concurrency_per_key=per_endpoint)
        conn.commit()
    return True


def app() -> dict[str, Any]:
    """``tockwork worker --app scheduler.webhooks:app --queue webhooks=N``: webhook deliveries
    (:data:`SETTINGS`, docs/webhooks.md)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        raise InvalidWebhook("DATABASE_URL", None, "the webhooks app needs DATABASE_URL")
    env = dict(os.environ)
    handler = handler_from_env(url, env)
    per = int(_number(env, "TOCKWORK_WEBHOOK_PER_ENDPOINT", DEFAULT_PER_ENDPOINT, 100_000))
    bound_endpoints(url, per)
    return {JOB_TYPE: handler}
