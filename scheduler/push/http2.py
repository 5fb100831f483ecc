"""A small HTTP/2 client for push providers: many streams over a few connections.

Push providers (FCM HTTP v1, APNs) take one request per message over HTTP/2; a herd of reminders
is thousands of small requests at once. :class:`Http2Client` keeps up to ``connections``
connections to one origin (opened lazily), puts each request on a stream of a connection with
room (the server's ``SETTINGS_MAX_CONCURRENT_STREAMS``, capped by ``max_streams``), and makes a
request wait, within its timeout, when every connection is full. It is built on ``h2`` (the
protocol state machine) with our own socket loop: one reader task per connection, and writes
coalesced (the frames of every request started in one turn of the event loop leave in one
``write``), which keeps the Python work per request small.

What can go wrong is classified by what the server may have done, because that decides whether
a request may be sent again:

======================  ====================================================  ==============
error                   when                                                  processed?
======================  ====================================================  ==============
:class:`ConnectFailed`  DNS, TCP, TLS, ALPN (no ``h2``) or no server SETTINGS  no: nothing sent
:class:`StreamRefused`  ``RST_STREAM(REFUSED_STREAM)``, or the stream is       no: safe to resend
                        above a GOAWAY's ``last_stream_id``
:class:`ConnectionLost` the connection closed, reset or went away with an      maybe
                        error while the stream was open
:class:`RequestTimeout` the request's whole ``request_timeout`` elapsed        maybe
======================  ====================================================  ==============

After a GOAWAY a connection takes no new stream (its streams at or below ``last_stream_id``
finish) and new requests go to a new connection; a connection that dies fails its open
streams with :class:`ConnectionLost` and is replaced on the next request. No header value is
ever logged or put in an error message (they carry bearer tokens and device tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import hpack
import hpack.hpack
import hpack.table
import hyperframe.frame

from scheduler.errors import SchedulerError

log = logging.getLogger(__name__)


class _NoHeaderValues(logging.Filter):
    """hpack logs every header it encodes or decodes at DEBUG, bearer tokens included: drop
    those records (a filter on hpack's loggers, so an application's DEBUG logging cannot
    bring them back)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


class _Silent:
    """hpack's module logger replaced: its ``debug`` calls (several per header, on the hot
    path of every request) cost a tenth of a request's CPU and log header values."""

    @staticmethod
    def debug(*args: object, **kwargs: object) -> None:
        return None


for _name in ("hpack", "hpack.hpack", "hpack.table"):
    logging.getLogger(_name).addFilter(_NoHeaderValues())
for _module in (hpack.hpack, hpack.table):
    if isinstance(getattr(_module, "log", None), logging.Logger):
        _module.log = _Silent()  # type: ignore[attr-defined]

_WINDOW = 1 << 24  # our receive window per stream: responses never wait for a WINDOW_UPDATE
_CONN_WINDOW = (1 << 30) - 65535  # added to the connection's default window
_READ = 1 << 18
_LAST_STREAM_ID = (1 << 31) - 1 - 2 * 10_000  # retire a connection before its ids run out
# A frame's 9-byte header (RFC 9113 4.1): length (24 bits), type, flags, stream id.
_FRAME_HEADER = struct.Struct(">BHBBL")
_END_STREAM = 0x1
_END_HEADERS = 0x4
_PADDED = 0x8
_PRIORITY = 0x20
_DATA = 0x0
_HEADERS = 0x1
# the stream states in which h2 takes a response's HEADERS and DATA without a stream error
_RECEIVING = frozenset({h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_LOCAL})
_RECV_DATA = h2.connection.ConnectionInputs.RECV_DATA
_RECV_HEADERS = h2.connection.ConnectionInputs.RECV_HEADERS


class _CachingEncoder(hpack.Encoder):
    """An HPACK encoder that reuses the last header block when it would come out the same.

    A push client sends the same headers on every request (method, path, bearer, content
    type): once they are in the dynamic table each encodes to the same indexes, and the table
    does not change. The block is reused only when the headers are equal to the last ones and
    that last encoding inserted nothing in the table (its newest entry and its size are
    unchanged) and no table size update is pending: then the output is identical.
    """

    def __init__(self) -> None:
        super().__init__()
        self._last: list[Any] | None = None
        self._block = b""

    def encode(self, headers: Any, huffman: bool = True) -> bytes:
        headers = list(headers)
        if headers == self._last and not self.table_size_changes:
            return self._block
        table = self.header_table.dynamic_entries
        size, first = len(table), (table[0] if table else None)
        block = super().encode(headers, huffman)
        unchanged = len(table) == size and (table[0] if table else None) is first
        self._last = headers if unchanged else None
        self._block = block
        return block


