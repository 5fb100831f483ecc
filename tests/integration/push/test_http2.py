"""The HTTP/2 client (scheduler/push/http2.py) against the fake-server framework over real
sockets: h2c and TLS/ALPN, stream limits, GOAWAY with streams in flight, resets, timeouts, and
the fake server's HTTP/1.1 side and control endpoint."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from typing import Any

import h11
import pytest

from scheduler.push.fakes.server import FakeRequest, FakeResponse, FakeServer, Faults
from scheduler.push.http2 import (
    ConnectFailed,
    ConnectionLost,
    Http2Client,
    Http2Error,
    RequestTimeout,
    Response,
    StreamRefused,
)


class Echo:
    """An application that counts what it processed and may hold requests on an event."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.gate: asyncio.Event | None = None
        self.arrived = 0
        self.all_arrived: asyncio.Event | None = None
        self.expect = 0

    async def __call__(self, request: FakeRequest) -> FakeResponse:
        self.seen.append(request.path)
        self.arrived += 1
        if self.all_arrived is not None and self.arrived >= self.expect:
            self.all_arrived.set()
        if self.gate is not None:
            await self.gate.wait()
        return FakeResponse(
            201,
            [("x-echo", request.headers.get("x-echo", "")), ("x-version", request.http_version)],
            request.body,
        )


def run(test: Callable[..., Coroutine[Any, Any, None]], **kwargs: Any) -> None:
    asyncio.run(test(**kwargs))


@pytest.mark.parametrize("tls", [False, True])
def test_request_roundtrip_h2c_and_tls(tls: bool) -> None:
    async def body() -> None:
        app = Echo()
        async with FakeServer(app, tls=tls) as server:
            client = Http2Client(server.url, ssl_context=server.client_context())
            try:
                response = await client.request(
                    "POST", "/a?b=1", [("X-Echo", "yes"), ("content-type", "x/y")], b"hello"
                )
                assert response == Response(
                    201,
                    {"x-echo": "yes", "x-version": "2", "content-length": "5"},
                    b"hello",
                )
                assert app.seen == ["/a?b=1"]
                assert client.stats.connections_opened == 1
            finally:
                await client.aclose()

    run(body)


def test_tls_requires_alpn_h2() -> None:
    async def body() -> None:
        async with FakeServer(Echo(), tls=True) as server:
            assert server.certificate is not None
            context = ssl.create_default_context(cafile=server.certificate.ca_file)
            client = Http2Client(server.url, ssl_context=context)
            # a server that only speaks HTTP/1.1: ALPN selects http/1.1 (set on the server)
            assert server._ssl is not None
            server._ssl.set_alpn_protocols(["http/1.1"])
            with pytest.raises(ConnectFailed, match="ALPN"):
                await client.request("GET", "/", [])
            await client.aclose()

    run(body)


def test_untrusted_certificate_is_connect_failed() -> None:
    async def body() -> None:
        async with FakeServer(Echo(), tls=True) as server:
            client = Http2Client(server.url)  # the system's CAs do not know the fake's
            with pytest.raises(ConnectFailed, match="SSLCertVerificationError"):
                await client.request("GET", "/", [])
            await client.aclose()

    run(body)


def test_connect_refused_is_connect_failed() -> None:
    async def body() -> None:
        server = FakeServer(Echo())
        port = await server.start()
        await server.stop()
        client = Http2Client(f"http://127.0.0.1:{port}", connect_timeout=2)
        with pytest.raises(ConnectFailed, match="could not connect"):
            await client.request("GET", "/", [])
        await client.aclose()

    run(body)


def test_streams_respect_server_limit_and_spread_over_connections() -> None:
    async def body() -> None:
        app = Echo()
        async with FakeServer(app, max_concurrent_streams=10) as server:
            client = Http2Client(server.url, connections=2)
            try:
                app.gate = asyncio.Event()
                app.all_arrived = asyncio.Event()
                app.expect = 20
                tasks = [asyncio.create_task(client.request("GET", f"/{i}", [])) for i in range(50)]
                await app.all_arrived.wait()
                # 2 connections x 10 streams in flight, the other 30 wait for room
                assert client.stats.in_flight == 20
                assert client.stats.waiting == 30
                assert app.arrived == 20
                app.gate.set()
                responses = await asyncio.gather(*tasks)
                assert [r.status for r in responses] == [201] * 50
                assert sorted(app.seen) == sorted(f"/{i}" for i in range(50))
                assert client.stats.connections_opened == 2
                assert client.stats.in_flight == 0
            finally:
                await client.aclose()

    run(body)


