"""The webhooks' HTTP/1.1 client: keep-alive connections per origin, the SSRF guard at connect.

Why our own rather than httpx: the guard must see the address a request actually goes to. Here
every connection is opened to an address the guard has just checked (the host is resolved once, by
us, and the socket connects to that address, never to the name), and the connected socket's peer
address is checked again before a byte is sent; a name whose resolution changed since registration
(DNS rebinding) is judged by what it resolves to now. TLS verifies the certificate against the host
*name* (SNI), so connecting by address weakens nothing.

Each request has a connect timeout (which also bounds the name's resolution, in a thread of its
own) and a total timeout (connect, send, response, body); a response body is read up to
``max_body`` bytes (a connection whose body was longer is closed, not reused). Connections are kept
per origin (scheme, host, port) and reused by the next request to it, so many requests in flight on
one event loop cost no handshake each: up to ``max_idle_per_origin`` idle ones (256 by default,
above a worker's usual slots: a worker starts its deliveries in bursts, one claim's worth at once,
and an idle list shorter than the burst closed the surplus only to open as many again at the next
claim). A client belongs to the event loop that first uses it (its connections do).

The HTTP/1.1 of a webhook POST is written and read here (h11, which did it before, cost more CPU a
delivery than everything else in the client: its event objects and its validation of each header,
sent and received; the fakes keep it for their server side): the request's head is a handful of
headers whose names are constants and whose values are ours (the signature headers, CR, LF and NUL
refused) or come from a checked URL (:func:`~.ssrf.parse_url` refuses spaces and control
characters); the response is read strictly (RFC 9112): a status line of HTTP/1.0 or HTTP/1.1,
header lines ending in CRLF or a bare LF (RFC 9112 section 2.2 lets a recipient accept one; a lone
CR, or a CR or NUL in a value, is refused), up to 64 KiB in all (no obsolete line folding), interim
1xx answers skipped, the body framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or the
connection's end, and anything else (a malformed line, a transfer coding other than chunked,
conflicting lengths, a 101) a ``protocol`` error. A connection is reused only after a complete
HTTP/1.1 response with a length, no ``Connection: close``, and a body within ``max_body``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.errors import SchedulerError
from scheduler.webhooks.ssrf import Guard, WebhookUrl

USER_AGENT = "tockwork-webhooks/1"
DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_TIMEOUT = 15.0
DEFAULT_MAX_BODY = 16 * 1024
DEFAULT_MAX_IDLE_PER_ORIGIN = 256
_READ = 65536  # also the longest response head read (status line and headers)
_HEAD_FORBIDDEN = frozenset("\r\n\x00")
_NO_BODY = frozenset({204, 304})
_FIELD_FORBIDDEN = frozenset(b"\r\n\x00")
_HEAD_END = re.compile(rb"\n\r?\n")  # the blank line that ends a head, after a line's LF
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # a header name (RFC 9110 token)

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


class _Malformed(SchedulerError):
    """A response this client does not read (module docstring): a ``protocol`` SendError."""


class _Reader:
    """A connection's incoming bytes, read in blocks of up to ``_READ`` from its stream into a
    buffer of our own and taken from there: a response head is found with one search for its
    blank line, whichever line ends it uses (a ``readuntil`` a line cost a microsecond each,
    and one ``readuntil`` of CRLF CRLF cannot see a head whose lines end in a bare LF)."""

    __slots__ = ("buffer", "stream")

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream
        self.buffer = bytearray()

    def at_eof(self) -> bool:
        return not self.buffer and self.stream.at_eof()

    async def _fill(self) -> None:
        data = await self.stream.read(_READ)
        if not data:
            raise asyncio.IncompleteReadError(bytes(self.buffer), None)
        self.buffer += data

    async def head(self) -> list[bytes]:
        """The status line and the header lines of a response, up to its blank line, each
        without its line end; at most ``_READ`` bytes in all."""
        buffer = self.buffer
        start = 0
        while (found := _HEAD_END.search(buffer, start)) is None:
            if len(buffer) > _READ:
                raise _Malformed(f"a response head over {_READ} bytes")
            start = max(len(buffer) - 2, 0)
            data = await self.stream.read(_READ)
            if not data:
                raise asyncio.IncompleteReadError(bytes(buffer), None)
            buffer += data
        end = found.start()  # the LF of the last line
        if end >= _READ:
            raise _Malformed(f"a response head over {_READ} bytes")
        head = bytes(memoryview(buffer)[: end + 1]).replace(b"\r\n", b"\n")
        del buffer[: found.end()]
        if b"\r" in head:
            raise _Malformed("a lone CR in the response head")
        return head[:-1].split(b"\n")

    async def line(self) -> bytes:
        """One line (a chunk's size, a trailer), without its line end."""
        start = 0
        while (end := self.buffer.find(b"\n", start)) < 0:
            if len(self.buffer) > _READ:
                raise _Malformed(f"a line over {_READ} bytes")
            start = len(self.buffer)
            await self._fill()
        raw = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return _line(raw)

    async def exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self._fill()  # (rarely: the body is most often read with the head)
        if len(self.buffer) == n:
            data = bytes(self.buffer)
            self.buffer.clear()
            return data
        data = bytes(memoryview(self.buffer)[:n])
        del self.buffer[:n]
        return data

    async def some(self) -> bytes:
        """What is buffered, or the next block; b"" at the end of the stream."""
        if self.buffer:
            data = bytes(self.buffer)
            self.buffer.clear()
            return data
        return await self.stream.read(_READ)


class _Connection:
    __slots__ = ("peer", "reader", "writer")

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        self.reader = _Reader(reader)
        self.writer = writer
        self.peer = peer

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
        except _Malformed as exc:
            raise SendError("protocol", f"malformed response: {exc}") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
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
            except (ConnectionError, asyncio.IncompleteReadError):
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
        try:
            found = await asyncio.wait_for(
                _resolved(self.guard, url.host, url.port), self.connect_timeout
            )
        except TimeoutError:
            raise SendError(
                "resolve", f"{url.host} did not resolve within {self.connect_timeout:g} s"
            ) from None
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
        conn.writer.write(_head(url.target, url.host_header, str(len(body)), headers) + body)
        await conn.writer.drain()
        reader = conn.reader
        while True:
            try:
                head = await reader.head()
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise ConnectionResetError("closed before a response") from None
                raise
            version, status, fields = _parse_head(head)
            if status >= 200:
                break
            if status == 101:
                raise _Malformed("101 Switching Protocols")
        close = version == b"HTTP/1.0" or "close" in _tokens(fields, "connection")
        coding = _tokens(fields, "transfer-encoding")
        lengths = {v.strip() for k, v in fields if k == "content-length"}
        chunks: list[bytes] = []
        truncated = False
        if status in _NO_BODY:
            pass
        elif coding:
            if coding != ["chunked"]:
                raise _Malformed("a transfer coding other than chunked")
            close = close or bool(lengths)  # both framings: read as chunked, then closed
            truncated = await self._read_chunked(reader, chunks)
        elif lengths:
            value = lengths.pop() if len(lengths) == 1 else ""
            if not (value.isascii() and value.isdigit()):
                raise _Malformed("a bad Content-Length")
            length = int(value)
            truncated = length > self.max_body
            if length:
                chunks.append(await reader.exactly(min(length, self.max_body)))
        else:
            close = True  # the body ends with the connection
            truncated = await self._read_to_end(reader, chunks)
        response = Response(status, fields, b"".join(chunks), truncated)
        return response, not (close or truncated)

    async def _read_chunked(self, reader: _Reader, chunks: list[bytes]) -> bool:
        """A chunked body into ``chunks`` up to ``max_body``; whether it was longer (the rest is
        not read: the connection is closed)."""
        size = 0
        while True:
            line = await reader.line()
            digits = line.split(b";", 1)[0].strip()
            if not digits or any(c not in b"0123456789abcdefABCDEF" for c in digits):
                raise _Malformed("a bad chunk size")
            n = int(digits, 16)
            if n == 0:
                break
            room = self.max_body - size
            if n > room:
                if room > 0:
                    chunks.append(await reader.exactly(room))
                return True
            chunks.append(await reader.exactly(n))
            size += n
            if await reader.line():
                raise _Malformed("a chunk without its line end")
        while await reader.line():  # trailers, ignored
            pass
        return False

    async def _read_to_end(self, reader: _Reader, chunks: list[bytes]) -> bool:
        """A body delimited by the end of the connection, up to ``max_body``; whether longer."""
        size = 0
        while data := await reader.some():
            room = self.max_body - size
            if len(data) > room:
                if room > 0:
                    chunks.append(data[:room])
                return True
            chunks.append(data)
            size += len(data)
        return False


async def _resolved(guard: Guard, host: str, port: int) -> list[str]:
    """``guard.resolver(host, port)`` in a daemon thread of its own, awaited: a resolver that
    never answers holds that thread only, not one of the loop's default executor (which
    psycopg's own lookups and every ``to_thread`` share); the caller bounds the wait."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[list[str]] = loop.create_future()

    def settle(result: list[str] | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result or [])

    def call() -> None:
        try:
            result, exc = guard.resolver(host, port), None
        except Exception as error:  # handed to the awaiting loop
            result, exc = None, error
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=call, name="tockwork-resolve", daemon=True).start()
    return await future


def _line(raw: bytes) -> bytes:
    """A line read up to its LF (``raw``, the LF left out), without its line end: CRLF, or a
    bare LF, which RFC 9112 (section 2.2) lets a recipient take for one (h11 did, and servers
    send it). A CR left in the line (a lone CR) is refused."""
    line = raw[:-1] if raw.endswith(b"\r") else raw
    if b"\r" in line:
        raise _Malformed("a lone CR in a line")
    return line


def _parse_head(lines: list[bytes]) -> tuple[bytes, int, list[tuple[str, str]]]:
    """Status line and header lines (without their line ends): the version, the status and
    the headers (names lowercase, values latin-1, surrounding blanks stripped)."""
    parts = lines[0].split(b" ", 2) if lines else []
    if (
        len(parts) < 2
        or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
        or len(parts[1]) != 3
        or not parts[1].isdigit()
        or parts[1] < b"100"
        or b"\x00" in lines[0]
    ):
        raise _Malformed("a bad status line")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name) or not _FIELD_FORBIDDEN.isdisjoint(value):
            raise _Malformed("a bad header line")
        fields.append((name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")))
    return parts[0], int(parts[1]), fields


def _tokens(fields: Sequence[tuple[str, str]], name: str) -> list[str]:
    """The comma-separated tokens of every ``name`` header, lowercase, in order."""
    return [t.strip().lower() for k, v in fields if k == name for t in v.split(",") if t.strip()]


def _head(target: str, host: str, length: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """The head of a POST: request line and headers. A value with CR, LF or NUL (which
    would split the head) is refused as h11 would have refused it."""
    lines = [
        f"POST {target} HTTP/1.1\r\nhost: {host}\r\nuser-agent: {USER_AGENT}\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n"
    ]
    for name, value in headers:
        if not _HEAD_FORBIDDEN.isdisjoint(value) or not _HEAD_FORBIDDEN.isdisjoint(name):
            raise _Malformed(f"the request header {name!r} holds CR, LF or NUL")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("ascii")


def monotonic_ms(start: float) -> float:
    """Milliseconds since ``start`` (``time.monotonic()``)."""
    return (time.monotonic() - start) * 1000.0
