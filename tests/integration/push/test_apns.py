"""The APNs channel against the APNs fake over real sockets (HTTP/2, h2c unless said).

Time is pinned: the channel and the fake each read an injected clock (epoch seconds), so a
provider token's age is set by the test, not waited for. The only real waits are a request
timeout (0.3 s) and the latency that holds requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.errors import InvalidPushConfig
from scheduler.push import PushChannel, PushMessage, PushResult, PushStatus
from scheduler.push.apns import ApnsChannel, apns_id
from scheduler.push.fakes.apns import ApnsFake, ApnsKey
from scheduler.push.fakes.server import FakeServer, Faults

TOPIC = "com.example.reminders"
T0 = 1_772_352_000.0  # 2026-03-01T08:00:00Z
NOW = datetime.fromtimestamp(T0, UTC)


class Clock:
    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def device(n: int) -> str:
    return f"{n:064x}"


def message(n: int, **changes: Any) -> PushMessage:
    fields: dict[str, Any] = {
        "key": f"occ-{n}:dev-{n}",
        "channel": "apns",
        "token": device(n),
        "title": "Water the plants",
        "body": f"Reminder {n}",
    }
    fields.update(changes)
    return PushMessage(**fields)


@dataclass
class Rig:
    fake: ApnsFake
    server: FakeServer
    channel: ApnsChannel
    key: ApnsKey
    channel_clock: Clock
    fake_clock: Clock

    async def send(self, messages: list[PushMessage]) -> list[PushResult]:
        results = await self.channel.send(messages, now=NOW)
        assert [r.message for r in results] == messages  # one result each, in order
        return results


@contextlib.asynccontextmanager
async def rig(
    tmp_path: Path,
    *,
    faults: Faults | None = None,
    tls: bool = False,
    fake_key: ApnsKey | None = None,
    **settings: Any,
) -> AsyncIterator[Rig]:
    key = ApnsKey.generate("ABCDE12345", "TEAM123456")
    channel_clock, fake_clock = Clock(), Clock()
    fake = ApnsFake(keys=[fake_key or key], topic=TOPIC, clock=fake_clock)
    async with fake.server(tls=tls, faults=faults) as server:
        options: dict[str, Any] = {
            "key_file": key.write(tmp_path / f"AuthKey_{key.key_id}.p8"),
            "key_id": key.key_id,
            "team_id": key.team_id,
            "topic": TOPIC,
            "url": server.url,
            "ssl_context": server.client_context(),
            "clock": channel_clock,
        }
        options.update(settings)
        channel = ApnsChannel(**options)
        try:
            yield Rig(fake, server, channel, key, channel_clock, fake_clock)
        finally:
            await channel.aclose()


def run(coroutine: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coroutine())


def outcomes(results: list[PushResult]) -> list[tuple[PushStatus, str | None]]:
    return [(r.status, r.code) for r in results]


# -- delivery ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tls", [False, True])
def test_delivers_what_apple_expects(tmp_path: Path, tls: bool) -> None:
    async def scenario() -> None:
        async with rig(tmp_path, tls=tls) as r:
            assert isinstance(r.channel, PushChannel)
            expires = NOW + timedelta(hours=1)
            messages = [
                message(1, collapse_key="schedule-1", expires_at=expires, data={"s": "1"}),
                message(2, priority="normal"),
            ]
            results = await r.send(messages)
            assert outcomes(results) == [(PushStatus.DELIVERED, None)] * 2
            first, second = sorted(r.fake.notifications, key=lambda n: n.token)
            assert (first.token, first.apns_id, first.topic, first.push_type) == (
                device(1),
                apns_id("occ-1:dev-1"),
                TOPIC,
                "alert",
            )
            assert (first.priority, first.expiration, first.collapse_id) == (
                "10",
                int(expires.timestamp()),
                "schedule-1",
            )
            alert = {"title": "Water the plants", "body": "Reminder 1"}
            assert first.payload == {
                "aps": {"alert": alert, "sound": "default"},
                "s": "1",
                "tockwork_key": "occ-1:dev-1",
            }
            assert (second.priority, second.expiration, second.collapse_id) == ("5", None, None)
            assert r.fake.duplicates() == {}
            assert (r.server.counters["requests_http2"], r.server.counters["requests_http1"]) == (
                2,
                0,
            )

    run(scenario)


def test_every_answer_of_the_table_against_the_fake(tmp_path: Path) -> None:
    """Each of Apple's answers, produced by the fake, becomes the result the table says."""
    scripted = [
        ((400, "BadCollapseId"), PushStatus.PERMANENT),
        ((400, "BadExpirationDate"), PushStatus.PERMANENT),
        ((400, "BadPriority"), PushStatus.PERMANENT),
        ((400, "BadTopic"), PushStatus.PERMANENT),
        ((400, "PayloadEmpty"), PushStatus.PERMANENT),
        ((403, "BadCertificate"), PushStatus.PERMANENT),
        ((403, "BadCertificateEnvironment"), PushStatus.PERMANENT),
        ((403, "Forbidden"), PushStatus.PERMANENT),
        ((410, "ExpiredToken"), PushStatus.REJECTED),
        ((413, "PayloadTooLarge"), PushStatus.PERMANENT),
        ((429, "TooManyRequests"), PushStatus.RATE_LIMITED),
        ((500, "InternalServerError"), PushStatus.TRANSIENT),
        ((503, "ServiceUnavailable"), PushStatus.TRANSIENT),
        ((503, "Shutdown"), PushStatus.TRANSIENT),
    ]

    async def scenario() -> None:
        async with rig(tmp_path) as r:
            r.fake.bad_tokens.add(device(1))
            r.fake.other_topic_tokens.add(device(2))
            r.fake.unregister(device(3), since_ms=1_700_000_000_000)
            for n, (answer, _) in enumerate(scripted, start=10):
                r.fake.scripted[device(n)] = answer
            messages = [message(n) for n in (1, 2, 3, 4)]
            messages += [message(n) for n in range(10, 10 + len(scripted))]
            results = await r.send(messages)
            assert outcomes(results[:4]) == [
                (PushStatus.REJECTED, "BadDeviceToken"),
                (PushStatus.REJECTED, "DeviceTokenNotForTopic"),
                (PushStatus.REJECTED, "Unregistered"),
                (PushStatus.DELIVERED, None),
            ]
            assert results[2].error == (
                "APNs answered 410 Unregistered (invalid since 2023-11-14T22:13:20+00:00)"
            )
            assert outcomes(results[4:]) == [(want, reason) for (_, reason), want in scripted]
            limited = results[
                4 + scripted.index(((429, "TooManyRequests"), PushStatus.RATE_LIMITED))
            ]
            assert limited.retry_after == timedelta(seconds=60)
            assert r.fake.requests == len(messages)  # each sent once

    run(scenario)