class _CachingDecoder(hpack.Decoder):
    """An HPACK decoder that reuses the last decoded header list when the same block comes
    again on the same table.

    A push provider answers every request with the same response headers (``:status 200``, a
    content type): once they are in the dynamic table each response is the same block of
    indexes, and decoding it changes nothing. Decoding is a function of the block and the
    table (and the two limits a decode checks), so the last result is reused when the block is
    equal, the table is the one that decode left (its newest entry the same object, the same
    length and size limit) and that decode changed nothing in it.
    """

    def __init__(self) -> None:
        super().__init__()
        self._block: bytes | None = None
        self._state: tuple[Any, ...] = ()
        self._headers: list[Any] = []

    def _table_state(self) -> tuple[Any, ...]:
        table = self.header_table
        entries = table.dynamic_entries
        return (
            entries[0] if entries else None,
            len(entries),
            table.maxsize,
            self.max_header_list_size,
            self.max_allowed_table_size,
        )

    def decode(self, data: bytes, raw: bool = False) -> Any:
        before = self._table_state()
        if raw and data == self._block and _same_table(before, self._state):
            return list(self._headers)
        headers = super().decode(data, raw)
        after = self._table_state()
        if raw and _same_table(after, before):
            self._block, self._state, self._headers = bytes(data), after, list(headers)
        else:
            self._block = None
        return headers


