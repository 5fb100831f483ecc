"""The fake-server framework: one loopback port serving HTTP/1.1 and HTTP/2, with faults.

Every push fake (FCM, APNs) is an application ``async def app(request: FakeRequest) ->
FakeResponse`` (or a plain function, answered in the same turn: faster) served by a
:class:`FakeServer`: an asyncio server that speaks HTTP/1.1 with
keep-alive (``h11``) and HTTP/2 (``h2``; cleartext with prior knowledge, detected by the
connection preface) on the same port, and optionally TLS with ALPN (``h2``, ``http/1.1``) on a
certificate it makes itself (:func:`make_certificate`, a CA and a ``localhost``/``127.0.0.1``
leaf; the CA's PEM file lets ``ssl``, ``requests`` (``REQUESTS_CA_BUNDLE``) and ``httpx``
(``SSL_CERT_FILE``) trust it).

Faults (:class:`Faults`) are shared by all fakes and can change while the server runs, from the
test (the object) or from another process (``POST /_fake/faults`` with a JSON object of
:class:`Faults` fields; ``GET /_fake/faults`` reads them back):

- ``latency``: seconds added before every application response;
- a storm: ``storm_status`` (429 or 503) with ``Retry-After: storm_retry_after`` for every request
  (whose path starts with ``storm_path_prefix``) until ``storm_until`` (``time.monotonic()``;
  None: until cleared) or for a fraction of them (``storm_fraction``);
- ``goaway_after``: on HTTP/2, a connection processes that many streams; when one more arrives it
  sends GOAWAY with ``last_stream_id`` the last processed stream, refuses every later stream
  (not processed: the client may resend them) and closes once the processed ones have answered
  (``goaway_times`` connections get this, then the fault clears itself);
- ``reset_after``: a connection (either protocol) is aborted (TCP reset) when a request beyond
  that many arrives, with requests still in flight (``reset_times`` connections).

Counters (:attr:`FakeServer.counters`, also ``GET /_fake/counters``): connections, requests per
protocol, responses per status, GOAWAYs, refused streams and resets.

Run it in-process on the test's loop (``await server.start()`` / ``await server.stop()``, or
``async with server``) or in a thread (:meth:`FakeServer.start_in_thread` returns a handle with
``.port``, ``.url``, ``.stop_thread()``); a fake module's ``main`` runs one as a process with
:func:`serve_until_signalled` (one JSON line on stdout when it listens, SIGTERM to stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import ipaddress
import json
import os
import random
import signal
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, cast

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h11

from scheduler.push.http2 import H2Connection

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_READ = 1 << 18


@dataclass(frozen=True, slots=True)
class FakeRequest:
    """A request as the application sees it (header names lower-case)."""

    method: str
    path: str  # with the query string
    headers: Mapping[str, str]
    body: bytes
    http_version: str  # "1.1" or "2"


@dataclass(slots=True)
class FakeResponse:
    status: int = 200
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""

    @classmethod
    def json(cls, status: int, value: Any, headers: Sequence[tuple[str, str]] = ()) -> FakeResponse:
        return cls(
            status,
            [("content-type", "application/json; charset=UTF-8"), *headers],
            json.dumps(value).encode(),
        )


# An application is ``async def app(request) -> FakeResponse`` or a plain function: a plain one
# is answered in the turn its request arrived (no task per request: the fake stays fast enough
# to be the server of the HTTP-limit benchmark).
App = Callable[[FakeRequest], Awaitable[FakeResponse]] | Callable[[FakeRequest], FakeResponse]


@dataclass
class Faults:
    """Faults injected by a :class:`FakeServer` (module docstring); mutable while it runs."""

    latency: float = 0.0
    storm_status: int | None = None
    storm_retry_after: int | None = None
    storm_until: float | None = None  # time.monotonic(); None: until cleared
    storm_fraction: float = 1.0
    storm_path_prefix: str = ""  # only requests whose path starts with it ("/v1/": not /token)
    goaway_after: int | None = None
    goaway_times: int = 1
    goaway_error: int = 0  # the GOAWAY's error code (0: NO_ERROR)
    reset_after: int | None = None
    reset_times: int = 1

    def storm(
        self,
        status: int,
        retry_after: int | None = None,
        *,
        seconds: float | None = None,
        fraction: float = 1.0,
        path_prefix: str = "",
    ) -> None:
        """Answer ``status`` (with Retry-After) to every request (whose path starts with
        ``path_prefix``), or to a ``fraction``, for ``seconds`` (None: until :meth:`clear`)."""
        self.storm_path_prefix = path_prefix
        self.storm_status = status
        self.storm_retry_after = retry_after
        self.storm_until = None if seconds is None else time.monotonic() + seconds
        self.storm_fraction = fraction

    def storming(self) -> bool:
        if self.storm_status is None:
            return False
        if self.storm_until is not None and time.monotonic() >= self.storm_until:
            self.storm_status = None
            return False
        return self.storm_fraction >= 1.0 or random.random() < self.storm_fraction

    def goaway(self, after_streams: int, *, times: int = 1, error_code: int = 0) -> None:
        self.goaway_after, self.goaway_times, self.goaway_error = after_streams, times, error_code

    def reset(self, after_requests: int, *, times: int = 1) -> None:
        self.reset_after, self.reset_times = after_requests, times

    def clear(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default)

    def update(self, values: Mapping[str, Any]) -> None:
        known = {f.name for f in fields(self)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        for name, value in values.items():
            setattr(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Certificate:
    """A CA and a leaf certificate for ``localhost``/``127.0.0.1`` (PEM files in ``directory``)."""

    ca_file: str  # what clients trust: ssl cafile, REQUESTS_CA_BUNDLE, SSL_CERT_FILE
    cert_file: str  # the leaf then the CA (the chain the server presents)
    key_file: str

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def make_certificate(directory: str | os.PathLike[str] | None = None) -> Certificate:
    """Generate a CA and a leaf for localhost and 127.0.0.1 (RSA 2048, valid one day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="fake-"))
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tockwork fake CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    cert_file.write_bytes(leaf.public_bytes(pem) + ca.public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_file.chmod(0o600)
    return Certificate(str(ca_file), str(cert_file), str(key_file))


class FakeServer:
    """An HTTP/1.1 + HTTP/2 loopback server for a fake application (module docstring)."""

    def __init__(
        self,
        app: App,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: bool | Certificate = False,
        faults: Faults | None = None,
        max_concurrent_streams: int = 1000,
    ) -> None:
        self.app = app
        self._sync_app = not (
            inspect.iscoroutinefunction(app) or inspect.iscoroutinefunction(type(app).__call__)
        )
        self.host = host
        self.port = port
        self.faults = faults if faults is not None else Faults()
        self.max_concurrent_streams = max_concurrent_streams
        self.counters: Counter[str] = Counter()
        self.certificate: Certificate | None = None
        self._ssl: ssl.SSLContext | None = None
        if tls:
            self.certificate = tls if isinstance(tls, Certificate) else make_certificate()
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.certificate.cert_file, self.certificate.key_file)
            context.set_alpn_protocols(["h2", "http/1.1"])
            self._ssl = context
        self._server: asyncio.Server | None = None
        self._connections: set[_ServerConnection] = set()
        self._thread: _ServerThread | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://{self.host}:{self.port}"

    @property
    def ca_file(self) -> str | None:
        return self.certificate.ca_file if self.certificate else None

    def client_context(self) -> ssl.SSLContext | None:
        """An SSL context trusting this server's certificate (None without TLS)."""
        return self.certificate.client_context() if self.certificate else None

    async def start(self) -> int:
        """Listen; returns the bound port (also :attr:`port`)."""
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, ssl=self._ssl, limit=_READ, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for conn in list(self._connections):
                conn.abort()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def start_in_thread(self) -> FakeServer:
        """Run the server on its own event loop in a daemon thread; :meth:`stop_thread` ends
        it. Returns self (``.port`` and ``.url`` are set)."""
        self._thread = _ServerThread(self)
        self._thread.begin()
        return self

    def stop_thread(self) -> None:
        if self._thread is not None:
            self._thread.end()
            self._thread = None

    async def serve_forever(self) -> None:
        await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    # -- connections ---------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters["connections"] += 1
        conn: _ServerConnection
        ssl_object = writer.get_extra_info("ssl_object")
        first = b""
        if ssl_object is not None:
            is_h2 = ssl_object.selected_alpn_protocol() == "h2"
        else:
            with contextlib.suppress(Exception):
                first = await reader.read(_READ)
            if not first:
                writer.close()
                return
            is_h2 = (
                first.startswith(_PREFACE[: len(first)])
                if len(first) < 24
                else (first.startswith(_PREFACE))
            )
        conn = (
            _H2Connection(self, reader, writer) if is_h2 else _H11Connection(self, reader, writer)
        )
        self._connections.add(conn)
        try:
            await conn.run(first)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # the server is stopping; asyncio 3.11's stream callback would log a cancelled
            # handler as an error, so this connection's handler ends quietly
            pass
        finally:
            self._connections.discard(conn)
            conn.abort()

    def _respond_now(self, request: FakeRequest) -> FakeResponse | None:
        """The response when it needs no waiting (a plain app, no latency), else None."""
        if not self._sync_app or self.faults.latency:
            return None
        return self._respond_sync(request)

    async def _respond(self, request: FakeRequest) -> FakeResponse:
        """The control endpoints, the faults, then the application."""
        if self.faults.latency:
            await asyncio.sleep(self.faults.latency)
        if self._sync_app:
            return self._respond_sync(request)
        early = self._before_app(request)
        if early is not None:
            return early
        try:
            return await cast(Callable[[FakeRequest], Awaitable[FakeResponse]], self.app)(request)
        except Exception as exc:  # the fake's own bug: answer 500 and count it
            return self._app_error(exc)

    def _respond_sync(self, request: FakeRequest) -> FakeResponse:
        early = self._before_app(request)
        if early is not None:
            return early
        try:
            return cast(Callable[[FakeRequest], FakeResponse], self.app)(request)
        except Exception as exc:  # the fake's own bug: answer 500 and count it
            return self._app_error(exc)

    def _app_error(self, exc: Exception) -> FakeResponse:
        self.counters["app_errors"] += 1
        return FakeResponse(
            500, [("content-type", "text/plain")], f"fake app error: {type(exc).__name__}".encode()
        )

    def _before_app(self, request: FakeRequest) -> FakeResponse | None:
        """The control endpoints and the storm."""
        if request.path.startswith("/_fake/"):
            control = self._control(request)
            if control is not None:
                return control
        faults = self.faults
        if (
            faults.storm_status is not None
            and request.path.startswith(faults.storm_path_prefix)
            and faults.storming()
        ):
            self.counters["storm_responses"] += 1
            headers = []
            if faults.storm_retry_after is not None:
                headers.append(("retry-after", str(faults.storm_retry_after)))
            return FakeResponse(faults.storm_status, headers, b"")
        return None

    def _control(self, request: FakeRequest) -> FakeResponse | None:
        if request.path == "/_fake/faults":
            if request.method == "POST":
                try:
                    values = json.loads(request.body or b"{}")
                    if values.pop("clear", False):
                        self.faults.clear()
                    self.faults.update(values)
                except (ValueError, TypeError) as exc:
                    return FakeResponse.json(400, {"error": str(exc)})
            return FakeResponse.json(200, self.faults.as_dict())
        if request.path == "/_fake/counters":
            return FakeResponse.json(200, dict(self.counters))
        return None


