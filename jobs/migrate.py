"""Schema migrations: ordered plain-SQL files applied once, under a namespaced advisory lock.

Each component (``jobs``, later ``scheduler``) ships ``sql/migrations/NNNN_name.sql`` and a
``sql/schema.sql`` that is the truth; a test proves the migrations produce that schema exactly.
:func:`migrate` runs in one transaction that first takes a transaction-scoped advisory lock, so
any number of processes may run it at once: the first applies what is missing, the others wait,
then find nothing left to do. Applied files are recorded with a checksum; editing a file that was
already applied is an error, not a silent divergence.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, LiteralString

import psycopg

from jobs.errors import MigrationError
from jobs.queries import query

# pg_advisory_xact_lock(class, object): the class id is ours ('tock' as an int4), so other
# applications' advisory locks never collide with these.
LOCK_CLASS = 0x746F636B
MIGRATION_LOCK = 1

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    component: str
    version: int
    name: str
    sql: LiteralString  # read from the package's own files

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available(component: str) -> list[Migration]:
    """The migrations a component ships, in order."""
    folder = resources.files(component).joinpath("sql", "migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(component, int(match.group(1)), match.group(2), entry.read_text("utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"{component}: two migration files share a version number")
    return found


def schema_sql(component: str) -> str:
    """The component's ``schema.sql``: what its migrations must produce."""
    return resources.files(component).joinpath("sql", "schema.sql").read_text("utf-8")


def migrate(conn: psycopg.Connection[Any], components: Sequence[str] = ("jobs",)) -> list[str]:
    """Apply the missing migrations of ``components`` (in that order); return what was applied.

    Commits on success and rolls back on failure; ``conn`` must not be inside a transaction.
    """
    applied_now: list[str] = []
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            query("tockwork_migration_lock"), {"lock_class": LOCK_CLASS, "lock_id": MIGRATION_LOCK}
        )
        cur.execute(query("tockwork_migration_create_table"))
        cur.execute(query("tockwork_migration_list"))
        done = {(c, v): s for c, v, s in cur.fetchall()}
        for component in components:
            for migration in available(component):
                key = (component, migration.version)
                if key in done:
                    if done[key] != migration.checksum:
                        raise MigrationError(
                            f"migration {component}/{migration.version:04d}_{migration.name} "
                            "changed after it was applied; add a new migration instead"
                        )
                    continue
                try:
                    cur.execute(migration.sql)
                except psycopg.Error as exc:
                    raise MigrationError(
                        f"migration {component}/{migration.version:04d}_{migration.name} "
                        f"failed: {exc}"
                    ) from exc
                cur.execute(
                    query("tockwork_migration_record"),
                    {
                        "component": component,
                        "version": migration.version,
                        "name": migration.name,
                        "checksum": migration.checksum,
                    },
                )
                applied_now.append(f"{component}/{migration.version:04d}_{migration.name}")
    return applied_now


def pending(conn: psycopg.Connection[Any], components: Sequence[str] = ("jobs",)) -> list[str]:
    """Migrations not yet applied (read-only)."""
    with conn.cursor() as cur:
        cur.execute(query("tockwork_migration_table_exists"))
        row = cur.fetchone()
        done: set[tuple[str, int]] = set()
        if row and row[0]:
            cur.execute(query("tockwork_migration_list"))
            done = {(c, v) for c, v, _checksum in cur.fetchall()}
    return [
        f"{c}/{m.version:04d}_{m.name}"
        for c in components
        for m in available(c)
        if (c, m.version) not in done
    ]
