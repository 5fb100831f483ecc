"""Reminders to devices: the delivery handler, the messages it builds, and the worker app.

:class:`DeliveryHandler` is the ``reminder`` job type's batch handler (``async``: it runs on the
worker's event loop, and its channels keep many HTTP/2 streams in flight there). For a batch of
up to :data:`MAX_BATCH` reminder jobs:

1. one read: the still-due check of the whole batch, the devices of its subjects, and
   check-before-send of the effect-once keys, one per (job, device). With
   :class:`RegistryResolver` or :class:`SubjectAsToken` that is one statement
   (``device_delivery_read``: one round trip, no transaction; the keys are computed in the
   database as :func:`device_key` computes them); with an application's own
   :class:`DeviceResolver`, one short transaction of the steps
   (:func:`scheduler.reminders.check_steps`, the resolver, ``jobs.effects.recorded``);
2. no transaction open: one :class:`~scheduler.push.PushMessage` per device not yet notified,
   sent through the channel the device belongs to (``fcm``, ``apns``, ``simulated``, ...), all
   channels at once;
3. right after the answers (record-after-send): the effect-once keys of the delivered
   messages and the devices' last success, one statement (``device_delivery_record``) for the
   built-in resolvers; a batch with dead tokens (invalidated, with ``device.invalidated``
   outbox facts) or an application's resolver records in one short transaction;
4. the job outcomes (below); the skip records (paused, superseded, quiet ``skip``, no device,
   expired) are written in the worker's completion transaction, so they commit exactly when
   the outcome does.

A job's outcome from its devices' results: any ``transient`` -> retry (its delivered devices
are recorded, so the retry notifies only the others); else any ``rate_limited`` -> retry after
the longest hint; else any ``permanent`` (or a device whose channel is not configured) -> dead,
with the error, for a person to fix and requeue; else succeeded (``delivered``, ``duplicate``,
and ``rejected``: a dead token is invalidated and never retried). A due job whose subject has no
valid device succeeds and is recorded as skipped (``no_device``); one whose message has expired
(``expires_at`` passed before it could be sent: a worker outage) succeeds, skipped
(``expired``), and is not sent: a phone must not show the 08:00 reminder at noon. A job the
worker claims after its schedule's ``max_lateness`` is not even run: jobs' expiry ends it
``expired`` and the handler's ``on_expired`` records the skip (kind ``expired``). The message's
``expires_at`` (FCM's ``ttl``, APNs' ``apns-expiration``) is the job's own ``expires_at`` (its
run_at plus the schedule's ``max_lateness``) when that comes before the occurrence plus the
handler's ``ttl``, unless the payload sets its own ``ttl``: the provider drops what a worker
would not start.

A transient answer's Retry-After is a floor under the handler's growing ``backoff`` (default
:class:`jobs.RetryPolicy`'s), not the delay itself: a provider's outage answering "retry after
1 s" for 30 s would otherwise use up a job's attempts in seconds.

What a message holds, from the job's payload (the schedule's payload, copied to each job):
``title`` (default ``Reminder``) and ``body`` (else ``message``, default ``reminder``) with the
placeholders ``{subject}``, ``{time}`` and ``{date}`` (the occurrence's local time and date in
the schedule's zone) and ``{zone}``; ``data`` (a mapping; values that are not strings are sent
as JSON text, as FCM requires strings); ``ttl`` (seconds, default :data:`DEFAULT_TTL`, at most
28 days); ``collapse_key`` (default one per schedule, ``tockwork-<schedule id>``: a late
reminder replaces a stale one on the device); ``priority`` (``high`` or ``normal``). The
expiry is the occurrence's nominal instant plus ``ttl``. ``data`` also carries
``tockwork_key`` (the message's idempotency key: an app can drop a repeat on the device),
``tockwork_schedule`` and ``tockwork_occurrence``.

Delivery is at least once: a worker that dies between a provider's answer and step 3 sends that
message again on the job's retry (FCM and APNs have no idempotency key to stop it; the
``tockwork_key`` in ``data`` lets the app on the phone drop it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg

import jobs
from jobs import Job, effects
from jobs.internal import Steps, arrays, steps
from jobs.metrics import Metrics, observe_all
from scheduler import devices as registry
from scheduler.errors import InvalidPushConfig
from scheduler.occurrence_job import OccurrenceMeta
from scheduler.push import PushChannel, PushMessage, PushResult, PushStatus
from scheduler.queries import database_now_steps, plan_once_async, query
from scheduler.reminders import (
    Due,
    ReminderBatch,
    check_steps,
    decide_steps,
    record_expired,
    record_skipped,
)
from timezones import Clock, get_zone

log = logging.getLogger("tockwork.delivery")

# Jobs per batch: each costs one message per device; 500 keeps a batch's reads one statement each.
MAX_BATCH = 500
# How long a reminder stays worth showing after its nominal instant, unless its payload says.
DEFAULT_TTL = timedelta(hours=1)
# FCM's and APNs' longest: 28 days. The shortest is a minute: a reminder must outlive the queue's
# own delay between its instant and its run, or every one of them would expire unsent.
MAX_TTL = timedelta(days=28)
MIN_TTL = timedelta(minutes=1)

Recipient = tuple[UUID | None, str]
_NIL = UUID(int=0)  # subject_deliveries' organization of subjects without one
MAX_CAP = 10_000
MAX_CAP_WINDOW = timedelta(days=31)


@dataclass(frozen=True, slots=True)
class SubjectCap:
    """A quiet "do not nag" rule: at most ``max_deliveries`` reminders per subject in any
    ``window`` (rolling, ending at each batch's instant), across all of that subject's
    schedules. The excess is not sent: the job succeeds and its occurrence is recorded as a
    skip of kind ``capped`` (the reason says the cap). Decided per batch, in the transaction of
    its still-due read (two statements, no round trip per job); a job counted once is admitted
    again on a retry without counting twice."""

    max_deliveries: int
    window: timedelta

    def __post_init__(self) -> None:
        n = self.max_deliveries
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CAP:
            raise InvalidPushConfig("max_deliveries", n, f"must be an integer from 1 to {MAX_CAP}")
        w = self.window
        if not isinstance(w, timedelta) or not timedelta(seconds=1) <= w <= MAX_CAP_WINDOW:
            raise InvalidPushConfig(
                "window", w, f"must be a timedelta from 1 second to {MAX_CAP_WINDOW.days} days"
            )

    @property
    def reason(self) -> str:
        """The skip's reason: ``capped: at most N per S s``."""
        return f"capped: at most {self.max_deliveries} per {self.window.total_seconds():g} s"


class Target(Protocol):
    """A device to notify, as a resolver returns it (:class:`scheduler.devices.Device` is one)."""

    @property
    def channel(self) -> str: ...

    @property
    def token(self) -> str: ...

    @property
    def id(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Device:
    """A device an application's resolver returns (not in the registry: ``id`` is None)."""

    channel: str
    token: str
    id: int | None = None


class DeviceResolver(Protocol):
    """Where a subject's devices come from: the registry by default, or the application.

    ``resolve`` is called inside the handler's short read transaction with its connection (an
    application that keeps tokens in its own tables reads them there, in the same snapshot);
    ``invalidate`` inside the record-after-send transaction, with the devices a provider
    declared dead: ``(target, reason, provider code)``.
    """

    async def resolve(
        self, conn: psycopg.AsyncConnection[Any], recipients: Sequence[Recipient]
    ) -> Mapping[Recipient, Sequence[Target]]: ...

    async def invalidate(
        self,
        conn: psycopg.AsyncConnection[Any],
        dead: Sequence[tuple[Target, str, str]],
        now: datetime,
    ) -> None: ...


class RegistryResolver:
    """Devices from Tockwork's registry (:mod:`scheduler.devices`), one statement a batch.

    A dead token is invalidated there, once, with a ``device.invalidated`` outbox fact; a
    delivered one gets its ``last_success_at`` (at most one write an hour per device).
    """

    async def resolve(
        self, conn: psycopg.AsyncConnection[Any], recipients: Sequence[Recipient]
    ) -> Mapping[Recipient, Sequence[Target]]:
        return await steps.on_async(conn, registry.devices_for_steps(recipients))

    async def invalidate(
        self,
        conn: psycopg.AsyncConnection[Any],
        dead: Sequence[tuple[Target, str, str]],
        now: datetime,
    ) -> None:
        items = [(t.id, reason, code) for t, reason, code in dead if t.id is not None]
        if items:
            await steps.on_async(conn, registry.invalidate_devices_steps(items, now=now))

    async def succeeded(
        self, conn: psycopg.AsyncConnection[Any], targets: Sequence[Target], now: datetime
    ) -> None:
        ids = sorted({t.id for t in targets if t.id is not None})
        if ids:
            await steps.on_async(conn, registry.mark_succeeded_steps(ids, now=now))


@dataclass(frozen=True, slots=True)
class SubjectAsToken:
    """Each subject is its own device token on ``channel``: for demos, tests, benchmarks and
    applications whose subjects are already tokens (or FCM topics). Nothing to invalidate."""

    channel: str

    async def resolve(
        self, conn: psycopg.AsyncConnection[Any], recipients: Sequence[Recipient]
    ) -> Mapping[Recipient, Sequence[Target]]:
        return {r: [Device(self.channel, r[1])] for r in recipients}

    async def invalidate(
        self,
        conn: psycopg.AsyncConnection[Any],
        dead: Sequence[tuple[Target, str, str]],
        now: datetime,
    ) -> None:
        for _, reason, code in dead:
            log.warning("a %s token was rejected (%s: %s)", self.channel, code, reason)


class BadPayload(jobs.PermanentError):
    """A reminder's payload cannot make a message (the field and the value named)."""


_PLACEHOLDER = re.compile(r"\{(subject|time|date|zone)\}")


@dataclass(frozen=True, slots=True)
class Content:
    """What a reminder job's payload says to show (module docstring)."""

    title: str
    body: str
    data: Mapping[str, str]
    ttl: timedelta
    collapse_key: str | None
    priority: str


def _text(payload: Mapping[str, Any], name: str, default: str) -> str:
    value = payload.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadPayload(f"payload field {name!r} must be text, got {value!r}", code="bad_payload")
    return value


_UNREAD: Any = object()


def content(
    job: Job, *, default_ttl: timedelta = DEFAULT_TTL, meta: OccurrenceMeta | None = _UNREAD
) -> Content:
    """The message a reminder job's payload describes (raises :class:`BadPayload`); ``meta``:
    the job's :class:`OccurrenceMeta` when the caller has read it already."""
    payload: Mapping[str, Any] = job.payload
    if type(payload) is not dict and not isinstance(payload, Mapping):  # type(): the ABC is slow
        payload = {}
    title = _text(payload, "title", "Reminder")
    body = _text(payload, "body", _text(payload, "message", "reminder"))
    raw = payload.get("data")
    data: dict[str, str] = {}
    if raw:
        if not isinstance(raw, Mapping):
            raise BadPayload(
                f"payload field 'data' must be a mapping, got {raw!r}", code="bad_payload"
            )
        data = {
            str(k): v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
            for k, v in raw.items()
        }
    ttl = default_ttl
    if payload.get("ttl") is not None:
        seconds = payload["ttl"]
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise BadPayload(
                f"payload field 'ttl' must be seconds, got {seconds!r}", code="bad_payload"
            )
        ttl = timedelta(seconds=seconds)
        if not MIN_TTL <= ttl <= MAX_TTL:
            raise BadPayload(
                f"payload field 'ttl' must be from {int(MIN_TTL.total_seconds())} to "
                f"{int(MAX_TTL.total_seconds())} seconds, "
                f"got {seconds!r}",
                code="bad_payload",
            )
    if meta is _UNREAD:
        meta = OccurrenceMeta.of(job)
    default_collapse = f"tockwork-{meta.schedule_id}" if meta is not None else None
    collapse = _text(payload, "collapse_key", default_collapse or "") or None
    priority = _text(payload, "priority", "high")
    if priority not in ("high", "normal"):
        raise BadPayload(
            f"payload field 'priority' must be 'high' or 'normal', got {priority!r}",
            code="bad_payload",
        )
    return Content(title, body, data, ttl, collapse, priority)


# A payload's content as a delivery uses it: title, body, data, ttl, collapse key (or
# _SCHEDULE_COLLAPSE: the schedule's default), priority, and whether the payload set the ttl.
_Content = tuple[str, str, Mapping[str, str], timedelta, str | None, str, bool]
_SCHEDULE_COLLAPSE = "\0schedule"  # not a key a payload can give: it would be text like any


def _content_of(
    job: Job, meta: OccurrenceMeta | None, default_ttl: timedelta, known: dict[Any, _Content]
) -> _Content:
    """:func:`content` of ``job`` (raises :class:`BadPayload` as it does), read once per
    distinct payload content of a batch (``known``): a herd's jobs share their title, body
    and options, and differ by subject and schedule (the default collapse key is left as
    :data:`_SCHEDULE_COLLAPSE`, for the caller to fill)."""
    payload = job.payload
    if type(payload) is dict and not payload.get("data"):
        get = payload.get
        fields = (
            get("title"),
            get("body"),
            get("message"),
            get("ttl"),
            get("collapse_key"),
            get("priority"),
        )
        try:
            cached = known.get(fields)
        except TypeError:  # a field that is neither text nor a number: content() names it
            content(job, default_ttl=default_ttl, meta=meta)
            raise  # not reached: content() raised BadPayload
        if cached is not None:
            return cached
        c = content(job, default_ttl=default_ttl, meta=None)
        collapse = c.collapse_key if fields[4] is not None else _SCHEDULE_COLLAPSE
        cached = known[fields] = (
            c.title,
            c.body,
            c.data,
            c.ttl,
            collapse,
            c.priority,
            fields[3] is not None,
        )
        return cached
    c = content(job, default_ttl=default_ttl, meta=meta)
    return (c.title, c.body, c.data, c.ttl, c.collapse_key, c.priority, _own_ttl(payload))


def render(text: str, *, subject: str, at: datetime, zone: str | None) -> str:
    """``text`` with its placeholders filled: ``{subject}``, ``{time}`` and ``{date}`` (``at``
    in ``zone``, else UTC) and ``{zone}``; other braces are left as they are."""
    if "{" not in text:
        return text
    local = at.astimezone(get_zone(zone)) if zone else at
    values = {
        "subject": subject,
        "time": local.strftime("%H:%M"),
        "date": local.strftime("%Y-%m-%d"),
        "zone": zone or "UTC",
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def device_key(job: Job, target: Target) -> str:
    """The effect-once key of ``job``'s notification of one device: stable across the job's
    attempts, different per device (a digest of the token, never the token itself).

    The job's effect key (:func:`jobs.effects.effect_key` of ``push``, e.g.
    ``push:reminder:-:schedule:42:2026-06-01T08:00``), then ``/``, the channel, ``.`` and the
    first 16 hex digits of the token's SHA-256, which the delivery's one read
    (``device_delivery_read`` in scheduler/sql/device.sql) computes in the database too. The
    job's part comes first so that a herd claimed in job order inserts its keys side by side
    in ``job_effects``'s primary key, not on a random leaf each (the digest first did: a
    full-page image per leaf touched after each checkpoint). One key per (job, device): the
    job's part is free text, but a channel's name has no ``/`` (``[a-z][a-z0-9_]*``: the
    handler refuses another channel, and sends nothing to a device of a channel it has not), so
    the key splits at its last ``/``."""
    return f"{effects.effect_key(job, 'push')}/{target.channel}.{_digest(target.token)}"


def _legacy_device_key(job: Job, target: Target) -> str:
    """:func:`device_key` as it was written before the job's part came first
    (``push.<channel>.<digest>`` then ``:reminder:<org>:<key>``): checked too for a job leased
    before (:attr:`jobs.Job.leased_before`: a retry, a rate-limited run, a requeue), whose
    earlier run may have been the former code's and recorded it (docs/push.md, "Effect-once
    keys", says until when)."""
    return f"push.{target.channel}.{_digest(target.token)}{_key_suffix(job)}"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _key_suffix(job: Job) -> str:
    """What follows the effect name in the job's effect keys (``:reminder:<org>:<key>``)."""
    return effects.effect_key(job, "push")[len("push") :]


# A due job's devices, as the read found them: (the registry's device id or None, channel,
# token, the effect-once key, recorded already). Tuples, not a Target each: the delivery's read
# returns these five columns side by side, and a herd has a device per job.
Found = list[tuple[int | None, str, str, str, bool]]


@dataclass(slots=True)
class _Plan:
    """One due job's messages (and the devices they go to)."""

    job: Job
    sends: list[PushMessage] = field(default_factory=list)
    done: int = 0  # devices notified by an earlier run of this job


class _AsyncConnections:
    """The handler's async connections: one per batch in flight, kept for the next."""

    def __init__(self, conninfo: str, *, plan_once: bool = False) -> None:
        self.conninfo = conninfo
        # Only the built-in resolvers' statements (ours) are planned once with their generic
        # plan: an application's resolver runs its own statements on these connections.
        self.plan_once = plan_once
        self._idle: list[psycopg.AsyncConnection[Any]] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed or conn.broken:
            # Autocommit: the delivery's one read and its record are single statements (one
            # round trip each); what needs more runs in an explicit transaction.
            conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, **jobs.connect_kwargs(jobs.pooler_mode())
            )
            arrays.register(conn)  # the read's and the record's columns (_read_folded)
            if self.plan_once:
                # A worker keeps up to a connection a batch in flight (16), each running a
                # few batches of a herd: planned per call, the read and the record were
                # planned again almost every time (docs/performance.md, fifth pass).
                await plan_once_async(conn)
        try:
            yield conn
        finally:
            if not conn.closed and not conn.broken:
                self._idle.append(conn)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


_START_DELAY = Metrics.for_registry().occurrence_start_delay


class DeliveryHandler(jobs.BatchHandler):
    """The batch handler of reminder jobs, through ``channels`` (module docstring).

    ``channels``: the configured :class:`~scheduler.push.PushChannel` objects (one per name);
    ``resolver``: where devices come from (default the registry); ``clock``: the instant of a
    batch (default the database's); ``ttl``: the default lifetime of a reminder; ``backoff``:
    the growing delay of a transient answer that carries a Retry-After (the hint is its floor,
    module docstring; default :class:`jobs.RetryPolicy`'s); ``cap``: a
    :class:`SubjectCap` on every subject's deliveries (default none). Jobs claimed past their
    max_lateness are not run; :meth:`on_expired` records them as skipped.
    """

    on_expired = staticmethod(record_expired)

    def __init__(
        self,
        conninfo: str,
        channels: Sequence[PushChannel],
        *,
        resolver: DeviceResolver | None = None,
        clock: Clock | None = None,
        ttl: timedelta = DEFAULT_TTL,
        max_batch: int = MAX_BATCH,
        backoff: jobs.RetryPolicy | None = None,
        cap: SubjectCap | None = None,
    ) -> None:
        super().__init__(max_batch=max_batch)
        if cap is not None and not isinstance(cap, SubjectCap):
            raise InvalidPushConfig("cap", cap, "must be a SubjectCap or None")
        self.cap = cap
        if not channels:
            raise InvalidPushConfig("channels", [], "at least one push channel is needed")
        self.channels: dict[str, PushChannel] = {}
        for channel in channels:
            if channel.name in self.channels:
                raise InvalidPushConfig("channels", channel.name, "two channels have this name")
            if not isinstance(channel.name, str) or not registry.CHANNEL_NAME.match(channel.name):
                # The device registry's rule, which the effect-once keys rely on (device_key).
                raise InvalidPushConfig(
                    "channels", channel.name, "a channel's name must be a lower-case letter, "
                    "then up to 31 of a-z, 0-9 and '_'"
                )  # fmt: skip
            self.channels[channel.name] = channel
        self.resolver: DeviceResolver = resolver if resolver is not None else RegistryResolver()
        self.clock = clock
        if not MIN_TTL <= ttl <= MAX_TTL:
            raise InvalidPushConfig("ttl", ttl, f"must be from {MIN_TTL} to {MAX_TTL}")
        self.ttl = ttl
        self.backoff = backoff if backoff is not None else jobs.RetryPolicy()
        self._connections = _AsyncConnections(conninfo, plan_once=type(self.resolver) in _FOLDED)

    async def aclose(self) -> None:
        """Close the handler's connections and its channels."""
        await self._connections.aclose()
        for channel in self.channels.values():
            await channel.aclose()

    async def __call__(self, batch: ReminderBatch) -> None:
        try:
            async with self._connections.connection() as conn:
                await self._deliver(conn, batch)
        except psycopg.OperationalError as exc:
            raise jobs.TransientError(f"database unavailable: {exc}", code="db") from exc

    async def _deliver(self, conn: psycopg.AsyncConnection[Any], batch: ReminderBatch) -> None:
        todo = list(batch.jobs)
        now_hint = self.clock.now() if self.clock is not None else None
        # Each job's occurrence meta and recipient, read from its payload once a batch.
        metas = {job.id: OccurrenceMeta.of(job) for job in todo}
        recipients = {job.id: _recipient(job) for job in todo}
        if type(self.resolver) in _FOLDED:
            now, dues, zones, found = await self._read_folded(
                conn, todo, now_hint, metas, recipients
            )
        else:
            async with conn.transaction():
                now, dues, zones, found = await self._read(conn, todo, now_hint)
        if self.cap is not None:
            async with conn.transaction():
                await self._apply_cap(conn, todo, dues, found, now)
        plans: list[_Plan] = []
        skips: dict[int, Due] = {}
        # Occurrence to start, every job's: a herd's jobs share their instant, so each
        # distinct one's delay is computed once, and the batch's are observed together.
        delays: list[float] = []
        delay_of: dict[datetime, float] = {}
        contents: dict[Any, _Content] = {}
        for job in todo:
            meta = metas[job.id]
            if meta is not None:
                delay = delay_of.get(meta.at)
                if delay is None:
                    delay = delay_of[meta.at] = max((now - meta.at).total_seconds(), 0.0)
                delays.append(delay)
            due = dues[job.id]
            if due.defer_until is not None:
                batch.snooze(job, max(due.defer_until - now, timedelta(0)))
                continue
            if not due:
                batch.succeed(job)
                if due.skipped:
                    skips[job.id] = due
                continue
            plan = self._plan(
                job,
                meta,
                recipients[job.id],
                now,
                zones,
                found.get(job.id, ()),
                batch,
                skips,
                contents,
            )
            if plan is not None:
                plans.append(plan)
        if delays:
            observe_all(_START_DELAY.labels(todo[0].job_type), delays)
        if skips:
            self._record_skips(batch, skips, now)
        if not plans:
            return
        results = await self._send(plans, now)
        job_ids = {m.key: plan.job.id for plan in plans for m in plan.sends}
        await self._record(conn, results, job_ids, now)
        for plan in plans:
            _outcome(batch, plan, results, self.backoff)

    async def _read_folded(
        self,
        conn: psycopg.AsyncConnection[Any],
        todo: Sequence[Job],
        now: datetime | None,
        metas: Mapping[int, OccurrenceMeta | None],
        recipients: Mapping[int, Recipient | None],
    ) -> tuple[datetime, dict[int, Due], dict[int, str], dict[int, Found]]:
        """The read of :meth:`_read` in one statement (``device_delivery_read``), for the
        registry and :class:`SubjectAsToken`: one round trip, no transaction."""
        subject_tokens = isinstance(self.resolver, SubjectAsToken)
        suffixes = [_key_suffix(job) for job in todo]
        # The columns encoded by jobs.arrays (registered on the connection): psycopg's list
        # dumpers scan and encode each element in Python, a tenth of the handler's time.
        params: dict[str, Any] = {
            "job_ids": arrays.int8_array([job.id for job in todo]),
            "schedule_ids": arrays.int8_array(
                [m.schedule_id if m is not None else None for m in metas.values()]
            ),
            "organization_ids": arrays.uuid_array([job.organization_id for job in todo]),
            "subjects": arrays.text_array(
                [r[1] if r is not None else None for r in recipients.values()]
            ),
            "suffixes": arrays.text_array(suffixes),
            "legacy_suffixes": arrays.text_array(
                [s if job.leased_before else None for job, s in zip(todo, suffixes, strict=True)]
            ),
            "now": now,
        }
        if subject_tokens:
            assert isinstance(self.resolver, SubjectAsToken)
            params["channel"] = self.resolver.channel
            name = "device_delivery_read_subject_tokens"
        else:
            name = "device_delivery_read"
        async with conn.cursor() as cur:
            await cur.execute(query(name), params)
            rows = await cur.fetchall()
        at: datetime = rows[0][1]
        states: dict[int, tuple[Any, ...]] = {}
        found: dict[int, Found] = {}
        # Slices, not a starred unpacking (a list per row). A row: job id, now, the schedule's
        # seven columns of schedule_still_due_many, then a Found's five (device id, channel,
        # token, key, whether the key is recorded).
        for row in rows:
            sid = row[2]
            if sid is not None and sid not in states:
                states[sid] = row[2:9]
            if row[11] is not None:
                devices = found.get(row[0])
                if devices is None:
                    devices = found[row[0]] = []
                devices.append(row[9:14])
        dues, zones = await steps.on_async(
            conn, decide_steps(todo, list(states.values()), at, metas)
        )
        return at, dues, zones, found

    async def _read(
        self, conn: psycopg.AsyncConnection[Any], todo: Sequence[Job], now: datetime | None
    ) -> tuple[datetime, dict[int, Due], dict[int, str], dict[int, Found]]:
        """The still-due check, the devices (through the resolver) and check-before-send,
        in the caller's transaction (an application's resolver reads in it)."""
        at: datetime = await steps.on_async(conn, database_now_steps(now))
        dues, zones = await steps.on_async(conn, check_steps(todo, at))
        recipients = sorted(
            {r for job in todo if dues[job.id] and (r := _recipient(job)) is not None},
            key=lambda r: (str(r[0]), r[1]),
        )
        targets = await self.resolver.resolve(conn, recipients) if recipients else {}
        found: dict[int, Found] = {}
        for job in todo:
            recipient = _recipient(job)
            if dues[job.id] and recipient is not None:
                found[job.id] = [
                    (t.id, t.channel, t.token, device_key(job, t), False)
                    for t in targets.get(recipient, ())
                ]
        # A job leased before is checked under the former key too (_legacy_device_key).
        legacy = {
            device_key(job, t): _legacy_device_key(job, t)
            for job in todo
            if job.leased_before and dues[job.id] and (r := _recipient(job)) is not None
            for t in targets.get(r, ())
        }
        keys = [device[3] for devices in found.values() for device in devices]
        keys += legacy.values()
        before = await effects.recorded_async(conn, keys) if keys else set()
        if before:
            for devices in found.values():
                devices[:] = [
                    (i, ch, tok, key, key in before or legacy.get(key) in before)
                    for i, ch, tok, key, _ in devices
                ]
        return at, dues, zones, found

    async def _apply_cap(
        self,
        conn: psycopg.AsyncConnection[Any],
        todo: Sequence[Job],
        dues: dict[int, Due],
        found: Mapping[int, Found],
        at: datetime,
    ) -> None:
        """The subject cap (:class:`SubjectCap`): the due jobs with a device to send to, in
        occurrence order, admitted or not in one statement; the others become not due
        (``capped``) in ``dues``."""
        assert self.cap is not None
        candidates: list[tuple[datetime, int, Job, Recipient]] = []
        for job in todo:
            r = _recipient(job)
            if dues[job.id] and r is not None and found.get(job.id):
                meta = OccurrenceMeta.of(job)
                candidates.append((meta.at if meta is not None else job.run_at, job.id, job, r))
        if not candidates:
            return
        candidates.sort(key=lambda c: (c[0], c[1]))
        params = {
            "job_ids": [c[1] for c in candidates],
            "organization_ids": [c[3][0] or _NIL for c in candidates],
            "subjects": [c[3][1] for c in candidates],
            "max_deliveries": self.cap.max_deliveries,
            "window_seconds": self.cap.window.total_seconds(),
            "now": at,
        }
        rows = await steps.on_async(conn, _admit_steps(params))
        capped = Due(False, self.cap.reason)
        for job_id, admitted, _used in rows:
            if not admitted:
                dues[job_id] = capped

    def _plan(
        self,
        job: Job,
        meta: OccurrenceMeta | None,
        recipient: Recipient | None,
        now: datetime,
        zones: Mapping[int, str],
        devices: Sequence[tuple[int | None, str, str, str, bool]],
        batch: ReminderBatch,
        skips: dict[int, Due],
        contents: dict[Any, _Content] | None = None,
    ) -> _Plan | None:
        """The messages of one due job to ``devices`` (:data:`Found`: each with its key and
        whether it is recorded), or None when its outcome is set already (a bad payload,
        nothing to send, expired). ``contents``: the batch's payload contents read so far
        (:func:`_content_of`)."""
        if not devices:
            batch.succeed(job)
            skips[job.id] = Due(False, "no_device")
            return None
        try:
            c = _content_of(job, meta, self.ttl, contents if contents is not None else {})
        except BadPayload as exc:
            batch.fail(job, str(exc), code="bad_payload")
            return None
        title, body, data, ttl, collapse, priority, own_ttl = c
        if collapse is _SCHEDULE_COLLAPSE:
            collapse = f"tockwork-{meta.schedule_id}" if meta is not None else None
        at = meta.at if meta is not None else job.run_at
        # The payload's own ttl, when it sets one; else the handler's ttl, cut to the job's
        # expiry: the provider keeps the message no longer than a worker would start the job.
        expires_at = at + ttl
        if job.expires_at is not None and not own_ttl and job.expires_at < expires_at:
            expires_at = job.expires_at
        subject = recipient[1] if recipient is not None else ""
        if "{" in title or "{" in body:
            zone = zones.get(meta.schedule_id) if meta is not None else None
            title = render(title, subject=subject, at=at, zone=zone)
            body = render(body, subject=subject, at=at, zone=zone)
        plan = _Plan(job)
        sends = plan.sends
        # What every device's data holds after its key (tockwork_key, set per device).
        schedule = str(meta.schedule_id) if meta is not None else ""
        planned: set[str] | None = set() if len(devices) > 1 else None
        for device_id, channel, token, key, recorded in devices:
            if planned is not None:
                if key in planned:  # a resolver listed one device twice: one message
                    continue
                planned.add(key)
            if recorded:
                plan.done += 1
                continue
            if meta is None:
                message_data = {**data, "tockwork_key": key}
            else:
                message_data = {
                    **data,
                    "tockwork_key": key,
                    "tockwork_schedule": schedule,
                    "tockwork_occurrence": meta.occurrence_key,
                }
            sends.append(
                PushMessage(
                    key,
                    channel,
                    token,
                    title,
                    body,
                    message_data,
                    collapse,
                    expires_at,
                    priority,
                    subject,
                    device_id,
                )
            )
        if not sends:
            batch.succeed(job)  # every device notified by an earlier run (check-before-send)
            return None
        if expires_at <= now:
            batch.succeed(job)
            skips[job.id] = Due(False, "expired")
            return None
        return plan

    def _record_skips(self, batch: ReminderBatch, skips: Mapping[int, Due], now: datetime) -> None:
        def record(c: psycopg.Connection[Any], succeeded: Sequence[Job]) -> None:
            record_skipped(c, [j for j in succeeded if j.id in skips], skips, now=now)

        batch.in_completion(record)

    async def _send(self, plans: Sequence[_Plan], now: datetime) -> dict[str, PushResult]:
        """Every plan's messages through their channels, all channels at once."""
        by_channel: dict[str, list[PushMessage]] = {}
        results: dict[str, PushResult] = {}
        for plan in plans:
            for message in plan.sends:
                if message.channel in self.channels:
                    by_channel.setdefault(message.channel, []).append(message)
                else:
                    results[message.key] = PushResult(
                        message,
                        PushStatus.PERMANENT,
                        f"no push channel {message.channel!r} is configured",
                        "no_channel",
                    )
        names = list(by_channel)
        answers = await asyncio.gather(
            *(self._send_one(self.channels[n], by_channel[n], now) for n in names)
        )
        for answer in answers:
            for result in answer:
                results[result.message.key] = result  # not .key: a property, a call
        return results

    @staticmethod
    async def _send_one(
        channel: PushChannel, messages: list[PushMessage], now: datetime
    ) -> list[PushResult]:
        try:
            answer = await channel.send(messages, now=now)
        except Exception as exc:  # a channel that broke its contract: nothing is lost
            log.error("push channel %s failed a whole send: %s", channel.name, type(exc).__name__)
            return [
                PushResult(
                    m, PushStatus.TRANSIENT, f"channel error: {type(exc).__name__}", "channel"
                )
                for m in messages
            ]
        if len(answer) != len(messages):
            log.error("push channel %s answered %d results for %d messages",
                      channel.name, len(answer), len(messages))  # fmt: skip
            return [
                PushResult(m, PushStatus.TRANSIENT, "channel answered short", "channel")
                for m in messages
            ]
        return answer

    async def _record(
        self,
        conn: psycopg.AsyncConnection[Any],
        results: Mapping[str, PushResult],
        job_ids: Mapping[str, int],
        now: datetime,
    ) -> None:
        """Record-after-send, right after the answers: the delivered keys and the devices'
        last success (one statement, ``device_delivery_record``, for the registry and
        :class:`SubjectAsToken`), the dead tokens in a transaction with their outbox facts."""
        delivered = [r for r in results.values() if r.status is PushStatus.DELIVERED]
        dead = [r for r in results.values() if r.status is PushStatus.REJECTED]
        if not delivered and not dead:
            return
        if not dead and type(self.resolver) in _FOLDED:
            keys = [r.message.key for r in delivered]
            ids = [r.message.device_id for r in delivered if r.message.device_id is not None]
            params = {
                **effects.record_many_params(keys, job_ids=[job_ids[k] for k in keys], now=now),
                **registry.mark_succeeded_params(ids, now=now),
            }
            # Checked above; encoded by jobs.arrays, as the read's (_read_folded).
            params["keys"] = arrays.text_array(params["keys"])
            params["job_ids"] = arrays.int8_array(params["job_ids"])
            params["ids"] = arrays.int8_array(params["ids"])
            async with conn.cursor() as cur:
                await cur.execute(query("device_delivery_record"), params)
            return
        async with conn.transaction():
            if delivered:
                await effects.record_many_async(
                    conn,
                    [r.key for r in delivered],
                    job_ids=[job_ids[r.key] for r in delivered],
                    now=now,
                )
                succeeded = getattr(self.resolver, "succeeded", None)
                if succeeded is not None:
                    await succeeded(conn, [_Sent(r.message) for r in delivered], now)
            if dead:
                await self.resolver.invalidate(
                    conn,
                    [(_Sent(r.message), r.error or "rejected", r.code or "rejected") for r in dead],
                    now,
                )


@dataclass(frozen=True, slots=True)
class _Sent:
    """The device a sent message went to, as a :class:`Target`."""

    message: PushMessage

    @property
    def channel(self) -> str:
        return self.message.channel

    @property
    def token(self) -> str:
        return self.message.token

    @property
    def id(self) -> int | None:
        return self.message.device_id


# The resolvers whose read and record the handler folds into one statement each.
_FOLDED: frozenset[type] = frozenset({RegistryResolver, SubjectAsToken})


def _admit_steps(params: dict[str, Any]) -> Steps[list[Any]]:
    """The subject cap's two statements: the subjects' rows, then the admission."""
    yield query("subject_delivery_ensure"), params
    rows: list[Any] = yield query("subject_delivery_admit"), params
    return rows


def _own_ttl(payload: Any) -> bool:
    """Whether a reminder's payload sets its own ``ttl``."""
    if type(payload) is not dict and not isinstance(payload, Mapping):  # type(): the ABC is slow
        return False
    return payload.get("ttl") is not None


def _recipient(job: Job) -> Recipient | None:
    payload = job.payload
    if type(payload) is not dict and not isinstance(payload, Mapping):
        return None
    subject = payload.get("subject")
    if subject is None or subject == "":
        return None
    return (job.organization_id, str(subject))


def _outcome(
    batch: ReminderBatch,
    plan: _Plan,
    results: Mapping[str, PushResult],
    backoff: jobs.RetryPolicy,
) -> None:
    """One job's outcome from its devices' results (module docstring)."""
    sends = plan.sends
    if len(sends) == 1 and results[sends[0].key].status in _SUCCEEDS:  # one device: no list
        batch.succeed(plan.job)
        return
    answers = [results[m.key] for m in sends]
    if all(r.status in _SUCCEEDS for r in answers):  # the common case: no list to sort out
        batch.succeed(plan.job)
        return
    transient = [r for r in answers if r.status is PushStatus.TRANSIENT]
    limited = [r for r in answers if r.status is PushStatus.RATE_LIMITED]
    permanent = [r for r in answers if r.status is PushStatus.PERMANENT]
    if transient:
        first = transient[0]
        hints = [r.retry_after for r in transient if r.retry_after is not None]
        # A 503's Retry-After is the least to wait, not the backoff: a storm answering "1 s"
        # for 30 s would use up every job's attempts in 10 s (tests/integration/push/
        # test_pipeline.py). The backoff still grows; without a hint the worker's policy rules.
        delay = max(*hints, backoff.backoff(plan.job.attempt)) if hints else None
        batch.retry(plan.job, _summary(first), code=first.code or "transient",
                    delay=delay)  # fmt: skip
    elif limited:
        hints = [r.retry_after or timedelta(0) for r in limited]
        batch.rate_limited(plan.job, max(hints), _summary(limited[0]))
    elif permanent:
        batch.fail(plan.job, _summary(permanent[0]), code=permanent[0].code or "permanent")
    else:
        batch.succeed(plan.job)


# The answers that leave a job succeeded (module docstring): a dead token is invalidated, not
# retried.
_SUCCEEDS = frozenset({PushStatus.DELIVERED, PushStatus.DUPLICATE, PushStatus.REJECTED})


def _summary(result: PushResult) -> str:
    where = result.message.channel
    return f"{where}: {result.error or result.status.value}"


# -- the worker app -------------------------------------------------------------------------------

# The settings the app reads (docs/push.md): name -> what it is.
SETTINGS = {
    "TOCKWORK_FCM_CREDENTIALS": "path of the FCM service-account JSON file",
    "TOCKWORK_FCM_URL": "FCM's base URL (default https://fcm.googleapis.com)",
    "TOCKWORK_FCM_QUOTA": "FCM messages a minute to pace to (default 600000; 0: no pacing)",
    "TOCKWORK_APNS_KEY_FILE": "path of the APNs .p8 signing key",
    "TOCKWORK_APNS_KEY_ID": "the key's id (10 characters)",
    "TOCKWORK_APNS_TEAM_ID": "the Apple team id (10 characters)",
    "TOCKWORK_APNS_TOPIC": "the app's bundle id",
    "TOCKWORK_APNS_URL": "production (default), sandbox, or a URL",
    "TOCKWORK_PUSH_SIMULATED": "1: the simulated channel (records in simulated_pushes)",
    "TOCKWORK_PUSH_DEVICES": "registry (default), or subject:<channel> (each subject is a token)",
    "TOCKWORK_PUSH_TTL": "seconds a reminder stays worth showing (default 3600)",
    "TOCKWORK_PUSH_SUBJECT_CAP": "N/SECONDS: at most N reminders per subject in any SECONDS "
    "(default: no cap)",
    "TOCKWORK_PUSH_CA_FILE": "a CA bundle to trust for the providers (a local fake's)",
}

_APNS = ("TOCKWORK_APNS_KEY_FILE", "TOCKWORK_APNS_KEY_ID", "TOCKWORK_APNS_TEAM_ID",
         "TOCKWORK_APNS_TOPIC")  # fmt: skip


def _seconds(
    env: Mapping[str, str], name: str, default: float, maximum: float, minimum: float = 0
) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InvalidPushConfig(name, raw, "must be a number") from None
    if not minimum <= value <= maximum:
        raise InvalidPushConfig(name, raw, f"must be from {minimum:g} to {maximum:g}")
    return value


# A channel's constructor names its own argument; the app names the setting it came from.
_FCM_FIELDS = {"credentials_file": "TOCKWORK_FCM_CREDENTIALS", "url": "TOCKWORK_FCM_URL",
               "quota_per_minute": "TOCKWORK_FCM_QUOTA"}  # fmt: skip
_APNS_FIELDS = {"key_file": "TOCKWORK_APNS_KEY_FILE", "key_id": "TOCKWORK_APNS_KEY_ID",
                "team_id": "TOCKWORK_APNS_TEAM_ID", "topic": "TOCKWORK_APNS_TOPIC",
                "url": "TOCKWORK_APNS_URL"}  # fmt: skip


@contextmanager
def _settings_named(names: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a channel's :class:`InvalidPushConfig` under the setting's name
    (``credentials_file.private_key`` -> ``TOCKWORK_FCM_CREDENTIALS (private_key)``)."""
    try:
        yield
    except InvalidPushConfig as exc:
        head, _, rest = exc.field.partition(".")
        if head not in names:
            raise
        field = names[head] + (f" ({rest})" if rest else "")
        raise InvalidPushConfig(field, exc.value, exc.reason) from None


def channels_from_env(conninfo: str, env: Mapping[str, str]) -> list[PushChannel]:
    """The channels the environment configures (:data:`SETTINGS`); raises
    :class:`InvalidPushConfig` naming the setting when one is missing or malformed."""
    import ssl

    context = None
    if ca := env.get("TOCKWORK_PUSH_CA_FILE", "").strip():
        try:
            context = ssl.create_default_context(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidPushConfig("TOCKWORK_PUSH_CA_FILE", ca, type(exc).__name__) from None
    channels: list[PushChannel] = []
    if credentials := env.get("TOCKWORK_FCM_CREDENTIALS", "").strip():
        from scheduler.push.fcm import FcmChannel

        quota = int(_seconds(env, "TOCKWORK_FCM_QUOTA", 600_000, 60_000_000))
        with _settings_named(_FCM_FIELDS):
            channels.append(
                FcmChannel(
                    credentials,
                    url=env.get("TOCKWORK_FCM_URL", "").strip() or "https://fcm.googleapis.com",
                    quota_per_minute=quota or None,
                    ssl_context=context,
                )
            )
    given = [name for name in _APNS if env.get(name, "").strip()]
    if given:
        missing = [name for name in _APNS if name not in given]
        if missing:
            raise InvalidPushConfig(missing[0], None, f"is required with {given[0]}")
        from scheduler.push.apns import ApnsChannel

        with _settings_named(_APNS_FIELDS):
            channels.append(
                ApnsChannel(
                    key_file=env["TOCKWORK_APNS_KEY_FILE"].strip(),
                    key_id=env["TOCKWORK_APNS_KEY_ID"].strip(),
                    team_id=env["TOCKWORK_APNS_TEAM_ID"].strip(),
                    topic=env["TOCKWORK_APNS_TOPIC"].strip(),
                    url=env.get("TOCKWORK_APNS_URL", "").strip() or "production",
                    ssl_context=context,
                    conninfo=conninfo,
                )
            )
    simulated = env.get("TOCKWORK_PUSH_SIMULATED", "").strip()
    if simulated not in ("", "0", "1"):
        raise InvalidPushConfig("TOCKWORK_PUSH_SIMULATED", simulated, "must be 0 or 1")
    if simulated == "1":
        from scheduler import simulated as sim

        sim.install(conninfo)
        channels.append(
            sim.SimulatedChannel(
                conninfo,
                transient_rate=_seconds(env, "TOCKWORK_SIM_TRANSIENT", 0, 1),
                rate_limit_rate=_seconds(env, "TOCKWORK_SIM_RATE_LIMIT", 0, 1),
                retry_after=timedelta(seconds=_seconds(env, "TOCKWORK_SIM_RETRY_AFTER", 1, 3600)),
            )
        )
    if not channels:
        raise InvalidPushConfig(
            "TOCKWORK_FCM_CREDENTIALS",
            None,
            "no push channel is configured: set TOCKWORK_FCM_CREDENTIALS, the "
            "TOCKWORK_APNS_* settings, or TOCKWORK_PUSH_SIMULATED=1",
        )
    return channels


def resolver_from_env(env: Mapping[str, str], channels: Sequence[PushChannel]) -> DeviceResolver:
    raw = env.get("TOCKWORK_PUSH_DEVICES", "").strip() or "registry"
    if raw == "registry":
        return RegistryResolver()
    kind, _, channel = raw.partition(":")
    names = sorted(c.name for c in channels)
    if kind != "subject" or channel not in names:
        raise InvalidPushConfig(
            "TOCKWORK_PUSH_DEVICES", raw, f"must be registry or subject:<one of {names}>"
        )
    return SubjectAsToken(channel)


def pace(conninfo: str, channels: Sequence[PushChannel]) -> jobs.RateLimit | None:
    """The global rate limit of the ``reminder`` job type at the channels' quota (the smallest
    one), set unless one is set already (an operator's limit wins: ``tockwork limits``)."""
    quotas = [c.quota_per_minute for c in channels if c.quota_per_minute]
    if not quotas:
        return None
    per_minute = min(quotas)
    with jobs.connect(conninfo) as conn:
        existing = [s for s in jobs.limits.list_limits(conn) if s.limit.job_type == "reminder"]
        if existing:
            return None
        limit = jobs.RateLimit(
            job_type="reminder", per_second=max(1, per_minute // 60), per_minute=per_minute
        )
        jobs.limits.set_limit(conn, limit)
        conn.commit()
        return limit


def app() -> dict[str, Any]:
    """``tockwork worker --app scheduler.delivery:app``: reminders to devices through the
    channels the environment configures (:data:`SETTINGS`, docs/push.md)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        raise InvalidPushConfig("DATABASE_URL", None, "the delivery app needs DATABASE_URL")
    env = dict(os.environ)
    channels = channels_from_env(url, env)
    resolver = resolver_from_env(env, channels)
    ttl = timedelta(
        seconds=_seconds(
            env, "TOCKWORK_PUSH_TTL", 3600, MAX_TTL.total_seconds(), MIN_TTL.total_seconds()
        )
    )
    cap = cap_from_env(env)
    pace(url, channels)
    return {"reminder": DeliveryHandler(url, channels, resolver=resolver, ttl=ttl, cap=cap)}


def cap_from_env(env: Mapping[str, str]) -> SubjectCap | None:
    """``TOCKWORK_PUSH_SUBJECT_CAP=N/SECONDS`` (``3/3600``) as a :class:`SubjectCap`; unset
    or empty: None."""
    raw = env.get("TOCKWORK_PUSH_SUBJECT_CAP", "").strip()
    if not raw:
        return None
    count, slash, window = raw.partition("/")
    if (
        not slash
        or not (count.isascii() and count.isdigit())
        or not (window.isascii() and window.isdigit())
        or len(count) > 6
        or len(window) > 8
    ):
        raise InvalidPushConfig("TOCKWORK_PUSH_SUBJECT_CAP", raw, "must be N/SECONDS, e.g. 3/3600")
    try:
        return SubjectCap(int(count), timedelta(seconds=int(window)))
    except InvalidPushConfig as exc:
        raise InvalidPushConfig("TOCKWORK_PUSH_SUBJECT_CAP", raw, exc.reason) from None


def simulated_app() -> dict[str, Any]:
    """``tockwork worker --app scheduler.delivery:simulated_app``: reminders through the
    simulated channel (``scheduler.simulated.SimulatedChannel``, rows in ``simulated_pushes``),
    each subject its own simulated device: the app of the demo and the tests, no provider.

    Reads ``DATABASE_URL`` and the failure rates ``TOCKWORK_SIM_TRANSIENT`` and
    ``TOCKWORK_SIM_RATE_LIMIT`` (fractions, default 0) from the environment.
    """
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        raise InvalidPushConfig("DATABASE_URL", None, "the simulated app needs DATABASE_URL")
    env = {name: value for name, value in os.environ.items() if name.startswith("TOCKWORK_SIM_")}
    channels = channels_from_env(url, {**env, "TOCKWORK_PUSH_SIMULATED": "1"})
    return {"reminder": DeliveryHandler(url, channels, resolver=SubjectAsToken("simulated"))}


__all__ = [
    "DEFAULT_TTL",
    "MAX_BATCH",
    "SETTINGS",
    "BadPayload",
    "Content",
    "DeliveryHandler",
    "Device",
    "DeviceResolver",
    "RegistryResolver",
    "SubjectAsToken",
    "SubjectCap",
    "Target",
    "app",
    "cap_from_env",
    "channels_from_env",
    "content",
    "device_key",
    "render",
    "simulated_app",
]
