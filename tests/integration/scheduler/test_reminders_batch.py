"""The batched reminder path: still_due_many, SimulatedPush.send_many, ReminderBatchHandler.

The handler runs against the real PostgreSQL; only the worker's ``jobs.Batch`` is replaced by
:class:`RecordingBatch`, a double that records the outcome set for each job and runs the
handler's completion effects the way the worker's completion transaction does (in one
transaction, given the jobs that succeeded). A batch whose completion never runs is one whose
worker died or lost its lease before the completion committed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import Job
from jobs.store import PgJobStore
from scheduler import Scheduler
from scheduler.reminders import (
    MAX_BATCH,
    Due,
    ReminderBatchHandler,
    still_due,
    still_due_many,
)
from scheduler.simulated import MULTICAST_MAX, Message, SendResult, SendStatus, SimulatedPush
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0758 = datetime(2026, 3, 7, 7, 58, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
QUIET = {"start": "07:00", "end": "09:30"}

Effect = Callable[[psycopg.Connection[Any], Sequence[Job]], None]


class RecordingBatch:
    """A stand-in for ``jobs.Batch``: outcomes by job id, completion effects kept to run."""

    def __init__(self, batch_jobs: Sequence[Job]) -> None:
        self.jobs = list(batch_jobs)
        self._ids = {j.id for j in self.jobs}
        self.outcomes: dict[int, tuple[Any, ...]] = {}
        self.effects: list[Effect] = []

    def _set(self, job: Job, *outcome: Any) -> None:
        assert job.id in self._ids
        self.outcomes[job.id] = outcome

    def succeed(self, job: Job) -> None:
        self._set(job, "succeeded")

    def retry(
        self, job: Job, message: str = "", *, code: str = "error", delay: timedelta | None = None
    ) -> None:
        self._set(job, "retry", code, delay)

    def rate_limited(self, job: Job, retry_after: timedelta, message: str = "") -> None:
        self._set(job, "rate_limited", retry_after)

    def fail(self, job: Job, message: str, *, code: str = "permanent") -> None:
        self._set(job, "dead", code)

    def snooze(self, job: Job, delay: timedelta) -> None:
        self._set(job, "snoozed", delay)

    def in_completion(self, fn: Effect) -> None:
        self.effects.append(fn)

    def outcome(self, job: Job) -> tuple[Any, ...]:
        return self.outcomes.get(job.id, ("succeeded",))  # undecided: succeeded

    def complete(self, conn: psycopg.Connection[Any]) -> None:
        """What the worker's completion transaction does with the effects (lease held)."""
        succeeded = [j for j in self.jobs if self.outcome(j) == ("succeeded",)]
        with conn.transaction():
            for fn in self.effects:
                fn(conn, succeeded)


