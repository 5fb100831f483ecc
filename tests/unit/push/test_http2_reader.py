"""The HTTP/2 client's lean reader (``H2Connection.receive_data`` on a client): for the same
bytes, cut anywhere, the same events as h2's own ``receive_data``, the same errors, the same
state afterwards (stream states, windows, the HPACK table) and the same bytes to send
(WINDOW_UPDATE, PING acks, RST_STREAM, a GOAWAY after an error).

Each case builds two clients (ours and h2's), opens the same requests on both, has an h2
server answer them (or writes frames by hand for what an h2 server refuses to write), and
feeds the answer to both clients in pieces: all at once, a byte at a time, and cut at random.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hyperframe.frame
import pytest

from scheduler.push.http2 import H2Connection, _CachingDecoder

Server = h2.connection.H2Connection


def config() -> h2.config.H2Configuration:
    return h2.config.H2Configuration(
        client_side=True,
        header_encoding=None,
        validate_inbound_headers=False,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
    )


def request(n: int) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"fcm.example"),
        (b":path", b"/v1/projects/p/messages:send"),
        (b"authorization", b"Bearer ya29.token"),
        (b"x-n", str(n % 2).encode()),
    ]


def pair(streams: int) -> tuple[H2Connection, h2.connection.H2Connection, Server]:
    """Our client, h2's client and an h2 server that has read the requests of ``streams``
    streams (1, 3, 5, ...), each with a body and END_STREAM."""
    ours = H2Connection(config(), lambda: 0)
    theirs = h2.connection.H2Connection(config=config())
    server = Server(config=h2.config.H2Configuration(client_side=False, header_encoding=None))
    server.initiate_connection()
    for conn in (ours, theirs):
        conn.initiate_connection()
        for n in range(streams):
            conn.send_headers(1 + 2 * n, request(n))
            conn.send_data(1 + 2 * n, b'{"message": {}}', end_stream=True)
    wire = ours.data_to_send()
    assert wire == theirs.data_to_send()
    server.receive_data(wire)
    hello = server.data_to_send()  # the server's SETTINGS and its ack of ours
    assert described(ours.receive_data(hello)) == described(theirs.receive_data(hello))
    assert ours.data_to_send() == theirs.data_to_send()
    return ours, theirs, server


def described(events: list[Any]) -> list[tuple[str, Any]]:
    return [(repr(e), getattr(e, "data", None)) for e in events]


def state(conn: h2.connection.H2Connection) -> Any:
    table = conn.decoder.header_table
    return (
        conn.state_machine.state,
        conn.inbound_flow_control_window,
        conn._inbound_flow_control_window_manager.current_window_size,
        {
            i: (
                s.state_machine.state,
                s.inbound_flow_control_window,
                s._expected_content_length,
                s._actual_content_length,
            )
            for i, s in conn.streams.items()
        },
        list(table.dynamic_entries),
        table.maxsize,
    )


def pieces(wire: bytes, how: str) -> list[bytes]:
    if how == "whole":
        return [wire]
    if how == "bytes":
        return [wire[i : i + 1] for i in range(len(wire))]
    rng = random.Random(len(wire))
    cuts = sorted(rng.sample(range(1, len(wire)), min(12, len(wire) - 1)))
    return [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]


def fed_alike(
    ours: H2Connection, theirs: h2.connection.H2Connection, wire: bytes, how: str
) -> None:
    """Feed ``wire`` to both clients piece by piece: equal events (or the same error) and
    state after every piece, and the same bytes to send."""
    for piece in pieces(wire, how):
        got: tuple[Any, ...]
        want: tuple[Any, ...]
        try:
            want = ("events", described(theirs.receive_data(piece)))
        except h2.exceptions.ProtocolError as exc:
            want = ("error", type(exc), str(exc))
        try:
            got = ("events", described(ours.receive_data(piece)))
        except h2.exceptions.ProtocolError as exc:
            got = ("error", type(exc), str(exc))
        assert got == want
        assert state(ours) == state(theirs)
        assert ours.data_to_send() == theirs.data_to_send()
        if want[0] == "error":
            return


def answers(server: Server, streams: int) -> None:
    """Plain answers: HEADERS then one DATA with END_STREAM, the same headers each time."""
    for n in range(streams):
        stream_id = 1 + 2 * n
        server.send_headers(
            stream_id, [(b":status", b"200"), (b"content-type", b"application/json")]
        )
        server.send_data(stream_id, b'{"name": "projects/p/messages/%d"}' % n, end_stream=True)


def mixed(server: Server, streams: int) -> None:
    """Every kind of frame a client meets, and the HPACK table changing between answers."""
    server.send_headers(1, [(b":status", b"200")], end_stream=True)  # no body
    server.send_headers(3, [(b":status", b"200"), (b"x-new", b"one")])  # a new table entry
    server.send_data(3, b"first half ", end_stream=False)
    server.ping(b"12345678")
    server.send_data(3, b"second half", end_stream=False)
    server.send_headers(3, [(b"grpc-status", b"0")], end_stream=True)  # trailers
    server.send_headers(5, [(b":status", b"503"), (b"retry-after", b"7")])
    server.send_data(5, b"padded", pad_length=9, end_stream=True)
    server.increment_flow_control_window(1000)
    server.increment_flow_control_window(500, stream_id=7)
    server.send_headers(7, [(b":status", b"200"), (b"x-big", b"v" * 40_000)])  # CONTINUATION
    server.send_data(7, b"after continuation", end_stream=True)
    server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 50})
    server.send_headers(9, [(b":status", b"200"), (b"x-new", b"one")])  # indexed again
    server.send_data(9, b"", end_stream=True)
    server.reset_stream(11, h2.errors.ErrorCodes.REFUSED_STREAM)
    server.send_headers(13, [(b":status", b"100")])  # informational, then the response
    server.send_headers(13, [(b":status", b"200")], end_stream=True)
    server.encoder.header_table_size = 100  # a table size update in the next block
    server.send_headers(15, [(b":status", b"200"), (b"x-new", b"two")], end_stream=True)
    server.send_headers(17, [(b":status", b"200"), (b"x-new", b"two")], end_stream=True)
    # (not a GOAWAY: ours keeps the streams below its last stream id open, on purpose)


HOW = ["whole", "bytes", "random"]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(
    ("streams", "write"), [(40, answers), (9, mixed)], ids=["answers", "mixed"]
)
def test_reads_what_h2_reads(streams: int, write: Callable[[Server, int], None], how: str) -> None:
    ours, theirs, server = pair(streams)
    write(server, streams)
    lean = counted(ours)
    fed_alike(ours, theirs, server.data_to_send(), how)
    # the lean path was taken: for every frame of the plain answers, for some of the others
    assert lean[0] == 2 * streams if write is answers else lean[0] > 0


def counted(conn: H2Connection) -> list[int]:
    """Count the frames ``conn`` takes on its lean path."""
    calls = [0]
    lean = conn._receive_lean

    def counting(*args: Any) -> Any:
        calls[0] += 1
        return lean(*args)

    conn._receive_lean = counting  # type: ignore[method-assign,assignment]
    return calls


def frames(*items: hyperframe.frame.Frame) -> bytes:
    return b"".join(f.serialize() for f in items)


def data(stream_id: int, payload: bytes, *flags: str) -> hyperframe.frame.DataFrame:
    frame = hyperframe.frame.DataFrame(stream_id, data=payload)
    for flag in flags:
        frame.flags.add(flag)
    return frame


def headers_frame(
    server: Server, stream_id: int, *flags: str, length: bytes | None = b"3"
) -> hyperframe.frame.HeadersFrame:
    fields = [(b":status", b"200")] + ([(b"content-length", length)] if length else [])
    frame = hyperframe.frame.HeadersFrame(stream_id, data=server.encoder.encode(fields))
    frame.flags.add("END_HEADERS")
    for flag in flags:
        frame.flags.add(flag)
    return frame


def bad_body_length(server: Server) -> bytes:
    """content-length 3 and a body of 5: a protocol error on the lean path."""
    return frames(headers_frame(server, 1), data(1, b"hello", "END_STREAM"))


def over_window(server: Server) -> bytes:
    """More DATA than the stream's window (65,535): a flow control error."""
    chunk = b"x" * 16_384
    return frames(*[data(1, chunk) for _ in range(5)])


