"""A deterministic TCP fault proxy for PostgreSQL's v3 wire protocol (tests only, pure Python).

It sits between a client and the server, forwards every byte, and on command loses the reply
to one request *after the server has fully processed it*: the client sees a dead connection
(``psycopg.OperationalError``) although the server committed. That is the one failure a
retry loop cannot tell from "nothing happened", and the one this proxy exists to produce::

    proxy = FaultProxy(db_url).start()
    with psycopg.connect(proxy.url) as conn:
        proxy.drop_next_commit_reply()
        conn.execute("INSERT ...")
        conn.commit()                 # raises OperationalError: yet the row is committed
    proxy.close()

**How the reply is lost, deterministically.** Every client ``Query`` ('Q'), ``Sync`` ('S') and
``FunctionCall`` ('F') gets exactly one ``ReadyForQuery`` ('Z') from the server, in order:
these are the protocol's *sync points*. When an armed fault matches a request (a simple query,
or a ``Parse``/``Bind`` of the extended protocol, prepared statements resolved by name), the
proxy notes the sync point that will close it (the ``Query`` itself, or the next ``Sync``).
Server messages up to the previous sync point are forwarded; from there on nothing reaches the
client, and when the target ``ReadyForQuery`` arrives (the server has committed: PostgreSQL
answers a commit, explicit or the implicit one of an autocommit statement, only once it is
done) the proxy cuts both connections. No timing is involved: the proxy waits for the
server's own message, so a test needs no sleep.

``mode="before"`` is the other half: the matching request is never forwarded and the
connection is cut at once (the server rolls back), so a test can show both outcomes.

The proxy answers ``SSLRequest`` and ``GSSENCRequest`` with 'N' (plain text; point the client
at it without ``sslmode=require``), forwards ``CancelRequest`` connections untouched, and
connects upstream over TCP or a Unix socket (``host=/path/to/dir``, as the embedded server's
URL has). Faults apply to whichever proxied connection matches first; ``application_name``
restricts one to the connections that sent that startup parameter.

Threads, not asyncio, so a synchronous test drives it: one acceptor thread, two pump threads
per connection. :meth:`FaultProxy.close` closes every socket and joins every thread.
"""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from psycopg.conninfo import conninfo_to_dict, make_conninfo

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

_COMMIT = re.compile(r"\s*(COMMIT|END)(\s+(WORK|TRANSACTION))?(\s+AND\s+NO\s+CHAIN)?\s*;?\s*", re.I)

Match = Callable[[str], bool]
"""A predicate on a request's SQL text (the text the server parses, ``$n`` placeholders)."""

Mode = Literal["after", "before"]


def is_commit(sql: str) -> bool:
    """The statement commits an explicit transaction (``COMMIT``, ``END``)."""
    return _COMMIT.fullmatch(sql) is not None


def sql_contains(fragment: str) -> Match:
    """A predicate: the request's SQL text contains ``fragment`` (comments included)."""
    return lambda sql: fragment in sql


@dataclass
class Fault:
    """One armed fault: lose the reply to (or the request of) the next ``times`` matches."""

    match: Match
    mode: Mode
    times: int
    application_name: str | None
    fired: int = 0


@dataclass
class Counts:
    """What went through the proxy (read under no lock: a test reads it after the fact)."""

    connections: int = 0
    requests: int = 0  # statements executed (simple Query or Bind)
    commits: int = 0  # explicit COMMITs seen
    faults: int = 0  # faults fired (replies lost or requests dropped)
    matched: list[str] = field(default_factory=list)  # SQL text of each fired fault


