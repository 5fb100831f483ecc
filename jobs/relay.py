"""The outbox relay: claims pending events and projects them into jobs, exactly once, in order.

One loop on one autocommit connection:

    claim up to batch_size events (one statement, FOR UPDATE SKIP LOCKED, committed at once)
    build each event's jobs through its projections, in Python, outside any transaction
    one transaction: mark the built events processed (fenced) and enqueue their jobs
    one statement: record the failures (retry later with backoff, or set aside as dead)
    claim again at once if this batch found work; else sleep until a notification on
    ``outbox_ready`` or the next poll

Exactly once: the jobs of an event are inserted in the transaction that marks it processed, with
idempotency keys derived from (event id, projection name, index). A relay killed anywhere leaves
either the event processed with its jobs, or neither; its claim expires after ``lease`` and
another relay takes the event over. Marking is fenced by the claim's attempt number, so a relay
whose lease was taken over cannot mark the event, and its jobs are never inserted.

Order: each aggregate has one *current* event, the one it has claimed, else its pending event of
lowest ``seq``; only current events are claimed, and a claimed one only by its holder until the
lease expires (then by a relay that takes it over). So at most one event per aggregate is
claimed at any time, across any number of relays (a unique partial index enforces it), and the
events of an aggregate are projected in ``seq`` order, which is the commit order of their
transactions when those serialise on the aggregate (:mod:`jobs.outbox`, docs/outbox.md). The
claim after a settled batch finds each aggregate's next event, and the loop claims again at once
whenever a batch found work, so a backlog on one aggregate drains at one event per round.

Lost replies: every row a relay claims carries its :attr:`Relay.run_id`. If the connection is
lost before a batch is settled, the claim (or the marking) may have committed unseen; after
reconnecting, the relay first looks up the events still claimed under its run id and finishes
them under the claim it holds (same fencing token), instead of leaving them leased to nobody
until the lease expires.

A claim is a lease, not ownership: the lease must exceed the time a batch takes (projections
are meant to be quick, pure functions). Many relays may run at once; SKIP LOCKED lets them pass
each other.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
from psycopg.types.json import set_json_loads

from jobs import arrays
from jobs.config import UNSET, Unset, merged, setting
from jobs.connection import json_loads
from jobs.enqueue import enqueue, enqueue_many
from jobs.errors import InvalidJob, ProjectionError
from jobs.model import Enqueued, JobSpec
from jobs.outbox import CHANNEL, Event, Projection, Projections
from jobs.queries import query
from jobs.retry import RetryPolicy, summarize
from jobs.service import Reconnect, Service, default_name
from jobs.tracing import Span, service_span
from timezones.clock import Clock

log = logging.getLogger("tockwork.relay")

MAX_BATCH = 10_000
CLAIMED_INDEX = "outbox_aggregate_claimed_idx"  # one claimed event per aggregate
_CLAIM_RACES = 10
_FEW_SPECS = 4
_SPEC_INDEX = re.compile(r"^specs\[(\d+)\]")


@dataclass
class RelayStats:
    """What a relay did, for scripts, tests and logs."""

    batches: int = 0
    claimed: int = 0
    processed: int = 0
    jobs_created: int = 0
    retried: int = 0
    dead: int = 0
    fenced: int = 0

    def __str__(self) -> str:
        """A line for humans (the relay's stop log): ``batches 2, claimed 10, ...``."""
        return ", ".join(
            f"{f.name.replace('_', ' ')} {getattr(self, f.name)}" for f in dataclasses.fields(self)
        )


def _enqueue(
    conn: psycopg.Connection[Any], specs: list[JobSpec], now: datetime | None
) -> list[Enqueued]:
    """The jobs of a settled batch: a few go in one ``INSERT`` each (one round trip), more in
    one ``enqueue_many`` (a COPY, which costs some five round trips however small the batch).
    The few of a one-aggregate backlog's rounds are the common case on the serial path."""
    if len(specs) > _FEW_SPECS or any(spec.payload is None for spec in specs):
        return enqueue_many(conn, specs, now=now)
    results = []
    for index, spec in enumerate(specs):
        try:
            results.append(
                enqueue(
                    conn,
                    spec.job_type,
                    spec.payload,
                    queue=spec.queue,
                    idempotency_key=spec.idempotency_key,
                    organization_id=spec.organization_id,
                    run_at=spec.run_at,
                    priority=spec.priority,
                    max_attempts=spec.max_attempts,
                    now=now,
                    unique_key=spec.unique_key,
                    on_active=spec.on_active,
                    concurrency_key=spec.concurrency_key,
                )
            )
        except InvalidJob as exc:
            raise InvalidJob(f"specs[{index}].{exc.field}", exc.value, exc.reason) from None
    return results


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """The relay's settings, each with its default, bounds and help (:mod:`jobs.config`).

    ``Relay(conninfo, projections, config=RelayConfig(...))``; the relay's keyword arguments of
    the same names override single fields. ``tockwork relay`` builds its options from these
    fields.
    """

    # 500: a batch costs the relay and the server about 1.7 ms whatever its size (its round
    # trips, statements and commit); at 100 that was over a quarter of what a fact cost
    # (docs/performance.md, "The drain's margin, fifth pass").
    batch_size: int = setting(
        500,
        help=f"events per claim (1 to {MAX_BATCH})",
        flag="--batch-size",
        minimum=1,
        maximum=MAX_BATCH,
        metavar="N",
    )
    lease: timedelta = setting(
        timedelta(seconds=60),
        help="seconds a claim lasts before another relay may take the event over (at least 1)",
        flag="--lease",
        minimum=1,
        metavar="SECONDS",
    )
    poll_interval: timedelta = setting(
        timedelta(seconds=1),
        help="seconds between polls when no notification arrives (above 0)",
        flag="--poll",
        positive=True,
        metavar="SECONDS",
    )
    # The API takes any positive number of attempts; the CLI's option 1 to 1000, as it always has.
    max_attempts: int = setting(
        5,
        help="claims of a failing event before it is set aside as dead (1 to 1000)",
        flag="--max-attempts",
        minimum=1,
        maximum=1000,
        metavar="N",
    )
    # LISTEN for notifications; the help line is the switch's (--no-listen turns it off).
    listen: bool = setting(True, help="poll only (behind PgBouncer)", flag="--no-listen")

    def __post_init__(self) -> None:
        batch_size, lease, poll_interval = self.batch_size, self.lease, self.poll_interval
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise InvalidJob("batch_size", batch_size, "must be an integer")
        if not 1 <= batch_size <= MAX_BATCH:
            raise InvalidJob("batch_size", batch_size, f"must be from 1 to {MAX_BATCH}")
        if not isinstance(lease, timedelta) or lease < timedelta(seconds=1):
            raise InvalidJob("lease", lease, "must be a timedelta of at least one second")
        if not isinstance(poll_interval, timedelta) or poll_interval <= timedelta(0):
            raise InvalidJob("poll_interval", poll_interval, "must be a positive timedelta")
        max_attempts = self.max_attempts
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise InvalidJob("max_attempts", max_attempts, "must be a positive integer")


class Relay(Service[RelayStats]):
    """Projects outbox events into jobs (see the module docstring).

    ``projections`` is a :class:`jobs.outbox.Projections` or any iterable of
    :class:`jobs.outbox.Projection`. An event whose type no projection names is marked processed
    with no job. A projection that raises (or returns something other than
    :class:`jobs.JobSpec`) fails its event: retried after ``retry.backoff(attempt)``, and set
    aside as dead after ``max_attempts`` claims. ``clock`` pins time for tests (SQL then uses it
    as ``now``); by default the database clock is the one clock.

    The settings (``batch_size``, ``lease``, ``poll_interval``, ``max_attempts``, ``listen``)
    come from ``config`` (:class:`RelayConfig`); a keyword argument of the same name overrides
    that field.

    :meth:`stop` takes effect after the batch in hand (its events are finished first);
    :meth:`run_until_idle` returns when a claim finds no event ready now, and does not LISTEN.
    """

    def __init__(
        self,
        conninfo: str,
        projections: Iterable[Projection],
        *,
        config: RelayConfig | None = None,
        batch_size: int | Unset = UNSET,
        lease: timedelta | Unset = UNSET,
        poll_interval: timedelta | Unset = UNSET,
        clock: Clock | None = None,
        name: str | None = None,
        listen: bool | Unset = UNSET,
        max_attempts: int | Unset = UNSET,
        retry: RetryPolicy | None = None,
        connect_kwargs: dict[str, Any] | None = None,
        reconnect: Reconnect | None = None,
        pooler: str | None = None,
        listen_conninfo: str | None = None,
    ) -> None:
        config = merged(
            config,
            RelayConfig,
            batch_size=batch_size,
            lease=lease,
            poll_interval=poll_interval,
            listen=listen,
            max_attempts=max_attempts,
        )
        super().__init__(
            conninfo,
            kind="relay",
            name=name or default_name("relay:"),
            log=log,
            clock=clock,
            connect_kwargs=connect_kwargs,
            reconnect=reconnect,
            pooler=pooler,
            listen_conninfo=listen_conninfo,
        )
        self.projections = (
            projections if isinstance(projections, Projections) else Projections(projections)
        )
        self.config = config
        self.batch_size = config.batch_size
        self.lease = config.lease
        self.poll_interval = config.poll_interval
        self.listen = config.listen
        self.max_attempts = config.max_attempts
        self.retry = retry or RetryPolicy(base=timedelta(seconds=5), cap=timedelta(minutes=30))
        self.stats = RelayStats()
        # This relay object's id, written on every row it claims (claim_id), and whether the
        # last batch may have left claims behind (a lost connection before it was settled).
        self.run_id = uuid4()
        self._unsettled = False
        # The next events of the aggregates the last round settled, claimed by its settling.
        self._next_rows: list[Any] = []
        self._woken = False
        self._general_full = False
        self._last_general = 0.0
        self._followed: set[UUID] = set()

    # -- lifecycle --------------------------------------------------------------------------

    def _connected(self, conn: psycopg.Connection[Any]) -> None:
        # Claimed payloads through orjson (as the worker's), and the mark's and the next
        # claim's arrays sent pre-encoded (jobs.arrays): per fact, json.loads and psycopg's
        # element-by-element dumping were a tenth of the relay's own CPU.
        set_json_loads(json_loads, conn)
        arrays.register(conn)

    def _result(self) -> RelayStats:
        return self.stats

    @contextmanager
    def _session(self, *, until_idle: bool) -> Iterator[None]:
        self._connection()
        try:
            if self.listen and not until_idle:
                self._listen(CHANNEL)
            log.info(
                "relay %s started: %d projection(s), batch %d, lease %ss, %s",
                self.name,
                len(self.projections),
                self.batch_size,
                self.lease.total_seconds(),
                "listening" if self.listening else "poll-only",
            )
            yield
        finally:
            self._unlisten()
            self._finish_in_hand()
            self.close()
            log.info("relay %s stopped: %s", self.name, self.stats)

    def _finish_in_hand(self) -> None:
        # Stopped between two rounds: the next events of the last batch's aggregates are
        # claimed already (with the marks that settled it). Finish them rather than leave them
        # leased until the lease expires; the settle of a stopping relay claims no more.
        if not self._next_rows or self._conn is None or self._conn.closed:
            return
        try:
            self._retrying(self.run_batch)
        except psycopg.OperationalError as exc:
            log.warning(
                "relay %s: %d claimed event(s) left leased until the lease expires (%s)",
                self.name,
                len(self._next_rows),
                exc,
            )

    def _step(self, *, until_idle: bool) -> float | None:
        # A batch that found work is followed by the next round at once: its settling claimed
        # the next event of each of its aggregates, so a backlog on one aggregate drains at one
        # event per round, not one per poll.
        claimed = self._retrying(self.run_batch)
        if until_idle:
            return None if claimed == 0 else 0.0
        return 0.0 if claimed > 0 else self.poll_interval.total_seconds()

    def wake(self) -> None:
        self._woken = True  # new events committed: the next round runs a general claim
        super().wake()

    # -- one batch --------------------------------------------------------------------------

    def run_batch(self) -> int:
        """Claim, project and settle one batch; return how many events it held.

        A round takes the events that the previous round's settling claimed (the next event
        of each aggregate it settled, at most ``batch_size``) and, when a general claim is due
        (:meth:`_general_due`), tops them up to ``batch_size`` with a general claim, or adds a
        quarter batch when they fill it. Run again after a lost connection
        (the reconnect policy does), it first finishes the events that the interrupted round
        may still hold: its claim, or the transaction that settled it, may have committed
        although the reply never came.
        """
        conn = self._conn
        assert conn is not None, "run_batch() runs inside run() or run_until_idle()"
        now = self.now_or_none()
        rows: list[Any] = []
        if self._unsettled:
            # Whatever this run still has claimed, the next events in hand included.
            self._next_rows = []
            rows = self._adopt(conn, now)
        if not rows:
            self._unsettled = True  # from before the claim is sent: its reply may be lost
            rows, self._next_rows = self._next_rows, []
            if self._general_due(bool(rows)):
                # At least a quarter of a batch for events of other aggregates, even when the
                # next events of the aggregates in hand fill it: deep aggregates must not starve
                # the others (a round holds at most 1.25 batch_size events).
                limit = max(self.batch_size - len(rows), self.batch_size // 4, 1)
                general = self._claim(conn, now, limit)
                self._last_general = time.monotonic()
                self._general_full = len(general) == limit
                rows = rows + general
        if not rows:
            self._unsettled = False
            return 0
        # One span per batch (jobs/tracing.py); the jobs it enqueues carry its context.
        with service_span(
            "tockwork.relay batch",
            {"tockwork.relay": self.name, "tockwork.relay.claimed": len(rows)},
        ) as span:
            self._project(conn, rows, now, span)
        return len(rows)

    def _project(
        self, conn: psycopg.Connection[Any], rows: list[Any], now: datetime | None, span: Span
    ) -> None:
        """Build, settle and fail the events of one claimed batch."""
        before = dataclasses.replace(self.stats)
        self.stats.batches += 1
        self.stats.claimed += len(rows)
        events = [Event(*row[:9]) for row in rows]
        # The events whose aggregate had a later pending event at their claim (the lease's
        # "more"): only their aggregates are probed for a next event when they settle.
        self._followed = {row[0] for row in rows if row[10]}

        built: dict[UUID, list[JobSpec]] = {}
        failures: dict[UUID, tuple[Event, BaseException]] = {}
        for event in events:
            try:
                built[event.id] = self._build(event)
            except Exception as exc:
                failures[event.id] = (event, exc)
        ok = [e for e in events if e.id in built]
        try:
            self._settle(conn, ok, built, failures, now)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                raise
            # A database error (a constraint, a trigger) aborted the whole batch: settle the
            # events one by one so that only the culprit fails.
            log.warning("relay %s: batch failed (%s); settling events one by one", self.name, exc)
            for event in ok:
                if event.id in failures:
                    continue
                try:
                    self._settle(conn, [event], built, failures, now)
                except psycopg.OperationalError:
                    raise
                except psycopg.Error as one:
                    failures[event.id] = (event, one)
        self._fail(conn, list(failures.values()), now)
        self._unsettled = False
        span.end(
            {
                "tockwork.relay.processed": self.stats.processed - before.processed,
                "tockwork.relay.jobs_created": self.stats.jobs_created - before.jobs_created,
                "tockwork.relay.failed": len(failures),
                "tockwork.relay.fenced": self.stats.fenced - before.fenced,
            }
        )

    def _general_due(self, holding: bool) -> bool:
        """Whether this round runs a general claim besides the events it already holds.

        Always when it holds none. While it holds the next events of aggregates it settled, a
        general claim is due only if new events were committed (a notification), the last one
        came back full (more is waiting), or a poll interval has passed since the last one: a
        general claim scans every waiting event of a deep aggregate, so running it on every
        round of a one-aggregate backlog would make the drain quadratic.
        """
        if self._stopping.is_set():
            return not holding
        if not holding or self._woken or self._general_full:
            self._woken = False
            return True
        return time.monotonic() - self._last_general >= self.poll_interval.total_seconds()

    def _claim(self, conn: psycopg.Connection[Any], now: datetime | None, limit: int) -> list[Any]:
        params = {
            "limit": limit,
            "lease": self.lease,
            "relay": self.name,
            "claim": self.run_id,
            "now": now,
        }
        for tries in range(1, _CLAIM_RACES + 1):
            try:
                with conn.cursor() as cur:
                    cur.execute(query("outbox_event_claim"), params)
                    return cur.fetchall()
            except psycopg.errors.UniqueViolation as exc:
                # Two claims chose different events of one aggregate from snapshots a commit
                # apart; the unique index let the first win. Claiming again sees its claim.
                if exc.diag.constraint_name != CLAIMED_INDEX or tries == _CLAIM_RACES:
                    raise
                log.debug("relay %s: claim raced another relay's on one aggregate", self.name)
        raise AssertionError("unreachable")

    def _adopt(self, conn: psycopg.Connection[Any], now: datetime | None) -> list[Any]:
        with conn.cursor() as cur:
            cur.execute(query("outbox_event_adopt"), {"claim": self.run_id, "now": now})
            rows = cur.fetchall()
        if rows:
            log.warning(
                "relay %s: reconnected; %d event(s) of the interrupted batch were still leased "
                "to this relay (its claim committed though the reply was lost): finishing them",
                self.name,
                len(rows),
            )
        else:
            log.info(
                "relay %s: reconnected; no event is still leased to the interrupted batch",
                self.name,
            )
        return rows

    def _build(self, event: Event) -> list[JobSpec]:
        specs: list[JobSpec] = []
        for projection in self.projections.for_event(event.event_type):
            for index, built in enumerate(projection.build(event)):
                if not isinstance(built, JobSpec):
                    raise ProjectionError(
                        f"projection {projection.name!r} returned {type(built).__name__}, "
                        "not a jobs.JobSpec"
                    )
                spec = built
                if not spec.idempotency_key or (
                    spec.organization_id is None and event.organization_id is not None
                ):
                    # A copy only when something is filled in (the fan-out's specs have both:
                    # a replace() a job cost the relay some microseconds a fact).
                    spec = dataclasses.replace(
                        spec,
                        idempotency_key=spec.idempotency_key
                        or f"outbox:{event.id}:{projection.name}:{index}",
                        organization_id=spec.organization_id
                        if spec.organization_id is not None
                        else event.organization_id,
                    )
                specs.append(spec)
        return specs

    def _settle(
        self,
        conn: psycopg.Connection[Any],
        events: list[Event],
        built: dict[UUID, list[JobSpec]],
        failures: dict[UUID, tuple[Event, BaseException]],
        now: datetime | None,
    ) -> None:
        """Mark ``events`` processed, enqueue their jobs and claim the next event of each of
        their aggregates (for the next round), in one transaction.

        A spec that fails validation fails its event only: the transaction is rolled back and
        tried again without that event (validation precedes any write, so this is cheap).
        """
        pending = [e for e in events if e.id not in failures]
        while pending:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(
                        query("outbox_event_mark_processed"),
                        {
                            "ids": arrays.uuid_array([e.id for e in pending]),
                            "tokens": arrays.int4_array([e.attempt for e in pending]),
                            "now": now,
                        },
                    )
                    marked = {row[0] for row in cur.fetchall()}
                    owners: list[Event] = []
                    specs: list[JobSpec] = []
                    settled: list[Event] = []  # marked, with a later event waiting at the claim
                    for event in pending:
                        if event.id in marked:
                            jobs_of = built[event.id]
                            owners.extend([event] * len(jobs_of))
                            specs.extend(jobs_of)
                            if event.id in self._followed:
                                settled.append(event)
                    results = _enqueue(conn, specs, now)
                    successors: list[Any] = []
                    room = self.batch_size - len(self._next_rows)
                    if settled and room > 0 and not self._stopping.is_set():
                        cur.execute(
                            query("outbox_event_claim_next"),
                            {
                                "limit": room,
                                "types": arrays.text_array([e.aggregate_type for e in settled], {}),
                                "ids": arrays.text_array([e.aggregate_id for e in settled]),
                                "relay": self.name,
                                "claim": self.run_id,
                                "now": now,
                            },
                        )
                        successors = cur.fetchall()
            except InvalidJob as exc:
                match = _SPEC_INDEX.match(exc.field)
                if match is None:
                    raise
                culprit = owners[int(match.group(1))]
                failures[culprit.id] = (culprit, exc)
                pending = [e for e in pending if e.id != culprit.id]
                continue
            self._next_rows.extend(successors)
            self.stats.fenced += len(pending) - len(marked)
            self.stats.processed += len(marked)
            self.stats.jobs_created += sum(1 for r in results if r.created)
            if len(marked) < len(pending):
                log.warning(
                    "relay %s: %d event(s) lost their lease before being marked; another relay "
                    "took them over",
                    self.name,
                    len(pending) - len(marked),
                )
            return

    def _fail(
        self,
        conn: psycopg.Connection[Any],
        failures: list[tuple[Event, BaseException]],
        now: datetime | None,
    ) -> None:
        if not failures:
            return
        for event, exc in failures:
            dead = event.attempt >= self.max_attempts
            log.warning(
                "relay %s: event %s (%s) failed on attempt %d%s",
                self.name,
                event.id,
                event.event_type,
                event.attempt,
                ", set aside as dead" if dead else ", will retry",
                exc_info=exc,
            )
        with conn.cursor() as cur:
            cur.execute(
                query("outbox_event_mark_failed"),
                {
                    "ids": [e.id for e, _ in failures],
                    "tokens": [e.attempt for e, _ in failures],
                    "errors": [summarize(exc) for _, exc in failures],
                    "delays": [self.retry.backoff(e.attempt) for e, _ in failures],
                    "dead": [e.attempt >= self.max_attempts for e, _ in failures],
                    "now": now,
                },
            )
            rows = cur.fetchall()
        self.stats.dead += sum(1 for _, dead in rows if dead)
        self.stats.retried += sum(1 for _, dead in rows if not dead)
        self.stats.fenced += len(failures) - len(rows)