def test_max_streams_caps_below_the_server() -> None:
    async def body() -> None:
        app = Echo()
        async with FakeServer(app) as server:
            client = Http2Client(server.url, connections=1, max_streams=3)
            app.gate = asyncio.Event()
            app.all_arrived = asyncio.Event()
            app.expect = 3
            tasks = [asyncio.create_task(client.request("GET", "/", [])) for _ in range(5)]
            await app.all_arrived.wait()
            assert (client.stats.in_flight, client.stats.waiting) == (3, 2)
            app.gate.set()
            assert len(await asyncio.gather(*tasks)) == 5
            await client.aclose()

    run(body)


def test_goaway_with_streams_in_flight() -> None:
    """The server processes 5 streams, then sends GOAWAY(last_stream_id = the 5th): the streams
    above fail with StreamRefused and were never processed; the next request opens a new
    connection."""

    async def body() -> None:
        app = Echo()
        async with FakeServer(app) as server:
            server.faults.goaway(5)
            client = Http2Client(server.url, connections=1)
            try:
                results = await asyncio.gather(
                    *[client.request("GET", f"/{i}", []) for i in range(20)],
                    return_exceptions=True,
                )
                ok = [r for r in results if isinstance(r, Response)]
                refused = [r for r in results if isinstance(r, StreamRefused)]
                assert len(ok) == 5 and len(refused) == 15, results
                assert len(app.seen) == 5  # refused streams never reached the application
                assert client.stats.goaways == 1
                assert server.counters["goaways"] == 1
                assert server.counters["streams_refused"] == 15
                again = await client.request("GET", "/after", [])
                assert again.status == 201
                assert client.stats.connections_opened == 2
            finally:
                await client.aclose()

    run(body)


def test_goaway_with_error_fails_open_streams_as_lost() -> None:
    async def body() -> None:
        app = Echo()
        async with FakeServer(app) as server:
            server.faults.goaway(2, error_code=2)  # INTERNAL_ERROR
            client = Http2Client(server.url, connections=1)
            app.gate = asyncio.Event()
            app.all_arrived = asyncio.Event()
            app.expect = 2
            first = [asyncio.create_task(client.request("GET", f"/{i}", [])) for i in range(2)]
            await app.all_arrived.wait()
            third = await asyncio.gather(client.request("GET", "/3", []), return_exceptions=True)
            assert isinstance(third[0], StreamRefused)
            results = await asyncio.gather(*first, return_exceptions=True)
            assert all(isinstance(r, ConnectionLost) for r in results), results
            await client.aclose()

    run(body)


def test_connection_reset_fails_open_streams_and_is_replaced() -> None:
    async def body() -> None:
        app = Echo()
        async with FakeServer(app) as server:
            client = Http2Client(server.url, connections=1)
            try:
                app.gate = asyncio.Event()
                app.all_arrived = asyncio.Event()
                app.expect = 3
                server.faults.reset(3)
                tasks = [asyncio.create_task(client.request("GET", f"/{i}", [])) for i in range(3)]
                await app.all_arrived.wait()
                results = await asyncio.gather(
                    *tasks, client.request("GET", "/4", []), return_exceptions=True
                )
                assert all(isinstance(r, ConnectionLost) for r in results), results
                assert client.stats.connections_lost == 1
                app.gate.set()
                assert (await client.request("GET", "/5", [])).status == 201
                assert client.stats.connections_opened == 2
                assert server.counters["resets"] == 1
            finally:
                await client.aclose()

    run(body)


def test_request_timeout_resets_the_stream() -> None:
    async def body() -> None:
        app = Echo()
        app.gate = asyncio.Event()
        async with FakeServer(app) as server:
            client = Http2Client(server.url, request_timeout=0.2)
            with pytest.raises(RequestTimeout, match=r"request_timeout=0\.2"):
                await client.request("GET", "/slow", [])
            assert client.stats.in_flight == 0
            app.gate.set()
            assert (await client.request("GET", "/fast", [])).status == 201
            await client.aclose()

    run(body)


def test_each_request_keeps_its_own_deadline() -> None:
    """The client's one deadline queue: a request that times out fails alone, the timer then
    waits for the next request's deadline (not failing it early, not forgetting it), and a
    request answered in time leaves nothing behind."""

    async def body() -> None:
        app = Echo()
        app.gate = asyncio.Event()
        async with FakeServer(app) as server:
            client = Http2Client(server.url, request_timeout=0.2)
            loop = asyncio.get_running_loop()
            first = asyncio.create_task(client.request("GET", "/slow-1", []))
            await asyncio.sleep(0)  # one turn: the first request is on its stream
            client.request_timeout = 0.6  # the next request's deadline comes later
            started = loop.time()
            second = asyncio.create_task(client.request("GET", "/slow-2", []))
            async with asyncio.timeout(10):  # a forgotten deadline would hang here
                with pytest.raises(RequestTimeout):  # (its text names the current setting)
                    await first
                assert not second.done()  # the earlier deadline came first, alone
                with pytest.raises(RequestTimeout, match=r"request_timeout=0\.6"):
                    await second
            assert loop.time() - started >= 0.55  # not failed with the first one
            assert client.stats.in_flight == 0
            app.gate.set()
            assert (await client.request("GET", "/fast", [])).status == 201
            assert not client._deadlines  # answered: its deadline is gone from the queue
            await client.aclose()

    run(body)


