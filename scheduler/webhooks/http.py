"""The webhooks' HTTP/1.1 client: keep-alive connections per origin, the SSRF guard at connect.

Why our own (on ``h11``, already the fakes' HTTP/1.1 side) rather than httpx: the guard must
see the address a request actually goes to. Here every connection is opened to an address the
guard has just checked (the host is resolved once, by us, and the socket connects to that
address, never to the name), and the connected socket's peer address is checked again before a
byte is sent; a name whose resolution changed since registration (DNS rebinding) is judged by
what it resolves to now. TLS verifies the certificate against the host *name* (SNI), so
connecting by address weakens nothing.

Each request has a connect timeout and a total timeout (connect, send, response, body); a
response body is read up to ``max_body`` bytes (a connection whose body was longer is closed,
not reused). Connections are kept per origin (scheme, host, port) and reused by the next
request to it, so many requests in flight on one event loop cost no handshake each: up to
``max_idle_per_origin`` idle ones (256 by default, above a worker's usual slots: a worker starts
its deliveries in bursts, one claim's worth at once, and an idle list shorter than the burst
closed the surplus only to open as many again at the next claim). A client belongs to the event
loop that first uses it (its connections do).

The request is written by this module, not by h11: its head is a handful of headers whose names
are constants and whose values are ours (the signature headers) or come from a checked URL
(:func:`~.ssrf.parse_url` refuses spaces and control characters), so h11's validation of each
header at every request was most of the client's CPU. h11 still parses the response and keeps
the connection's state: it is handed a request of the same method, target and framing (host and
content length), whose bytes are not sent.
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass

import h11

from scheduler.errors import SchedulerError
from scheduler.webhooks.ssrf import Guard, WebhookUrl

USER_AGENT = "tockwork-webhooks/1"
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_MAX_BODY = 16 * 1024
DEFAULT_MAX_IDLE_PER_ORIGIN = 256
_READ = 65536
_HEAD_FORBIDDEN = frozenset("\r\n\x00")

Origin = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes  # at most max_body bytes
    truncated: bool

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None


class SendError(SchedulerError):
    """A request that got no HTTP response: ``kind`` is ``refused`` (the SSRF guard),
    ``resolve``, ``connect``, ``connect_timeout``, ``timeout`` or ``protocol``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Connection:
    __slots__ = ("h11", "peer", "reader", "writer")

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.h11 = h11.Connection(h11.CLIENT)

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()


