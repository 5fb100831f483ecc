"""FcmChannel against the FCM fake over real sockets: each row of the error table, GOAWAY with
streams in flight, token refresh under load, revoked tokens, resets, timeouts, and secrets kept
out of logs and results."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.errors import InvalidPushConfig
from scheduler.push import PushChannel, PushMessage, PushResult, PushStatus
from scheduler.push.fakes.fcm import FcmFake, RunningFcmFake, start_fcm_fake
from scheduler.push.fakes.server import FakeRequest, FakeResponse
from scheduler.push.fcm import FcmChannel

NOW = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)


def run(test: Callable[..., Coroutine[Any, Any, None]], **kwargs: Any) -> None:
    asyncio.run(test(**kwargs))


def token(i: int) -> str:
    return f"fcm-device-token-{i:06d}:APA91b"


def messages(n: int, start: int = 0, **kwargs: Any) -> list[PushMessage]:
    return [
        PushMessage(
            key=f"occ-{i}",
            channel="fcm",
            token=token(i),
            title="Reminder",
            body=f"number {i}",
            data={"n": str(i)},
            collapse_key="sched-1",
            expires_at=NOW + timedelta(hours=1),
            **kwargs,
        )
        for i in range(start, start + n)
    ]


async def started(
    tmp_path: Path, fake: FcmFake | None = None, tls: bool = False, **channel: Any
) -> tuple[RunningFcmFake, FcmChannel]:
    running = await start_fcm_fake(tls=tls, directory=tmp_path, fake=fake)
    fcm = FcmChannel(
        running.credentials,
        url=running.url,
        ssl_context=running.server.client_context(),
        **channel,
    )
    return running, fcm


async def stop(running: RunningFcmFake, fcm: FcmChannel) -> None:
    await fcm.aclose()
    await running.server.stop()


def test_is_a_push_channel(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path)
        assert isinstance(fcm, PushChannel)
        assert (fcm.name, fcm.quota_per_minute) == ("fcm", 600_000)
        await stop(running, fcm)

    run(body)


@pytest.mark.parametrize("tls", [False, True])
def test_delivers_a_batch_once_each(tmp_path: Path, tls: bool) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path, tls=tls)
        try:
            batch = messages(1500)
            results = await fcm.send(batch, now=NOW)
            assert [r.message for r in results] == batch
            assert {r.status for r in results} == {PushStatus.DELIVERED}
            fake = running.fake
            assert fake.delivered == 1500 and fake.duplicates() == {}
            assert fcm.refreshes == 1 and fake.tokens_issued == 1
            got = fake.received[0].message
            assert got["data"] == {"n": "0", "tockwork_key": "occ-0"}
            assert got["android"] == {"priority": "HIGH", "ttl": "3600s", "collapse_key": "sched-1"}
            assert {r.http_version for r in fake.received} == {"2"}
        finally:
            await stop(running, fcm)

    run(body)


def test_each_error_class(tmp_path: Path) -> None:
    async def body() -> None:
        fake = FcmFake()
        running, fcm = await started(tmp_path, fake=fake)
        try:
            batch = messages(8)
            fake.unregistered.add(token(1))
            fake.sender_mismatch.add(token(2))
            fake.quota_exceeded.add(token(3))
            fake.quota_retry_after = 17
            fake.unavailable.add(token(4))
            fake.internal.add(token(5))
            fake.third_party_auth.add(token(6))
            bad = PushMessage("occ-bad", "fcm", "not a valid token!", "t", "b")
            big = PushMessage("occ-big", "fcm", token(7), "t", "b", data={"x": "y" * 5000})
            results = await fcm.send([*batch[:7], bad, big], now=NOW)
            got = [(r.status, r.code) for r in results]
            assert got == [
                (PushStatus.DELIVERED, None),
                (PushStatus.REJECTED, "UNREGISTERED"),
                (PushStatus.PERMANENT, "SENDER_ID_MISMATCH"),
                (PushStatus.RATE_LIMITED, "QUOTA_EXCEEDED"),
                (PushStatus.TRANSIENT, "UNAVAILABLE"),
                (PushStatus.TRANSIENT, "INTERNAL"),
                (PushStatus.PERMANENT, "THIRD_PARTY_AUTH_ERROR"),
                (PushStatus.REJECTED, "INVALID_ARGUMENT"),
                (PushStatus.PERMANENT, "INVALID_ARGUMENT"),
            ]
            assert results[3].retry_after == timedelta(seconds=17)
            assert fake.delivered == 1
            # a 401 THIRD_PARTY_AUTH_ERROR is not a bearer problem: no refresh
            assert fcm.refreshes == 1
        finally:
            await stop(running, fcm)

    run(body)


def test_storm_429_and_503_with_retry_after(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path)
        try:
            running.server.faults.storm(429, None, path_prefix="/v1/")
            results = await fcm.send(messages(3), now=NOW)
            assert {(r.status, r.retry_after) for r in results} == {
                (PushStatus.RATE_LIMITED, timedelta(seconds=60))
            }
            running.server.faults.storm(503, 9, path_prefix="/v1/")
            results = await fcm.send(messages(3), now=NOW)
            assert {(r.status, r.code, r.retry_after) for r in results} == {
                (PushStatus.TRANSIENT, "http_503", timedelta(seconds=9))
            }
            running.server.faults.clear()
            assert fcm.refreshes == 1
            assert {r.status for r in await fcm.send(messages(3), now=NOW)} == {
                PushStatus.DELIVERED
            }
        finally:
            await stop(running, fcm)

    run(body)


def test_goaway_with_streams_in_flight_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """A GOAWAY every 300 streams (3 times) while 2,000 are in flight: every message gets a
    result, the refused ones are resent once, and no (token, key) reaches the fake twice."""

    async def body() -> None:
        running, fcm = await started(tmp_path, connections=1)
        try:
            running.server.faults.goaway(300, times=3)
            batch = messages(2000)
            results = await fcm.send(batch, now=NOW)
            assert len(results) == 2000
            assert [r.message for r in results] == batch
            assert running.server.counters["goaways"] == 3
            assert running.server.counters["streams_refused"] > 0
            fake = running.fake
            assert fake.duplicates() == {}
            delivered = [r for r in results if r.status is PushStatus.DELIVERED]
            assert len(delivered) == fake.delivered
            others = {(r.status, r.code) for r in results if r.status is not PushStatus.DELIVERED}
            assert others <= {(PushStatus.TRANSIENT, "stream_refused")}
            assert fcm.client.stats.goaways == 3
        finally:
            await stop(running, fcm)

    run(body)


def test_stream_refused_twice_is_transient(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path, connections=1)
        try:
            await fcm.send(messages(1, start=100), now=NOW)  # the token, the first connection
            # this connection refuses everything, and so does the one after it
            running.server.faults.goaway(0, times=2)
            results = await fcm.send(messages(5), now=NOW)
            assert {(r.status, r.code) for r in results} == {
                (PushStatus.TRANSIENT, "stream_refused")
            }
            assert running.fake.delivered == 1
        finally:
            await stop(running, fcm)

    run(body)


def test_token_refresh_under_load(tmp_path: Path) -> None:
    """Access tokens live 2 s of the fake's clock, which advances 1 ms per request it serves: a
    token expires every ~2,000 requests while 500 are in flight. The channel's own clock is
    pinned (it never reaches its early refresh), so every refresh is one an expiry at the fake
    caused, whatever the machine's speed: every request is eventually authorised, each expiry
    costs one refresh shared by the requests it failed, and no 401 reaches a result.

    (It used to race the wall clock: the channel refreshed early by ``time.monotonic`` after
    1 s, so on a loaded machine that sent fewer than 2,000 requests a second the fake's tokens
    never expired, and a slow enough run refreshed more than the test allowed.)"""

    async def body() -> None:
        start = time.time()
        ticks = [0]

        def clock() -> float:
            ticks[0] += 1
            return start + ticks[0] * 0.001

        fake = FcmFake(access_token_ttl=2, clock=clock)
        frozen = datetime.fromtimestamp(start, UTC)
        running, fcm = await started(tmp_path, fake=fake, max_in_flight=500, clock=lambda: frozen)
        try:
            results = await fcm.send(messages(6000), now=NOW)
            assert {r.status for r in results} == {PushStatus.DELIVERED}
            assert fake.delivered == 6000 and fake.duplicates() == {}
            # 6,000 deliveries, their 401s and the grants at 2,000 ticks a token
            assert 4 <= fcm.refreshes <= 6, fcm.refreshes
            assert fake.tokens_issued == fcm.refreshes
            # each expiry fails at most the requests in flight, each once
            assert 0 < fake.unauthorized <= 500 * (fcm.refreshes - 1), fake.unauthorized
        finally:
            await stop(running, fcm)

    run(body)


def test_token_refreshed_early_by_the_clock(tmp_path: Path) -> None:
    """An access token is replaced five minutes before it expires by the channel's clock,
    before any request is refused with it."""

    async def body() -> None:
        # the first grant dated nearly an hour ago (its assertion still valid now)
        at = [datetime.now(UTC) - timedelta(seconds=3600 - 200)]
        running, fcm = await started(tmp_path, clock=lambda: at[0])
        try:
            assert {r.status for r in await fcm.send(messages(5), now=NOW)} == {
                PushStatus.DELIVERED
            }
            at[0] += timedelta(seconds=3600 - 300 - 1)  # one second before the early refresh
            await fcm.send(messages(5, start=5), now=NOW)
            assert fcm.refreshes == 1
            at[0] += timedelta(seconds=2)
            results = await fcm.send(messages(5, start=10), now=NOW)
            assert {r.status for r in results} == {PushStatus.DELIVERED}
            assert fcm.refreshes == 2 and running.fake.tokens_issued == 2
            assert running.fake.unauthorized == 0
        finally:
            await stop(running, fcm)

    run(body)


def test_an_interrupted_refresh_fails_its_waiters(tmp_path: Path) -> None:
    """The send that makes the grant is cancelled while another send waits for that token:
    the waiting one ends ``transient`` at once instead of waiting forever."""

    async def body() -> None:
        accepted = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            accepted.set()  # never answers: the grant waits for its SETTINGS
            await reader.read()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fake = FcmFake()
        info = fake.service_account(f"http://127.0.0.1:{port}")  # token_uri: the silent one
        path = tmp_path / "silent-token-uri.json"
        path.write_text(json.dumps(info))
        fcm = FcmChannel(path, url="http://127.0.0.1:9", connect_timeout=60)
        try:
            first = asyncio.create_task(fcm.send(messages(1), now=NOW))
            await accepted.wait()
            second = asyncio.create_task(fcm.send(messages(2, start=1), now=NOW))
            await asyncio.sleep(0)  # one turn: the second send waits for the first's grant
            assert not second.done()
            first.cancel()
            async with asyncio.timeout(10):
                results = await second
            assert {(r.status, r.code) for r in results} == {
                (PushStatus.TRANSIENT, "token_refresh_interrupted")
            }
            with pytest.raises(asyncio.CancelledError):
                await first
        finally:
            await fcm.aclose()
            server.close()
            await server.wait_closed()

    run(body)


def test_revoked_token_one_refresh(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path)
        try:
            assert {r.status for r in await fcm.send(messages(200), now=NOW)} == {
                PushStatus.DELIVERED
            }
            running.fake.revoke_access_tokens()
            results = await fcm.send(messages(500, start=200), now=NOW)
            assert {r.status for r in results} == {PushStatus.DELIVERED}
            assert fcm.refreshes == 2  # the first grant and one shared refresh
            assert running.fake.unauthorized >= 1
            assert running.fake.duplicates() == {}
        finally:
            await stop(running, fcm)

    run(body)


def test_persistent_401_is_transient_after_one_refresh(tmp_path: Path) -> None:
    async def body() -> None:
        class Revoking(FcmFake):
            """Every access token it grants is revoked at once (a disabled account)."""

            def _token(self, request: FakeRequest) -> FakeResponse:
                response = super()._token(request)
                self.revoke_access_tokens()
                return response

        fake = Revoking()
        running, fcm = await started(tmp_path, fake=fake)
        try:
            results = await fcm.send(messages(3), now=NOW)
            assert {(r.status, r.code) for r in results} == {
                (PushStatus.TRANSIENT, "UNAUTHENTICATED")
            }
            assert fcm.refreshes == 2  # the first grant and one refresh shared by the batch
            assert fake.unauthorized == 6  # each message sent twice
        finally:
            await stop(running, fcm)

    run(body)


def test_refused_grant_is_permanent(tmp_path: Path) -> None:
    async def body() -> None:
        running = await start_fcm_fake(directory=tmp_path)
        other = FcmFake(project_id=running.fake.project_id)
        info = other.service_account(running.url)
        info["client_email"] = running.fake.client_email  # right name, wrong key
        forged = tmp_path / "forged.json"
        forged.write_text(json.dumps(info))
        fcm = FcmChannel(forged, url=running.url)
        try:
            results = await fcm.send(messages(2), now=NOW)
            assert {(r.status, r.code) for r in results} == {
                (PushStatus.PERMANENT, "invalid_grant")
            }
        finally:
            await stop(running, fcm)

    run(body)


def test_connection_reset_is_transient(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path, connections=1)
        try:
            running.server.faults.latency = 0.05  # requests are in flight when it resets
            running.server.faults.reset(50)
            results = await fcm.send(messages(300), now=NOW)
            lost = [r for r in results if r.status is PushStatus.TRANSIENT]
            assert lost and {r.code for r in lost} == {"connection_lost"}
            assert {r.status for r in results} <= {PushStatus.DELIVERED, PushStatus.TRANSIENT}
            assert running.server.counters["resets"] == 1
            assert fcm.client.stats.connections_lost == 1
            running.server.faults.clear()
            again = await fcm.send(messages(10), now=NOW)
            assert {r.status for r in again} == {PushStatus.DELIVERED}
        finally:
            await stop(running, fcm)

    run(body)


def test_slow_server_times_out_as_transient(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path, request_timeout=0.3)
        try:
            await fcm.send(messages(1), now=NOW)  # the token, before the server slows down
            running.server.faults.latency = 5.0
            results = await fcm.send(messages(4), now=NOW)
            assert {(r.status, r.code) for r in results} == {(PushStatus.TRANSIENT, "timeout")}
        finally:
            running.server.faults.clear()
            await stop(running, fcm)

    run(body)


def test_unreachable_is_transient(tmp_path: Path) -> None:
    async def body() -> None:
        running = await start_fcm_fake(directory=tmp_path)
        fcm = FcmChannel(running.credentials, url=running.url, connect_timeout=2)
        await fcm.send(messages(1), now=NOW)  # the token
        await running.server.stop()
        try:
            results = await fcm.send(messages(2), now=NOW)
            assert {r.status for r in results} == {PushStatus.TRANSIENT}
            assert {r.code for r in results} <= {"connect_failed", "connection_lost"}
        finally:
            await fcm.aclose()

    run(body)


def test_no_secret_in_logs_or_results(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    async def body() -> list[PushResult]:
        fake = FcmFake()
        running, fcm = await started(tmp_path, fake=fake, connections=1)
        try:
            fake.unregistered.add(token(1))
            fake.third_party_auth.add(token(2))
            fake.quota_exceeded.add(token(3))
            running.server.faults.goaway(5)
            first = await fcm.send(messages(20), now=NOW)
            fake.revoke_access_tokens()
            running.server.faults.reset(3)
            running.server.faults.latency = 0.02
            second = await fcm.send(messages(20, start=20), now=NOW)
            return first + second
        finally:
            await stop(running, fcm)

    results = asyncio.run(body())
    key = json.loads((tmp_path / "service-account.json").read_text())["private_key"]
    key_lines = [line for line in key.splitlines() if "-----" not in line]
    secrets = [token(i) for i in range(40)] + key_lines[:3]
    texts = [r.getMessage() for r in caplog.records] + [r.error or "" for r in results]
    texts += [str(r.args) for r in caplog.records]
    for text in texts:
        assert "ya29." not in text and "Bearer" not in text
        for secret in secrets:
            assert secret not in text
    assert any(r.error for r in results)


def test_malformed_credentials_fail_at_construction(tmp_path: Path) -> None:
    path = tmp_path / "sa.json"
    path.write_text(json.dumps({"type": "service_account", "project_id": "p"}))
    with pytest.raises(InvalidPushConfig) as caught:
        FcmChannel(path)
    assert caught.value.field == "credentials_file.private_key"
    with pytest.raises(InvalidPushConfig) as caught:
        FcmChannel(tmp_path / "missing.json")
    assert caught.value.field == "credentials_file"


def test_message_for_another_channel_is_a_programming_error(tmp_path: Path) -> None:
    async def body() -> None:
        running, fcm = await started(tmp_path)
        try:
            apns = PushMessage("k", "apns", "t" * 20, "a", "b")
            with pytest.raises(ValueError, match="apns"):
                await fcm.send([apns], now=NOW)
        finally:
            await stop(running, fcm)

    run(body)


def test_fake_as_a_process_driven_over_http(tmp_path: Path) -> None:
    """``python -m scheduler.push.fakes.fcm`` prints where it listens; another process
    configures it and reads its accounting over the control endpoints; SIGTERM stops it."""
    import subprocess
    import sys
    import urllib.request

    process = subprocess.Popen(
        [sys.executable, "-m", "scheduler.push.fakes.fcm", "--dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        info = json.loads(process.stdout.readline())
        assert set(info) == {"url", "port", "ca_file", "pid", "credentials"}

        def post(path: str, body: dict[str, Any]) -> Any:
            request = urllib.request.Request(
                info["url"] + path, data=json.dumps(body).encode(), method="POST"
            )
            with urllib.request.urlopen(request) as reply:
                return json.load(reply)

        post("/_fake/fcm/config", {"unregistered": [token(1)]})

        async def body() -> list[PushResult]:
            fcm = FcmChannel(info["credentials"], url=info["url"])
            try:
                return await fcm.send(messages(3), now=NOW)
            finally:
                await fcm.aclose()

        results = asyncio.run(body())
        assert [r.status for r in results] == [
            PushStatus.DELIVERED,
            PushStatus.REJECTED,
            PushStatus.DELIVERED,
        ]
        with urllib.request.urlopen(info["url"] + "/_fake/fcm/summary") as reply:
            summary = json.load(reply)
        assert summary["delivered"] == 2 and summary["errors"] == {"UNREGISTERED": 1}
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0
    assert json.loads(err.strip().splitlines()[-1])["delivered"] == 2
