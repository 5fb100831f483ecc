"""The webhooks' HTTP/1.1 client against a raw socket server that answers canned bytes: the
response framings it reads (Content-Length, chunked, to the connection's end, interim 1xx),
the bound on a body, when a connection is reused, and what is a ``protocol`` error."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

from scheduler.webhooks.http import HttpClient, SendError
from scheduler.webhooks.ssrf import Guard, networks, parse_url

LOCAL = Guard(allow=networks(["127.0.0.1/32"]))


async def _exchange(
    answers: list[bytes], *, max_body: int = 16
) -> tuple[list[Any], int, list[bytes]]:
    """POST once per answer; each request is answered with the next canned bytes (the
    server closes the connection after an answer that says ``close`` or is HTTP/1.0).
    Returns each result (a Response or the SendError kind), the connections the client
    opened, and the requests' bodies as the server read them."""
    queue = list(answers)
    bodies: list[bytes] = []
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while queue:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                bodies.append(await reader.readexactly(length))
                answer = queue.pop(0)
                writer.write(answer)
                await writer.drain()
                if b"close" in answer.lower() or answer.startswith(b"HTTP/1.0"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HttpClient(LOCAL, max_body=max_body, timeout=5)
    url = parse_url(f"http://127.0.0.1:{port}/hook")
    results: list[Any] = []
    try:
        for n in range(len(answers)):
            try:
                results.append(await client.post(url, [("webhook-id", str(n))], b"{}"))
            except SendError as exc:
                results.append(exc.kind)
    finally:
        await client.aclose()
        await _shut(server, writers)
    return results, client.connections_opened, bodies


async def _shut(server: asyncio.Server, writers: list[asyncio.StreamWriter]) -> None:
    """Close the server and its connections, and let the loop finish closing them all (the
    client's included) before the test's loop ends."""
    server.close()
    for writer in writers:
        writer.close()
    await server.wait_closed()
    for writer in writers:
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    await asyncio.sleep(0.05)


def run(answers: list[bytes], **kw: Any) -> tuple[list[Any], int, list[bytes]]:
    return asyncio.run(_exchange(answers, **kw))


def test_content_length_and_chunked_bodies_are_read_and_the_connection_reused() -> None:
    results, opened, bodies = run([
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Thing:  a b \r\n\r\nhello",
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 503\r\nretry-after: 7\r\ncontent-length: 0\r\n\r\n",
    ])  # fmt: skip
    assert [(r.status, r.body, r.truncated) for r in results] == [
        (200, b"hello", False), (201, b"abcde", False), (204, b"", False), (503, b"", False),
    ]  # fmt: skip
    assert results[0].header("X-Thing") == "a b" and results[3].header("Retry-After") == "7"
    assert opened == 1 and bodies == [b"{}"] * 4


def test_a_body_beyond_max_body_is_cut_and_its_connection_not_reused() -> None:
    results, opened, _ = run([
        b"HTTP/1.1 500 Oops\r\nContent-Length: 40\r\n\r\n" + b"x" * 40,
        b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n" + b"y" * 16
        + b"\r\n5\r\nzzzzz\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ], max_body=16)  # fmt: skip
    assert [(r.status, r.body, r.truncated) for r in results] == [
        (500, b"x" * 16, True), (500, b"y" * 16, True), (200, b"ok", False),
    ]  # fmt: skip
    assert opened == 3


def test_a_body_to_the_connections_end_and_connection_close_end_the_connection() -> None:
    results, opened, _ = run([
        b"HTTP/1.0 200 OK\r\n\r\nto the end",
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 1\r\n\r\n1",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2",
    ], max_body=64)  # fmt: skip
    assert [(r.status, r.body) for r in results] == [(200, b"to the end"), (200, b"1"), (200, b"2")]
    assert opened == 3


def test_bare_lf_line_ends_are_read_as_crlf() -> None:
    """RFC 9112 section 2.2: a recipient may take a bare LF for a line end; h11 did, and a
    server that sends them is answered, not timed out (it was, before: the head was read up to
    CRLF CRLF). In the status line, the headers, the chunk lines and the trailers, mixed with
    CRLF too; the connection is reused as with CRLF."""
    results, opened, _ = run([
        b"HTTP/1.1 200 OK\nContent-Length: 5\nX-Thing:  a b \n\nhello",
        b"HTTP/1.1 201 Created\nTransfer-Encoding: chunked\n\n"
        b"3;ext=1\nabc\n2\r\nde\r\n0\nTrailer: x\n\n",
        b"HTTP/1.1 100 Continue\n\nHTTP/1.1 204 No Content\r\n\n",
        b"HTTP/1.1 503\r\nretry-after: 7\ncontent-length: 0\n\r\n",
    ])  # fmt: skip
    assert [(r.status, r.body, r.truncated) for r in results] == [
        (200, b"hello", False), (201, b"abcde", False), (204, b"", False), (503, b"", False),
    ]  # fmt: skip
    assert results[0].header("X-Thing") == "a b" and results[3].header("Retry-After") == "7"
    assert opened == 1


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n",
        b"ICY 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Name: 1\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        # a lone CR: in a value, in the status line, ending a line, in a chunk line
        b"HTTP/1.1 200 OK\nX-A: a\rb\nContent-Length: 0\n\n",
        b"HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-A: a\r\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3\rabc\n0\n\n",
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n3\nabc\r0\n\n",
        # NUL in a value or the status line, with bare LFs
        b"HTTP/1.1 200 OK\nX-A: a\x00b\nContent-Length: 0\n\n",
        b"HTTP/1.1 200 O\x00K\nContent-Length: 0\n\n",
        # a head over 64 KiB, in one line or in many
        b"HTTP/1.1 200 OK\nX-A: " + b"a" * 70_000 + b"\nContent-Length: 0\n\n",
        b"HTTP/1.1 200 OK\n" + b"X-A: 0123456789012345678901234567890123\n" * 2_000 + b"\n",
    ],
)
def test_a_malformed_response_is_a_protocol_error(answer: bytes) -> None:
    results, _, _ = run([answer])
    assert results == ["protocol"]


def test_a_request_header_that_would_split_the_head_is_refused_unsent() -> None:
    received: list[bytes] = []
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        received.append(await reader.read(65536))

    async def post() -> str:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = HttpClient(LOCAL, timeout=5)
        try:
            url = parse_url(f"http://127.0.0.1:{port}/x")
            await client.post(url, [("webhook-id", "a\r\nx-injected: 1")], b"{}")
        except SendError as exc:
            return exc.kind
        finally:
            await client.aclose()
            await _shut(server, writers)
        return "sent"

    assert asyncio.run(post()) == "protocol"
    assert b"x-injected" not in b"".join(received)  # nothing was written


def test_a_resolver_that_does_not_answer_is_a_resolve_error_within_the_connect_timeout() -> None:
    release = threading.Event()

    def hanging(host: str, port: int) -> list[str]:
        release.wait(30)
        return ["127.0.0.1"]

    async def post() -> tuple[str, float]:
        client = HttpClient(Guard(resolver=hanging), connect_timeout=0.2, timeout=10)
        start = time.monotonic()
        try:
            await client.post(parse_url("http://hooks.example/x"), [], b"{}")
        except SendError as exc:
            return exc.kind, time.monotonic() - start
        finally:
            await client.aclose()
        return "sent", time.monotonic() - start

    try:
        kind, took = asyncio.run(post())
    finally:
        release.set()
    assert kind == "resolve" and took < 5
