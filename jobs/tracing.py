"""OpenTelemetry traces from enqueue to execution, optional: a no-op without ``opentelemetry-api``.

Everything Tockwork does with OpenTelemetry is in this module, and it needs only the API
(``pip install 'tockwork[otel]'``); the application installs the SDK and an exporter and sets
its tracer provider as usual. Without the API, or before any tracer provider is set, each hook
below is one function call that returns at once: nothing is captured, no span is made.

**Enqueue.** :func:`capture` is called by every enqueue (:func:`jobs.enqueue`,
:func:`jobs.enqueue_many` and their async twins, through the one path each takes). When the
caller's current span is *recording*, its W3C ``traceparent`` (and ``tracestate``, when the
trace has one) is stored on the job (``jobs.trace_parent``, ``jobs.trace_state``); otherwise
both stay NULL. A batch shares one context: the span it was enqueued in.

**Execution.** The worker runs each handler call inside a span (:func:`job_span`,
:func:`batch_span`) of kind CONSUMER, named ``tockwork.job <job_type>`` (``tockwork.batch
<job_type>`` for a batch handler), made current while the handler runs so that its own spans
are children of it. Following the OpenTelemetry messaging conventions, the span is the root of
a trace of its own and *links* to the enqueue's context rather than being its child: a job may
run long after the request that enqueued it ended, and every attempt (a retry, a run after a
lease expired) links to the same enqueue context, so one request leads to all the runs of its
job. Attributes (:data:`ATTRIBUTES` documents each): the queue, job type, job id, attempt,
outcome, error code, claim wait (start minus ``run_at``) and handler duration. The payload, the
idempotency key and the organization id are never attribute values; ``configure(
organization_id=True)`` adds the organization id for those who want it. A handler that raised
is recorded on the span (an exception event) with status ERROR when the job will be retried or
is dead; a snooze or a cancel is not an error.

**Services.** The scheduler's tick (``tockwork.scheduler tick``) and each relay batch
(``tockwork.relay batch``) get a span of kind INTERNAL with their counts as attributes (see
:func:`service_span`); the jobs they enqueue carry that span's context, so a reminder's
execution links to the tick that enqueued it.

Tests and applications may pass their own provider (``configure(tracer_provider=...)``) instead
of the global one, and ``configure(enabled=False)`` turns everything off even where the API is
installed.
"""

from __future__ import annotations

import importlib.metadata
import os
import types
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.model import JobStatus

if TYPE_CHECKING:
    from jobs.model import Job
    from jobs.store import Finished

_api: Any  # opentelemetry.trace, or None without the API
_context: Any  # opentelemetry.context
_propagator: Any
try:  # the optional extra: Tockwork imports and runs without it
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # exercised in a subprocess by the tests
    _api = _context = _propagator = None
else:
    _api, _context = _otel_trace, _otel_context
    _propagator = TraceContextTextMapPropagator()

INSTRUMENTATION = "tockwork"
# The attributes of an execution span, and what each holds. None is a payload value, an
# idempotency key or (unless configure(organization_id=True)) an organization id.
ATTRIBUTES: Mapping[str, str] = types.MappingProxyType(
    {
        "messaging.system": "always 'tockwork'",
        "messaging.operation.type": "'process' (a handler call)",
        "messaging.operation.name": "'process'",
        "messaging.destination.name": "the job's queue",
        "messaging.message.id": "the job id (a single handler's span)",
        "messaging.batch.message_count": "the jobs of a batch handler's call",
        "tockwork.job.type": "the job type",
        "tockwork.job.attempt": "the attempt number, from 1 (a single handler's span)",
        "tockwork.job.max_attempts": "the job's max_attempts (a single handler's span)",
        "tockwork.job.outcome": "the handler's outcome: succeeded, retried, dead, snoozed...",
        "tockwork.job.error_code": "the error code of a failed attempt",
        "tockwork.job.claim_wait": "seconds from run_at to the start of the handler call",
        "tockwork.job.handler_duration": "seconds the handler ran",
        "tockwork.job.ids": "the job ids of a batch, in the order of tockwork.job.outcomes",
        "tockwork.job.outcomes": "each job's outcome in a batch",
        "tockwork.batch.runs": "handler calls a batch took (re-runs isolate a failure)",
        "tockwork.worker": "the worker's name",
        "tockwork.organization_id": "only with configure(organization_id=True)",
    }
)
_NO_TRACE: tuple[None, None] = (None, None)


