"""A real Patroni cluster on loopback ports: one etcd and three PostgreSQL 15 nodes (issue 25).

``python -m tests.failover.cluster up [--async] [--dir DIR]`` starts it and prints the
multi-host URL; ``... down --dir DIR`` stops it. :class:`PatroniCluster` is what the failover
suite (tests/failover/test_failover.py, ``make failover``) drives: start, find the leader, kill
it (SIGKILL of its Patroni and of its postmaster: the node dies, its leader key expires, Patroni
promotes a standby), bring it back (it rejoins as a standby, pg_rewind if needed), switch over.

Debian's packages: ``patroni``, ``etcd-server`` and ``postgresql-15`` (``.ci/run`` installs
them; :func:`unavailable` says what is missing, and the suite is skipped with that reason).
The nodes run as the ``postgres`` user when we are root (PostgreSQL refuses root). Every node
trusts loopback connections: a throwaway cluster, no password is configured or printed.

``synchronous_mode: true`` makes Patroni keep one standby synchronous and promote only it, so a
commit acknowledged to a client is on the new primary; the asynchronous variant lets Patroni
promote any standby within ``maximum_lag_on_failover`` (set high, so that it does fail over
with lag, as a deployment that prefers availability would).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.failover.servers import DEBIAN_PG, own, scratch_dir, server_user

# Below the ephemeral range (32768-60999 on Linux), where a client socket may hold a port.
BASE_PORT = int(os.environ.get("TOCKWORK_FAILOVER_BASE_PORT", "25400"))
NODES = 3
# How long a dead leader's key lives (Patroni's minimum) and how often Patroni loops.
TTL = 20
LOOP_WAIT = 1
RETRY_TIMEOUT = 5


def unavailable() -> str | None:
    """Why no cluster can start here (a missing package), or None."""
    missing = [
        package
        for package, path in (
            ("patroni", "/usr/bin/patroni"),
            ("etcd-server", "/usr/bin/etcd"),
            ("postgresql-15", str(DEBIAN_PG / "postgres")),
        )
        if not Path(path).exists()
    ]
    if missing:
        return (
            f"Debian packages missing: {', '.join(missing)} (apt-get install patroni "
            "etcd-server postgresql-15; .ci/run installs them)"
        )
    if os.geteuid() == 0 and server_user() is None:
        return "running as root without a 'postgres' user to run the servers as"
    return None


@dataclass
class Node:
    index: int
    pg_port: int
    rest_port: int
    data: Path
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"node{self.index}"


@dataclass
class PatroniCluster:
    """Three Patroni nodes and an etcd under ``root`` (a folder of its own)."""

    root: Path
    synchronous: bool = True
    base_port: int = BASE_PORT
    nodes: list[Node] = field(default_factory=list)
    etcd: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        self.etcd_client = self.base_port + 21
        self.etcd_peer = self.base_port + 22
        self.nodes = [
            Node(
                i,
                self.base_port + 1 + i,
                self.base_port + 11 + i,
                self.root / f"node{i}",
                self.root / f"node{i}.yml",
                self.root / f"node{i}.log",
            )
            for i in range(NODES)
        ]

    # -- URLs -------------------------------------------------------------------------------

    def url(self, dbname: str = "postgres", attrs: str = "read-write") -> str:
        """The multi-host URL every command is given: libpq tries each host and keeps the one
        that accepts writes (``target_session_attrs=read-write``)."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return (
            f"postgresql://postgres@{hosts}/{dbname}?target_session_attrs={attrs}&connect_timeout=3"
        )

    def node_url(self, node: Node, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{node.pg_port}/{dbname}?connect_timeout=3"

    # -- start and stop ---------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        own(self.root)
        etcd_dir = self.root / "etcd"
        own(etcd_dir)
        with (self.root / "etcd.log").open("ab") as log:
            self.etcd = self._popen(
                [
                    "/usr/bin/etcd",
                    "--name",
                    "e0",
                    "--data-dir",
                    str(etcd_dir),
                    "--listen-client-urls",
                    f"http://127.0.0.1:{self.etcd_client}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{self.etcd_client}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{self.etcd_peer}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{self.etcd_peer}",
                    "--initial-cluster",
                    f"e0=http://127.0.0.1:{self.etcd_peer}",
                    "--log-level",
                    "warn",
                ],
                log,
            )
        self._wait(lambda: self._http(f"http://127.0.0.1:{self.etcd_client}/health"), 30, "etcd")
        for node in self.nodes:
            node.config.write_text(self._config(node))
            own(node.data.parent)
            self.start_node(node)
        self.wait_leader(None, timeout)
        self.wait_replicas(timeout)

    def start_node(self, node: Node) -> None:
        with node.log.open("ab") as log:
            node.process = self._popen(["/usr/bin/patroni", str(node.config)], log)

    @staticmethod
    def _popen(argv: list[str], log: Any) -> subprocess.Popen[bytes]:
        """Start a server process as the server user, its output appended to ``log`` (the
        child keeps the file open; ours is closed by the caller)."""
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, user=server_user(), start_new_session=True
        )

    def stop(self) -> None:
        """Stop every node (SIGTERM: Patroni stops its PostgreSQL), then etcd; no data kept."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(60)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
            self._kill_postmaster(node)
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.terminate()
            self.etcd.wait(30)

    # -- state ------------------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            body = self._http(f"http://127.0.0.1:{node.rest_port}/cluster")
            if body is not None:
                members: list[dict[str, Any]] = json.loads(body).get("members", [])
                return members
        return []

    def leader(self) -> Node | None:
        """The node that is the running primary, or None (none yet, or a failover under way)."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                return self.nodes[int(str(m["name"]).removeprefix("node"))]
        return None

    def wait_replicas(self, timeout: float = 120.0, count: int = NODES - 1) -> None:
        """Wait until ``count`` standbys stream from the leader (and, synchronous, one is sync)."""

        def ready() -> bool:
            members = self.members()
            streaming = [
                m for m in members if m.get("role") in ("replica", "sync_standby")
                and m.get("state") in ("running", "streaming")
            ]  # fmt: skip
            if len(streaming) < count:
                return False
            return not self.synchronous or any(m.get("role") == "sync_standby" for m in members)

        self._wait(ready, timeout, f"{count} streaming standbys")

    def wait_leader(self, other_than: Node | None, timeout: float = 120.0) -> Node:
        found: list[Node] = []

        def promoted() -> bool:
            leader = self.leader()
            if leader is None or leader is other_than or not self.writable(leader):
                return False
            found.append(leader)
            return True

        self._wait(promoted, timeout, "a new leader")
        return found[-1]

    def writable(self, node: Node) -> bool:
        """Whether the node accepts writes now (Patroni reports a leader before it does)."""
        try:
            with psycopg.connect(self.node_url(node), autocommit=True) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                return row == (False,)
        except psycopg.Error:
            return False

    # -- faults -----------------------------------------------------------------------------

    def kill(self, node: Node) -> None:
        """The node dies: SIGKILL of its Patroni and of its postmaster (the backends go too)."""
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
            node.process.wait()
        self._kill_postmaster(node)

    def switchover(self, leader: Node) -> None:
        """A planned switchover through Patroni's REST API to any healthy standby."""
        body = json.dumps({"leader": leader.name}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{leader.rest_port}/switchover", data=body, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"switchover refused: {exc.code} {exc.read().decode()}") from None

    # -- helpers ----------------------------------------------------------------------------

    def _kill_postmaster(self, node: Node) -> None:
        pidfile = node.data / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        # The backends notice the postmaster's death on their own; wait until it is gone.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    @staticmethod
    def _http(url: str) -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                body: bytes = response.read()
                return body.decode()
        except (urllib.error.URLError, OSError, ValueError):
            return None

    @staticmethod
    def _wait(condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise TimeoutError(f"the Patroni cluster: no {what} after {timeout:.0f} s")

    def _config(self, node: Node) -> str:
        # JSON is YAML: the configuration is written with json.dumps, no YAML library needed.
        config = {
            "scope": f"tockwork-{self.base_port}",
            "name": node.name,
            "restapi": {
                "listen": f"127.0.0.1:{node.rest_port}",
                "connect_address": f"127.0.0.1:{node.rest_port}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_client}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    # Asynchronous: a standby behind by up to 1 GB may still be promoted.
                    "maximum_lag_on_failover": 1 << 30,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "max_connections": 200,
                            "wal_keep_size": "256MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data),
                "bin_dir": str(DEBIAN_PG),
                "pgpass": str(self.root / f"{node.name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {"unix_socket_directories": str(self.root)},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        return json.dumps(config, indent=2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.failover.cluster")
    p.add_argument("action", choices=("up", "down"))
    p.add_argument("--dir", type=Path, help="the cluster's folder (default: a new one in /tmp)")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="no sync standby")
    args = p.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        print(f"cannot start a Patroni cluster: {reason}", file=sys.stderr)
        return 2
    if args.action == "up":
        root = args.dir or scratch_dir("tockwork-patroni-")
        cluster = PatroniCluster(root, synchronous=not args.asynchronous)
        cluster.start()
        (root / "pids").write_text(
            json.dumps({"etcd": cluster.etcd.pid if cluster.etcd else None,
                        "nodes": [n.process.pid for n in cluster.nodes if n.process]})
        )  # fmt: skip
        print(cluster.url())
        return 0
    if args.dir is None:
        print("down needs --dir", file=sys.stderr)
        return 2
    pids = json.loads((args.dir / "pids").read_text())
    for pid in [*pids["nodes"], pids["etcd"]]:
        with contextlib.suppress(ProcessLookupError, TypeError):
            os.kill(int(pid), signal.SIGTERM)
    time.sleep(5)
    shutil.rmtree(args.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
