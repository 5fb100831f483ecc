"""Where the CLI finds its database, and which components' migrations it applies."""

from __future__ import annotations

from jobs.devdb import database_url

# Migrations are applied component by component, in this order (dependencies first).
COMPONENTS: tuple[str, ...] = ("jobs", "scheduler")


def resolve_url(flag: str | None) -> str:
    """``--database-url`` if given, else ``DATABASE_URL``, else the embedded server."""
    return flag or database_url()


def ensure_schema(url: str, *, apply: bool) -> None:
    """Apply the migrations (``apply``) or refuse to start on an out-of-date schema.

    Raises :class:`scheduler.cli_common.InputError` naming what is missing, so a command
    started against a database nobody migrated exits with a clear message (code 2).
    """
    import psycopg

    from jobs import migrate
    from jobs import pending_migrations as pending
    from scheduler.cli_common import InputError

    with psycopg.connect(url) as conn:
        if apply:
            migrate(conn, COMPONENTS)
            return
        missing = pending(conn, COMPONENTS)
    if missing:
        raise InputError(
            f"the database schema is not up to date (missing {', '.join(missing)}): "
            "run 'tockwork migrate' or start with --migrate"
        )
