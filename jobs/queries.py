"""Named SQL queries, loaded from the ``.sql`` files shipped inside a package: the one loader.

A package keeps its queries beside the tables they touch: ``<package>/sql/<table>.sql`` (for
example ``jobs/sql/job.sql``, ``scheduler/sql/schedule.sql``), plus ``pg_misc.sql`` for the
statements that touch no table. A file holds blocks that start with ``-- name: <query_name>``;
the text up to the next such line is the query. Names start with their table, as in River's
``river_job.sql`` (``job_claim``, ``outbox_event_claim``, ``schedule_due_lock``), so a name says
what it touches, and a name is defined once across all the files of a package.
``schema.sql`` and ``migrations/`` are not named queries and are not loaded here.

SQL never lives in Python strings and is never assembled from user input. The loaded mapping is
read-only (:class:`types.MappingProxyType`): a query is what its file says, for the life of the
process (a benchmark measures through a cursor wrapper, it does not swap query text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import LiteralString

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)

SCHEMA_FILE = "schema.sql"
"""The schema a package's migrations must reproduce: not named queries."""


def parse_named(text: str) -> dict[str, LiteralString]:
    """Split a named-query file into ``{name: sql}``."""
    queries: dict[str, LiteralString] = {}
    matches = list(_NAME.finditer(text))
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        body = text[match.end() : end].strip()
        if match.group(1) in queries:
            raise ValueError(f"query {match.group(1)!r} is defined twice")
        # The files are part of the package, not user input.
        queries[match.group(1)] = body
    return queries


def query_files(package: str) -> list[Traversable]:
    """The named-query files of ``package`` (``sql/*.sql`` but ``schema.sql``), by name."""
    folder = resources.files(package).joinpath("sql")
    return sorted(
        (f for f in folder.iterdir() if f.name.endswith(".sql") and f.name != SCHEMA_FILE),
        key=lambda f: f.name,
    )


@cache
def load(package: str) -> Mapping[str, LiteralString]:
    """All the named queries of ``package``, read-only; a name defined in two files is an error."""
    queries: dict[str, LiteralString] = {}
    origin: dict[str, str] = {}
    for file in query_files(package):
        for name, body in parse_named(file.read_text(encoding="utf-8")).items():
            if name in queries:
                raise ValueError(
                    f"query {name!r} is defined in both {origin[name]} and {file.name}"
                )
            queries[name], origin[name] = body, file.name
    return MappingProxyType(queries)


def query(name: str) -> LiteralString:
    """The jobs component's query ``name``."""
    return load("jobs")[name]
