"""The delivery handler (``scheduler.delivery``): devices, messages, outcomes, configuration.

Against the real PostgreSQL (the still-due check, the effect-once keys, the skip records); the
devices come from :class:`FakeResolver` (an application's own resolver: what it returns, what
it was asked to invalidate), the channels are the simulated one (rows in ``simulated_pushes``)
or :class:`ScriptedChannel`, an in-memory channel that answers each token as told and counts
what it was sent. The worker's ``jobs.Batch`` is ``RecordingBatch`` (its completion effects run
when the test says the completion committed). The handler is async: each call runs with
``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import jobs
import scheduler
from jobs import Job
from jobs.store import PgJobStore
from scheduler import Scheduler, delivery
from scheduler import devices as registry
from scheduler.delivery import (
    DEFAULT_TTL,
    DeliveryHandler,
    Device,
    RegistryResolver,
    SubjectAsToken,
    Target,
    device_key,
)
from scheduler.errors import InvalidPushConfig
from scheduler.occurrence_job import OccurrenceMeta
from scheduler.push import PushChannel, PushMessage, PushResult, PushStatus
from scheduler.simulated import SimulatedChannel
from tests.integration.scheduler.test_reminders_batch import RecordingBatch, next_attempt
from timezones import FrozenClock

T0 = datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
SAT_0800 = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)
# 08:00 in Chicago on 2026-03-07 (CST, UTC-6; daylight time starts on the 8th).
CHICAGO_0800 = datetime(2026, 3, 7, 14, 0, tzinfo=UTC)

Recipient = tuple[Any, str]


# -- doubles --------------------------------------------------------------------------------


class FakeResolver:
    """An application's resolver: a fixed set of devices per subject, and a record of every
    call (``resolved``: the recipients asked for; ``invalidated``: each call's dead devices)."""

    def __init__(self, devices: Mapping[str, Sequence[Device]]) -> None:
        self.devices = devices
        self.resolved: list[list[Recipient]] = []
        self.invalidated: list[list[tuple[str, str, int | None, str, str]]] = []

    async def resolve(
        self, conn: psycopg.AsyncConnection[Any], recipients: Sequence[Recipient]
    ) -> Mapping[Recipient, Sequence[Target]]:
        self.resolved.append(list(recipients))
        return {r: list(self.devices.get(r[1], ())) for r in recipients}

    async def invalidate(
        self,
        conn: psycopg.AsyncConnection[Any],
        dead: Sequence[tuple[Target, str, str]],
        now: datetime,
    ) -> None:
        self.invalidated.append(
            [(t.channel, t.token, t.id, reason, code) for t, reason, code in dead]
        )


Answer = tuple[PushStatus, str | None, timedelta | None]  # status, code, retry_after


class ScriptedChannel:
    """An in-memory channel: each token answers the statuses scripted for it, one per send,
    then ``delivered``; every message sent is kept (``sent``)."""

    quota_per_minute: int | None = None

    def __init__(self, name: str = "fake", script: Mapping[str, Sequence[Answer]] = {}) -> None:
        self.name = name
        self.script = {token: list(answers) for token, answers in script.items()}
        self.sent: list[PushMessage] = []
        self.sends = 0
        self.closed = False

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        self.sends += 1
        self.sent.extend(messages)
        results = []
        for m in messages:
            answers = self.script.get(m.token)
            if answers:
                status, code, hint = answers.pop(0)
                results.append(PushResult(m, status, f"scripted {status}", code, hint))
            else:
                results.append(PushResult(m, PushStatus.DELIVERED))
        return results

    def counts(self) -> Counter[str]:
        """Messages sent per token."""
        return Counter(m.token for m in self.sent)

    async def aclose(self) -> None:
        self.closed = True


class BrokenChannel(ScriptedChannel):
    """A channel that breaks its contract: raises (``mode="raise"``), or answers one result
    short (``mode="short"``)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        results = await super().send(messages, now=now)
        if self.mode == "raise":
            raise RuntimeError(f"lost the plot at {messages[0].token}")
        return results[:-1]


# -- helpers --------------------------------------------------------------------------------


def create(
    conn: psycopg.Connection[Any], subject: str, *, zone: str = "UTC", **payload: Any
) -> int:
    s = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone=zone, subject=subject, jitter=0,
        payload={"subject": subject, **payload}, now=T0,
    )  # fmt: skip
    return s.id


def claim(conn: psycopg.Connection[Any], db_url: str, at: datetime = SAT_0800) -> list[Job]:
    """Enqueue the occurrences due at ``at`` (one tick two minutes before) and lease them."""
    conn.commit()
    replica = Scheduler(
        db_url, clock=FrozenClock(at - timedelta(minutes=2)), lookahead=timedelta(minutes=5)
    )
    replica.tick()
    replica.close()
    with psycopg.connect(db_url, autocommit=True) as c:
        return PgJobStore(c).claim({"default": 1000}, "test", timedelta(seconds=30), at)


def meta(job: Job) -> OccurrenceMeta:
    m = OccurrenceMeta.of(job)
    assert m is not None
    return m


def by_subject(batch_jobs: Sequence[Job]) -> dict[str, Job]:
    return {str(j.payload["subject"]): j for j in batch_jobs}


def skips(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    rows = conn.execute("SELECT schedule_id, kind, reason FROM schedule_skips ORDER BY 1, 2, 3")
    return [tuple(r) for r in rows.fetchall()]


def pushed(conn: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    """The simulated channel's rows: (schedule id, occurrence key, token), sorted."""
    rows = conn.execute(
        "SELECT schedule_id, occurrence_key, token FROM simulated_pushes ORDER BY 1, 2, 3"
    )
    return [tuple(r) for r in rows.fetchall()]


def deliver(handler: DeliveryHandler, batch: RecordingBatch) -> None:
    asyncio.run(handler(batch))


Make = Callable[..., DeliveryHandler]


@pytest.fixture
def handlers(db_url: str) -> Iterator[Make]:
    """``handlers(channel, ..., resolver=..., at=...)``: delivery handlers at a frozen instant
    (default 08:00 UTC), closed after the test."""
    made: list[DeliveryHandler] = []

    def make(*channels: PushChannel, at: datetime = SAT_0800, **kwargs: Any) -> DeliveryHandler:
        handler = DeliveryHandler(db_url, list(channels), clock=FrozenClock(at), **kwargs)
        made.append(handler)
        return handler

    yield make
    for handler in made:
        asyncio.run(handler.aclose())


# -- devices ----------------------------------------------------------------------------------


def test_a_subject_with_three_devices_one_dead(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    sid = create(conn, "ada")
    create(conn, "bob")
    batch_jobs = claim(conn, db_url)
    ada = by_subject(batch_jobs)["ada"]
    devices = [Device("simulated", "tok-phone", 1), Device("simulated", "tok-tablet", 2),
               Device("simulated", "tok-dead", 3)]  # fmt: skip
    resolver = FakeResolver({"ada": devices, "bob": [Device("simulated", "tok-bob", 4)]})
    channel = SimulatedChannel(db_url, rejected_tokens={"tok-dead"})
    batch = RecordingBatch(batch_jobs)
    deliver(handlers(channel, resolver=resolver), batch)
    # Two delivered, one rejected: the job succeeded (a dead token is not retried)...
    assert [batch.outcome(j) for j in batch_jobs] == [("succeeded",)] * 2
    occurrence = meta(ada).occurrence_key
    assert [row for row in pushed(conn) if row[0] == sid] == [
        (sid, occurrence, "tok-phone"),
        (sid, occurrence, "tok-tablet"),
    ]
    # ... its dead device invalidated once, through the resolver, with the provider's words.
    assert resolver.invalidated == [
        [("simulated", "tok-dead", 3, "device token unregistered", "UNREGISTERED")]
    ]
    # One resolve for the batch, each subject once.
    assert [sorted(s for _, s in call) for call in resolver.resolved] == [["ada", "bob"]]
    # An effect-once key per (job, device), recorded for the delivered devices only.
    keys = [device_key(ada, d) for d in devices]
    assert len(set(keys)) == 3
    assert jobs.effects.recorded(conn, keys) == set(keys[:2])


def test_a_retry_after_a_transient_failure_sends_only_to_the_undelivered_device(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    create(conn, "ada")
    batch_jobs = claim(conn, db_url)
    devices = [Device("fake", t) for t in ("tok-a", "tok-b", "tok-c")]
    channel = ScriptedChannel(script={"tok-b": [(PushStatus.TRANSIENT, "UNAVAILABLE", None)]})
    handler = handlers(channel, resolver=FakeResolver({"ada": devices}))
    first = RecordingBatch(batch_jobs)
    deliver(handler, first)
    # Transient and delivered devices: the job is retried (no hint: the retry policy's delay).
    assert first.outcome(batch_jobs[0]) == ("retry", "UNAVAILABLE", None)
    assert "fake" in first.messages[batch_jobs[0].id]
    assert channel.counts() == {"tok-a": 1, "tok-b": 1, "tok-c": 1}
    second = RecordingBatch(next_attempt(batch_jobs))
    deliver(handler, second)
    assert second.outcome(second.jobs[0]) == ("succeeded",)
    assert channel.counts() == {"tok-a": 1, "tok-b": 2, "tok-c": 1}
    # A third run (the completion was lost): every device recorded, nothing sent.
    third = RecordingBatch(next_attempt(second.jobs))
    deliver(handler, third)
    assert third.outcome(third.jobs[0]) == ("succeeded",)
    assert channel.sends == 2
    keys = {device_key(batch_jobs[0], d) for d in devices}
    assert jobs.effects.recorded(conn, keys) == keys


def test_a_device_listed_twice_is_notified_once(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """An application's resolver may list one device twice (two rows of its own table for one
    token): one message per (job, device), as its effect-once key says."""
    create(conn, "ada")
    (job,) = claim(conn, db_url)
    phone = Device("fake", "tok-phone")
    channel = ScriptedChannel()
    batch = RecordingBatch([job])
    deliver(handlers(channel, resolver=FakeResolver({"ada": [phone, phone]})), batch)
    assert batch.outcome(job) == ("succeeded",)
    assert [m.token for m in channel.sent] == ["tok-phone"]


def test_a_subject_without_a_device_succeeds_and_is_recorded_as_skipped_at_completion(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    sid = create(conn, "nobody")
    batch_jobs = claim(conn, db_url)
    channel = ScriptedChannel()
    handler = handlers(channel, resolver=FakeResolver({}))
    fenced = RecordingBatch(batch_jobs)
    deliver(handler, fenced)
    assert fenced.outcome(batch_jobs[0]) == ("succeeded",)
    assert channel.sends == 0
    assert skips(conn) == []  # its completion never committed (a lost lease)
    batch = RecordingBatch(next_attempt(batch_jobs))
    deliver(handler, batch)
    assert skips(conn) == []
    batch.complete(conn)
    batch.complete(conn)  # a completion run twice records once
    assert skips(conn) == [(sid, "skipped", "no_device")]
    assert scheduler.get_schedule(conn, sid).skipped_count == 1


def test_an_expired_reminder_is_not_sent_and_is_recorded_as_skipped(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    short = create(conn, "short", ttl=60)
    create(conn, "long", ttl=600)
    edge = create(conn, "edge", ttl=120)
    batch_jobs = claim(conn, db_url)
    subjects = by_subject(batch_jobs)
    channel = ScriptedChannel()
    # Two minutes late (a worker outage): the 60 s reminder expired, and the 120 s one at
    # this very instant; the 600 s one is still worth showing.
    handler = handlers(channel, at=SAT_0800 + timedelta(minutes=2), resolver=SubjectAsToken("fake"))
    batch = RecordingBatch(batch_jobs)
    deliver(handler, batch)
    assert [batch.outcome(j) for j in batch_jobs] == [("succeeded",)] * 3
    assert [m.token for m in channel.sent] == ["long"]
    assert channel.sent[0].expires_at == meta(subjects["long"]).at + timedelta(seconds=600)
    assert skips(conn) == []
    batch.complete(conn)
    # Kind "expired" (issue 24), as for a job the worker claimed after its max_lateness.
    assert skips(conn) == sorted([(short, "expired", "expired"), (edge, "expired", "expired")])
    keys = [device_key(j, Device("fake", str(j.payload["subject"]))) for j in batch_jobs]
    assert jobs.effects.recorded(conn, keys) == {keys[batch_jobs.index(subjects["long"])]}


def test_a_ttl_under_a_minute_is_refused_not_silently_expired(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """A ttl of 0 would expire every reminder before its run (the queue's own delay is never
    zero): it is a bad payload, dead with its reason, never a silent skip."""
    create(conn, "ada", ttl=0)
    (job,) = claim(conn, db_url)
    channel = ScriptedChannel()
    batch = RecordingBatch([job])
    deliver(handlers(channel, at=SAT_0800, resolver=SubjectAsToken("fake")), batch)
    assert batch.outcome(job) == ("dead", "bad_payload")
    assert channel.sent == []
    with pytest.raises(InvalidPushConfig, match="ttl"):
        handlers(channel, ttl=timedelta(seconds=59))


# -- the message ----------------------------------------------------------------------------


def test_title_and_body_placeholders_render_in_the_schedule_s_zone(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    sid = create(
        conn, "ada", zone="America/Chicago", title="Hi {subject}",
        body="{time} on {date} ({zone}); {unknown} and {{subject}} stay",
    )  # fmt: skip
    (job,) = claim(conn, db_url, at=CHICAGO_0800)
    assert meta(job).at == CHICAGO_0800
    channel = ScriptedChannel()
    deliver(handlers(channel, at=CHICAGO_0800, resolver=SubjectAsToken("fake")),
            RecordingBatch([job]))  # fmt: skip
    (message,) = channel.sent
    assert message.title == "Hi ada"
    # 14:00 UTC is 08:00 in Chicago (UTC-6), not the instant's UTC time.
    assert message.body == ("08:00 on 2026-03-07 (America/Chicago); {unknown} and {ada} stay")
    assert (message.subject, message.token, message.channel) == ("ada", "ada", "fake")
    assert message.data["tockwork_schedule"] == str(sid)


def test_render_places_the_local_time_on_either_side_of_midnight() -> None:
    """A late-evening reminder in a zone west of UTC falls on the next UTC date."""
    at = datetime(2026, 7, 1, 3, 30, tzinfo=UTC)  # 22:30 CDT (UTC-5) on 30 June
    text = "{date} {time} {zone} {subject}"
    assert delivery.render(text, subject="s", at=at, zone="America/Chicago") == (
        "2026-06-30 22:30 America/Chicago s"
    )
    assert delivery.render(text, subject="s", at=at, zone=None) == "2026-07-01 03:30 UTC s"
    assert delivery.render("no braces", subject="s", at=at, zone="Mars/Base") == "no braces"


def test_the_message_fields_from_the_payload(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    data = {"n": 3, "ok": True, "s": "x", "nested": {"a": [1, 2]}, "none": None}
    plain = create(conn, "plain", message="drink water")
    custom = create(
        conn, "custom", title="T", body="B", data=data, ttl=7200, collapse_key="mine",
        priority="normal",
    )  # fmt: skip
    batch_jobs = claim(conn, db_url)
    subjects = by_subject(batch_jobs)
    channel = ScriptedChannel()
    handler = handlers(channel, resolver=SubjectAsToken("fake"), ttl=timedelta(minutes=5))
    deliver(handler, RecordingBatch(batch_jobs))
    sent = {m.subject: m for m in channel.sent}
    p, c = sent["plain"], sent["custom"]
    # Defaults: title Reminder, body from "message", the handler's ttl, one collapse key per
    # schedule, high priority; data carries only Tockwork's keys.
    assert (p.title, p.body, p.priority) == ("Reminder", "drink water", "high")
    assert p.collapse_key == f"tockwork-{plain}"
    assert p.expires_at == meta(subjects["plain"]).at + timedelta(minutes=5)
    assert dict(p.data) == {
        "tockwork_key": p.key,
        "tockwork_schedule": str(plain),
        "tockwork_occurrence": meta(subjects["plain"]).occurrence_key,
    }
    assert p.key == device_key(subjects["plain"], Device("fake", "plain"))
    # The payload's own: data values made strings (JSON text for what is not a string).
    assert (c.title, c.body, c.priority, c.collapse_key) == ("T", "B", "normal", "mine")
    assert c.expires_at == meta(subjects["custom"]).at + timedelta(seconds=7200)
    assert {k: v for k, v in c.data.items() if not k.startswith("tockwork_")} == {
        "n": "3", "ok": "true", "s": "x", "nested": '{"a":[1,2]}', "none": "null",
    }  # fmt: skip
    assert all(isinstance(v, str) for v in c.data.values())
    assert json.loads(c.data["nested"]) == data["nested"]
    assert c.data["tockwork_schedule"] == str(custom)


def test_each_message_is_its_own_payload_s_in_a_batch_that_shares_contents(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """The handler reads a payload's content once per distinct content of a batch (a herd's
    jobs share theirs): each message is still what content() and render() make of its own
    job's payload, with its own schedule's collapse key and its own subject."""
    payloads: list[dict[str, Any]] = [
        {"message": "drink water"},
        {"message": "drink water"},
        {"message": "drink water", "collapse_key": ""},
        {"message": "drink water", "collapse_key": "mine"},
        {"message": "drink water", "ttl": 7200},
        {"message": "drink water", "ttl": 7200.0},
        {"title": "Hi {subject}", "body": "at {time} {zone}"},
        {"title": "Hi {subject}", "body": "at {time} {zone}"},
        {"message": "drink water", "priority": "normal"},
        {"message": "drink water", "data": {"k": 1}},
        {"message": "drink water", "title": 5},
    ]
    ids = {f"s{i}": create(conn, f"s{i}", **payload) for i, payload in enumerate(payloads)}
    batch_jobs = claim(conn, db_url)
    channel = ScriptedChannel()
    handler = handlers(channel, resolver=SubjectAsToken("fake"), ttl=timedelta(minutes=5))
    batch = RecordingBatch(batch_jobs)
    deliver(handler, batch)
    sent = {m.subject: m for m in channel.sent}
    assert len(sent) == len(payloads) - 1
    for job in batch_jobs:
        subject = str(job.payload["subject"])
        if subject == "s10":
            assert batch.outcome(job) == ("dead", "bad_payload")
            continue
        c = delivery.content(job, default_ttl=timedelta(minutes=5))
        m, at = sent[subject], meta(job).at
        assert m.title == delivery.render(c.title, subject=subject, at=at, zone="UTC")
        assert m.body == delivery.render(c.body, subject=subject, at=at, zone="UTC")
        assert (m.collapse_key, m.priority) == (c.collapse_key, c.priority)
        expires = at + c.ttl
        if job.payload.get("ttl") is None and job.expires_at is not None:
            expires = min(expires, job.expires_at)
        assert m.expires_at == expires
        assert dict(m.data) == {
            **c.data,
            "tockwork_key": m.key,
            "tockwork_schedule": str(ids[subject]),
            "tockwork_occurrence": meta(job).occurrence_key,
        }
    assert sent["s0"].collapse_key == f"tockwork-{ids['s0']}"
    assert sent["s1"].collapse_key == f"tockwork-{ids['s1']}"
    assert (sent["s2"].collapse_key, sent["s3"].collapse_key) == (None, "mine")
    assert (sent["s6"].title, sent["s7"].title) == ("Hi s6", "Hi s7")
    assert sent["s4"].expires_at == sent["s5"].expires_at != sent["s0"].expires_at
    assert sent["s9"].data["k"] == "1" and "k" not in sent["s0"].data


def test_the_default_ttl_is_an_hour_after_the_nominal_instant(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    create(conn, "ada")
    (job,) = claim(conn, db_url)
    channel = ScriptedChannel()
    deliver(handlers(channel, resolver=SubjectAsToken("fake")), RecordingBatch([job]))
    assert timedelta(hours=1) == DEFAULT_TTL
    assert channel.sent[0].expires_at == SAT_0800 + DEFAULT_TTL
    assert channel.sent[0].ttl(SAT_0800 + timedelta(minutes=20)) == timedelta(minutes=40)


BAD_PAYLOADS: list[tuple[dict[str, Any], str]] = [
    ({"ttl": -1}, "'ttl'"),
    ({"ttl": 59}, "'ttl'"),
    ({"ttl": 28 * 86400 + 1}, "'ttl'"),
    ({"ttl": "soon"}, "'ttl'"),
    ({"ttl": True}, "'ttl'"),
    ({"title": 5}, "'title'"),
    ({"body": ["x"]}, "'body'"),
    ({"priority": "urgent"}, "'priority'"),
    ({"data": [1, 2]}, "'data'"),
    ({"collapse_key": 7}, "'collapse_key'"),
]


def test_a_bad_payload_is_dead_with_bad_payload_naming_the_field(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    for i, (payload, _) in enumerate(BAD_PAYLOADS):
        create(conn, f"bad{i}", **payload)
    create(conn, "good")
    batch_jobs = claim(conn, db_url)
    subjects = by_subject(batch_jobs)
    channel = ScriptedChannel()
    batch = RecordingBatch(batch_jobs)
    deliver(handlers(channel, resolver=SubjectAsToken("fake")), batch)
    for i, (payload, field) in enumerate(BAD_PAYLOADS):
        job = subjects[f"bad{i}"]
        assert batch.outcome(job) == ("dead", "bad_payload"), payload
        assert field in batch.messages[job.id], (payload, batch.messages[job.id])
        assert repr(next(iter(payload.values()))) in batch.messages[job.id]
    # The bad ones did not stop the good one.
    assert batch.outcome(subjects["good"]) == ("succeeded",)
    assert [m.token for m in channel.sent] == ["good"]


# -- outcomes from the channels' answers -----------------------------------------------------


def test_a_device_whose_channel_is_not_configured_is_dead_with_no_channel(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    create(conn, "ada")
    (job,) = claim(conn, db_url)
    devices = [Device("fake", "tok-a"), Device("apns", "tok-iphone-0123456789")]
    channel = ScriptedChannel()
    batch = RecordingBatch([job])
    deliver(handlers(channel, resolver=FakeResolver({"ada": devices})), batch)
    assert batch.outcome(job) == ("dead", "no_channel")
    assert "'apns'" in batch.messages[job.id]
    assert "tok-iphone" not in batch.messages[job.id]
    # The configured channel's device was notified, and recorded: a requeue after the
    # operator configures APNs notifies only the iPhone.
    assert [m.token for m in channel.sent] == ["tok-a"]
    assert jobs.effects.recorded(conn, [device_key(job, d) for d in devices]) == {
        device_key(job, devices[0])
    }


@pytest.mark.parametrize("mode", ["raise", "short"])
def test_a_channel_that_breaks_its_contract_loses_nothing(
    conn: psycopg.Connection[Any],
    db_url: str,
    handlers: Make,
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create(conn, "ada")
    create(conn, "bob")
    batch_jobs = claim(conn, db_url)
    broken = BrokenChannel(mode)
    sound = ScriptedChannel("sound")
    devices = {
        "ada": [Device("fake", "tok-ada-0123456789"), Device("sound", "tok-ada-2")],
        "bob": [Device("sound", "tok-bob")],
    }
    resolver = FakeResolver(devices)
    batch = RecordingBatch(batch_jobs)
    with caplog.at_level(logging.ERROR, logger="tockwork.delivery"):
        deliver(handlers(broken, sound, resolver=resolver), batch)
    subjects = by_subject(batch_jobs)
    # Every message of the broken channel is transient (even one it answered): retried.
    assert batch.outcome(subjects["ada"]) == ("retry", "channel", None)
    # The other channel's sends were not held up, and its deliveries recorded.
    assert batch.outcome(subjects["bob"]) == ("succeeded",)
    ada_keys = [device_key(subjects["ada"], d) for d in devices["ada"]]
    assert jobs.effects.recorded(conn, ada_keys) == {ada_keys[1]}
    # One error line naming the channel, not the token (other loggers may be captured too).
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tockwork.delivery"]
    assert "fake" in line and "tok-ada" not in line
    assert "tok-ada" not in batch.messages[subjects["ada"].id]
    # The retry sends only the undelivered device.
    retry = RecordingBatch(next_attempt([subjects["ada"]]))
    fixed = ScriptedChannel()
    deliver(handlers(fixed, ScriptedChannel("sound"), resolver=resolver), retry)
    assert retry.outcome(retry.jobs[0]) == ("succeeded",)
    assert [m.token for m in fixed.sent] == ["tok-ada-0123456789"]


def test_the_outcome_of_a_job_from_its_devices_answers(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """Any transient -> retry (with the longest of its hints); else any rate limited -> retry
    after the longest hint; else any permanent -> dead; else succeeded."""
    answers: dict[str, list[Answer]] = {
        "rl-5": [(PushStatus.RATE_LIMITED, "QUOTA_EXCEEDED", timedelta(seconds=5))],
        "rl-30": [(PushStatus.RATE_LIMITED, "QUOTA_EXCEEDED", timedelta(seconds=30))],
        "rl-10": [(PushStatus.RATE_LIMITED, "QUOTA_EXCEEDED", timedelta(seconds=10))],
        "tr-3": [(PushStatus.TRANSIENT, "http_503", timedelta(seconds=3))],
        "perm": [(PushStatus.PERMANENT, "SENDER_ID_MISMATCH", None)],
        "dead": [(PushStatus.REJECTED, "UNREGISTERED", None)],
        "dup": [(PushStatus.DUPLICATE, None, None)],
    }
    tokens = {
        "limited": ["rl-5", "rl-30", "ok-1"],  # rate limited: the longest hint
        "transient": ["rl-10", "tr-3", "perm"],  # transient wins, with its own hint
        "permanent": ["perm-2", "ok-2"],  # permanent: dead
        "fine": ["ok-3", "dead", "dup"],  # delivered, rejected, duplicate: succeeded
    }
    answers["perm-2"] = answers["perm"]
    ids = {name: create(conn, name) for name in tokens}
    batch_jobs = claim(conn, db_url)
    subjects = by_subject(batch_jobs)
    channel = ScriptedChannel(script=answers)
    resolver = FakeResolver({s: [Device("fake", t, i) for i, t in enumerate(ts)]
                             for s, ts in tokens.items()})  # fmt: skip
    batch = RecordingBatch(batch_jobs)
    deliver(handlers(channel, resolver=resolver), batch)
    assert {s: batch.outcome(j) for s, j in subjects.items()} == {
        "limited": ("rate_limited", timedelta(seconds=30)),
        "transient": ("retry", "http_503", timedelta(seconds=3)),
        "permanent": ("dead", "SENDER_ID_MISMATCH"),
        "fine": ("succeeded",),
    }
    assert "scripted permanent" in batch.messages[subjects["permanent"].id]
    assert resolver.invalidated == [[("fake", "dead", 1, "scripted rejected", "UNREGISTERED")]]
    # Only the delivered devices are recorded (a duplicate was recorded by whoever sent it).
    delivered = {
        device_key(subjects[s], Device("fake", t))
        for s, ts in tokens.items()
        for t in ts
        if t.startswith("ok-")
    }
    every = [device_key(subjects[s], Device("fake", t)) for s, ts in tokens.items() for t in ts]
    assert jobs.effects.recorded(conn, every) == delivered
    assert sorted(ids) == sorted(subjects)


# -- the simulated channel's contract ---------------------------------------------------------


def _messages(prefix: str, n: int) -> list[PushMessage]:
    return [
        PushMessage(key=f"{prefix}{i}", channel="simulated", token=f"token-{i:04}-abcdef",
                    title=f"title {i}", body=f"body {i}", subject=f"s{i}",
                    data={"tockwork_schedule": "7", "tockwork_occurrence": f"2026-03-07T{i}"})
        for i in range(n)
    ]  # fmt: skip


def test_the_simulated_channel_keeps_the_channel_contract(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    messages = _messages("k", 80)
    dead, permanent = messages[3].token, messages[4].token
    messages.append(dataclasses.replace(messages[10]))  # the same key twice (another object)

    def channel(seed: int) -> SimulatedChannel:
        return SimulatedChannel(
            db_url, transient_rate=0.2, rate_limit_rate=0.2, retry_after=timedelta(seconds=9),
            rejected_tokens={dead}, permanent_tokens={permanent}, seed=seed,
        )  # fmt: skip

    async def scenario() -> list[list[PushResult]]:
        first, second, other = channel(3), channel(3), channel(4)
        try:
            return [await c.send(messages, now=SAT_0800) for c in (first, second, other)]
        finally:
            for c in (first, second, other):
                await c.aclose()

    a, b, c = asyncio.run(scenario())
    for results in (a, b, c):
        # One result per message, in order, the message itself.
        assert len(results) == len(messages)
        assert all(r.message is m for r, m in zip(results, messages, strict=True))
        assert results[3].status is PushStatus.REJECTED
        assert results[4].status is PushStatus.PERMANENT
        for r in results:
            assert r.error is None or r.message.token not in r.error
    # Every kind of answer in one send (a duplicate: below), each message its own.
    assert {r.status for r in a} >= set(PushStatus) - {PushStatus.DUPLICATE}
    assert all(
        r.retry_after == timedelta(seconds=9) for r in a if r.status is PushStatus.RATE_LIMITED
    )
    # The same key twice in one send: at most one delivery.
    assert not (a[10].status is PushStatus.DELIVERED and a[-1].status is PushStatus.DELIVERED)
    delivered = {r.key for r in a if r.status is PushStatus.DELIVERED}
    # Each key delivered by one of the three channels, once: one row each.
    every = {r.key for r in a + b + c if r.status is PushStatus.DELIVERED}
    assert len(every) == sum(r.status is PushStatus.DELIVERED for r in a + b + c)
    rows = conn.execute(
        "SELECT effect_key, job_id, attempt, schedule_id, occurrence_key, subject, token, title,"
        " message FROM simulated_pushes ORDER BY effect_key"
    ).fetchall()
    assert {r[0] for r in rows} == every
    by_key = {m.key: m for m in messages[:80]}
    for key, job_id, attempt, sid, occurrence, subject, token, title, body in rows:
        m = by_key[key]
        assert (job_id, attempt, sid) == (None, None, 7)
        assert (occurrence, subject, token, title, body) == (
            m.data["tockwork_occurrence"], m.subject, m.token, m.title, m.body,
        )  # fmt: skip
    # Failures are drawn from the seed: another channel with the same seed answers the same,
    # except that what the first delivered is now a duplicate (never delivered twice).
    assert [r.status for r in b] == [
        PushStatus.DUPLICATE if r.status is PushStatus.DELIVERED else r.status for r in a
    ]
    assert PushStatus.DUPLICATE in {r.status for r in b}
    assert not any(r.status is PushStatus.DELIVERED for r in b if r.key in delivered)
    # Another seed draws other failures.
    failed = {PushStatus.TRANSIENT, PushStatus.RATE_LIMITED}
    assert [r.status in failed for r in c] != [r.status in failed for r in a]


def test_the_simulated_channel_serves_one_event_loop_after_another(db_url: str) -> None:
    """A worker's ``run_until_idle`` runs its async handlers on a new event loop each time:
    sends that overlap on one loop, then on the next, all deliver (none raises)."""
    channel = SimulatedChannel(db_url)

    async def overlapping(prefix: str) -> list[PushStatus]:
        answers = await asyncio.gather(
            channel.send(_messages(f"{prefix}a", 5), now=SAT_0800),
            channel.send(_messages(f"{prefix}b", 5), now=SAT_0800),
        )
        return [r.status for results in answers for r in results]

    try:
        for loop in ("x", "y", "z"):
            assert asyncio.run(overlapping(loop)) == [PushStatus.DELIVERED] * 10
    finally:
        asyncio.run(channel.aclose())


def test_the_simulated_channel_answers_transient_when_its_database_is_unreachable() -> None:
    channel = SimulatedChannel("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    messages = _messages("u", 3)

    async def scenario() -> list[PushResult]:
        try:
            return await channel.send(messages, now=SAT_0800)
        finally:
            await channel.aclose()

    results = asyncio.run(scenario())
    assert [r.status for r in results] == [PushStatus.TRANSIENT] * 3
    assert all(r.message is m for r, m in zip(results, messages, strict=True))
    assert {r.code for r in results} == {"db"}


# -- configuration ----------------------------------------------------------------------------

PUSH_ENV = [*delivery.SETTINGS, "TOCKWORK_SIM_TRANSIENT", "TOCKWORK_SIM_RATE_LIMIT",
            "TOCKWORK_SIM_RETRY_AFTER"]  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, db_url: str) -> pytest.MonkeyPatch:
    """The environment without any push setting, DATABASE_URL this test's database."""
    for name in PUSH_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", db_url)
    return monkeypatch


@pytest.mark.parametrize(
    ("env", "field", "needle"),
    [
        ({}, "TOCKWORK_FCM_CREDENTIALS", "no push channel is configured"),
        ({"TOCKWORK_FCM_CREDENTIALS": "  "}, "TOCKWORK_FCM_CREDENTIALS", "TOCKWORK_APNS_*"),
        ({"TOCKWORK_APNS_KEY_FILE": "/keys/AuthKey.p8"}, "TOCKWORK_APNS_KEY_ID",
         "required with TOCKWORK_APNS_KEY_FILE"),
        ({"TOCKWORK_APNS_KEY_ID": "ABCDEFGHIJ", "TOCKWORK_APNS_TEAM_ID": "KLMNOPQRST",
          "TOCKWORK_APNS_TOPIC": "com.example.app"}, "TOCKWORK_APNS_KEY_FILE", "required"),
        ({"TOCKWORK_APNS_KEY_FILE": "/k.p8", "TOCKWORK_APNS_KEY_ID": "ABCDEFGHIJ",
          "TOCKWORK_APNS_TEAM_ID": "KLMNOPQRST"}, "TOCKWORK_APNS_TOPIC", "required"),
        ({"TOCKWORK_PUSH_SIMULATED": "yes"}, "TOCKWORK_PUSH_SIMULATED", "'yes'"),
        ({"TOCKWORK_PUSH_SIMULATED": "1", "TOCKWORK_SIM_TRANSIENT": "lots"},
         "TOCKWORK_SIM_TRANSIENT", "must be a number"),
        ({"TOCKWORK_PUSH_SIMULATED": "1", "TOCKWORK_SIM_RATE_LIMIT": "2"},
         "TOCKWORK_SIM_RATE_LIMIT", "from 0 to 1"),
        ({"TOCKWORK_PUSH_CA_FILE": "/nonexistent/ca.pem", "TOCKWORK_PUSH_SIMULATED": "1"},
         "TOCKWORK_PUSH_CA_FILE", "/nonexistent/ca.pem"),
    ],
)  # fmt: skip
def test_channels_from_env_names_the_setting(
    db_url: str, env: dict[str, str], field: str, needle: str
) -> None:
    with pytest.raises(InvalidPushConfig) as info:
        delivery.channels_from_env(db_url, env)
    assert info.value.field == field
    assert field in str(info.value) and needle in str(info.value)


def test_channels_from_env_the_simulated_channel(db_url: str) -> None:
    env = {"TOCKWORK_PUSH_SIMULATED": "1", "TOCKWORK_SIM_RATE_LIMIT": "0.25",
           "TOCKWORK_SIM_RETRY_AFTER": "4"}  # fmt: skip
    (channel,) = delivery.channels_from_env(db_url, env)
    assert isinstance(channel, SimulatedChannel) and isinstance(channel, PushChannel)
    assert (channel.name, channel.rate_limit_rate, channel.retry_after) == (
        "simulated", 0.25, timedelta(seconds=4),
    )  # fmt: skip
    assert delivery.channels_from_env(db_url, {"TOCKWORK_PUSH_SIMULATED": "0", **env})[0]
    assert isinstance(delivery.resolver_from_env({}, [channel]), RegistryResolver)
    assert delivery.resolver_from_env(
        {"TOCKWORK_PUSH_DEVICES": "subject:simulated"}, [channel]
    ) == SubjectAsToken("simulated")


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"TOCKWORK_PUSH_TTL": "an hour"}, "TOCKWORK_PUSH_TTL"),
        ({"TOCKWORK_PUSH_TTL": "-1"}, "TOCKWORK_PUSH_TTL"),
        ({"TOCKWORK_PUSH_TTL": str(29 * 86400)}, "TOCKWORK_PUSH_TTL"),
        ({"TOCKWORK_PUSH_SUBJECT_CAP": "3"}, "TOCKWORK_PUSH_SUBJECT_CAP"),
        ({"TOCKWORK_PUSH_SUBJECT_CAP": "0/3600"}, "TOCKWORK_PUSH_SUBJECT_CAP"),
        ({"TOCKWORK_PUSH_SUBJECT_CAP": "3/-1"}, "TOCKWORK_PUSH_SUBJECT_CAP"),
        ({"TOCKWORK_PUSH_SUBJECT_CAP": "3/99999999"}, "TOCKWORK_PUSH_SUBJECT_CAP"),
        ({"TOCKWORK_PUSH_DEVICES": "phonebook"}, "TOCKWORK_PUSH_DEVICES"),
        ({"TOCKWORK_PUSH_DEVICES": "subject:fcm"}, "TOCKWORK_PUSH_DEVICES"),
        ({"TOCKWORK_PUSH_DEVICES": "subject:"}, "TOCKWORK_PUSH_DEVICES"),
        ({"TOCKWORK_PUSH_SIMULATED": ""}, "TOCKWORK_FCM_CREDENTIALS"),
        ({"DATABASE_URL": ""}, "DATABASE_URL"),
    ],
)
def test_the_delivery_app_names_a_bad_setting(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], field: str
) -> None:
    clean_env.setenv("TOCKWORK_PUSH_SIMULATED", "1")
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(InvalidPushConfig) as info:
        delivery.app()
    assert info.value.field == field
    assert field in str(info.value)


def test_the_delivery_app_from_the_environment(
    clean_env: pytest.MonkeyPatch, conn: psycopg.Connection[Any]
) -> None:
    clean_env.setenv("TOCKWORK_PUSH_SIMULATED", "1")
    clean_env.setenv("TOCKWORK_PUSH_DEVICES", "subject:simulated")
    clean_env.setenv("TOCKWORK_PUSH_TTL", "120")
    handler = delivery.app()["reminder"]
    try:
        assert isinstance(handler, DeliveryHandler)
        assert handler.ttl == timedelta(seconds=120)
        assert handler.resolver == SubjectAsToken("simulated")
        assert list(handler.channels) == ["simulated"]
    finally:
        asyncio.run(handler.aclose())
    # The simulated channel has no quota: no pacing limit was set.
    assert jobs.limits.list_limits(conn) == []


def test_the_handler_refuses_a_bad_channel_list_or_ttl(db_url: str) -> None:
    with pytest.raises(InvalidPushConfig, match="channels"):
        DeliveryHandler(db_url, [])
    with pytest.raises(InvalidPushConfig, match="two channels have this name"):
        DeliveryHandler(db_url, [ScriptedChannel(), ScriptedChannel()])
    with pytest.raises(InvalidPushConfig, match=r"channels.*'my/chan'"):
        DeliveryHandler(db_url, [ScriptedChannel("my/chan")])  # it would end the effect keys
    with pytest.raises(InvalidPushConfig, match="ttl"):
        DeliveryHandler(db_url, [ScriptedChannel()], ttl=timedelta(seconds=-1))
    with pytest.raises(InvalidPushConfig, match="ttl"):
        DeliveryHandler(db_url, [ScriptedChannel()], ttl=timedelta(days=29))


def test_closing_the_handler_closes_its_channels(db_url: str) -> None:
    fake, other = ScriptedChannel(), ScriptedChannel("other")
    asyncio.run(DeliveryHandler(db_url, [fake, other]).aclose())
    assert fake.closed and other.closed


# -- pacing -----------------------------------------------------------------------------------


@dataclasses.dataclass
class QuotaChannel:
    """Just what pace reads of a channel."""

    name: str
    quota_per_minute: int | None

    async def send(self, messages: Sequence[PushMessage], *, now: datetime) -> list[PushResult]:
        raise AssertionError("pace sends nothing")

    async def aclose(self) -> None:
        pass


def reminder_limits(conn: psycopg.Connection[Any]) -> list[jobs.RateLimit]:
    conn.commit()  # a fresh snapshot
    return [s.limit for s in jobs.limits.list_limits(conn) if s.limit.job_type == "reminder"]


def test_pace_sets_the_reminder_rate_limit_at_the_smallest_quota_once(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    channels: list[PushChannel] = [QuotaChannel("fcm", 1200), QuotaChannel("apns", 90_000),
                                   QuotaChannel("simulated", None)]  # fmt: skip
    limit = delivery.pace(db_url, channels)
    expected = jobs.RateLimit(job_type="reminder", per_second=20, per_minute=1200)
    assert limit == expected
    assert reminder_limits(conn) == [expected]
    # Set already: left as it is (the next start of a worker does not reset the buckets).
    assert delivery.pace(db_url, [QuotaChannel("fcm", 600)]) is None
    assert reminder_limits(conn) == [expected]


def test_pace_keeps_an_operator_s_limit_and_needs_a_quota(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    assert delivery.pace(db_url, [QuotaChannel("simulated", None)]) is None
    assert reminder_limits(conn) == []
    small = delivery.pace(db_url, [QuotaChannel("fcm", 30)])
    assert small == jobs.RateLimit(job_type="reminder", per_second=1, per_minute=30)
    jobs.limits.clear_limit(conn, job_type="reminder")
    operator = jobs.RateLimit(job_type="reminder", per_second=5)
    jobs.limits.set_limit(conn, operator)
    conn.commit()
    assert delivery.pace(db_url, [QuotaChannel("fcm", 1200)]) is None
    assert reminder_limits(conn) == [operator]
    # Another job type's limit does not count as the reminders'.
    jobs.limits.clear_limit(conn, job_type="reminder")
    jobs.limits.set_limit(conn, jobs.RateLimit(job_type="email", per_second=3))
    conn.commit()
    assert delivery.pace(db_url, [QuotaChannel("fcm", 1200)]) is not None
    assert reminder_limits(conn) == [
        jobs.RateLimit(job_type="reminder", per_second=20, per_minute=1200)
    ]


# -- the device registry (scheduler.devices, helper H2's) -------------------------------------


def test_the_registry_resolver_notifies_valid_devices_and_invalidates_a_dead_one_once(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    devices: Any = pytest.importorskip("scheduler.devices")
    phone = devices.add_device(conn, "ada", "simulated", "tok-phone-0123456789", platform="android")
    dead = devices.add_device(conn, "ada", "simulated", "tok-dead-0123456789")
    other = devices.add_device(conn, "bob", "simulated", "tok-bob-0123456789")
    gone = devices.add_device(conn, "ada", "simulated", "tok-old-0123456789")
    devices.invalidate_devices(conn, [(gone.id, "replaced", None)], now=T0)
    conn.commit()
    facts = "SELECT count(*) FROM outbox_events WHERE event_type = 'device.invalidated'"
    row = conn.execute(facts).fetchone()
    assert row is not None
    facts_before = int(row[0])
    create(conn, "ada")
    batch_jobs = claim(conn, db_url)
    channel = SimulatedChannel(db_url, rejected_tokens={dead.token})
    handler = handlers(channel)  # the registry is the default resolver
    assert isinstance(handler.resolver, RegistryResolver)
    batch = RecordingBatch(batch_jobs)
    deliver(handler, batch)
    assert batch.outcome(batch_jobs[0]) == ("succeeded",)
    # The valid devices of the job's subject only (an invalidated one is not resolved).
    assert sorted(row[2] for row in pushed(conn)) == [phone.token]
    conn.commit()
    valid = devices.list_devices(conn, subject="ada")
    assert [d.token for d in valid] == [phone.token]
    assert valid[0].last_success_at == SAT_0800
    (was_dead,) = [
        d
        for d in devices.list_devices(conn, subject="ada", include_invalid=True)
        if d.id == dead.id
    ]
    assert was_dead.invalidated_at == SAT_0800 and was_dead.invalid_reason
    assert [d.last_success_at for d in devices.list_devices(conn, subject="bob")] == [None]
    assert other.subject == "bob"
    # One fact for the dead device (the one invalidated before had its own), which does not
    # carry the token.
    assert conn.execute(facts).fetchone() == (facts_before + 1,)
    payloads = conn.execute(
        "SELECT payload::text FROM outbox_events WHERE event_type = 'device.invalidated'"
    ).fetchall()
    assert not [p for (p,) in payloads if dead.token in p or gone.token in p]
    # The job again (its completion lost): nothing sent twice, nothing invalidated twice.
    again = RecordingBatch(next_attempt(batch_jobs))
    deliver(handler, again)
    assert again.outcome(again.jobs[0]) == ("succeeded",)
    assert sorted(row[2] for row in pushed(conn)) == [phone.token]
    assert conn.execute(facts).fetchone() == (facts_before + 1,)


def test_the_registry_resolver_keeps_organizations_apart(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """One subject name in two organizations (and in none) is three people: each job notifies
    the devices of its own organization's subject only."""
    devices: Any = pytest.importorskip("scheduler.devices")
    org_a, org_b = uuid.uuid4(), uuid.uuid4()
    devices.add_device(conn, "ada", "simulated", "tok-org-a-0123456789", organization_id=org_a)
    devices.add_device(conn, "ada", "simulated", "tok-org-b-0123456789", organization_id=org_b)
    devices.add_device(conn, "ada", "simulated", "tok-no-org-0123456789")
    conn.commit()
    in_a = scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="ada", jitter=0,
        payload={"subject": "ada"}, organization_id=org_a, now=T0,
    )  # fmt: skip
    no_org = create(conn, "ada")
    batch_jobs = claim(conn, db_url)
    assert sorted(str(j.organization_id) for j in batch_jobs) == sorted([str(org_a), "None"])
    batch = RecordingBatch(batch_jobs)
    deliver(handlers(SimulatedChannel(db_url)), batch)
    assert [batch.outcome(j) for j in batch_jobs] == [("succeeded",)] * 2
    assert sorted((sid, token) for sid, _, token in pushed(conn)) == sorted(
        [(in_a.id, "tok-org-a-0123456789"), (no_org, "tok-no-org-0123456789")]
    )


# -- one statement to read a batch, one to record it (issue 22's round trips) -----------------


class Statements:
    """Counts what the handler's connections send: statements through a cursor, and
    transaction blocks (each a BEGIN and a COMMIT of its own)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        self.transactions = 0
        execute = psycopg.AsyncCursor.execute
        transaction = psycopg.AsyncConnection.transaction

        async def counted_execute(cur: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            self.sent.append(str(query).split("\n", 1)[0])
            return await execute(cur, query, *args, **kwargs)

        def counted_transaction(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.transactions += 1
            return transaction(conn, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted_execute)
        monkeypatch.setattr(psycopg.AsyncConnection, "transaction", counted_transaction)


def test_a_registry_batch_is_read_in_one_statement_and_recorded_in_one(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The still-due check, the devices and check-before-send in one statement; the effect
    keys and the devices' last success in one more; no transaction block: two round trips
    for a batch, whatever its size (the in-memory channel sends nothing to the database)."""
    for subject in ("ada", "bob", "cy"):
        for n in range(2):
            registry.add_device(conn, subject, "fake", f"tok-{subject}-{n}-0123456789")
        create(conn, subject)
    batch_jobs = claim(conn, db_url)
    channel = ScriptedChannel()
    handler = handlers(channel)
    statements = Statements(monkeypatch)
    batch = RecordingBatch(batch_jobs)
    deliver(handler, batch)
    assert [batch.outcome(j) for j in batch_jobs] == [("succeeded",)] * 3
    assert len(channel.sent) == 6
    # A new connection's one setup statement (its statements planned once), then the batch's two.
    setup, *sent = statements.sent
    assert setup.startswith("-- The delivery's own connections"), statements.sent
    assert len(sent) == 2 and statements.transactions == 0, statements.sent
    conn.commit()
    keys = [device_key(j, Device("fake", t.token)) for j in batch_jobs
            for t in registry.list_devices(conn, subject=str(j.payload["subject"]))]  # fmt: skip
    assert jobs.effects.recorded(conn, keys) == set(keys) and len(keys) == 6
    assert {d.last_success_at for d in registry.list_devices(conn)} == {SAT_0800}
    # Run again (a completion lost): the one read finds every key recorded, nothing is sent,
    # nothing is recorded.
    statements.sent.clear()
    again = RecordingBatch(next_attempt(batch_jobs))
    deliver(handler, again)
    assert [again.outcome(j) for j in again.jobs] == [("succeeded",)] * 3
    assert len(channel.sent) == 6 and len(statements.sent) == 1


def test_the_handler_s_connections_plan_each_statement_once_as_index_probes(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """The built-in resolvers' connections prepare their statements at the first call and run
    their generic plan (no custom plan per batch), and that plan probes job_effects by its
    key even when it was made while the table was empty; an application's resolver's
    connections keep the server's defaults."""
    for subject in ("ada", "bob"):
        registry.add_device(conn, subject, "fake", f"tok-{subject}-0123456789")
        create(conn, subject)
    batch_jobs = claim(conn, db_url)
    handler = handlers(ScriptedChannel())
    deliver(handler, RecordingBatch(batch_jobs[:1]))
    deliver(handler, RecordingBatch(batch_jobs[1:]))

    async def prepared(h: DeliveryHandler) -> tuple[list[Any], list[Any]]:
        async with h._connections.connection() as c:
            cur = await c.execute(
                "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan')"
            )
            settings = list(await cur.fetchall())
            cur = await c.execute(
                "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            )
            rows = await cur.fetchall()
            ours = [r for r in rows if "FROM job_effects" in r[0] or "effect_recorded" in r[0]]
            return settings, ours

    settings, statements = asyncio.run(prepared(handler))
    assert settings == [("force_generic_plan", "off")]
    assert len(statements) == 2, statements  # the read and the record, each called twice
    assert all(generic == 2 and custom == 0 for _, generic, custom in statements), statements
    read = next(text for text, _, _ in statements if "job_effects WHERE effect_key" in text)
    conn.execute("TRUNCATE job_effects")
    conn.commit()

    def plan(seqscan: str) -> str:
        # PREPARE and EXPLAIN EXECUTE under force_generic_plan, not EXPLAIN (GENERIC_PLAN):
        # that option exists from PostgreSQL 16 on, and CI also runs on 15.
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("SELECT set_config('enable_seqscan', %s, false)", [seqscan])
            c.execute("SET plan_cache_mode = force_generic_plan")
            c.execute("PREPARE the_read AS " + read)
            row = c.execute(
                "SELECT cardinality(parameter_types) FROM pg_prepared_statements"
                " WHERE name = 'the_read'"
            ).fetchone()
            assert row is not None
            nulls = ", ".join(["NULL"] * row[0])
            return "\n".join(r[0] for r in c.execute(f"EXPLAIN EXECUTE the_read({nulls})"))

    if conn.info.server_version >= 160000:
        # What the one plan would be without the setting (PostgreSQL 16 on; 15's planner
        # estimates the emptied table otherwise and probes its index either way).
        assert "Seq Scan on job_effects" in plan("on")
    assert "Seq Scan on job_effects" not in plan("off") and "Index" in plan("off")

    class OwnResolver(SubjectAsToken):
        """An application's resolver (not one of the built-in ones)."""

    own = handlers(ScriptedChannel(), resolver=OwnResolver("fake"))
    deliver(own, RecordingBatch(claim(conn, db_url, SAT_0800 + timedelta(days=1))))
    settings, _ = asyncio.run(prepared(own))
    assert settings == [("auto", "on")]


def test_the_database_computes_each_device_s_key_as_device_key_does(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make
) -> None:
    """The one read computes the effect-once keys in SQL (a SHA-256 of the token's UTF-8):
    they must be :func:`device_key`'s for any token (non-ASCII, long) and any job (with and
    without an organization), or check-before-send would miss the records."""
    org = uuid.uuid4()
    tokens = ["tok-plain-0123456789", "tök-ünï-çødé-😀-0123456789", "x" * 2000]
    for token in tokens:
        registry.add_device(conn, "ada", "fake", token)
        registry.add_device(conn, "ada", "fake", token + "-org", organization_id=org)
    create(conn, "ada")
    scheduler.create_schedule(
        conn, job_type="reminder", rule="daily@08:00", zone="UTC", subject="ada", jitter=0,
        payload={"subject": "ada"}, organization_id=org, now=T0,
    )  # fmt: skip
    batch_jobs = claim(conn, db_url)
    assert len(batch_jobs) == 2
    # One key of each job recorded before: the read must report exactly those as done.
    done = {
        device_key(j, Device("fake", tokens[1] + ("-org" if j.organization_id else "")))
        for j in batch_jobs
    }
    jobs.effects.record_many(conn, sorted(done), now=T0)
    conn.commit()
    handler = handlers(ScriptedChannel())

    async def read() -> dict[int, Any]:
        async with handler._connections.connection() as c:
            metas = {j.id: OccurrenceMeta.of(j) for j in batch_jobs}
            recipients = {j.id: delivery._recipient(j) for j in batch_jobs}
            return (await handler._read_folded(c, batch_jobs, SAT_0800, metas, recipients))[3]

    found = asyncio.run(read())
    for job in batch_jobs:
        suffix = "-org" if job.organization_id else ""
        wanted = {
            (t + suffix, device_key(job, Device("fake", t + suffix)),
             device_key(job, Device("fake", t + suffix)) in done)
            for t in tokens
        }  # fmt: skip
        assert {(token, key, seen) for _, _, token, key, seen in found[job.id]} == wanted


@pytest.mark.parametrize(
    ("zone", "expected"), [("Etc/UTC", "UTC"), ("UTC", "UTC"), ("Europe/Paris", "Europe/Paris")]
)
def test_a_delivery_session_in_utc_by_another_name_is_set_to_utc(
    db_url: str, zone: str, expected: str
) -> None:
    """The delivery's own connections (plan_once_async): a zone that is UTC by another name
    becomes 'UTC' (the same rules; psycopg loads its timestamps faster), any other stays."""
    from scheduler.queries import plan_once_async

    async def session() -> tuple[str, datetime]:
        async with await psycopg.AsyncConnection.connect(
            db_url, autocommit=True, options=f"-c TimeZone={zone}"
        ) as conn:
            await plan_once_async(conn)
            cur = await conn.execute("SELECT current_setting('TimeZone'), %s::timestamptz", (T0,))
            row = await cur.fetchone()
            assert row is not None
            return row[0], row[1]

    setting, at = asyncio.run(session())
    assert setting == expected
    assert at == T0 and (at.tzinfo is UTC) == (expected == "UTC")


def test_a_device_key_is_the_job_s_effect_key_then_the_device_and_parses_from_the_right(
    conn: psycopg.Connection[Any], db_url: str
) -> None:
    """The job's part first (a herd's keys go in side by side in job_effects' primary key),
    the device last; the job's part is free text, the channel name has no '/': the key splits
    at its last '/' into the two, so two different (job, device) pairs never share a key."""
    create(conn, "ada")
    job = claim(conn, db_url)[0]
    odd = [
        dataclasses.replace(job, idempotency_key=k)
        for k in ("a/fake.0123456789abcdef", "a", "a/fake", "ü/:.", "x" * 300)
    ]
    pairs = [(j, Device(ch, tok)) for j in [job, *odd]
             for ch in ("fake", "fcm", "a_1") for tok in ("t", "a/fake.t", "")]  # fmt: skip
    keys = {device_key(j, d): (j, d) for j, d in pairs}
    assert len(keys) == len(pairs)
    for key, (j, d) in keys.items():
        job_part, _, device_part = key.rpartition("/")
        assert job_part == jobs.effects.effect_key(j, "push")
        channel, _, digest = device_part.partition(".")
        assert channel == d.channel and len(digest) == 16


def _former_key(job: Job, channel: str, token: str) -> str:
    """A device's key as the delivery wrote it before the job's part came first."""
    digest = hashlib.sha256(token.encode()).hexdigest()[:16]
    org = job.organization_id or "-"
    return f"push.{channel}.{digest}:reminder:{org}:{job.idempotency_key}"


@pytest.mark.parametrize("resolver", ["registry", "application"])
def test_a_retry_after_an_upgrade_does_not_send_what_the_former_keys_recorded(
    conn: psycopg.Connection[Any], db_url: str, handlers: Make, resolver: str
) -> None:
    """Effect-once across the key change: a run of the former code recorded its keys in the
    former form, then died (or was rate limited, which gives its attempt back) before the
    job completed, and this code runs the job again: the recorded devices are not sent
    again, in the registry's one read and with an application's resolver alike. A first
    claim checks the current form only (a herd pays one probe a device)."""
    tokens = {s: [f"tok-{s}-{n}-0123456789" for n in range(2)] for s in ("ada", "bob", "cy")}
    for subject, ts in tokens.items():
        for t in ts:
            registry.add_device(conn, subject, "fake", t)
        create(conn, subject)
    batch_jobs = claim(conn, db_url)
    subjects = by_subject(batch_jobs)
    # The former code delivered to each subject's first device, recorded it, then stopped.
    jobs.effects.record_many(
        conn, sorted(_former_key(subjects[s], "fake", ts[0]) for s, ts in tokens.items()),
        now=SAT_0800,
    )  # fmt: skip
    conn.commit()
    channel = ScriptedChannel()
    kwargs: dict[str, Any] = {}
    if resolver == "application":
        devices = {s: [Device("fake", t) for t in ts] for s, ts in tokens.items()}
        kwargs["resolver"] = FakeResolver(devices)
    handler = handlers(channel, **kwargs)
    # ada on a retry (attempt 2); cy after a rate-limited run (attempt 1 again, a later lease);
    # bob on his first claim, which the former code cannot have run (not checked: sent).
    (retried,) = next_attempt([subjects["ada"]])
    limited = dataclasses.replace(subjects["cy"], lease_token=subjects["cy"].lease_token + 2)
    assert (retried.leased_before, limited.leased_before) == (True, True)
    assert not subjects["bob"].leased_before
    batch = RecordingBatch([retried, limited, subjects["bob"]])
    deliver(handler, batch)
    assert [batch.outcome(j) for j in batch.jobs] == [("succeeded",)] * 3
    assert sorted(channel.counts()) == sorted([tokens["ada"][1], tokens["cy"][1], *tokens["bob"]])
    # Recorded in the current form now: run again, nothing is sent.
    again = RecordingBatch(next_attempt(batch.jobs))
    deliver(handler, again)
    assert len(channel.sent) == 4
    keys = [device_key(j, Device("fake", t)) for j in batch.jobs
            for t in tokens[str(j.payload["subject"])]]  # fmt: skip
    assert jobs.effects.recorded(conn, keys) == set(keys) - {keys[0], keys[2]}