class HttpClient:
    """POSTs to webhook URLs (module docstring)."""

    def __init__(
        self,
        guard: Guard,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        timeout: float = DEFAULT_TIMEOUT,
        max_body: int = DEFAULT_MAX_BODY,
        ssl_context: ssl.SSLContext | None = None,
        max_idle_per_origin: int = DEFAULT_MAX_IDLE_PER_ORIGIN,
    ) -> None:
        self.guard = guard
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_body = max_body
        self.ssl_context = ssl_context
        self.max_idle_per_origin = max_idle_per_origin
        self._idle: dict[Origin, list[_Connection]] = {}
        self.connections_opened = 0

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    async def post(
        self, url: WebhookUrl, headers: Sequence[tuple[str, str]], body: bytes
    ) -> Response:
        """POST ``body`` to ``url``; the response (any status), or :class:`SendError`."""
        origin = (url.scheme, url.host, url.port)
        held: list[_Connection] = []  # the connection in use, closed on any failure
        keep = False
        try:
            async with asyncio.timeout(self.timeout):
                response, keep = await self._attempt(origin, url, headers, body, held)
        except TimeoutError:
            raise SendError("timeout", f"no complete response within {self.timeout:g} s") from None
        except SendError:
            raise
        except (ConnectionError, OSError) as exc:
            raise SendError("connect", f"connection failed: {type(exc).__name__}") from None
        except (h11.ProtocolError, asyncio.IncompleteReadError) as exc:
            raise SendError("protocol", f"malformed response: {type(exc).__name__}") from None
        finally:
            if held and not keep:
                held[-1].close()
        if keep:
            self._give_back(origin, held[-1])
        return response

    async def _attempt(
        self,
        origin: Origin,
        url: WebhookUrl,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        held: list[_Connection],
    ) -> tuple[Response, bool]:
        conn = self._take(origin)
        if conn is not None:
            held.append(conn)
            try:
                return await self._exchange(conn, url, headers, body)
            except (ConnectionError, h11.RemoteProtocolError, asyncio.IncompleteReadError):
                # A kept connection the server had closed meanwhile: once more, anew.
                conn.close()
        conn = await self._open(url)
        held.append(conn)
        return await self._exchange(conn, url, headers, body)

    def _take(self, origin: Origin) -> _Connection | None:
        conns = self._idle.get(origin)
        while conns:
            conn = conns.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                return conn
            conn.close()
        return None

    def _give_back(self, origin: Origin, conn: _Connection) -> None:
        conns = self._idle.setdefault(origin, [])
        if len(conns) < self.max_idle_per_origin:
            conns.append(conn)
        else:
            conn.close()

    async def _resolve(self, url: WebhookUrl) -> list[str]:
        try:
            ipaddress.ip_address(url.host)
        except ValueError:
            pass
        else:
            return [url.host]
        loop = asyncio.get_running_loop()
        try:
            found = await loop.run_in_executor(None, self.guard.resolver, url.host, url.port)
        except (OSError, UnicodeError) as exc:
            raise SendError("resolve", f"{url.host} does not resolve ({exc})") from None
        if not found:
            raise SendError("resolve", f"{url.host} has no address")
        return found

    async def _open(self, url: WebhookUrl) -> _Connection:
        addresses = await self._resolve(url)
        if url.host not in addresses:
            named = self.guard.name_refusal(url.host)
            if named is not None and not all(
                self.guard.allowed(ipaddress.ip_address(a.split("%", 1)[0])) for a in addresses
            ):
                raise SendError("refused", f"refused: {named}")
        for address in addresses:
            why = self.guard.refusal(address.split("%", 1)[0])
            if why is not None:
                raise SendError("refused", f"refused: {url.host} resolves to a {why} address")
        context = None
        if url.tls:
            context = self.ssl_context or ssl.create_default_context()
        last: Exception | None = None
        for address in addresses:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(
                        address,
                        url.port,
                        ssl=context,
                        server_hostname=url.host if context is not None else None,
                        limit=_READ,
                    ),
                    self.connect_timeout,
                )
            except TimeoutError:
                last = SendError(
                    "connect_timeout", f"connect timed out after {self.connect_timeout:g} s"
                )
                continue
            except (OSError, ssl.SSLError) as exc:
                last = exc
                continue
            peer = writer.get_extra_info("peername")
            peer_address = str(peer[0]) if peer else ""
            # The address actually connected to, checked once more before anything is sent.
            why = self.guard.refusal(peer_address.split("%", 1)[0]) if peer_address else "unknown"
            if why is not None:
                writer.close()
                raise SendError("refused", f"refused: connected to a {why} address")
            self.connections_opened += 1
            return _Connection(reader, writer, peer_address)
        if isinstance(last, SendError):
            raise last
        raise SendError("connect", f"connection failed: {type(last).__name__}")

    async def _exchange(
        self,
        conn: _Connection,
        url: WebhookUrl,
        headers: Sequence[tuple[str, str]],
        body: bytes,
    ) -> tuple[Response, bool]:
        c = conn.h11
        host, length = url.host_header, str(len(body))
        # h11 learns the request's method and framing (module docstring); what goes on the
        # wire is the head below, the same request with every header.
        c.send(
            h11.Request(
                method="POST",
                target=url.target,
                headers=[("host", host), ("content-length", length)],
            )
        )
        c.send(h11.Data(data=body))
        c.send(h11.EndOfMessage())
        conn.writer.write(_head(url.target, host, length, headers) + body)
        await conn.writer.drain()
        status = 0
        response_headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []
        size = 0
        truncated = False
        while True:
            event = c.next_event()
            if event is h11.NEED_DATA:
                data = await conn.reader.read(_READ)
                if not data and c.their_state is h11.SEND_RESPONSE:
                    raise ConnectionResetError("closed before a response")
                c.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                status = event.status_code
                response_headers = [
                    (k.decode().lower(), v.decode("latin-1")) for k, v in event.headers
                ]
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Data):
                room = self.max_body - size
                if room > 0:
                    chunks.append(bytes(event.data[:room]))
                size += len(event.data)
                if size > self.max_body:
                    truncated = True
                    break  # the rest is not read: the connection is closed, not reused
            elif isinstance(event, h11.EndOfMessage):
                break
            elif isinstance(event, h11.ConnectionClosed):
                if status == 0:
                    raise ConnectionResetError("closed before a response")
                break
        keep = not truncated and c.our_state is h11.DONE and c.their_state is h11.DONE
        if keep:
            c.start_next_cycle()
        return Response(status, response_headers, b"".join(chunks), truncated), keep


def _head(target: str, host: str, length: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """The head of a POST: request line and headers. A value with CR, LF or NUL (which
    would split the head) is refused as h11 would have refused it."""
    lines = [
        f"POST {target} HTTP/1.1\r\nhost: {host}\r\nuser-agent: {USER_AGENT}\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n"
    ]
    for name, value in headers:
        if not _HEAD_FORBIDDEN.isdisjoint(value) or not _HEAD_FORBIDDEN.isdisjoint(name):
            raise h11.LocalProtocolError(f"illegal header value in {name}")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("ascii")


def monotonic_ms(start: float) -> float:
    """Milliseconds since ``start`` (``time.monotonic()``)."""
    return (time.monotonic() - start) * 1000.0