class _Conn:
    """One proxied client connection and its upstream twin."""

    def __init__(self, proxy: FaultProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server: socket.socket | None = None
        self.params: dict[str, str] = {}
        self.statements: dict[str, str] = {}  # prepared statement name -> SQL text
        self.pending_sql: str | None = None  # extended-protocol text awaiting its Sync
        self.sent_syncs = 0  # sync points sent to the server
        self.seen_ready = 0  # ReadyForQuery received from the server (after start-up)
        self.target: int | None = None  # sync point whose reply is being lost
        self.target_sql = ""
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.threads: list[threading.Thread] = []

    # -- plumbing -------------------------------------------------------------------------------

    def cut(self) -> None:
        """Close both sides (idempotent); the pumps end on their next read."""
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.server):
            if sock is None:
                continue
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def run(self) -> None:
        try:
            if self._start_up():
                pump = threading.Thread(target=self._server_pump, daemon=True)
                self.threads.append(pump)
                pump.start()
                self._client_pump()
        except OSError:
            pass
        finally:
            self.cut()

    def _start_up(self) -> bool:
        """Read the untyped start-up packets; answer SSL/GSS requests with 'N'."""
        while True:
            head = _recv_exact(self.client, 8)
            if head is None:
                return False
            length, code = struct.unpack("!ii", head)
            body = _recv_exact(self.client, length - 8)
            if body is None:
                return False
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                self.client.sendall(b"N")
                continue
            self.server = self.proxy.connect_upstream()
            if code == CANCEL_REQUEST:
                self.server.sendall(head + body)
                return False
            parts = body.split(b"\x00")
            self.params = {
                k.decode(): v.decode() for k, v in zip(parts[::2], parts[1::2], strict=False) if k
            }
            self.server.sendall(head + body)
            return True

    # -- client -> server ---------------------------------------------------------------------

    def _client_pump(self) -> None:
        while not self.closed.is_set():
            msg = _recv_message(self.client)
            if msg is None:
                return
            kind, payload = msg
            forward = self._on_client(kind, payload)
            if forward is None:
                self.cut()
                return
            kind = forward
            assert self.server is not None
            self.server.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)

    def _on_client(self, kind: bytes, payload: bytes) -> bytes | None:
        """Account for one client message; returns the type to forward it as, None to drop it
        and cut the connection.

        A request is matched when it executes: a simple ``Query``, or a ``Bind`` (its statement
        resolved by name, the unnamed one included: psycopg re-runs prepared statements with a
        ``Bind`` alone). A ``Flush`` after a matched request is forwarded as a ``Sync``: the
        client (psycopg's pipeline) waits for results before it syncs, and the lost reply must
        end at a sync point the server answers (where an autocommit statement commits).
        """
        sql: str | None = None
        if kind == b"Q":
            sql = _cstring(payload, 0)[0]
        elif kind == b"P":
            name, at = _cstring(payload, 0)
            self.statements[name] = _cstring(payload, at)[0]
        elif kind == b"B":
            _portal, at = _cstring(payload, 0)
            sql = self.statements.get(_cstring(payload, at)[0], "")
        elif kind == b"C" and payload[:1] == b"S":
            self.statements.pop(_cstring(payload, 1)[0], None)
        if sql is not None and self.proxy.on_request is not None:
            self.proxy.on_request(sql)
        with self.lock:
            if sql is not None:
                self.proxy.counts.requests += 1
                if is_commit(sql):
                    self.proxy.counts.commits += 1
                if self.target is None:
                    fault = self.proxy.take_fault(self, sql)
                    if fault is not None:
                        if fault.mode == "before":
                            self.proxy.fired(sql)
                            return None
                        self.target_sql = sql
                        # The reply to lose ends at the sync point that closes this request.
                        self.target = self.sent_syncs + 1
            if kind == b"H" and self.target == self.sent_syncs + 1:
                kind = b"S"
            if kind in (b"Q", b"F", b"S"):
                self.sent_syncs += 1
        return kind

    # -- server -> client ---------------------------------------------------------------------

    def _server_pump(self) -> None:
        try:
            self._server_messages()
        except OSError:
            pass  # either side closed: the connection is over
        finally:
            self.cut()

    def _server_messages(self) -> None:
        assert self.server is not None
        started = False
        while not self.closed.is_set():
            msg = _recv_message(self.server)
            if msg is None:
                return
            kind, payload = msg
            forward = True
            if kind == b"Z":
                if not started:
                    started = True  # the ReadyForQuery that ends the start-up
                else:
                    with self.lock:
                        self.seen_ready += 1
                        if self.target is not None and self.seen_ready >= self.target:
                            # The server has answered the request in full (committed): the
                            # client never hears of it.
                            self.proxy.fired(self.target_sql)
                            self.cut()
                            return
            with self.lock:
                if self.target is not None and self.seen_ready >= self.target - 1:
                    forward = False  # part of the reply being lost
            if forward:
                self.client.sendall(kind + struct.pack("!i", len(payload) + 4) + payload)