class _State:
    enabled = True
    organization_id = False
    provider: Any = None  # an explicit tracer provider; None: the global one
    tracer: Any = None
    tracer_of: Any = None  # the provider the cached tracer came from
    global_provider: Any = None  # the global provider, once one is set


_state = _State()


def available() -> bool:
    """Whether the ``opentelemetry-api`` package is installed."""
    return _api is not None


def configure(
    *,
    tracer_provider: Any = None,
    organization_id: bool = False,
    enabled: bool = True,
) -> None:
    """Set how Tockwork traces (process-wide; call it at start-up, before workers start).

    ``tracer_provider``: an OpenTelemetry ``TracerProvider`` to use instead of the global one.
    ``organization_id``: add the job's organization id to execution spans (off by default: it
    is tenant data). ``enabled=False``: capture no context and make no span at all.
    """
    _state.provider = tracer_provider
    _state.organization_id = organization_id
    _state.enabled = enabled
    _state.tracer = _state.tracer_of = _state.global_provider = None


def _tracer() -> Any:
    """The tracer to make spans with, or None when tracing is off (no API, disabled, or no
    tracer provider set: the API's default provider makes only non-recording spans)."""
    if _api is None or not _state.enabled:
        return None
    provider = _state.provider
    if provider is None:
        provider = _global_provider()
        if provider is None:
            return None
    if _state.tracer_of is not provider:
        _state.tracer = provider.get_tracer(INSTRUMENTATION, _version())
        _state.tracer_of = provider
    return _state.tracer


def _global_provider() -> Any:
    """The global tracer provider once the application has set one, else None (kept for good
    once found: the API lets it be set only once).

    ``get_tracer_provider()`` looks the environment up at every call until a provider is set
    (3-10 us, paid per job by a worker of an application that does not trace), so the API's
    module global is read first; where the environment names a provider, or a future API has
    no such global, the public call decides."""
    if _state.global_provider is None:
        if getattr(_api, "_TRACER_PROVIDER", _UNKNOWN) is None and not _ENV_PROVIDER:
            return None  # the common case: none set yet
        provider = _api.get_tracer_provider()
        if isinstance(provider, (_api.ProxyTracerProvider, _api.NoOpTracerProvider)):
            return None
        _state.global_provider = provider
    return _state.global_provider


_UNKNOWN = object()
# A provider named by the environment is loaded by the API's first lookup.
_ENV_PROVIDER = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _version() -> str | None:
    try:
        return importlib.metadata.version("tockwork")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return None


def capture() -> tuple[str | None, str | None]:
    """The W3C ``(traceparent, tracestate)`` of the current span when it is recording, else
    ``(None, None)``: what an enqueue stores on its jobs."""
    if _api is None or not _state.enabled or not _api.get_current_span().is_recording():
        return _NO_TRACE
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent"), carrier.get("tracestate") or None


def _link(job: Job, attributes: Mapping[str, Any] | None = None) -> Any:
    """A link to the context ``job`` was enqueued in, or None if it has none (or a bad one)."""
    if job.trace_parent is None:
        return None
    carrier = {"traceparent": job.trace_parent}
    if job.trace_state:
        carrier["tracestate"] = job.trace_state
    linked = _api.get_current_span(_propagator.extract(carrier)).get_span_context()
    if not linked.is_valid:
        return None
    return _api.Link(linked, attributes)


