"""Named SQL queries, loaded from ``.sql`` files shipped inside a package.

A file holds blocks that start with ``-- name: <query_name>``; the text up to the next such line
is the query. SQL never lives in Python strings and is never assembled from user input.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


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


@cache
def load(package: str, filename: str = "queries.sql") -> dict[str, LiteralString]:
    """Load the named queries of ``package``'s ``sql/<filename>``."""
    text = resources.files(package).joinpath("sql", filename).read_text(encoding="utf-8")
    return parse_named(text)


def query(name: str) -> LiteralString:
    """The jobs component's query ``name``."""
    return load("jobs")[name]