class SpyPush(SimulatedPush):
    """The simulated provider, remembering the job ids of each multicast request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[list[int]] = []

    def send_many(
        self, conn: psycopg.Connection[Any], messages: Sequence[Message]
    ) -> list[SendResult]:
        self.requests.append([m.job.id for m in messages])
        return super().send_many(conn, messages)


class JournalPush(SpyPush):
    """A provider whose deliveries are not our rows (a network provider's case): the handler
    records them in job_effects (record-after-send) and checks there before sending."""

    delivery_is_effect_record = False


def create(conn: psycopg.Connection[Any], subject: str, **kwargs: Any) -> int:
    kwargs.setdefault("rule", "daily@08:00")
    s = scheduler.create_schedule(
        conn, job_type="reminder", zone="UTC", subject=subject, jitter=0,
        payload={"subject": subject, "message": f"hello {subject}"}, now=T0, **kwargs,
    )  # fmt: skip
    return s.id


def tick_and_claim(
    conn: psycopg.Connection[Any], db_url: str, at: datetime = SAT_0800
) -> list[Job]:
    """Enqueue the occurrences ahead (one tick at 07:58) and lease every job ready at ``at``."""
    conn.commit()
    replica = Scheduler(db_url, clock=FrozenClock(SAT_0758), lookahead=timedelta(minutes=5))
    replica.tick()
    replica.close()
    with psycopg.connect(db_url, autocommit=True) as c:
        return PgJobStore(c).claim({"default": 1000}, "test", timedelta(seconds=30), at)


def next_attempt(batch_jobs: Sequence[Job]) -> list[Job]:
    """The same jobs claimed again (a retry, or a rescue after the lease expired)."""
    return [dataclasses.replace(j, attempt=j.attempt + 1, lease_token=j.lease_token + 1)
            for j in batch_jobs]  # fmt: skip


def pushes(conn: psycopg.Connection[Any]) -> dict[int, int]:
    """Deliveries per job id."""
    rows = conn.execute("SELECT job_id, count(*) FROM simulated_pushes GROUP BY 1").fetchall()
    return {job_id: n for job_id, n in rows}


def skips(conn: psycopg.Connection[Any], after: int = 0) -> list[tuple[int, str, str]]:
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT schedule_id, kind, reason FROM schedule_skips WHERE id > %s ORDER BY 1, 2",
            (after,),
        ).fetchall()
    ]


def last_skip_id(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT coalesce(max(id), 0) FROM schedule_skips").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def handlers(db_url: str) -> Any:
    made: list[ReminderBatchHandler] = []

    def make(provider: SimulatedPush, at: datetime = SAT_0800) -> ReminderBatchHandler:
        handler = ReminderBatchHandler(db_url, provider, clock=FrozenClock(at))
        made.append(handler)
        return handler

    yield make
    for handler in made:
        handler.close()


# -- still_due_many ---------------------------------------------------------------------------


def test_still_due_many_answers_like_still_due_for_each_job_and_records_skips_once(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    ids = {name: create(conn, name) for name in ("due", "paused", "gone", "moved", "quiet")}
    # Two occurrences of one schedule in the batch: its skipped_count counts both.
    ids["hourly"] = create(conn, "hourly", rule="cron:*/2 * * * *")
    batch = tick_and_claim(conn, db_url)
    by_subject = {j.payload["subject"]: j for j in batch if j.payload["subject"] != "hourly"}
    hourly = [j for j in batch if j.payload["subject"] == "hourly"]
    assert len(hourly) == 2
    plain = jobs.enqueue(conn, "reminder", {"subject": "x"}, now=SAT_0758)
    conn.commit()
    with psycopg.connect(db_url, autocommit=True) as c:
        (plain_job,) = PgJobStore(c).claim({"default": 5}, "t", timedelta(seconds=30), SAT_0800)
    assert plain_job.id == plain.id
    batch.append(plain_job)
    at = SAT_0800 - timedelta(seconds=30)
    scheduler.pause(conn, ids["paused"], now=at)
    scheduler.pause(conn, ids["hourly"], now=at)
    scheduler.delete(conn, ids["gone"], now=at)
    scheduler.update_schedule(conn, ids["moved"], rule="daily@09:00", now=at)
    scheduler.update_schedule(conn, ids["quiet"], quiet_hours={**QUIET, "action": "defer"}, now=at)
    conn.commit()
    before = last_skip_id(conn)
    counts = dict(conn.execute("SELECT id, skipped_count FROM schedules").fetchall())

    read_only = still_due_many(conn, batch, now=SAT_0800, record=False)
    assert skips(conn, before) == []
    expected = {
        by_subject["due"].id: Due(True),
        by_subject["paused"].id: Due(False, "paused"),
        by_subject["gone"].id: Due(False, "deleted"),
        by_subject["moved"].id: Due(False, "superseded"),
        by_subject["quiet"].id: Due(False, "quiet_hours", datetime(2026, 3, 7, 9, 30, tzinfo=UTC)),
        hourly[0].id: Due(False, "paused"),
        hourly[1].id: Due(False, "paused"),
        plain_job.id: Due(True),
    }
    assert read_only == expected
    assert still_due_many(conn, batch, now=SAT_0800) == expected
    conn.commit()
    assert skips(conn, before) == sorted(
        [(ids["paused"], "skipped", "paused"), (ids["moved"], "superseded", "superseded"),
         (ids["hourly"], "skipped", "paused"), (ids["hourly"], "skipped", "paused")]
    )  # fmt: skip
    after = dict(conn.execute("SELECT id, skipped_count FROM schedules").fetchall())
    assert {k: after[k] - counts[k] for k in after} == {
        ids["due"]: 0, ids["paused"]: 1, ids["moved"]: 1, ids["quiet"]: 0, ids["hourly"]: 2,
    }  # fmt: skip
    # Asked again, per job or for the batch: the same answers, and nothing recorded twice.
    assert {j.id: still_due(conn, j, now=SAT_0800) for j in batch} == expected
    assert still_due_many(conn, batch, now=SAT_0800) == expected
    assert len(skips(conn, before)) == 4
    assert still_due_many(conn, [], now=SAT_0800) == {}


def test_quiet_hours_with_skip_are_recorded_as_skipped(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    sid = create(conn, "u1")
    (job,) = tick_and_claim(conn, db_url)
    scheduler.update_schedule(conn, sid, quiet_hours={**QUIET, "action": "skip"}, now=SAT_0758)
    before = last_skip_id(conn)
    assert still_due_many(conn, [job], now=SAT_0800) == {job.id: Due(False, "quiet_hours")}
    assert skips(conn, before) == [(sid, "skipped", "quiet_hours")]


# -- SimulatedPush.send_many ------------------------------------------------------------------


def job(job_id: int, attempt: int = 1, key: str | None = None) -> Job:
    return Job(job_id, "default", "reminder", {}, attempt, 10, key, None, 0, T0, T0, 1)


def test_send_many_answers_per_message_and_delivers_each_key_once(
    conn: psycopg.Connection[Any],
) -> None:
    provider = SimulatedPush(
        transient_rate=0.2, rate_limit_rate=0.2, retry_after=timedelta(seconds=7),
        rejected_subjects={"dead-token"}, seed=5,
    )  # fmt: skip
    messages = [Message(job(i), f"u{i}", "hi") for i in range(1, 101)]
    messages[10] = Message(job(11), "dead-token", "hi")
    messages.append(Message(job(1000, key="r:1"), "u", "copy 1"))
    messages.append(Message(job(1001, key="r:1"), "u", "copy 2"))  # same logical job
    results = provider.send_many(conn, messages)
    assert [r.message for r in results] == messages
    by_status: dict[SendStatus, list[SendResult]] = {}
    for r in results:
        by_status.setdefault(r.status, []).append(r)
    # Every kind of answer in one request, each message its own.
    assert set(by_status) == set(SendStatus)
    assert [r.job.id for r in by_status[SendStatus.REJECTED]] == [11]
    assert by_status[SendStatus.REJECTED][0].code == "bad_token"
    assert all(r.retry_after == timedelta(seconds=7) for r in by_status[SendStatus.RATE_LIMITED])
    assert all(r.code == "provider_timeout" for r in by_status[SendStatus.TRANSIENT])
    assert not any(r.ok for s in (SendStatus.TRANSIENT, SendStatus.RATE_LIMITED,
                                  SendStatus.REJECTED) for r in by_status[s])  # fmt: skip
    delivered = {r.job.id for r in by_status[SendStatus.DELIVERED]}
    assert pushes(conn) == dict.fromkeys(delivered, 1)
    # The two copies of one logical job: one delivery; the other is a duplicate (if both drew
    # no failure).
    copies = [r.status for r in results[-2:]]
    assert SendStatus.DELIVERED not in copies[1:] or copies[0] != SendStatus.DELIVERED
    # Draws are per (job, attempt): the same request again gives the same failures, and the
    # delivered ones come back as duplicates, not delivered again.
    again = provider.send_many(conn, messages)
    assert [r.status for r in again] == [
        SendStatus.DUPLICATE if r.status is SendStatus.DELIVERED else r.status for r in results
    ]
    assert pushes(conn) == dict.fromkeys(delivered, 1)
    # At the next attempt the draws differ.
    retried = provider.send_many(conn, [Message(job(m.job.id, 2), m.subject, m.message)
                                        for m in messages])  # fmt: skip
    assert [r.status for r in retried] != [r.status for r in again]


def test_send_many_splits_long_lists_into_multicast_requests(
    conn: psycopg.Connection[Any],
) -> None:
    n = MULTICAST_MAX + 7
    results = SimulatedPush().send_many(conn, [Message(job(i), "u", "hi") for i in range(1, n + 1)])
    assert [r.status for r in results] == [SendStatus.DELIVERED] * n
    assert len(pushes(conn)) == n
    assert SimulatedPush().send_many(conn, []) == []


def test_send_is_send_many_for_one(conn: psycopg.Connection[Any]) -> None:
    provider = SimulatedPush(rejected_subjects={"bad"})
    assert provider.send(conn, job(1), subject="u", message="hi")
    assert not provider.send(conn, job(1, attempt=2), subject="u", message="hi")
    # The delivery row is the push's effect record: no job_effects row is written for it.
    assert provider.delivered(conn, ["push:job:1", "push:job:2"]) == {"push:job:1"}
    assert jobs.effects.recorded(conn, ["push:job:1"]) == set()
    # A provider whose deliveries are not its rows records them in job_effects.
    journal = JournalPush()
    assert journal.send(conn, job(4), subject="u", message="hi")
    assert jobs.effects.recorded(conn, ["push:job:4"]) == {"push:job:4"}
    with pytest.raises(jobs.PermanentError) as info:
        provider.send(conn, job(2), subject="bad", message="hi")
    assert info.value.code == "bad_token"
    with pytest.raises(jobs.RateLimited) as limited:
        SimulatedPush(rate_limit_rate=1, retry_after=timedelta(seconds=3)).send(
            conn, job(3), subject="u", message="hi"
        )
    assert limited.value.retry_after == timedelta(seconds=3)
    with pytest.raises(jobs.TransientError) as transient:
        SimulatedPush(transient_rate=1).send(conn, job(3), subject="u", message="hi")
    assert transient.value.code == "provider_timeout"
    assert pushes(conn) == {1: 1, 4: 1}


# -- ReminderBatchHandler ---------------------------------------------------------------------


def test_batch_handler_against_paused_deleted_superseded_and_quiet_hours_schedules(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    names = ("due", "paused", "gone", "moved", "defer", "skip")
    ids = {name: create(conn, name) for name in names}
    batch_jobs = tick_and_claim(conn, db_url)
    by_subject = {j.payload["subject"]: j.id for j in batch_jobs}
    at = SAT_0800 - timedelta(seconds=30)
    scheduler.pause(conn, ids["paused"], now=at)
    scheduler.delete(conn, ids["gone"], now=at)
    scheduler.update_schedule(conn, ids["moved"], rule="daily@09:00", now=at)
    scheduler.update_schedule(conn, ids["defer"], quiet_hours={**QUIET, "action": "defer"}, now=at)
    scheduler.update_schedule(conn, ids["skip"], quiet_hours={**QUIET, "action": "skip"}, now=at)
    conn.commit()
    before = last_skip_id(conn)
    provider = SpyPush()
    handler = handlers(provider)

    batch = RecordingBatch(batch_jobs)
    handler(batch)
    outcomes = {name: batch.outcome(j) for j in batch_jobs for name in names
                if by_subject[name] == j.id}  # fmt: skip
    assert outcomes == {
        "due": ("succeeded",),
        "paused": ("succeeded",),
        "gone": ("succeeded",),
        "moved": ("succeeded",),
        "defer": ("snoozed", timedelta(minutes=90)),  # to the end of quiet hours, 09:30
        "skip": ("succeeded",),
    }
    # Only the due reminder was sent, in one multicast request, and delivered.
    assert provider.requests == [[by_subject["due"]]]
    assert pushes(conn) == {by_subject["due"]: 1}
    # The skips are completion effects: none is written before the outcomes commit...
    assert skips(conn, before) == []
    # ... and they commit with them, once per job.
    batch.complete(conn)
    expected_skips = sorted([(ids["paused"], "skipped", "paused"),
                             (ids["moved"], "superseded", "superseded"),
                             (ids["skip"], "skipped", "quiet_hours")])  # fmt: skip
    assert skips(conn, before) == expected_skips

    # The same batch again (the worker died after committing): nothing sent, nothing recorded
    # twice, the same outcomes.
    rerun = RecordingBatch(next_attempt(batch_jobs))
    handler(rerun)
    rerun.complete(conn)
    assert [rerun.outcome(j) for j in rerun.jobs] == [batch.outcome(j) for j in batch_jobs]
    assert provider.requests == [[by_subject["due"]]]
    assert pushes(conn) == {by_subject["due"]: 1}
    assert skips(conn, before) == expected_skips


def test_a_fenced_batch_records_no_skip_and_its_rerun_records_each_once(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    sid = create(conn, "u1")
    batch_jobs = tick_and_claim(conn, db_url)
    scheduler.pause(conn, sid, now=SAT_0758)
    conn.commit()
    before = last_skip_id(conn)
    handler = handlers(SpyPush())
    handler(RecordingBatch(batch_jobs))  # its worker lost the lease: no completion
    assert skips(conn, before) == []
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (0,)
    rerun = RecordingBatch(next_attempt(batch_jobs))
    handler(rerun)
    rerun.complete(conn)
    rerun.complete(conn)  # a completion effect run twice still records once
    assert skips(conn, before) == [(sid, "skipped", "paused")]
    assert scheduler.get_schedule(conn, sid).skipped_count == 1


def test_one_rejected_or_throttled_message_does_not_fail_the_others(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    for i in range(60):
        create(conn, f"u{i}")
    batch_jobs = tick_and_claim(conn, db_url)
    provider = SpyPush(
        transient_rate=0.15, rate_limit_rate=0.15, retry_after=timedelta(seconds=7),
        rejected_subjects={"u3"}, seed=2,
    )  # fmt: skip
    batch = RecordingBatch(batch_jobs)
    handlers(provider)(batch)
    assert provider.requests == [[j.id for j in batch_jobs]]  # one multicast request
    kinds: dict[str, list[int]] = {}
    for j in batch_jobs:
        kinds.setdefault(batch.outcome(j)[0], []).append(j.id)
    assert set(kinds) == {"succeeded", "retry", "rate_limited", "dead"}
    (u3,) = [j for j in batch_jobs if j.payload["subject"] == "u3"]
    assert batch.outcome(u3) == ("dead", "bad_token")
    assert all(
        batch.outcome(j) in {("retry", "provider_timeout", None),
                             ("rate_limited", timedelta(seconds=7))}
        for j in batch_jobs if j.id in kinds["retry"] + kinds["rate_limited"]
    )  # fmt: skip
    assert pushes(conn) == dict.fromkeys(kinds["succeeded"], 1)
    # The deliveries are their own effect records (the provider's rows, committed with the
    # request), so a rerun of this batch would not even ask the provider for them; no
    # job_effects row repeats them.
    keys = [jobs.effects.effect_key(j, "push") for j in batch_jobs]
    delivered_keys = {jobs.effects.effect_key(j, "push") for j in batch_jobs
                      if j.id in kinds["succeeded"]}  # fmt: skip
    assert provider.delivered(conn, keys) == delivered_keys
    assert jobs.effects.recorded(conn, keys) == set()


def test_rate_limited_messages_inside_a_multicast_retry_alone(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    for i in range(40):
        create(conn, f"u{i}")
    batch_jobs = tick_and_claim(conn, db_url)
    provider = SpyPush(rate_limit_rate=0.3, retry_after=timedelta(seconds=5), seed=7)
    handler = handlers(provider)
    pending = batch_jobs
    throttled: list[list[int]] = []
    for _ in range(20):
        batch = RecordingBatch(pending)
        handler(batch)
        batch.complete(conn)
        limited = [j for j in pending if batch.outcome(j) == ("rate_limited", timedelta(seconds=5))]
        assert all(batch.outcome(j) == ("succeeded",) for j in pending if j not in limited)
        if not limited:
            break
        throttled.append([j.id for j in limited])
        # The worker retries the throttled jobs alone, after the hint.
        pending = next_attempt(limited)
    else:
        pytest.fail("the rate-limited reminders were never delivered")
    assert provider.requests[0] == [j.id for j in batch_jobs]  # one multicast request
    assert throttled, "the seed draws some 429s"
    assert 0 < len(throttled[0]) < len(batch_jobs) / 2
    # Each retry request carries exactly the jobs throttled in the request before it.
    assert provider.requests[1:] == throttled
    # Every reminder delivered, exactly once.
    assert pushes(conn) == {j.id: 1 for j in batch_jobs}


def test_no_reminder_is_delivered_twice_when_a_batch_is_run_again(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    for i in range(30):
        create(conn, f"u{i}")
    batch_jobs = tick_and_claim(conn, db_url)
    # The general path: a provider whose deliveries are recorded in job_effects.
    provider = JournalPush(transient_rate=0.2, seed=4)
    handler = handlers(provider)
    # The worker dies after the pushes, before its completion commits: the jobs are rescued
    # after their leases expire and run again.
    first = RecordingBatch(batch_jobs)
    handler(first)
    delivered = {j.id for j in batch_jobs if first.outcome(j) == ("succeeded",)}
    assert 0 < len(delivered) < len(batch_jobs)
    second = RecordingBatch(next_attempt(batch_jobs))
    handler(second)
    # Check-before-send: the provider is asked only for those not delivered the first time.
    assert set(provider.requests[1]) == {j.id for j in batch_jobs} - delivered
    assert all(second.outcome(j) == ("succeeded",) for j in second.jobs if j.id in delivered)
    # Even with the effect records lost (an external call whose record never committed), the
    # provider's own key reports a duplicate: the job succeeds, no second delivery.
    # Each delivery has its job_effects record (record-after-send), none without one.
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (
        sum(pushes(conn).values()),
    )
    conn.execute("DELETE FROM job_effects")
    conn.commit()
    reliable = JournalPush()  # no failures drawn: every job ends delivered
    third = RecordingBatch(next_attempt(next_attempt(batch_jobs)))
    handlers(reliable)(third)
    assert reliable.requests == [[j.id for j in batch_jobs]]
    assert all(third.outcome(j) == ("succeeded",) for j in third.jobs)
    assert pushes(conn) == {j.id: 1 for j in batch_jobs}


def test_the_simulated_providers_rows_are_the_effect_records_of_its_pushes(
    conn: psycopg.Connection[Any], db_url: str, handlers: Any
) -> None:
    """Issue 22: with the simulated provider, check-before-send reads its delivery rows and
    record-after-send writes nothing more; a batch run again still delivers nothing twice."""
    for i in range(30):
        create(conn, f"u{i}")
    batch_jobs = tick_and_claim(conn, db_url)
    provider = SpyPush(transient_rate=0.2, seed=4)
    handler = handlers(provider)
    first = RecordingBatch(batch_jobs)
    handler(first)  # the worker dies before its completion commits
    delivered = {j.id for j in batch_jobs if first.outcome(j) == ("succeeded",)}
    assert 0 < len(delivered) < len(batch_jobs)
    assert pushes(conn) == dict.fromkeys(delivered, 1)
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (0,)
    second = RecordingBatch(next_attempt(batch_jobs))
    handler(second)
    # Check-before-send on the provider's rows: only those not delivered are asked for.
    assert set(provider.requests[1]) == {j.id for j in batch_jobs} - delivered
    assert all(second.outcome(j) == ("succeeded",) for j in second.jobs if j.id in delivered)
    assert conn.execute("SELECT count(*) FROM job_effects").fetchone() == (0,)
    for _ in range(10):  # the transient failures drawn per attempt clear in a few rounds
        pending = [j for j in second.jobs if second.outcome(j) != ("succeeded",)]
        if not pending:
            break
        second = RecordingBatch(next_attempt(pending))
        handler(second)
    assert pushes(conn) == {j.id: 1 for j in batch_jobs}


def test_batch_size_is_one_multicast_request() -> None:
    assert ReminderBatchHandler.max_batch == MAX_BATCH == MULTICAST_MAX == 500