def data_on_reset_stream(server: Server) -> bytes:
    """DATA for a stream the client reset: h2's path (a RST_STREAM back), not the lean one."""
    return frames(data(3, b"late", "END_STREAM"), data(1, b"ok", "END_STREAM"))


def unknown_stream(server: Server) -> bytes:
    return frames(data(41, b"never opened", "END_STREAM"))


def data_on_stream_zero(server: Server) -> bytes:
    raw = bytearray(data(1, b"zero").serialize())
    raw[5:9] = b"\x00\x00\x00\x00"
    return bytes(raw)


def headers_after_end(server: Server) -> bytes:
    """A second response after the stream ended: h2's path, a connection error."""
    return frames(
        headers_frame(server, 1, "END_STREAM", length=None),
        hyperframe.frame.HeadersFrame(1, data=b"\x88", flags=["END_HEADERS"]),
    )


def bad_hpack(server: Server) -> bytes:
    frame = hyperframe.frame.HeadersFrame(1, data=b"\xff\xff\xff\xff\xff", flags=["END_HEADERS"])
    return frames(frame)


def prioritised_headers(server: Server) -> bytes:
    """HEADERS with the PRIORITY flag (an h2 server does not write it): h2's path."""
    frame = headers_frame(server, 1, "PRIORITY", "END_STREAM", length=None)
    frame.depends_on, frame.stream_weight = 0, 16
    return frames(frame, headers_frame(server, 3, "END_STREAM", length=None))


