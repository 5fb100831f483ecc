"""The APNs fake checked against a widely used APNs client, aioapns (there is no official Apple
SDK for Python): pointed at the fake over TLS, it gets the answers our channel gets.

aioapns connects to Apple's host on port 443 with TLS; the test points its connection class at
the fake's port and gives it an SSL context that trusts the fake's CA and offers ALPN ``h2``.
Its provider token is signed with the real clock, so the fake reads the real clock here.
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aioapns import APNs, NotificationRequest, PushType
from aioapns.connection import APNsProductionClientProtocol

from scheduler.push import PushMessage
from scheduler.push.apns import ApnsChannel
from scheduler.push.fakes.apns import ApnsFake, ApnsKey

TOPIC = "com.example.reminders"


def device(n: int) -> str:
    return f"{n:064x}"


def aioapns_client(key: ApnsKey, port: int, context: Any, topic: str = TOPIC) -> APNs:
    client = APNs(
        key=key.pem.decode(),
        key_id=key.key_id,
        team_id=key.team_id,
        topic=topic,
        max_connection_attempts=1,
        ssl_context=context,
    )

    class Local(APNsProductionClientProtocol):
        APNS_SERVER = "127.0.0.1"
        APNS_PORT = port

    client.pool.protocol_class = Local
    return client


def test_aioapns_gets_the_answers_our_channel_gets(tmp_path: Path) -> None:
    key = ApnsKey.generate("ABCDE12345", "TEAM123456")
    cases: list[tuple[str, dict[str, Any], tuple[str, str | None]]] = [
        (device(1), {}, ("200", None)),
        (device(2), {}, ("410", "Unregistered")),
        (device(3), {}, ("400", "BadDeviceToken")),
        (device(4), {}, ("400", "DeviceTokenNotForTopic")),
        (device(5), {"apns_topic": "com.example.other"}, ("400", "TopicDisallowed")),
        (device(6), {"collapse_key": "c" * 65}, ("400", "BadCollapseId")),
        ("0" * 63 + "x", {}, ("400", "BadDeviceToken")),
    ]

    # Our channel signs with a key of its own: the fake applies Apple's 20-minute rule per key,
    # and two signers of one key (aioapns and the channel) would trip it.
    ours = ApnsKey.generate("OURKEY1234", "TEAM123456")

    async def scenario() -> None:
        fake = ApnsFake(keys=[key, ours], topic=TOPIC)
        fake.unregister(device(2), since_ms=1_700_000_000_000)
        fake.bad_tokens.add(device(3))
        fake.other_topic_tokens.add(device(4))
        async with fake.server(tls=True) as server:
            context = server.client_context()
            assert context is not None
            context.set_alpn_protocols(["h2"])
            client = aioapns_client(key, server.port, context)
            try:
                answers = []
                for token, options, _ in cases:
                    request = NotificationRequest(
                        device_token=token,
                        message={
                            "aps": {"alert": {"title": "t", "body": "b"}},
                            "tockwork_key": "k",
                        },
                        push_type=PushType.ALERT,
                        priority=10,
                        time_to_live=3600,
                        **options,
                    )
                    result = await asyncio.wait_for(client.send_notification(request), 10)
                    answers.append((result.status, result.description))
                    if token == device(2):
                        assert result.timestamp == 1_700_000_000_000
                    assert (
                        result.status != "200"
                        or fake.notifications[-1].apns_id == request.notification_id
                    )
            finally:
                client.pool.close()
            assert answers == [expected for _, _, expected in cases]

            # A key the fake does not know: aioapns hears what our channel hears.
            stranger = ApnsKey.generate("ABCDE12345", "TEAM123456")
            client = aioapns_client(stranger, server.port, context)
            try:
                request = NotificationRequest(device_token=device(1), message={"aps": {}})
                result = await asyncio.wait_for(client.send_notification(request), 10)
            finally:
                client.pool.close()
            assert (result.status, result.description) == ("403", "InvalidProviderToken")

            # Our channel, same fake, same devices.
            channel = ApnsChannel(
                key_file=ours.write(tmp_path / "k.p8"),
                key_id=ours.key_id,
                team_id=ours.team_id,
                topic=TOPIC,
                url=server.url,
                ssl_context=server.client_context(),
            )
            try:
                now = datetime.now(UTC)
                messages = [PushMessage(f"k{n}", "apns", device(n), "t", "b") for n in (1, 2, 3, 4)]
                results = await channel.send(messages, now=now)
            finally:
                await channel.aclose()
            assert [r.code for r in results] == [description for _, description in answers[:4]]

    asyncio.run(scenario())


def test_the_fake_does_not_serve_http1() -> None:
    """APNs is HTTP/2 only: an HTTP/1.1 request gets no APNs answer."""

    async def scenario() -> None:
        fake = ApnsFake(keys=[ApnsKey.generate()], topic=TOPIC)
        async with fake.server() as server:
            request = urllib.request.Request(
                f"{server.url}/3/device/{device(1)}",
                data=b'{"aps": {}}',
                method="POST",
                headers={"apns-topic": TOPIC},
            )

            def post() -> int:
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return int(response.status)
                except urllib.error.HTTPError as error:
                    error.close()
                    return int(error.code)

            status = await asyncio.to_thread(post)
        assert status == 505
        assert fake.requests == 0 and list(fake.notifications) == []

    asyncio.run(scenario())
