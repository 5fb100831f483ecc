"""A real PgBouncer in transaction mode in front of the test database server.

The session fixture :func:`pgbouncer` writes an ini and a userlist to a temporary folder and
starts Debian's ``/usr/sbin/pgbouncer`` (or the one on ``PATH``) on a free localhost port, with
``pool_mode = transaction`` and **one** server connection per database and user: every client
of a test database shares one server connection, so whatever a client leaves on a session
(a prepared statement, a setting, a LISTEN) is met by the next client, deterministically. It
skips the pooler tests, with the reason, when no ``pgbouncer`` binary is installed
(``.ci/run`` installs Debian's package).

PgBouncer refuses to run as root: as root it runs as the owner of the server's socket folder
(the embedded server's ``.pgdata``, which only that user may enter), else as ``nobody``.
:func:`pooler_url` is the test's own database (``db_url``) through the pooler.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# A database entry of its own with one server connection, for the test that shows what goes
# wrong without the pooler settings (tests/integration/pooler/test_pooler_api.py).
SHARED_DB = "tockwork_pooler_shared"


@dataclass(frozen=True)
class PgBouncer:
    host: str
    port: int
    version: tuple[int, ...]
    user: str
    log: Path

    def url(self, direct_url: str) -> str:
        """``direct_url``'s database, through the pooler."""
        return make_conninfo(direct_url, host=self.host, port=str(self.port))

    def show(self, what: str) -> list[tuple[str, ...]]:
        """``SHOW <what>`` on the admin console (simple query protocol only)."""
        url = make_conninfo("", host=self.host, port=str(self.port), dbname="pgbouncer")
        with psycopg.connect(url, user=self.user, autocommit=True) as conn:
            result = conn.pgconn.exec_(f"SHOW {what}".encode())
            return [
                tuple((result.get_value(r, c) or b"").decode() for c in range(result.nfields))
                for r in range(result.ntuples)
            ]


def _binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run(
        [binary, "--version"], check=False, capture_output=True, text=True, timeout=10
    ).stdout
    match = re.search(r"PgBouncer (\d+)\.(\d+)(?:\.(\d+))?", out)
    if match is None:
        return (0,)
    return tuple(int(g) for g in match.groups() if g is not None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_as(host: str) -> str | None:
    """Whom PgBouncer runs as (``-u``): None when we are not root."""
    if os.geteuid() != 0:
        return None
    if host.startswith("/") and os.path.isdir(host):
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
        if owner != "root":
            return owner
    return "nobody"


def _ini(
    folder: Path, server: dict[str, Any], port: int, version: tuple[int, ...], user: str
) -> str:
    target = f"host={server.get('host') or 'localhost'} port={server.get('port') or 5432}"
    lines = [
        "[databases]",
        f"{SHARED_DB} = {target} dbname={server.get('dbname') or 'postgres'} pool_size=1",
        f"* = {target}",
        "",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {folder / 'userlist.txt'}",
        f"admin_users = {user}",
        "pool_mode = transaction",
        "default_pool_size = 1",
        "max_client_conn = 500",
        # A client that pinned the one server connection fails within seconds, not minutes.
        "query_wait_timeout = 20",
        f"logfile = {folder / 'pgbouncer.log'}",
        "ignore_startup_parameters = extra_float_digits",
    ]
    if version >= (1, 21):
        # Newer PgBouncers can track prepared statements; keep them off, as 1.18 is.
        lines.append("max_prepared_statements = 0")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    binary = _binary()
    if binary is None:
        pytest.skip(
            "pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does it): "
            "the transaction-pooler tests are skipped"
        )
    server = conninfo_to_dict(server_url)
    user = str(server.get("user") or "postgres")
    run_as = _run_as(str(server.get("host") or ""))
    version = _version(binary)
    folder = Path(tempfile.mkdtemp(prefix="tockwork-pgbouncer-"))
    port = _free_port()
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(_ini(folder, server, port, version, user))
    if run_as is not None:
        uid = pwd.getpwnam(run_as).pw_uid
        for path in (folder, folder / "userlist.txt", folder / "pgbouncer.ini"):
            os.chown(path, uid, -1)
    command = [binary, *(["-u", run_as] if run_as else []), str(folder / "pgbouncer.ini")]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    bouncer = PgBouncer("127.0.0.1", port, version, user, folder / "pgbouncer.log")
    try:
        _wait_ready(proc, bouncer)
        yield bouncer
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(proc: subprocess.Popen[bytes], bouncer: PgBouncer) -> None:
    """Until the admin console answers (the process's own event), or it exited."""
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            log = bouncer.log.read_text() if bouncer.log.exists() else ""
            raise RuntimeError(f"pgbouncer exited with {proc.returncode}: {err}{log}")
        try:
            bouncer.show("VERSION")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@pytest.fixture
def pooler_url(pgbouncer: PgBouncer, db_url: str) -> str:
    """This test's database (``db_url``), through the transaction-mode PgBouncer."""
    return pgbouncer.url(db_url)