def test_the_fakes_own_checks_reach_the_channel_as_apple_answers(tmp_path: Path) -> None:
    """Not scripted: a wrong topic, a key the fake does not know, a storm of 429 and 503."""

    async def scenario() -> None:
        async with rig(tmp_path, topic="com.example.other") as r:
            [result] = await r.send([message(1)])
            assert outcomes([result]) == [(PushStatus.PERMANENT, "TopicDisallowed")]
        stranger = ApnsKey.generate("ABCDE12345", "TEAM123456")
        async with rig(tmp_path, fake_key=stranger) as r:
            [result] = await r.send([message(1)])
            assert outcomes([result]) == [(PushStatus.PERMANENT, "InvalidProviderToken")]
        faults = Faults()
        async with rig(tmp_path, faults=faults) as r:
            faults.storm(429, retry_after=7)
            [limited] = await r.send([message(1)])
            assert (limited.status, limited.code, limited.retry_after) == (
                PushStatus.RATE_LIMITED,
                "http_429",
                timedelta(seconds=7),
            )
            faults.storm(503, retry_after=3)
            [busy] = await r.send([message(1)])
            assert (busy.status, busy.code, busy.retry_after) == (
                PushStatus.TRANSIENT,
                "http_503",
                timedelta(seconds=3),
            )
            faults.clear()
            assert outcomes(await r.send([message(1)])) == [(PushStatus.DELIVERED, None)]

    run(scenario)


