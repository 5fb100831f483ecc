"""Typed job definitions: a job type declared once, with its handler and its payload's types.

::

    @jobs.job("send_welcome", queue="emails")
    def send_welcome(user_id: int, locale: str = "en") -> None: ...

    send_welcome.enqueue(conn, user_id=42)              # mypy checks the arguments
    send_welcome.with_options(idempotency_key="welcome-42").enqueue(conn, user_id=42)
    recompute.with_options(unique_key="stats:42", on_active="replace").enqueue(conn, user_id=42)
    send_welcome.with_options(concurrency_key="user-42").enqueue(conn, user_id=42)
    jobs.enqueue_many(conn, [send_welcome.spec(user_id=u) for u in (1, 2, 3)])
    Worker(url, jobs.handlers(send_welcome), {"emails": 4})

The function's parameters are the payload: ``enqueue`` and ``spec`` take exactly the
function's arguments (the decorator keeps its signature through a ``ParamSpec``, so a type
checker rejects a missing, misspelled or mistyped argument), and pydantic validates them
against the annotations before anything is written. The payload is the arguments by name, in
JSON form (``{"user_id": 42, "locale": "en"}``), so plain ``jobs.enqueue(conn,
"send_welcome", {"user_id": 42})`` from another service enqueues the same job. A function
whose one parameter is a pydantic model takes that model as the whole payload::

    class Reminder(pydantic.BaseModel):
        user_id: int
        text: str

    @jobs.job("remind")
    def remind(reminder: Reminder) -> None: ...

    remind.enqueue(conn, Reminder(user_id=42, text="stand up"))  # payload: the model's fields

Running a job validates its payload again (it may have been written by an untyped producer);
a payload that does not fit is a :class:`jobs.PermanentError` (retrying cannot fix it), so the
job goes dead with the validation error and can be inspected and requeued. Handler outcomes
(:class:`jobs.Retry`, :class:`jobs.Snooze`...) raised by the function work as in any handler.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, ParamSpec, TypeVar

import psycopg
import pydantic

from jobs import validate
from jobs.enqueue import enqueue, enqueue_async
from jobs.errors import InvalidJob
from jobs.model import Enqueued, Job, JobSpec, OnActive
from jobs.outcomes import PermanentError
from timezones.errors import shown

__all__ = ["JobDefinition", "handlers", "job"]

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class _Options:
    queue: str = "default"
    priority: int = 0
    max_attempts: int | None = None
    idempotency_key: str | None = None
    organization_id: Any = None
    run_at: datetime | None = None
    now: datetime | None = None
    unique_key: str | None = None
    on_active: OnActive = "keep"
    concurrency_key: str | None = None

    def job_fields(self) -> dict[str, Any]:
        """The options a job row takes (:class:`jobs.JobSpec`'s and ``enqueue``'s names)."""
        return {
            "queue": self.queue,
            "idempotency_key": self.idempotency_key,
            "organization_id": self.organization_id,
            "run_at": self.run_at,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "unique_key": self.unique_key,
            "on_active": self.on_active,
            "concurrency_key": self.concurrency_key,
        }


def _first_error(exc: pydantic.ValidationError) -> tuple[str, Any, str]:
    error = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    return where, error.get("input"), error["msg"]


@dataclass(frozen=True, eq=False)
class JobDefinition(Generic[P, R]):
    """A job type bound to its handler function; made by :func:`job`."""

    fn: Callable[P, R]
    job_type: str
    options: _Options = field(default_factory=_Options)
    _model: type[pydantic.BaseModel] | None = field(default=None, repr=False)
    _signature: inspect.Signature | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._model is not None:
            return
        signature = inspect.signature(self.fn)
        fields: dict[str, Any] = {}
        for name, param in signature.parameters.items():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise InvalidJob(
                    "fn", self.fn, f"parameter {name!r}: *args and **kwargs cannot be a payload"
                )
            annotation = Any if param.annotation is param.empty else param.annotation
            default = ... if param.default is param.empty else param.default
            fields[name] = (annotation, default)
        hints = _resolved_hints(self.fn)
        for name in fields:
            if name in hints:
                fields[name] = (hints[name], fields[name][1])
        model = pydantic.create_model(
            f"{self.job_type}_payload",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_signature", signature)

    # -- the payload ------------------------------------------------------------------------

    def _whole_model(self) -> type[pydantic.BaseModel] | None:
        """The pydantic model that is the whole payload (a function of one model parameter)."""
        assert self._model is not None
        fields = self._model.model_fields
        if len(fields) != 1:
            return None
        annotation = next(iter(fields.values())).annotation
        if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            return annotation
        return None

    def payload(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The validated JSON payload for these arguments (:class:`jobs.InvalidJob` if wrong)."""
        assert self._model is not None and self._signature is not None
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidJob(f"{self.job_type}.arguments", (args, kwargs), str(exc)) from None
        try:
            value = self._model.model_validate(dict(bound.arguments))
        except pydantic.ValidationError as exc:
            where, got, reason = _first_error(exc)
            raise InvalidJob(f"{self.job_type}.{where}", got, reason) from None
        data = value.model_dump(mode="json", exclude_unset=False)
        whole = self._whole_model()
        if whole is not None:
            inner: dict[str, Any] = next(iter(data.values()))
            return inner
        return data

    def _arguments(self, payload: Any) -> dict[str, Any]:
        """The function's arguments from a stored payload (the handler side)."""
        assert self._model is not None
        whole = self._whole_model()
        try:
            if whole is not None:
                name = next(iter(self._model.model_fields))
                return {name: whole.model_validate(payload)}
            value = self._model.model_validate(payload)
        except pydantic.ValidationError as exc:
            where, got, reason = _first_error(exc)
            raise PermanentError(
                f"payload of {self.job_type!r} does not fit the handler: {where}: {reason} "
                f"(got {shown(got)})",
                code="invalid_payload",
            ) from None
        return {name: getattr(value, name) for name in self._model.model_fields}

    # -- producing --------------------------------------------------------------------------

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A :class:`jobs.JobSpec` for :func:`jobs.enqueue_many`, with this definition's options."""
        return JobSpec(
            job_type=self.job_type,
            payload=self.payload(*args, **kwargs),
            **self.options.job_fields(),
        )

    def enqueue(
        self, conn: psycopg.Connection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> Enqueued:
        """:func:`jobs.enqueue` with validated arguments, in the caller's transaction."""
        return enqueue(
            conn,
            self.job_type,
            self.payload(*args, **kwargs),
            now=self.options.now,
            **self.options.job_fields(),
        )

    async def enqueue_async(
        self, conn: psycopg.AsyncConnection[Any], /, *args: P.args, **kwargs: P.kwargs
    ) -> Enqueued:
        """:func:`jobs.enqueue_async` with validated arguments."""
        return await enqueue_async(
            conn,
            self.job_type,
            self.payload(*args, **kwargs),
            now=self.options.now,
            **self.options.job_fields(),
        )

    def with_options(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        idempotency_key: str | None = None,
        organization_id: Any = None,
        run_at: datetime | None = None,
        now: datetime | None = None,
        unique_key: str | None = None,
        on_active: OnActive | None = None,
        concurrency_key: str | None = None,
    ) -> JobDefinition[P, R]:
        """A copy whose enqueues use these options (None keeps the definition's)."""
        changes: dict[str, Any] = {
            name: value
            for name, value in (
                ("queue", queue),
                ("priority", priority),
                ("max_attempts", max_attempts),
                ("idempotency_key", idempotency_key),
                ("organization_id", organization_id),
                ("run_at", run_at),
                ("now", now),
                ("unique_key", unique_key),
                ("on_active", on_active),
                ("concurrency_key", concurrency_key),
            )
            if value is not None
        }
        options = replace(self.options, **changes)
        _check_options(options)
        return replace(self, options=options)

    # -- consuming --------------------------------------------------------------------------

    def __call__(self, job: Job) -> R:
        """The handler: validates ``job.payload`` and calls the function with it."""
        return self.fn(**self._arguments(job.payload))  # type: ignore[call-arg]

    def call(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function directly (tests), bypassing the queue."""
        return self.fn(*args, **kwargs)


def _resolved_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception as exc:  # a name the annotations use is not importable at definition time
        raise InvalidJob("fn", fn, f"its annotations cannot be resolved: {exc}") from None


def _check_options(o: _Options) -> None:
    validate.queue_name(o.queue, "queue")
    validate.priority(o.priority)
    if o.max_attempts is not None:
        validate.max_attempts(o.max_attempts)
    validate.idempotency_key(o.idempotency_key)
    validate.organization_id(o.organization_id)
    validate.aware(o.run_at, "run_at")
    validate.aware(o.now, "now")
    validate.unique_key(o.unique_key)
    validate.on_active(o.on_active, o.unique_key)
    validate.keys(o.idempotency_key, o.unique_key)
    validate.concurrency_key(o.concurrency_key)


def job(
    job_type: str,
    *,
    queue: str = "default",
    priority: int = 0,
    max_attempts: int | None = None,
    concurrency_key: str | None = None,
) -> Callable[[Callable[P, R]], JobDefinition[P, R]]:
    """Declare ``job_type`` with the decorated function as its handler (see the module doc).

    ``concurrency_key``: the key of every job it enqueues (a queue's per-key limit counts it,
    :func:`jobs.set_queue_policy`); usually given per enqueue instead, with
    :meth:`JobDefinition.with_options`.
    """
    validate.job_type(job_type)
    options = _Options(
        queue=queue, priority=priority, max_attempts=max_attempts, concurrency_key=concurrency_key
    )
    _check_options(options)

    def decorate(fn: Callable[P, R]) -> JobDefinition[P, R]:
        if not callable(fn):
            raise InvalidJob("fn", fn, "must be a function")
        if asyncio.iscoroutinefunction(fn):
            raise InvalidJob(
                "fn", fn, "async handlers are not supported by the worker yet: use a def function"
            )
        return JobDefinition(fn, job_type, options)

    return decorate


def handlers(*definitions: JobDefinition[Any, Any]) -> dict[str, Callable[[Job], Any]]:
    """The ``handlers`` mapping of :class:`jobs.Worker` for these definitions."""
    out: dict[str, Callable[[Job], Any]] = {}
    for index, d in enumerate(definitions):
        if not isinstance(d, JobDefinition):
            raise InvalidJob(f"definitions[{index}]", d, "must be made by @jobs.job(...)")
        if d.job_type in out:
            raise InvalidJob(f"definitions[{index}]", d.job_type, "job type declared twice")
        out[d.job_type] = d
    return out