def oversized(server: Server) -> bytes:
    return frames(data(1, b"y" * 20_000))


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize(
    "write",
    [
        bad_body_length,
        over_window,
        data_on_reset_stream,
        unknown_stream,
        data_on_stream_zero,
        headers_after_end,
        bad_hpack,
        oversized,
        prioritised_headers,
    ],
)
def test_fails_as_h2_fails(write: Callable[[Server], bytes], how: str) -> None:
    ours, theirs, server = pair(2)
    for conn in (ours, theirs):
        conn.reset_stream(3, h2.errors.ErrorCodes.CANCEL)
    assert ours.data_to_send() == theirs.data_to_send()
    fed_alike(ours, theirs, write(server), how)


def test_the_decoder_cache_reuses_only_what_decodes_the_same() -> None:
    """The cached list comes back only for the same block on the same table; a block that
    inserts into the table, or a table changed between two equal blocks, is decoded again."""
    encoder, ours, plain = hpack.Encoder(), _CachingDecoder(), hpack.Decoder()
    blocks = [
        encoder.encode([(b":status", b"200"), (b"content-type", b"application/json")]),
        encoder.encode([(b":status", b"200"), (b"content-type", b"application/json")]),
        encoder.encode([(b":status", b"200"), (b"content-type", b"application/json")]),
        encoder.encode([(b":status", b"200"), (b"x-id", b"1")]),  # inserts
        encoder.encode([(b":status", b"200"), (b"content-type", b"application/json")]),
        encoder.encode([(b":status", b"200"), (b"x-id", b"1")]),  # indexed now
    ]
    encoder.header_table_size = 64  # evicts: the same indexes now mean other headers
    blocks += [encoder.encode([(b":status", b"200"), (b"x-id", b"2")]) for _ in range(3)]
    blocks.append(blocks[1])
    for block in blocks:
        try:
            want: Any = plain.decode(block, raw=True)
        except Exception as exc:  # the same failure is what is compared
            want = type(exc)
        try:
            got: Any = ours.decode(block, raw=True)
        except Exception as exc:
            got = type(exc)
        assert got == want
        assert list(ours.header_table.dynamic_entries) == list(plain.header_table.dynamic_entries)
    assert blocks[1] == blocks[2]  # the case the cache is for did occur


def test_a_server_connection_reads_through_h2() -> None:
    """The fakes' server connections keep h2's reader (and its decoder) as they are."""
    server = H2Connection(
        h2.config.H2Configuration(client_side=False, header_encoding=None), lambda: 0
    )
    assert type(server.decoder) is hpack.Decoder
    client = h2.connection.H2Connection(config=config())
    client.initiate_connection()
    client.send_headers(1, request(0), end_stream=True)
    events = server.receive_data(client.data_to_send())
    assert any(isinstance(e, h2.events.RequestReceived) for e in events)
