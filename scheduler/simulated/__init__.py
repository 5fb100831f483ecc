"""The simulated push provider: a real pipeline's last hop, recorded instead of sent.

:class:`SimulatedPush` records each delivery in the ``simulated_pushes`` table, keyed by the
job's effect key (a retried job never notifies twice), and can be told to fail transiently, to
rate-limit with a Retry-After, or to reject tokens, so a reminder pipeline can be tested end to
end without a live provider.

:meth:`SimulatedPush.send_many` is the multicast form (FCM's ``sendEachForMulticast``, up to
:data:`MULTICAST_MAX` messages a request): one request, one result per message (delivered,
duplicate, transient, rate limited with a Retry-After, rejected token), so one bad token or one
throttled message does not fail the others. Its deliveries are written with one statement.

:class:`SimulatedChannel` is the same provider as a push channel (``scheduler.push``), the one
the delivery handler (``scheduler.delivery``) uses in tests and demos: one row per device
notified, written on a connection of its own (a real provider's effect is not part of the
handler's transaction either).

The table belongs to this opt-in migration component (``scheduler.simulated``), not to the
scheduler's core schema: a production database gets it only when something uses the provider
(:func:`install`, which ``scheduler.delivery.simulated_app`` calls, or ``tockwork migrate
--with simulated``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, LiteralString

import psycopg

import jobs
from jobs import Job, effects, migrate
from jobs.internal import arrays, pending_migrations, queries
from scheduler.errors import InvalidSchedule
from scheduler.occurrence_job import OccurrenceMeta
from scheduler.push import PushMessage, PushResult, PushStatus
from scheduler.queries import plan_once_async

# The migration component's name (its package): ``sql/migrations`` and ``sql/schema.sql``.
COMPONENT = "scheduler.simulated"

# Messages per multicast request (FCM's limit); send_many splits longer lists into requests.
MULTICAST_MAX = 500


def query(name: str) -> LiteralString:
    return queries.load(COMPONENT)[name]


_INSTALLED: set[str] = set()


def install(url: str) -> bool:
    """Apply this component's migrations to the database at ``url`` (once per process), if
    the scheduler's core migrations are in; return whether the component is installed.

    On a database without the core schema it does nothing: the scheduler's first migration
    (from before the table was opt-in) creates ``simulated_pushes`` itself and the next drops
    it when empty, so a table made first would fail ``tockwork migrate`` ("relation
    simulated_pushes already exists"). The command that loads the app then refuses the
    unmigrated database with its one line, or migrates it first (``--migrate``); the next
    start installs the component."""
    if url in _INSTALLED:
        return True
    with psycopg.connect(url) as conn:
        # scheduler.migrations.COMPONENTS, which imports this module (no cycle: named here)
        if pending_migrations(conn, ("jobs", "scheduler")):
            return False
        migrate(conn, (COMPONENT,))
    _INSTALLED.add(url)
    return True


def _fraction(*parts: object) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _check_rates(transient_rate: float, rate_limit_rate: float) -> None:
    """The failure rates of the simulated provider and channel: fractions from 0 to 1."""
    for name, rate in (("transient_rate", transient_rate), ("rate_limit_rate", rate_limit_rate)):
        if not 0.0 <= rate <= 1.0:
            raise InvalidSchedule(name, rate, "must be from 0 to 1")


class SendStatus(StrEnum):
    """What the provider answered for one message of a request."""

    DELIVERED = "delivered"  # sent now
    DUPLICATE = "duplicate"  # delivered before (same key): not sent again
    TRANSIENT = "transient"  # timeout or 5xx: worth retrying
    RATE_LIMITED = "rate_limited"  # 429: retry after ``retry_after``
    REJECTED = "rejected"  # the device token is dead: retrying cannot help


@dataclass(frozen=True, slots=True)
class Message:
    """One push: the job it delivers, its subject (whose device token) and its text."""

    job: Job
    subject: str | None
    message: str
    # The message's idempotency key: the job's ``push`` effect key (computed once: a request
    # reads it several times per message).
    key: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", effects.effect_key(self.job, "push"))


@dataclass(frozen=True, slots=True)
class SendResult:
    """The provider's answer for one :class:`Message`."""

    message: Message
    status: SendStatus
    error: str | None = None
    code: str | None = None  # provider_timeout, rate_limited, bad_token
    retry_after: timedelta | None = None  # RATE_LIMITED only

    @property
    def job(self) -> Job:
        return self.message.job

    @property
    def key(self) -> str:
        return self.message.key

    @property
    def ok(self) -> bool:
        """Delivered, now or before: the job's push has happened."""
        return self.status in (SendStatus.DELIVERED, SendStatus.DUPLICATE)


class SimulatedPush:
    """A push provider that records deliveries in ``simulated_pushes`` instead of sending.

    Failures are deterministic per (job, attempt), so a run is reproducible: ``transient_rate``
    of attempts fail transiently, ``rate_limit_rate`` are rate limited with ``retry_after``, and
    subjects in ``rejected_subjects`` have a dead device token (rejected). :meth:`send_many`
    reports them per message; :meth:`send` raises :class:`jobs.TransientError`,
    :class:`jobs.RateLimited` and :class:`jobs.PermanentError`.
    """

    def __init__(
        self,
        *,
        transient_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        retry_after: timedelta = timedelta(seconds=1),
        rejected_subjects: Collection[str] = (),
        seed: int = 0,
    ) -> None:
        _check_rates(transient_rate, rate_limit_rate)
        self.transient_rate = transient_rate
        self.rate_limit_rate = rate_limit_rate
        self.retry_after = retry_after
        self.rejected_subjects = frozenset(rejected_subjects)
        self.seed = seed

    def _refusal(self, m: Message) -> SendResult | None:
        """The failure this message draws, or None when the provider accepts it."""
        if m.subject is not None and m.subject in self.rejected_subjects:
            error = f"device token of {m.subject} rejected"
            return SendResult(m, SendStatus.REJECTED, error, "bad_token")
        if not (self.transient_rate or self.rate_limit_rate):
            return None  # no failure to draw (the default): skip the hash
        draw = _fraction(self.seed, m.job.id, m.job.attempt)
        if draw < self.transient_rate:
            return SendResult(
                m, SendStatus.TRANSIENT, "simulated provider timeout", "provider_timeout"
            )
        if draw < self.transient_rate + self.rate_limit_rate:
            return SendResult(
                m,
                SendStatus.RATE_LIMITED,
                "simulated provider: 429 Retry-After",
                "rate_limited",
                self.retry_after,
            )
        return None

    def send_many(
        self, conn: psycopg.Connection[Any], messages: Sequence[Message]
    ) -> list[SendResult]:
        """Multicast: deliver ``messages``, one :class:`SendResult` each, in their order.

        A message whose key was delivered before (by an earlier request, or earlier in this
        one) is a duplicate and is not delivered again. The deliveries of each request of up to
        :data:`MULTICAST_MAX` messages are one statement, in the caller's transaction.
        """
        results: list[SendResult] = []
        for start in range(0, len(messages), MULTICAST_MAX):
            results.extend(self._request(conn, messages[start : start + MULTICAST_MAX]))
        return results

    def _request(
        self, conn: psycopg.Connection[Any], messages: Sequence[Message]
    ) -> list[SendResult]:
        answers: list[SendResult | None] = [self._refusal(m) for m in messages]
        accepted: dict[str, Message] = {}
        for m, answer in zip(messages, answers, strict=True):
            if answer is None:
                accepted.setdefault(m.key, m)
        delivered: set[str] = set()
        if accepted:
            rows = [(key, accepted[key]) for key in sorted(accepted)]
            metas = [OccurrenceMeta.of(m.job) for _, m in rows]
            cursor = conn.execute(
                query("simulated_push_insert_many"),
                {
                    "effect_keys": [key for key, _ in rows],
                    "job_ids": [m.job.id for _, m in rows],
                    "schedule_ids": [None if m is None else m.schedule_id for m in metas],
                    "occurrence_keys": [None if m is None else m.occurrence_key for m in metas],
                    "occurrence_ats": [None if m is None else m.at for m in metas],
                    "subjects": [m.subject for _, m in rows],
                    "messages": [m.message for _, m in rows],
                    "attempts": [m.job.attempt for _, m in rows],
                },
            )
            delivered = {row[0] for row in cursor.fetchall()}
        results: list[SendResult] = []
        for m, answer in zip(messages, answers, strict=True):
            if answer is not None:
                results.append(answer)
            elif accepted.get(m.key) is m and m.key in delivered:
                results.append(SendResult(m, SendStatus.DELIVERED))
            else:  # delivered before, or earlier in this request
                results.append(SendResult(m, SendStatus.DUPLICATE))
        return results

    def send(
        self, conn: psycopg.Connection[Any], job: Job, *, subject: str | None, message: str
    ) -> bool:
        """Deliver once: returns False if this job's push was already delivered.

        :meth:`send_many` for one message, its answer raised as the handler outcome. Runs in
        the caller's transaction; the delivery row and its effect record (``job_effects``)
        commit together.
        """
        (result,) = self.send_many(conn, [Message(job, subject, message)])
        match result.status:
            case SendStatus.REJECTED:
                raise jobs.PermanentError(result.error or "", code=result.code)
            case SendStatus.TRANSIENT:
                raise jobs.TransientError(result.error or "", code=result.code)
            case SendStatus.RATE_LIMITED:
                raise jobs.RateLimited(result.retry_after, result.error or "")
            case SendStatus.DUPLICATE:
                return False
        effects.record_many(conn, [result.key], job_ids=[job.id])
        return True


class SimulatedChannel:
    """A push channel (``scheduler.push.PushChannel``, name ``simulated``) that records each
    notification in ``simulated_pushes`` instead of sending it (module docstring).

    Failures are drawn per (message key, try) from ``seed``: ``transient_rate`` of tries fail
    transiently, ``rate_limit_rate`` are rate limited with ``retry_after``; tokens in
    ``rejected_tokens`` are dead (rejected), those in ``permanent_tokens`` fail permanently. A
    key recorded before comes back ``duplicate``. ``conninfo``: the database of the table
    (its component must be installed: :func:`install`).
    """

    name = "simulated"
    quota_per_minute: int | None = None

    def __init__(
        self,
        conninfo: str,
        *,
        transient_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        retry_after: timedelta = timedelta(seconds=1),
        rejected_tokens: Collection[str] = (),
        permanent_tokens: Collection[str] = (),
        seed: int = 0,
    ) -> None:
        _check_rates(transient_rate, rate_limit_rate)
        self.conninfo = conninfo
        self.transient_rate = transient_rate
        self.rate_limit_rate = rate_limit_rate
        self.retry_after = retry_after
        self.rejected_tokens = frozenset(rejected_tokens)
        self.permanent_tokens = frozenset(permanent_tokens)
        self.seed = seed
        self.tries: dict[str, int] = {}
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    @property
    def _refuses(self) -> bool:
        """Whether any message can be refused (a failure rate, a dead or failing token)."""
        return bool(
            self.transient_rate
            or self.rate_limit_rate
            or self.rejected_tokens
            or self.permanent_tokens
        )

    def _refusal(self, m: PushMessage) -> PushResult | None:
        if m.token in self.rejected_tokens:
            return PushResult(m, PushStatus.REJECTED, "device token unregistered", "UNREGISTERED")
        if m.token in self.permanent_tokens:
            return PushResult(m, PushStatus.PERMANENT, "sender id mismatch", "SENDER_ID_MISMATCH")
        if not (self.transient_rate or self.rate_limit_rate):
            return None
        n = self.tries[m.key] = self.tries.get(m.key, 0) + 1
        draw = _fraction(self.seed, m.key, n)
        if draw < self.transient_rate:
            return PushResult(m, PushStatus.TRANSIENT, "simulated 503", "UNAVAILABLE")
        if draw < self.transient_rate + self.rate_limit_rate:
            return PushResult(
                m, PushStatus.RATE_LIMITED, "simulated 429", "QUOTA_EXCEEDED", self.retry_after
            )
        return None

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = await psycopg.AsyncConnection.connect(
                self.conninfo, autocommit=True, **jobs.connect_kwargs(jobs.pooler_mode())
            )
            arrays.register(self._conn)  # the insert's columns (_channel_rows)
            await plan_once_async(self._conn)  # one statement, many times: planned once
        return self._conn

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        """Record ``messages`` (one statement), one result each, in order."""
        # The common case, no failure configured: no call per message.
        answers: list[PushResult | None] = (
            [self._refusal(m) for m in messages] if self._refuses else [None] * len(messages)
        )
        accepted: dict[str, PushMessage] = {}
        for m, answer in zip(messages, answers, strict=True):
            if answer is None:
                accepted.setdefault(m.key, m)
        duplicates: set[str] = set()
        if accepted:
            rows = [accepted[key] for key in sorted(accepted)]
            loop = asyncio.get_running_loop()
            if self._lock is None or self._lock_loop is not loop:
                # A lock is bound to the loop it first waited on, and a worker's run_until_idle
                # runs a new loop each time: a lock per loop (the old one has no holder left).
                self._lock, self._lock_loop = asyncio.Lock(), loop
            try:
                async with self._lock:
                    conn = await self._connection()
                    cursor = await conn.execute(
                        query("simulated_push_channel_insert_many"), _channel_rows(rows)
                    )
                    duplicates = {row[0] for row in await cursor.fetchall()}
            except psycopg.OperationalError as exc:
                error = f"simulated provider unreachable: {type(exc).__name__}"
                return [
                    a if a is not None else PushResult(m, PushStatus.TRANSIENT, error, "db")
                    for m, a in zip(messages, answers, strict=True)
                ]
        results: list[PushResult] = []
        append, get = results.append, accepted.get
        for m, answer in zip(messages, answers, strict=True):
            if answer is not None:
                append(answer)
            elif get(m.key) is m and m.key not in duplicates:
                append(PushResult(m, _DELIVERED))
            else:
                append(PushResult(m, _DUPLICATE))
        return results

    async def aclose(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


_DELIVERED, _DUPLICATE = PushStatus.DELIVERED, PushStatus.DUPLICATE


def _channel_rows(rows: Sequence[PushMessage]) -> dict[str, bytes]:
    """The insert's columns, in one pass over the messages, encoded by jobs.arrays (psycopg's
    list dumpers encode each element in Python: most of the send's time)."""
    schedule_ids: list[int | None] = []
    occurrence_keys: list[str | None] = []
    for m in rows:
        data = m.data
        schedule = data.get("tockwork_schedule")
        schedule_ids.append(int(schedule) if schedule is not None and schedule.isdigit() else None)
        occurrence_keys.append(data.get("tockwork_occurrence"))
    texts: dict[str, bytes] = {}  # the titles and messages of a herd repeat
    subjects = [m.subject for m in rows]
    tokens = [m.token for m in rows]
    encoded_subjects = arrays.text_array(subjects)
    return {
        "effect_keys": arrays.text_array([m.key for m in rows]),
        "job_ids": arrays.int8_array([None] * len(rows)),
        "schedule_ids": arrays.int8_array(schedule_ids),
        "occurrence_keys": arrays.text_array(occurrence_keys, texts),
        "subjects": encoded_subjects,
        # Each subject its own token (SubjectAsToken, the simulated app's): encoded once.
        "tokens": encoded_subjects if tokens == subjects else arrays.text_array(tokens),
        "titles": arrays.text_array([m.title for m in rows], texts),
        "messages": arrays.text_array([m.body for m in rows], texts),
    }


__all__ = [
    "COMPONENT",
    "MULTICAST_MAX",
    "Message",
    "SendResult",
    "SendStatus",
    "SimulatedChannel",
    "SimulatedPush",
    "install",
]