def test_what_can_never_be_sent_is_answered_without_a_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with rig(tmp_path) as r:
            results = await r.send(
                [
                    message(1, token="not-a-token"),
                    message(2, token="ab" * 31),  # 62 digits
                    message(3, body="x" * 4100),
                    message(4, data={"aps": "mine"}),
                    message(5, priority="urgent"),
                ]
            )
            assert outcomes(results) == [
                (PushStatus.REJECTED, "BadDeviceToken"),
                (PushStatus.REJECTED, "BadDeviceToken"),
                (PushStatus.PERMANENT, "PayloadTooLarge"),
                (PushStatus.PERMANENT, "invalid_message"),
                (PushStatus.PERMANENT, "invalid_message"),
            ]
            assert r.fake.requests == 0 and r.server.counters["connections"] == 0

    run(scenario)


def test_a_message_for_another_channel_is_a_programming_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with rig(tmp_path) as r:
            with pytest.raises(ValueError, match=r"message\.channel"):
                await r.channel.send([message(1), message(2, channel="fcm")], now=NOW)
            assert r.fake.requests == 0

    run(scenario)


# -- the provider token --------------------------------------------------------------------------


def test_one_token_for_a_thousand_concurrent_sends_renewed_at_50_minutes(tmp_path: Path) -> None:
    """Never more often than every 20 minutes: the fake would answer 429
    TooManyProviderTokenUpdates to a second token within 20 minutes of the first."""

    async def scenario() -> None:
        async with rig(tmp_path) as r:

            async def herd(minutes: float) -> None:
                r.channel_clock.now = r.fake_clock.now = T0 + minutes * 60
                results = await r.send([message(n) for n in range(1000)])
                assert {res.status for res in results} == {PushStatus.DELIVERED}

            await herd(0)
            assert (r.channel.provider_token.signed, r.fake.token_updates["ABCDE12345"]) == (1, 0)
            await herd(49.9)
            assert r.channel.provider_token.signed == 1
            await herd(50)
            assert (r.channel.provider_token.signed, r.fake.token_updates["ABCDE12345"]) == (2, 1)
            await herd(69)
            assert r.channel.provider_token.signed == 2
            await herd(100)
            assert (r.channel.provider_token.signed, r.fake.token_updates["ABCDE12345"]) == (3, 2)
            assert r.fake.reasons["TooManyProviderTokenUpdates"] == 0
            assert r.fake.counts[(device(7), "occ-7:dev-7")] == 5 and r.fake.requests == 5000

    run(scenario)


def test_expired_provider_token_is_renewed_once_and_resent_once(tmp_path: Path) -> None:
    """The fake's clock runs ahead (a host that slept): APNs says the token expired."""

    async def scenario() -> None:
        async with rig(tmp_path) as r:
            assert outcomes(await r.send([message(0)])) == [(PushStatus.DELIVERED, None)]
            # 30 minutes on the host, 61 at Apple: the token is old enough to renew.
            r.channel_clock.now, r.fake_clock.now = T0 + 30 * 60, T0 + 61 * 60
            results = await r.send([message(n) for n in range(1, 51)])
            assert {res.status for res in results} == {PushStatus.DELIVERED}
            assert r.channel.provider_token.signed == 2  # one renewal for fifty answers
            assert r.fake.reasons["ExpiredProviderToken"] == 50
            assert r.fake.duplicates() == {}
            # Apple still says expired to the fresh token: one renewal, one resend, transient.
            r.channel_clock.now, r.fake_clock.now = T0 + 60 * 60, T0 + 200 * 60
            [result] = await r.send([message(99)])
            assert outcomes([result]) == [(PushStatus.TRANSIENT, "ExpiredProviderToken")]
            assert r.channel.provider_token.signed == 3
            assert r.fake.reasons["ExpiredProviderToken"] == 52

    run(scenario)


def test_expired_answer_to_a_young_token_does_not_renew_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with rig(tmp_path) as r:
            assert outcomes(await r.send([message(0)])) == [(PushStatus.DELIVERED, None)]
            r.channel_clock.now, r.fake_clock.now = T0 + 19 * 60, T0 + 61 * 60
            results = await r.send([message(1), message(2)])
            assert outcomes(results) == [(PushStatus.TRANSIENT, "ExpiredProviderToken")] * 2
            assert r.channel.provider_token.signed == 1
            assert r.fake.requests == 3  # sent once each

    run(scenario)


# -- the connection ------------------------------------------------------------------------------