def _same_table(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same table: the same newest entry (the object: a new insertion of equal headers
    evicts others), the same length, size and limits."""
    return bool(b) and a[0] is b[0] and a[1:] == b[1:]


class H2Connection(h2.connection.H2Connection):
    """h2's connection with the open-stream count taken from its owner, and a lean path for
    what a client sends and receives most.

    h2 counts open streams by scanning every stream it holds (and culls the closed ones) at
    each new stream: quadratic with thousands of streams in flight (most of a 20,000-request
    run's time). The owner knows how many are open; the scan (which frees closed streams) runs
    once every ``_CULL`` new streams.

    A client's connection also writes its requests lean (:meth:`send_request`) and reads the
    answers lean (:meth:`receive_data`): a response's HEADERS and DATA frames on a stream
    that is open for receiving are cut out of the bytes with ``struct`` and handed to h2's
    connection and stream state machines (the same inputs, window accounting and checks as
    h2's own frame handlers), without the hyperframe objects h2 builds for each frame (and the
    ``repr`` of each it computes for a trace log it does not emit). Every other frame (SETTINGS,
    PING, GOAWAY, WINDOW_UPDATE, RST_STREAM, padded or prioritised frames, CONTINUATION, a
    frame on a closed or unknown stream, an oversized one) goes through h2 unchanged, in order.
    """

    _CULL = 512

    def __init__(self, config: h2.config.H2Configuration, count_open: Callable[[], int]) -> None:
        super().__init__(config=config)
        self.encoder = _CachingEncoder()
        self._count_open = count_open
        self._new_streams = 0
        self._lean = bool(config.client_side)
        self._rest = b""  # received bytes of a frame not yet complete (lean path)
        if self._lean:
            # a client reads the same response headers again and again (a server, the fakes,
            # reads many clients' requests: left as h2 has it)
            decoder = _CachingDecoder()
            decoder.max_header_list_size = self.decoder.max_header_list_size
            decoder.max_allowed_table_size = self.decoder.max_allowed_table_size
            self.decoder = decoder

    def receive_data(self, data: Any) -> list[h2.events.Event]:
        """h2's ``receive_data`` (the events, the state, the errors, in the same order), with
        a response's HEADERS and DATA frames taken on the lean path (class docstring)."""
        if not self._lean or self.incoming_buffer._data:
            return super().receive_data(data)
        buf = self._rest + data if self._rest else bytes(data)
        events: list[h2.events.Event] = []
        size = len(buf)
        pos = 0
        streams = self.streams
        buffered = self.incoming_buffer
        limit = self.max_inbound_frame_size  # changes only through h2's path (SETTINGS ack)
        try:
            while size - pos >= 9:
                high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(buf, pos)
                length = (high << 16) | low
                if length > limit:
                    # h2 buffers it (and everything after it) and fails it when it is whole
                    events += super().receive_data(buf[pos:])
                    pos = size
                    break
                end = pos + 9 + length
                stream = streams.get(stream_id & 0x7FFFFFFF) if kind <= _HEADERS else None
                lean = not (
                    stream is None
                    or buffered._headers_buffer  # h2 waits for CONTINUATION frames
                    or flags & _PADDED
                    or stream.state_machine.state not in _RECEIVING
                    or (kind == _HEADERS and (flags & _PRIORITY or not flags & _END_HEADERS))
                )
                if end > size:
                    if not lean:  # h2 checks a frame's header before its body comes
                        events += super().receive_data(buf[pos:])
                        pos = size
                    break
                if lean:
                    events += self._receive_lean(stream, kind, flags, buf[pos + 9 : end])  # type: ignore[arg-type]
                else:
                    # h2 as it is (it terminates the connection itself on an error)
                    events += super().receive_data(buf[pos:end])
                    limit = self.max_inbound_frame_size
                pos = end
        except BaseException:
            self._rest = b""  # the connection is failed; nothing more is read from it
            raise
        self._rest = buf[pos:]
        return events

    def _receive_lean(
        self, stream: h2.stream.H2Stream, kind: int, flags: int, payload: bytes
    ) -> list[h2.events.Event]:
        """A HEADERS (END_HEADERS, no padding or priority) or a DATA frame (no padding) on a
        stream open for receiving: what h2's ``_receive_headers_frame`` and
        ``_receive_data_frame`` do with it, in the same order."""
        try:
            if kind == _DATA:
                length = len(payload)
                events = self.state_machine.process_input(_RECV_DATA)
                self._inbound_flow_control_window_manager.window_consumed(length)
                return events + stream.receive_data(payload, bool(flags & _END_STREAM), length)[1]
            headers = h2.connection._decode_headers(self.decoder, payload)
            events = self.state_machine.process_input(_RECV_HEADERS)
            end_stream = bool(flags & _END_STREAM)
            encoding = self.config.header_encoding
            return events + stream.receive_headers(headers, end_stream, encoding)[1]
        except h2.exceptions.ProtocolError as exc:
            # what h2's receive_data does with an error of a frame's handler
            self._terminate_connection(exc.error_code)
            raise

    def _counted(self) -> int:
        self._new_streams += 1
        if self._new_streams >= self._CULL:
            self._new_streams = 0
            self._open_streams(0)  # culls closed streams of both parities
        return self._count_open()

    @property
    def open_outbound_streams(self) -> int:
        return self._counted()

    def _receive_goaway_frame(
        self, frame: hyperframe.frame.GoAwayFrame
    ) -> tuple[list[hyperframe.frame.Frame], list[h2.events.Event]]:
        # RFC 9113 6.8: the streams at or below last_stream_id still complete after a GOAWAY.
        # h2 closes its state machine at once (and drops what is queued to send), which would
        # fail them; keep the state open and let the owner take no new stream.
        event = h2.events.ConnectionTerminated()
        event.error_code = h2.errors._error_code_from_int(frame.error_code)
        event.last_stream_id = frame.last_stream_id
        event.additional_data = frame.additional_data or None
        return [], [event]

    def send_goaway(self, last_stream_id: int, error_code: int = 0) -> None:
        """Queue a GOAWAY without closing the state machine (the streams at or below
        ``last_stream_id`` are still answered)."""
        frame = hyperframe.frame.GoAwayFrame(0)
        frame.last_stream_id = last_stream_id
        frame.error_code = error_code
        self._prepare_for_sending([frame])

    @property
    def open_inbound_streams(self) -> int:
        return self._counted()

    def send_request(
        self, stream_id: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> bytes:
        """Open ``stream_id`` with a request: its HEADERS frame and, when it fits the flow
        control windows and the frame size, its whole body in one DATA frame that ends the
        stream; the rest of the body, if any, is returned for :meth:`send_data`.

        The hot path of a push client, written lean: h2's ``send_headers`` and ``send_data``
        build hyperframe objects (a ``Flags`` set, padding and priority fields) and check and
        normalise each header, which cost most of a request's CPU. Here the frames are packed
        with struct, the header block comes from the caching encoder, and h2's state machines
        and windows take the same transitions and amounts as h2's own calls (so what h2
        receives on the stream afterwards is checked as before). A header block larger than a
        frame goes through h2 (CONTINUATION frames).
        """
        block = self.encoder.encode(headers)
        if len(block) > self.max_outbound_frame_size:
            self.send_headers(stream_id, headers, end_stream=not body)
            return body
        self.state_machine.process_input(h2.connection.ConnectionInputs.SEND_HEADERS)
        stream = self._begin_new_stream(stream_id, h2.connection.AllowedStreamIDs.ODD)
        stream.state_machine.process_input(h2.stream.StreamInputs.SEND_HEADERS)
        for name, value in headers:  # what h2's send_headers keeps of the pseudo-headers
            if name == b":method":
                stream.request_method = value
            elif name == b":authority":
                stream._authority = value
            elif not name.startswith(b":"):
                break
        flags = _END_HEADERS
        size = len(body)
        if not body:
            flags |= _END_STREAM
            stream.state_machine.process_input(h2.stream.StreamInputs.SEND_END_STREAM)
        out = self._data_to_send
        out += _FRAME_HEADER.pack(len(block) >> 16, len(block) & 0xFFFF, 0x1, flags, stream_id)
        out += block
        if not body or size > min(
            self.outbound_flow_control_window,
            stream.outbound_flow_control_window,
            self.max_outbound_frame_size,
        ):
            return body
        self.state_machine.process_input(h2.connection.ConnectionInputs.SEND_DATA)
        stream.state_machine.process_input(h2.stream.StreamInputs.SEND_DATA)
        stream.state_machine.process_input(h2.stream.StreamInputs.SEND_END_STREAM)
        stream.outbound_flow_control_window -= size
        self.outbound_flow_control_window -= size
        out += _FRAME_HEADER.pack(size >> 16, size & 0xFFFF, 0x0, _END_STREAM, stream_id)
        out += body
        return b""


class Http2Error(SchedulerError):
    """Base class of the HTTP/2 client's errors (the message never holds a header value)."""


class ConnectFailed(Http2Error):
    """The connection could not be made (DNS, TCP, TLS, ALPN, no SETTINGS): nothing was sent."""


class RequestTimeout(Http2Error):
    """The request's total timeout elapsed: the server may have processed it."""


class StreamRefused(Http2Error):
    """The server refused the stream (REFUSED_STREAM, or above a GOAWAY's last stream id): it
    was not processed and is safe to send again."""


class ConnectionLost(Http2Error):
    """The connection closed, reset or went away with an error while the stream was open: the
    server may have processed the request."""


@dataclass(frozen=True, slots=True)
class Response:
    """A response: status, headers (lower-case names), the body up to ``max_body`` bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool = False  # the body was longer than max_body and was cut


@dataclass(frozen=True, slots=True)
class Http2Stats:
    """The client's counters (tests and benchmarks)."""

    in_flight: int  # streams open now, over every connection
    waiting: int  # requests waiting for room on a connection
    connections: int  # connections open now
    connections_opened: int  # connections ever opened (successfully)
    goaways: int  # GOAWAY frames received
    streams_refused: int  # streams failed with StreamRefused
    connections_lost: int  # connections that died with streams open


class _Stream:
    __slots__ = ("body", "future", "headers", "pending", "status", "truncated")

    def __init__(self, future: asyncio.Future[Response]) -> None:
        self.future = future
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.truncated = False
        self.pending = b""  # request body not yet sent (flow control)


class _Connection:
    """One HTTP/2 connection: its h2 state, its streams, its reader task."""

    def __init__(
        self,
        client: Http2Client,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.client = client
        self.reader = reader
        self.writer = writer
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_inbound_headers=False,
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            # h2 would join split ``cookie`` fields, which a client does not receive: the
            # generators it runs over every response's headers for that are skipped
            normalize_inbound_headers=False,
        )
        self.streams: dict[int, _Stream] = {}
        self.h2 = H2Connection(config, self.streams.__len__)
        self.capacity = 0  # streams allowed at once (server's max, our cap); 0 before SETTINGS
        self.draining = False  # GOAWAY received or ids nearly exhausted: no new streams
        self.closed = False
        self.settings_seen = asyncio.Event()
        self.flush_scheduled = False
        self.blocked: set[int] = set()  # streams with request body waiting for window
        self.reader_task: asyncio.Task[None] | None = None
        self.goaway_received = False

    @property
    def free(self) -> int:
        if self.draining or self.closed:
            return 0
        return self.capacity - len(self.streams)

    def start(self) -> None:
        self.h2.initiate_connection()
        self.h2.update_settings(
            {
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            }
        )
        self.h2.increment_flow_control_window(_CONN_WINDOW)
        self.flush()
        self.reader_task = asyncio.get_running_loop().create_task(self.read_loop())

    def schedule_flush(self) -> None:
        if not self.flush_scheduled:
            self.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.flush_scheduled = False
        data = self.h2.data_to_send()
        if data and not self.closed:
            self.writer.write(data)

    def open_stream(
        self, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, asyncio.Future[Response]]:
        h2c = self.h2
        stream_id = h2c.get_next_available_stream_id()
        if stream_id >= _LAST_STREAM_ID:
            self.draining = True
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        stream = _Stream(future)
        rest = h2c.send_request(stream_id, headers, body)
        self.streams[stream_id] = stream
        if rest:
            stream.pending = rest
            self.send_pending(stream_id, stream)
        self.schedule_flush()
        return stream_id, future

    def send_pending(self, stream_id: int, stream: _Stream) -> None:
        h2c = self.h2
        while stream.pending:
            room = min(h2c.local_flow_control_window(stream_id), h2c.max_outbound_frame_size)
            if room <= 0:
                self.blocked.add(stream_id)
                return
            chunk, stream.pending = stream.pending[:room], stream.pending[room:]
            h2c.send_data(stream_id, chunk, end_stream=not stream.pending)
        self.blocked.discard(stream_id)

    def cancel(self, stream_id: int) -> None:
        """Reset a stream the caller gave up on (timeout, cancellation)."""
        if self.streams.pop(stream_id, None) is None:
            return
        self.blocked.discard(stream_id)
        if not self.closed:
            with contextlib.suppress(h2.exceptions.ProtocolError, h2.exceptions.StreamClosedError):
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self.schedule_flush()
        self.client._stream_done()

    async def read_loop(self) -> None:
        reason = "connection closed by the server"
        try:
            while True:
                data = await self.reader.read(_READ)
                if not data:
                    break
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError as exc:
                    reason = f"protocol error: {type(exc).__name__}"
                    break
                self.handle(events)
                if self.closed:
                    return
                self.flush()
        except (OSError, ssl.SSLError) as exc:
            reason = f"connection lost: {type(exc).__name__}"
        except asyncio.CancelledError:
            reason = "connection closed by the client"
        self.lost(reason)

    def handle(self, events: list[h2.events.Event]) -> None:
        streams = self.streams
        ended_bytes = 0  # DATA of streams that ended: acknowledged once for the connection
        ended_on = 0
        for event in events:
            kind = type(event)
            if kind is h2.events.DataReceived:
                stream = streams.get(event.stream_id)  # type: ignore[attr-defined]
                data: bytes = event.data  # type: ignore[attr-defined]
                length: int = event.flow_controlled_length  # type: ignore[attr-defined]
                if event.stream_ended is None:  # type: ignore[attr-defined]
                    # the stream reads on: its window and the connection's are given back
                    self.h2.acknowledge_received_data(length, event.stream_id)  # type: ignore[attr-defined]
                elif length:
                    # a closed stream's window is not given back (h2 skips it): only the
                    # connection's, once for the whole read below
                    ended_bytes += length
                    ended_on = event.stream_id  # type: ignore[attr-defined]
                if stream is not None:
                    room = self.client.max_body - len(stream.body)
                    if len(data) > room:
                        data = data[: max(room, 0)]
                        stream.truncated = True
                    stream.body += data
            elif kind is h2.events.ResponseReceived:
                stream = streams.get(event.stream_id)  # type: ignore[attr-defined]
                if stream is not None:
                    for name, value in event.headers:  # type: ignore[attr-defined]
                        if name == b":status":
                            stream.status = int(value)
                        else:
                            stream.headers[name.decode("latin-1").lower()] = value.decode("latin-1")
            elif kind is h2.events.StreamEnded:
                stream = streams.pop(event.stream_id, None)  # type: ignore[attr-defined]
                if stream is not None:
                    if not stream.future.done():
                        stream.future.set_result(
                            Response(
                                stream.status, stream.headers, bytes(stream.body), stream.truncated
                            )
                        )
                    self.client._stream_done()
                    if self.goaway_received and not streams:
                        self.close()
            elif kind is h2.events.StreamReset:
                stream_id: int = event.stream_id  # type: ignore[attr-defined]
                stream = streams.pop(stream_id, None)
                self.blocked.discard(stream_id)
                if stream is not None:
                    code = event.error_code  # type: ignore[attr-defined]
                    if code == h2.errors.ErrorCodes.REFUSED_STREAM:
                        self.client.streams_refused += 1
                        error: Http2Error = StreamRefused("stream refused by the server")
                    else:
                        error = ConnectionLost(f"stream reset by the server ({_code(code)})")
                    if not stream.future.done():
                        stream.future.set_exception(error)
                    self.client._stream_done()
            elif kind is h2.events.RemoteSettingsChanged:
                self.capacity = min(
                    self.h2.remote_settings.max_concurrent_streams, self.client.max_streams
                )
                self.settings_seen.set()
                self.client._wake()
            elif kind is h2.events.WindowUpdated:
                if self.blocked:
                    for blocked_id in list(self.blocked):
                        blocked = streams.get(blocked_id)
                        if blocked is None:
                            self.blocked.discard(blocked_id)
                        else:
                            self.send_pending(blocked_id, blocked)
            elif kind is h2.events.ConnectionTerminated:
                self.goaway(
                    event.last_stream_id,  # type: ignore[attr-defined]
                    event.error_code,  # type: ignore[attr-defined]
                )
        if ended_bytes:
            self.h2.acknowledge_received_data(ended_bytes, ended_on)

    def goaway(self, last_stream_id: int | None, error_code: int | None) -> None:
        self.client.goaways += 1
        self.draining = True
        self.goaway_received = True
        last = last_stream_id if last_stream_id is not None else 0
        for stream_id in [i for i in self.streams if i > last]:
            stream = self.streams.pop(stream_id)
            self.client.streams_refused += 1
            if not stream.future.done():
                stream.future.set_exception(
                    StreamRefused(f"stream above the GOAWAY's last stream id ({_code(error_code)})")
                )
            self.client._stream_done()
        if error_code:  # a GOAWAY with an error: the connection is going down now
            self.lost(f"GOAWAY with {_code(error_code)}")
        elif not self.streams:
            self.close()
        self.client._wake()

    def lost(self, reason: str) -> None:
        """The connection is gone: its open streams fail with ConnectionLost."""
        if self.streams:
            self.client.connections_lost += 1
            log.debug(
                "http2 %s: %s with %d streams open", self.client.origin, reason, len(self.streams)
            )
        streams = list(self.streams.values())
        self.streams.clear()  # the same dict handle() may still be reading
        for stream in streams:
            if not stream.future.done():
                stream.future.set_exception(ConnectionLost(reason))
        self.close()
        for _ in streams:
            self.client._stream_done()
        self.client._wake()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.draining = True
        self.client._forget(self)
        with contextlib.suppress(Exception):
            self.h2.close_connection()
            self.writer.write(self.h2.data_to_send())
        with contextlib.suppress(Exception):
            self.writer.close()
        task = self.reader_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()


def _code(code: int | None) -> str:
    if code is None:
        return "no error code"
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error {code}"


class Http2Client:
    """Requests to one origin over up to ``connections`` HTTP/2 connections (module docstring).

    ``base_url`` is ``http://host:port`` (h2c, prior knowledge) or ``https://host[:port]``
    (TLS, ALPN ``h2``; ``ssl_context`` trusts a test server's certificate, and gets its ALPN
    protocols set to ``h2``: do not share it with an HTTP/1.1 client). Every request has a
    total timeout (``request_timeout``, including the wait for a free stream and the
    connection); connecting has its own (``connect_timeout``). Bodies are read up to
    ``max_body`` bytes (``Response.truncated`` says one was cut).
    """

    def __init__(
        self,
        base_url: str,
        *,
        connections: int = 2,
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        max_body: int = 65536,
        ssl_context: ssl.SSLContext | None = None,
        max_streams: int | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"base_url must be http://host[:port] or https://host[:port], "
                f"got scheme {parts.scheme!r}"
            )
        if connections < 1:
            raise ValueError(f"connections must be >= 1, got {connections}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = 443 if self.tls else 80
        self.authority = self.host if self.port == default_port else f"{self.host}:{self.port}"
        self.origin = f"{parts.scheme}://{self.authority}"
        self._prefix = [
            (b":method", b""),
            (b":scheme", parts.scheme.encode()),
            (b":authority", self.authority.encode()),
            (b":path", b""),
        ]
        self.max_connections = connections
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_body = max_body
        self.max_streams = max_streams if max_streams is not None else 1 << 31
        if self.tls:
            context = ssl_context or ssl.create_default_context()
            context.set_alpn_protocols(["h2"])
            self._ssl: ssl.SSLContext | None = context
        else:
            self._ssl = None
        self._conns: list[_Connection] = []
        self._connecting = 0
        # the requests waiting for an answer, in deadline order: (deadline, its future, the
        # connection, the stream id); one timer for the first deadline
        self._deadlines: deque[tuple[float, asyncio.Future[Response], _Connection, int]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self._last_key: tuple[Any, ...] | None = None
        self._last_encoded: list[tuple[bytes, bytes]] = []
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._in_flight = 0
        self._closed = False
        self.connections_opened = 0
        self.goaways = 0
        self.streams_refused = 0
        self.connections_lost = 0

    @property
    def stats(self) -> Http2Stats:
        return Http2Stats(
            in_flight=self._in_flight,
            waiting=len(self._waiters),
            connections=len(self._conns),
            connections_opened=self.connections_opened,
            goaways=self.goaways,
            streams_refused=self.streams_refused,
            connections_lost=self.connections_lost,
        )

    async def request(
        self,
        method: str,
        path: str,
        headers: Sequence[tuple[str, str]],
        body: bytes = b"",
    ) -> Response:
        """Send one request and read its response (errors: module docstring).

        The whole request has one deadline, ``request_timeout`` from now. While it waits for
        its answer it is in the client's queue of deadlines, kept in deadline order (one timer
        for the queue, not one per request: with one timeout for every request a new one goes
        at the end, unless it waited for a stream longer than a later one); the wait for a
        connection or a free stream, when there is one, is bounded by the same deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_timeout
        conn = self._pick()
        if conn is None:
            try:
                async with asyncio.timeout_at(deadline):
                    conn = await self._acquire()
            except TimeoutError:
                raise RequestTimeout(self._timed_out()) from None
        encoded = self._encoded(method, path, headers)
        try:
            stream_id, future = conn.open_stream(encoded, body)
        except h2.exceptions.ProtocolError as exc:
            # the connection cannot take this stream (closed under us): nothing sent
            self._in_flight -= 1
            conn.draining = True
            raise StreamRefused(f"connection cannot open a stream ({type(exc).__name__})") from None
        entry = (deadline, future, conn, stream_id)
        deadlines = self._deadlines
        if self._timer_loop is not loop:  # what a former event loop left is dead with it
            deadlines.clear()
            self._timer, self._timer_loop = None, loop
        if not deadlines or deadline >= deadlines[-1][0]:
            deadlines.append(entry)
        else:
            # it waited for a stream while a later request got one: keep the deadline order
            i = len(deadlines) - 1
            while i > 0 and deadlines[i - 1][0] > deadline:
                i -= 1
            deadlines.insert(i, entry)
        timer = self._timer
        if timer is None or (deadlines[0] is entry and timer.when() > deadline):
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(deadline, self._expire)
        try:
            return await future
        except asyncio.CancelledError:
            conn.cancel(stream_id)
            raise
        finally:
            while deadlines and deadlines[0][1].done():
                deadlines.popleft()

    def _timed_out(self) -> str:
        return f"no response within request_timeout={self.request_timeout}s"

    def _expire(self) -> None:
        """The deadline queue's timer: fail the requests whose deadline passed (their streams
        reset), then wait for the next deadline."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines:
            deadline, future, conn, stream_id = deadlines[0]
            if not future.done():
                if deadline > now:
                    self._timer = loop.call_at(deadline, self._expire)
                    return
                conn.cancel(stream_id)
                future.set_exception(RequestTimeout(self._timed_out()))
            deadlines.popleft()

    def _encoded(
        self, method: str, path: str, headers: Sequence[tuple[str, str]]
    ) -> list[tuple[bytes, bytes]]:
        """The request's header list for h2, the last one again when nothing changed (a push
        client sends the same method, path and headers on every request)."""
        key = (method, path, tuple(headers))
        if key == self._last_key:
            return self._last_encoded
        prefix = self._prefix
        encoded = [(b":method", method.encode()), prefix[1], prefix[2], (b":path", path.encode())]
        # no content-length (optional in HTTP/2): the headers stay the same from one request
        # to the next, so HPACK sends them as indexes of its table
        encoded += [(k.lower().encode(), v.encode()) for k, v in headers]
        self._last_key, self._last_encoded = key, encoded
        return encoded

    def _pick(self) -> _Connection | None:
        """A connection to put a stream on now, reserved (counted in ``_in_flight``): the one
        with the most free streams, when more than half of its streams are free or no other
        connection may be opened; None when the caller has to connect or wait."""
        if self._closed:
            raise Http2Error("the HTTP/2 client is closed")
        best: _Connection | None = None
        best_free = 0
        for conn in self._conns:
            free = conn.free
            if free > best_free:
                best, best_free = conn, free
        if best is not None and (
            best_free > best.capacity // 2
            or len(self._conns) + self._connecting >= self.max_connections
        ):
            self._in_flight += 1
            return best
        return None

    async def _acquire(self) -> _Connection:
        """A connection with a free stream, reserving it (counted in ``_in_flight``): one
        picked now, a new one, or the first with room after waiting."""
        while True:
            picked = self._pick()
            if picked is not None:
                return picked
            if len(self._conns) + self._connecting < self.max_connections:
                conn = await self._connect()
                if conn.free > 0:
                    self._in_flight += 1
                    return conn
                continue
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                # woken waiters were popped already; only a cancelled one is still queued
                if waiter.cancelled() or not waiter.done():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                elif self._waiters:
                    self._wake()  # pass the wake-up this waiter no longer uses on
                raise

    async def _connect(self) -> _Connection:
        self._connecting += 1
        try:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    reader, writer = await asyncio.open_connection(
                        self.host,
                        self.port,
                        ssl=self._ssl,
                        server_hostname=self.host if self._ssl else None,
                        limit=_READ,
                    )
            except TimeoutError:
                raise ConnectFailed(
                    f"could not connect to {self.origin} within "
                    f"connect_timeout={self.connect_timeout}s"
                ) from None
            except (OSError, ssl.SSLError) as exc:
                raise ConnectFailed(
                    f"could not connect to {self.origin}: {type(exc).__name__}: {exc}"
                ) from None
            if self._ssl is not None:
                ssl_object = writer.get_extra_info("ssl_object")
                alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
                if alpn != "h2":
                    writer.close()
                    raise ConnectFailed(
                        f"{self.origin} did not select HTTP/2 by ALPN (selected {alpn!r})"
                    )
            conn = _Connection(self, reader, writer)
            conn.start()
            try:
                async with asyncio.timeout(self.connect_timeout):
                    await conn.settings_seen.wait()
            except TimeoutError:
                conn.close()
                raise ConnectFailed(
                    f"{self.origin} sent no HTTP/2 SETTINGS within "
                    f"connect_timeout={self.connect_timeout}s"
                ) from None
            except BaseException:
                conn.close()  # cancelled while waiting: the socket and reader go with it
                raise
            if conn.closed:
                raise ConnectFailed(f"{self.origin} closed the connection before SETTINGS")
            self._conns.append(conn)
            self.connections_opened += 1
            return conn
        finally:
            self._connecting -= 1
            if self._waiters:
                self._wake()

    def _stream_done(self) -> None:
        self._in_flight -= 1
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        # wake as many waiters as there are free streams (each re-checks)
        free = sum(conn.free for conn in self._conns)
        if len(self._conns) + self._connecting < self.max_connections:
            free += 1
        while self._waiters and free > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def _forget(self, conn: _Connection) -> None:
        with contextlib.suppress(ValueError):
            self._conns.remove(conn)
        self._wake()

    async def aclose(self) -> None:
        """Close every connection; requests still open fail with ConnectionLost."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conns = list(self._conns)
        for conn in conns:
            conn.lost("connection closed by the client")
        tasks = [c.reader_task for c in conns if c.reader_task is not None]
        for conn in conns:
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)


__all__ = [
    "ConnectFailed",
    "ConnectionLost",
    "H2Connection",
    "Http2Client",
    "Http2Error",
    "Http2Stats",
    "RequestTimeout",
    "Response",
    "StreamRefused",
]
