"""Where the CLI finds its database, and which components' migrations it applies."""

from __future__ import annotations

from jobs.devdb import database_url

# Migrations are applied component by component, in this order (dependencies first).
COMPONENTS: tuple[str, ...] = ("jobs", "scheduler")


def resolve_url(flag: str | None) -> str:
    """``--database-url`` if given, else ``DATABASE_URL``, else the embedded server."""
    return flag or database_url()