def test_goaway_with_streams_in_flight_resends_the_refused_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = Faults(latency=0.05)
        async with rig(tmp_path, faults=faults, connections=1) as r:
            faults.goaway(10)
            messages = [message(n) for n in range(60)]
            results = await r.send(messages)
            assert {res.status for res in results} == {PushStatus.DELIVERED}
            # 50 when the 60 streams leave in one burst (as they do): 10 processed, 50 refused.
            assert 0 < r.channel._client.stats.streams_refused <= 50
            assert r.fake.duplicates() == {}
            assert sum(r.fake.counts.values()) == 60

    async def twice() -> None:
        # Two GOAWAYs in a row: refused, resent, refused again -> transient (once each).
        faults = Faults(latency=0.05)
        async with rig(tmp_path, faults=faults, connections=1) as r:
            faults.goaway(10, times=2)
            results = await r.send([message(n) for n in range(100, 160)])
            delivered = [res for res in results if res.ok]
            refused = [res for res in results if not res.ok]
            # (20, 40) when the streams leave in one burst: 10 processed on each of the two
            # connections that go away; the rest refused twice.
            assert len(delivered) >= 20 and refused and len(delivered) + len(refused) == 60
            assert {(res.status, res.code) for res in refused} == {
                (PushStatus.TRANSIENT, "stream_refused")
            }
            assert r.fake.duplicates() == {}
            assert {res.key for res in delivered} == {n.tockwork_key for n in r.fake.notifications}

    run(scenario)
    run(twice)


def test_a_reset_connection_is_transient_for_what_was_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = Faults(latency=0.2)
        async with rig(tmp_path, faults=faults, connections=1) as r:
            faults.reset(5)
            results = await r.send([message(n) for n in range(20)])
            lost = [res for res in results if not res.ok]
            assert lost, "the reset failed no request"
            assert {(res.status, res.code) for res in lost} == {
                (PushStatus.TRANSIENT, "connection_lost")
            }
            recorded = {n.tockwork_key for n in r.fake.notifications}
            assert {res.key for res in results if res.ok} <= recorded
            # The channel connects again for the next call.
            faults.clear()
            assert outcomes(await r.send([message(99)])) == [(PushStatus.DELIVERED, None)]

    run(scenario)


def test_a_slow_answer_times_out_as_transient(tmp_path: Path) -> None:
    async def scenario() -> None:
        faults = Faults(latency=5.0)
        async with rig(tmp_path, faults=faults, request_timeout=0.3) as r:
            results = await r.send([message(1), message(2)])
            assert outcomes(results) == [(PushStatus.TRANSIENT, "timeout")] * 2

    run(scenario)