class FaultProxy:
    """The proxy: :meth:`start`, :attr:`url`, arm faults, read :attr:`counts`, :meth:`close`.

    ``upstream`` is the real server's conninfo (URL or key=value); :attr:`url` is the same
    conninfo pointed at the proxy.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        params = conninfo_to_dict(upstream)
        host = str(params.get("host") or "localhost")
        port = int(params.get("port") or 5432)
        self._upstream_unix = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None
        self._upstream_tcp = (host, port)
        self._params = params
        self.counts = Counts()
        self.on_request: Callable[[str], None] | None = None
        """Called (on a proxy thread) with the SQL text of each statement as it executes, before
        it is forwarded: a test signal, e.g. set an event when a heartbeat is sent."""
        self._faults: list[Fault] = []
        self._cond = threading.Condition()
        self._conns: list[_Conn] = []
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._closing = threading.Event()
        self.url = ""

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen on an ephemeral port of 127.0.0.1; returns self."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        port = listener.getsockname()[1]
        params = {k: v for k, v in self._params.items() if k not in ("host", "hostaddr", "port")}
        params.setdefault("sslmode", "disable")
        self.url = make_conninfo("", **params, host="127.0.0.1", port=str(port))
        self._acceptor = threading.Thread(target=self._accept, name="faultproxy", daemon=True)
        self._acceptor.start()
        return self

    def close(self) -> None:
        """Stop accepting, cut every connection, join every thread."""
        self._closing.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        if self._acceptor is not None:
            self._acceptor.join(5)
        with self._cond:
            conns = list(self._conns)
        for c in conns:
            c.cut()
        for c in conns:
            for t in c.threads:
                t.join(5)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect_upstream(self) -> socket.socket:
        if self._upstream_unix is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._upstream_unix)
            return sock
        return socket.create_connection(self._upstream_tcp)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # the client is already gone
                client.close()
                continue
            conn = _Conn(self, client)
            thread = threading.Thread(target=conn.run, name="faultproxy-conn", daemon=True)
            conn.threads.append(thread)
            with self._cond:
                if self._closing.is_set():
                    client.close()
                    return
                self._conns = [c for c in self._conns if not c.closed.is_set()]
                self._conns.append(conn)
                self.counts.connections += 1
            thread.start()

    # -- faults ---------------------------------------------------------------------------------

    def drop_next_commit_reply(
        self, *, times: int = 1, application_name: str | None = None
    ) -> None:
        """Lose the reply to the next ``times`` explicit COMMITs (the server commits)."""
        self.drop_reply(is_commit, times=times, application_name=application_name)

    def drop_reply(
        self,
        match: Match,
        *,
        times: int = 1,
        mode: Mode = "after",
        application_name: str | None = None,
    ) -> None:
        """Arm a fault for the next ``times`` requests whose SQL text ``match`` accepts.

        ``mode="after"``: the server processes the request (and whatever else its sync point
        closes: an autocommit statement commits) and the reply is lost. ``mode="before"``: the
        request never reaches the server. Either way the connection is cut.
        """
        if times < 1:
            raise ValueError(f"times must be >= 1, not {times}")
        with self._cond:
            self._faults.append(Fault(match, mode, times, application_name))

    def disarm(self) -> None:
        """Forget the faults that have not fired."""
        with self._cond:
            self._faults.clear()

    @property
    def armed(self) -> int:
        """Faults (times) still waiting for a match."""
        with self._cond:
            return sum(f.times - f.fired for f in self._faults)

    def take_fault(self, conn: _Conn, sql: str) -> Fault | None:
        """The first armed fault that matches ``sql`` on ``conn``, reserved (it fires once)."""
        with self._cond:
            for fault in self._faults:
                name = fault.application_name
                if name is not None and conn.params.get("application_name") != name:
                    continue
                if fault.match(sql):
                    fault.fired += 1
                    if fault.fired >= fault.times:
                        self._faults.remove(fault)
                    return fault
        return None

    def fired(self, sql: str) -> None:
        with self._cond:
            self.counts.faults += 1
            self.counts.matched.append(sql)
            self._cond.notify_all()

    def wait_faults(self, n: int, timeout: float) -> bool:
        """Wait until ``n`` faults in all have fired (a condition variable, no polling)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.counts.faults >= n, timeout)

    def cut_all(self) -> int:
        """Cut every live connection now (a server restart, as the client sees it)."""
        with self._cond:
            conns = [c for c in self._conns if not c.closed.is_set()]
        for c in conns:
            c.cut()
        return len(conns)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n > 0:
        try:
            chunk = sock.recv(min(n, 1 << 16))
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv_message(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """One typed message: (type byte, payload without the length)."""
    head = _recv_exact(sock, 5)
    if head is None:
        return None
    (length,) = struct.unpack("!i", head[1:])
    payload = _recv_exact(sock, length - 4) if length > 4 else b""
    if payload is None:
        return None
    return head[:1], payload


def _cstring(data: bytes, at: int) -> tuple[str, int]:
    end = data.index(b"\x00", at)
    return data[at:end].decode("utf-8", "replace"), end + 1