class Span:
    """A span in the making, or a no-op (:data:`OFF`) when tracing is off.

    ``with span:`` makes it current (its block's spans are its children). An exception that
    leaves the block is recorded and ends the span; otherwise :meth:`finish` (a handler call)
    or :meth:`end` (a service span) ends it after the outcome is known.
    """

    __slots__ = ("_batch", "_span", "_token")

    def __init__(self, span: Any = None, *, batch: bool = False) -> None:
        self._span = span
        self._batch = batch
        self._token: Any = None

    def __enter__(self) -> Span:
        if self._span is not None:
            self._token = _context.attach(_api.set_span_in_context(self._span))
        return self

    def __exit__(self, _type: Any, exc: BaseException | None, _tb: Any) -> None:
        if self._token is not None:
            _context.detach(self._token)
            self._token = None
        if exc is not None and self._span is not None:
            self._fail(exc)
            self._span.end()
            self._span = None

    def _fail(self, exc: BaseException) -> None:
        self._span.record_exception(exc)
        self._span.set_status(_api.Status(_api.StatusCode.ERROR, type(exc).__name__))

    def set(self, attributes: Mapping[str, Any]) -> None:
        """Add attributes (a no-op when off)."""
        if self._span is not None:
            self._span.set_attributes(attributes)

    def end(self, attributes: Mapping[str, Any] | None = None) -> None:
        """End a service span, with its final attributes."""
        span, self._span = self._span, None
        if span is not None:
            if attributes:
                span.set_attributes(attributes)
            span.end()

    def finish(
        self, finished: Sequence[Finished], error: BaseException | None, *, runs: int = 1
    ) -> None:
        """End a handler call's span with the attempts' outcomes: one job for a single
        handler, the batch's jobs for a batch handler (``runs``: its calls, re-runs included)."""
        span, self._span = self._span, None
        if span is None or not finished:
            if span is not None:
                span.end()
            return
        failed = [f for f in finished if f.decision.status in _FAILED]
        if not self._batch:
            f = finished[0]
            span.set_attribute("tockwork.job.outcome", f.decision.outcome)
            span.set_attribute("tockwork.job.handler_duration", f.duration_ms / 1000.0)
            if f.decision.code:
                span.set_attribute("tockwork.job.error_code", f.decision.code)
        else:
            span.set_attribute("tockwork.job.ids", [f.job.id for f in finished])
            span.set_attribute("tockwork.job.outcomes", [f.decision.outcome for f in finished])
            span.set_attribute("tockwork.batch.runs", runs)
            span.set_attribute(
                "tockwork.job.handler_duration", max(f.duration_ms for f in finished) / 1000.0
            )
        if failed:
            if error is not None:
                span.record_exception(error)
            codes = sorted({f.decision.code or f.decision.outcome for f in failed})
            span.set_status(_api.Status(_api.StatusCode.ERROR, ", ".join(codes)))
        span.end()


OFF = Span()
"""The span of tracing switched off: every method is a no-op."""

_FAILED = frozenset({JobStatus.RETRYING, JobStatus.DEAD})


def _common(job: Job, worker: str, started_at: datetime) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": INSTRUMENTATION,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": job.queue,
        "tockwork.job.type": job.job_type,
        "tockwork.worker": worker,
        "tockwork.job.claim_wait": max(0.0, (started_at - job.run_at).total_seconds()),
    }
    return attributes


def job_span(job: Job, worker: str, started_at: datetime) -> Span:
    """The execution span of one single-handler call (started now), or :data:`OFF`."""
    tracer = _tracer()
    if tracer is None:
        return OFF
    attributes = _common(job, worker, started_at)
    attributes["messaging.message.id"] = str(job.id)
    attributes["tockwork.job.attempt"] = job.attempt
    attributes["tockwork.job.max_attempts"] = job.max_attempts
    if _state.organization_id and job.organization_id is not None:
        attributes["tockwork.organization_id"] = str(job.organization_id)
    link = _link(job)
    return Span(
        tracer.start_span(
            f"tockwork.job {job.job_type}",
            context=_ROOT,
            kind=_api.SpanKind.CONSUMER,
            attributes=attributes,
            links=[link] if link is not None else None,
        )
    )


def batch_span(batch: Sequence[Job], worker: str, started_at: datetime) -> Span:
    """The execution span of one batch-handler call, linked to each job's enqueue context
    (the link's attributes name the job and its attempt), or :data:`OFF`."""
    tracer = _tracer()
    if tracer is None or not batch:
        return OFF
    first = batch[0]
    # The claim wait of the job that waited longest.
    attributes = _common(min(batch, key=lambda j: j.run_at), worker, started_at)
    attributes["messaging.batch.message_count"] = len(batch)
    if _state.organization_id:
        orgs = sorted({str(j.organization_id) for j in batch if j.organization_id is not None})
        if orgs:
            attributes["tockwork.organization_id"] = orgs
    links = [
        link
        for j in batch
        if (
            link := _link(j, {"messaging.message.id": str(j.id), "tockwork.job.attempt": j.attempt})
        )
        is not None
    ]
    return Span(
        tracer.start_span(
            f"tockwork.batch {first.job_type}",
            context=_ROOT,
            kind=_api.SpanKind.CONSUMER,
            attributes=attributes,
            links=links or None,
        ),
        batch=True,
    )


def service_span(name: str, attributes: Mapping[str, Any]) -> Span:
    """A span of kind INTERNAL for one round of a service (a tick, a relay batch), a child of
    the current span if any (a tick called from an application's code), or :data:`OFF`."""
    tracer = _tracer()
    if tracer is None:
        return OFF
    return Span(tracer.start_span(name, kind=_api.SpanKind.INTERNAL, attributes=attributes))


# The parent of every execution span: none (a new trace, linked to the enqueue's).
_ROOT: Any = _context.Context() if _context is not None else None