def test_server_without_http2_is_connect_failed() -> None:
    async def body() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            writer.close()

        plain = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = plain.sockets[0].getsockname()[1]
        client = Http2Client(f"http://127.0.0.1:{port}", connect_timeout=2)
        with pytest.raises(ConnectFailed):
            await client.request("GET", "/", [])
        await client.aclose()
        plain.close()
        await plain.wait_closed()

    run(body)


def test_body_truncated_at_max_body_and_large_request_body() -> None:
    async def body() -> None:
        async with FakeServer(Echo()) as server:
            client = Http2Client(server.url, max_body=1000)
            big = bytes(range(256)) * 1000  # larger than the default 64 KiB window
            response = await client.request("POST", "/", [], big)
            assert response.truncated and response.body == big[:1000]
            await client.aclose()

    run(body)


def test_errors_never_carry_header_values() -> None:
    async def body() -> None:
        app = Echo()
        app.gate = asyncio.Event()
        async with FakeServer(app) as server:
            client = Http2Client(server.url, request_timeout=0.1)
            secret = "Bearer ya29.SECRET-VALUE"
            with pytest.raises(Http2Error) as caught:
                await client.request("GET", "/", [("authorization", secret)])
            assert "SECRET" not in str(caught.value)
            await client.aclose()

    run(body)


def test_http1_keepalive_and_control_endpoint() -> None:
    """The same port serves HTTP/1.1 (keep-alive): the control endpoint sets faults from
    another process's point of view, and counters read back."""
    server = FakeServer(Echo()).start_in_thread()
    try:
        conn = h11.Connection(h11.CLIENT)
        sock = socket.create_connection(("127.0.0.1", server.port))
        for path in ("/one", "/two"):
            sock.sendall(
                conn.send(h11.Request(method="GET", target=path, headers=[("host", "x")]))
                + (conn.send(h11.EndOfMessage()) or b"")
            )
            status = None
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(sock.recv(65536))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
            assert status == 201
            conn.start_next_cycle()
        sock.close()

        request = urllib.request.Request(
            f"{server.url}/_fake/faults",
            data=json.dumps({"storm_status": 503, "storm_retry_after": 7}).encode(),
            method="POST",
        )
        with urllib.request.urlopen(request) as reply:
            assert json.load(reply)["storm_status"] == 503
        assert server.faults.storm_status == 503
        try:
            urllib.request.urlopen(f"{server.url}/x")
        except urllib.error.HTTPError as exc:
            assert exc.code == 503 and exc.headers["retry-after"] == "7"
            exc.close()
        else:
            raise AssertionError("the storm did not answer 503")
        bad = urllib.request.Request(
            f"{server.url}/_fake/faults", data=b'{"nope": 1}', method="POST"
        )
        with pytest.raises(urllib.error.HTTPError, match="400") as refused:
            urllib.request.urlopen(bad)
        refused.value.close()
        with urllib.request.urlopen(f"{server.url}/_fake/counters") as reply:
            counters = json.load(reply)
        # every HTTP/1.1 request counts, the control ones too (this one included)
        assert counters["requests_http1"] == 6 and counters["storm_responses"] == 1
    finally:
        server.stop_thread()


def test_storm_fraction_and_duration() -> None:
    faults = Faults()
    faults.storm(429, 3, fraction=0.0)
    assert not faults.storming()
    faults.storm(429, 3, seconds=0.0)
    assert not faults.storming() and faults.storm_status is None
    faults.storm(429, 3)
    assert faults.storming()
    faults.clear()
    assert faults == Faults()


def test_many_streams_in_flight_over_tls() -> None:
    async def body() -> None:
        async with FakeServer(Echo(), tls=True) as server:
            client = Http2Client(server.url, ssl_context=server.client_context(), connections=2)
            responses = await asyncio.gather(
                *[client.request("POST", "/", [], b"x" * 200) for _ in range(3000)]
            )
            assert {r.status for r in responses} == {201}
            assert client.stats.connections_opened <= 2
            await client.aclose()

    run(body)


def test_http1_large_body_arrives_whole_when_the_connection_closes() -> None:
    # urllib sends "Connection: close": the server closes right after the response, and an
    # 8 MB body must not be cut short in the transport's buffer (it was, before the drain).
    body = bytes(range(256)) * 31_250

    def big(request: FakeRequest) -> FakeResponse:
        return FakeResponse(200, [("content-type", "application/octet-stream")], body)

    server = FakeServer(big).start_in_thread()
    try:
        with urllib.request.urlopen(server.url + "/big") as reply:
            assert reply.read() == body
    finally:
        server.stop_thread()