class _ServerConnection:
    def __init__(
        self, server: FakeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.requests = 0
        self.aborted = False

    async def run(self, first: bytes) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            transport = self.writer.transport
            with contextlib.suppress(Exception):
                transport.abort()

    def should_reset(self) -> bool:
        """The reset fault: True when this request is beyond ``reset_after``."""
        faults = self.server.faults
        if faults.reset_after is None or self.requests <= faults.reset_after:
            return False
        faults.reset_times -= 1
        if faults.reset_times <= 0:
            faults.reset_after = None
        self.server.counters["resets"] += 1
        return True


class _H11Connection(_ServerConnection):
    async def run(self, first: bytes) -> None:
        conn = h11.Connection(h11.SERVER)
        if first:
            conn.receive_data(first)
        server = self.server
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.reader.read(_READ)
                conn.receive_data(data)
                if not data and conn.their_state in (h11.IDLE, h11.DONE):
                    return
                continue
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                if event is h11.PAUSED and conn.our_state is h11.DONE:
                    conn.start_next_cycle()
                    continue
                return
            if isinstance(event, h11.Request):
                head = event
                body = bytearray()
                while True:
                    part = conn.next_event()
                    if part is h11.NEED_DATA:
                        data = await self.reader.read(_READ)
                        if not data:
                            return
                        conn.receive_data(data)
                    elif isinstance(part, h11.Data):
                        body += part.data
                    elif isinstance(part, h11.EndOfMessage):
                        break
                    else:
                        return
                self.requests += 1
                server.counters["requests_http1"] += 1
                if self.should_reset():
                    self.abort()
                    return
                request = FakeRequest(
                    head.method.decode(),
                    head.target.decode(),
                    {k.decode().lower(): v.decode("latin-1") for k, v in head.headers},
                    bytes(body),
                    "1.1",
                )
                response = server._respond_now(request) or await server._respond(request)
                server.counters[f"status_{response.status}"] += 1
                headers = [(k, v) for k, v in response.headers]
                headers.append(("content-length", str(len(response.body))))
                out = conn.send(h11.Response(status_code=response.status, headers=headers))
                out += conn.send(h11.Data(data=response.body)) or b""
                out += conn.send(h11.EndOfMessage()) or b""
                self.writer.write(out or b"")
                if conn.our_state is h11.MUST_CLOSE:
                    # A large body can still be in the transport's buffer: close() flushes it,
                    # and wait_closed() returns once it has (drain() alone waits only down to
                    # the buffer's high-water mark, 64 KiB, and the abort in _accept's finally
                    # then dropped the rest: a client read an incomplete body).
                    self.writer.close()
                    await self.writer.wait_closed()
                    return
                conn.start_next_cycle()
            else:
                return


class _H2Stream:
    __slots__ = ("body", "headers")

    def __init__(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.headers = headers
        self.body = bytearray()


class _H2Connection(_ServerConnection):
    def __init__(
        self, server: FakeServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        super().__init__(server, reader, writer)
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding=None,
            validate_inbound_headers=False,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
        )
        self.streams: dict[int, _H2Stream] = {}
        self.answering = 0  # streams handed to the application, not yet answered
        self.h2 = H2Connection(config, lambda: len(self.streams) + self.answering)
        self.goaway_sent = False
        self.last_processed = 0
        self.flush_scheduled = False
        self.pending: dict[int, bytes] = {}  # response bodies waiting for window
        self.tasks: set[asyncio.Task[None]] = set()

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        data = self.h2.data_to_send()
        if data and not self.aborted:
            self.writer.write(data)

    async def run(self, first: bytes) -> None:
        h2c = self.h2
        h2c.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: (
                    self.server.max_concurrent_streams
                ),
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24,
            },
        )
        h2c.initiate_connection()
        h2c.increment_flow_control_window((1 << 30) - 65535)
        self.flush()
        data = first
        try:
            while True:
                if data:
                    try:
                        events = h2c.receive_data(data)
                    except h2.exceptions.ProtocolError:
                        self.flush()
                        return
                    self.handle(events)
                    if self.aborted:
                        return
                    self.flush()
                data = await self.reader.read(_READ)
                if not data:
                    return
        finally:
            for task in self.tasks:
                task.cancel()

    def handle(self, events: list[h2.events.Event]) -> None:
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.streams[event.stream_id] = _H2Stream(list(event.headers or ()))
            elif isinstance(event, h2.events.DataReceived):
                stream = self.streams.get(event.stream_id or 0)
                if stream is not None and event.data:
                    stream.body += event.data
                self.h2.acknowledge_received_data(
                    event.flow_controlled_length or 0, event.stream_id or 0
                )
            elif isinstance(event, h2.events.StreamEnded):
                stream = self.streams.pop(event.stream_id or 0, None)
                if stream is not None:
                    self.arrived(event.stream_id or 0, stream)
                    if self.aborted:
                        return
            elif isinstance(event, h2.events.StreamReset):
                self.streams.pop(event.stream_id or 0, None)
                self.pending.pop(event.stream_id or 0, None)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in list(self.pending):
                    self.send_body(stream_id, self.pending.pop(stream_id))
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway_sent = True

    def arrived(self, stream_id: int, stream: _H2Stream) -> None:
        server = self.server
        faults = server.faults
        if self.goaway_sent:
            self.refuse(stream_id)
            return
        self.requests += 1
        if self.should_reset():
            self.flush()
            self.abort()
            return
        if faults.goaway_after is not None and self.requests > faults.goaway_after:
            faults.goaway_times -= 1
            if faults.goaway_times <= 0:
                faults.goaway_after = None
            self.goaway_sent = True
            server.counters["goaways"] += 1
            self.h2.send_goaway(self.last_processed, faults.goaway_error)
            self.refuse(stream_id)
            if faults.goaway_error:
                self.flush()
                self.abort()
            elif not self.answering:
                self.close_soon()
            return
        self.last_processed = stream_id
        server.counters["requests_http2"] += 1
        headers: dict[str, str] = {}
        method = path = ""
        for name, value in stream.headers:
            if name == b":method":
                method = value.decode()
            elif name == b":path":
                path = value.decode()
            elif name[:1] != b":":
                headers[name.decode().lower()] = value.decode("latin-1")
        request = FakeRequest(method, path, headers, bytes(stream.body), "2")
        now = server._respond_now(request)
        if now is not None:
            self.reply(stream_id, now)
            return
        self.answering += 1
        task = asyncio.get_running_loop().create_task(self.answer(stream_id, request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def refuse(self, stream_id: int) -> None:
        self.server.counters["streams_refused"] += 1
        with contextlib.suppress(h2.exceptions.ProtocolError):
            self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)

    async def answer(self, stream_id: int, request: FakeRequest) -> None:
        response = await self.server._respond(request)
        self.answering -= 1
        if self.aborted:
            return
        self.reply(stream_id, response)
        if self.goaway_sent and not self.answering:
            self.close_soon()

    def reply(self, stream_id: int, response: FakeResponse) -> None:
        self.server.counters[f"status_{response.status}"] += 1
        headers = [(b":status", str(response.status).encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in response.headers]
        headers.append((b"content-length", str(len(response.body)).encode()))
        try:
            self.h2.send_headers(stream_id, headers, end_stream=not response.body)
            if response.body:
                self.send_body(stream_id, response.body)
        except h2.exceptions.ProtocolError:  # the client reset the stream meanwhile
            pass
        self.schedule_flush()

    def send_body(self, stream_id: int, body: bytes) -> None:
        h2c = self.h2
        try:
            while body:
                room = min(h2c.local_flow_control_window(stream_id), h2c.max_outbound_frame_size)
                if room <= 0:
                    self.pending[stream_id] = body
                    return
                chunk, body = body[:room], body[room:]
                h2c.send_data(stream_id, chunk, end_stream=not body)
        except h2.exceptions.ProtocolError:
            pass

    def close_soon(self) -> None:
        """Close after the pending frames are written (a graceful GOAWAY's end)."""
        loop = asyncio.get_running_loop()

        def close() -> None:
            self.flush()
            with contextlib.suppress(Exception):
                self.writer.close()

        loop.call_soon(close)


async def serve_until_signalled(
    server: FakeServer,
    info: Mapping[str, Any] | None = None,
    on_stop: Callable[[], None] | None = None,
) -> None:
    """Run a started ``server`` as a process's main task: print one JSON line (``url``,
    ``port``, ``ca_file``, ``pid`` and ``info``) on stdout once it listens, serve until
    SIGTERM or SIGINT, then stop it and call ``on_stop`` (a fake's summary, say)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    line = {"url": server.url, "port": server.port, "ca_file": server.ca_file, "pid": os.getpid()}
    print(json.dumps({**line, **(info or {})}), flush=True)
    await stop.wait()
    await server.stop()
    if on_stop is not None:
        on_stop()


class _ServerThread:
    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.run, name="fake-server", daemon=True)

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self.server.start())
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.stop())
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    def begin(self) -> None:
        self.thread.start()
        self.ready.wait(30)
        if self.error is not None:
            raise self.error

    def end(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)


__all__ = [
    "App",
    "Certificate",
    "FakeRequest",
    "FakeResponse",
    "FakeServer",
    "Faults",
    "make_certificate",
    "serve_until_signalled",
]