def test_a_server_that_is_not_there_is_transient(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with rig(tmp_path) as r:
            url = r.server.url
        # The server is stopped: nothing listens on its port any more.
        key = ApnsKey.generate("ABCDE12345", "TEAM123456")
        channel = ApnsChannel(
            key_file=key.write(tmp_path / "k.p8"),
            key_id=key.key_id,
            team_id=key.team_id,
            topic=TOPIC,
            url=url,
            connect_timeout=2.0,
        )
        try:
            [result] = await channel.send([message(1)], now=NOW)
            assert outcomes([result]) == [(PushStatus.TRANSIENT, "connect_failed")]
        finally:
            await channel.aclose()

    run(scenario)


def test_in_flight_requests_are_bounded_across_calls(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with rig(tmp_path, max_in_flight=4) as r:
            app = r.fake.app
            in_flight = peak = 0

            async def counting(request: Any) -> Any:
                nonlocal in_flight, peak
                in_flight += 1
                peak = max(peak, in_flight)
                try:
                    await asyncio.sleep(0.02)
                    return await app(request)
                finally:
                    in_flight -= 1

            r.server.app = counting
            calls = [r.send([message(n + 10 * c) for n in range(10)]) for c in range(3)]
            batches = await asyncio.gather(*calls)
            assert all(res.ok for batch in batches for res in batch)
            assert peak == 4

    run(scenario)


# -- secrets -------------------------------------------------------------------------------------


@pytest.fixture
def hpack_at_default_level() -> Iterator[None]:
    """aioapns sets hpack's logger to CRITICAL when it is imported (by another test of the
    session), which would hide what hpack logs: back to the default for the test."""
    parent = logging.getLogger("hpack")
    level = parent.level
    parent.setLevel(logging.NOTSET)
    yield
    parent.setLevel(level)


@pytest.mark.usefixtures("hpack_at_default_level")
def test_no_secret_in_logs_or_results(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The key, the provider tokens and the device tokens appear in no log record (every logger
    at DEBUG, the HTTP/2 libraries' included) and in no result."""
    caplog.set_level(logging.DEBUG)
    all_results: list[PushResult] = []
    faults = Faults()

    async def scenario() -> None:
        async with rig(tmp_path, faults=faults, connections=1) as r:
            r.fake.unregister(device(2))
            r.fake.bad_tokens.add(device(3))
            messages = [message(n) for n in range(1, 6)] + [message(6, token="zz" * 32)]
            all_results.extend(await r.send(messages))
            r.channel_clock.now, r.fake_clock.now = T0 + 30 * 60, T0 + 61 * 60
            all_results.extend(await r.send([message(7)]))
            faults.goaway(1)
            faults.latency = 0.05
            all_results.extend(await r.send([message(n) for n in range(8, 12)]))
            faults.clear()
            secrets = {
                *r.fake.provider_tokens(),
                *(m.token for m in messages),
                device(7),
                *(device(n) for n in range(8, 12)),
                *_key_lines(r.key),
            }
            assert len(r.fake.provider_tokens()) == 2
            texts = [record.getMessage() for record in caplog.records]
            texts += [str(record.args) for record in caplog.records]
            texts += [res.error or "" for res in all_results]
            leaks = {
                secret[-12:]: text[:80]
                for secret in secrets
                for text in texts
                if secret in text or secret.lower() in text.lower()
            }
            assert leaks == {}
            assert any(res.status is PushStatus.REJECTED for res in all_results)
            assert caplog.records, "nothing was logged: the check would see nothing"

    run(scenario)


def _key_lines(key: ApnsKey) -> list[str]:
    body = key.pem.decode().splitlines()[1:-1]
    return [line for line in body if len(line) > 16]


def test_bad_configuration_names_the_field(tmp_path: Path) -> None:
    key = ApnsKey.generate("ABCDE12345", "TEAM123456")
    path = key.write(tmp_path / "k.p8")
    with pytest.raises(InvalidPushConfig) as info:
        ApnsChannel(key_file=path, key_id="ABCDE12345", team_id="team", topic=TOPIC)
    assert info.value.field == "team_id"
    assert str(info.value) == ("invalid team_id 'team': must be 10 characters, A-Z and 0-9")
    with pytest.raises(InvalidPushConfig) as info:
        ApnsChannel(
            key_file=tmp_path / "none.p8", key_id="ABCDE12345", team_id="TEAM123456", topic=TOPIC
        )
    assert info.value.field == "key_file"


# -- process mode --------------------------------------------------------------------------------


def test_the_fake_runs_as_a_process(tmp_path: Path) -> None:
    """``python -m scheduler.push.fakes.apns``: one JSON line says where; the control endpoints
    set token sets and read the summary; SIGTERM stops it with exit code 0."""
    process = subprocess.Popen(
        [sys.executable, "-m", "scheduler.push.fakes.apns", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        where = json.loads(process.stdout.readline())
        assert Path(where["key_file"]).read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")

        def control(path: str, body: dict[str, Any] | None = None) -> Any:
            data = None if body is None else json.dumps(body).encode()
            with urllib.request.urlopen(f"{where['url']}{path}", data, timeout=10) as answer:
                return json.loads(answer.read())

        assert control("/_fake/apns/config", {"unregistered": [device(2)]}) == {"ok": True}

        async def scenario() -> list[PushResult]:
            channel = ApnsChannel(
                key_file=where["key_file"],
                key_id=where["key_id"],
                team_id=where["team_id"],
                topic=where["topic"],
                url=where["url"],
            )
            try:
                return await channel.send([message(1), message(2)], now=NOW)
            finally:
                await channel.aclose()

        results = asyncio.run(scenario())
        assert outcomes(results) == [
            (PushStatus.DELIVERED, None),
            (PushStatus.REJECTED, "Unregistered"),
        ]
        summary = control("/_fake/apns/summary")
        assert (summary["requests"], summary["delivered"], summary["duplicates"]) == (2, 1, 0)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert json.loads(err.strip().splitlines()[-1])["reasons"]["Unregistered"] == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
