"""The HTTP/2 client's lean request writer (``H2Connection.send_request``): byte for byte the
frames h2's own ``send_headers`` + ``send_data`` write, and the same state afterwards (stream
states, flow control windows, what h2 accepts next), for bodies that fit and bodies that do not.
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import hyperframe.frame
import pytest

from scheduler.push.http2 import H2Connection


def client(*, preamble_sent: bool = True) -> H2Connection:
    config = h2.config.H2Configuration(
        client_side=True,
        header_encoding=None,
        validate_inbound_headers=False,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
    )
    conn = H2Connection(config, lambda: 0)
    conn.initiate_connection()
    if preamble_sent:
        conn.data_to_send()
    return conn


def server() -> h2.connection.H2Connection:
    config = h2.config.H2Configuration(client_side=False, header_encoding=None)
    conn = h2.connection.H2Connection(config=config)
    conn.initiate_connection()
    return conn


def headers(n: int) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"fcm.example:8080"),
        (b":path", f"/v1/projects/p/messages:send?n={n % 3}".encode()),
        (b"authorization", b"Bearer ya29.token"),
        (b"content-type", b"application/json; charset=UTF-8"),
    ]


def send_rest(conn: h2.connection.H2Connection, stream_id: int, rest: bytes) -> bytes:
    """Send what the windows and the frame size allow of ``rest``, as the client's
    send_pending does; what is left."""
    while rest:
        room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size)
        if room <= 0:
            break
        chunk, rest = rest[:room], rest[room:]
        conn.send_data(stream_id, chunk, end_stream=not rest)
    return rest


def state(conn: h2.connection.H2Connection) -> Any:
    return (
        conn.state_machine.state,
        conn.outbound_flow_control_window,
        conn.highest_outbound_stream_id,
        {
            i: (s.state_machine.state, s.outbound_flow_control_window, s.request_method)
            for i, s in conn.streams.items()
        },
    )


@pytest.mark.parametrize("size", [0, 1, 300, 16384, 16385, 70_000])
def test_send_request_writes_what_h2_writes(size: int) -> None:
    """Three requests on each of two connections: one through h2's calls (the body cut to the
    windows and the frame size as the client's send_pending does), one through send_request."""
    ours, theirs = client(), client()
    for n in range(3):
        stream_id = 1 + 2 * n
        body = bytes([65 + n]) * size
        theirs.send_headers(stream_id, headers(n), end_stream=not body)
        rest = send_rest(theirs, stream_id, body)
        left = send_rest(ours, stream_id, ours.send_request(stream_id, headers(n), body))
        assert ours.data_to_send() == theirs.data_to_send(), (size, n)
        assert left == rest
        assert state(ours) == state(theirs)


def test_a_server_reads_the_requests_and_answers_them() -> None:
    """h2 as the server decodes what send_request wrote, and the client's h2 accepts the
    answers on those streams (its state machines took the transitions of a sent request)."""
    ours, peer = client(preamble_sent=False), server()
    peer.receive_data(ours.data_to_send())
    ours.receive_data(peer.data_to_send())
    bodies = {1: b'{"message": 1}', 3: b"", 5: b"x" * 20_000}
    for stream_id, body in bodies.items():
        assert not send_rest(
            ours, stream_id, ours.send_request(stream_id, headers(stream_id), body)
        )
    got: dict[int, bytes] = {}
    ended: set[int] = set()
    for event in peer.receive_data(ours.data_to_send()):
        if isinstance(event, h2.events.RequestReceived):
            assert event.headers == headers(event.stream_id)
            got[event.stream_id] = b""
        elif isinstance(event, h2.events.DataReceived):
            got[event.stream_id] += event.data
        elif isinstance(event, h2.events.StreamEnded):
            ended.add(event.stream_id)
    assert got == bodies and ended == set(bodies)
    for stream_id in bodies:
        peer.send_headers(stream_id, [(b":status", b"200")])
        peer.send_data(stream_id, b"ok", end_stream=True)
    events = ours.receive_data(peer.data_to_send())
    assert {e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)} == set(bodies)


def test_a_header_block_larger_than_a_frame_goes_through_h2() -> None:
    ours = client()
    big = [*headers(0), (b"x-big", b"v" * 20_000)]
    assert ours.send_request(1, big, b"{}") == b"{}"  # the body is left to send_data
    ours.send_data(1, b"{}", end_stream=True)
    data = ours.data_to_send()
    kinds = [type(f) for f in _frames(data)]
    assert kinds == [
        hyperframe.frame.HeadersFrame,
        hyperframe.frame.ContinuationFrame,
        hyperframe.frame.DataFrame,
    ]


def _frames(data: bytes) -> list[hyperframe.frame.Frame]:
    frames = []
    while data:
        frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
        frame.parse_body(memoryview(data[9 : 9 + length]))
        frames.append(frame)
        data = data[9 + length :]
    return frames


def test_the_settings_the_server_sends_bound_the_frame() -> None:
    """A server's smaller window leaves the body to send_data (flow control)."""
    ours, peer = client(preamble_sent=False), server()
    peer.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 10})
    peer.receive_data(ours.data_to_send())
    ours.receive_data(peer.data_to_send())
    assert ours.send_request(1, headers(0), b"y" * 11) == b"y" * 11
    assert ours.local_flow_control_window(1) == 10
