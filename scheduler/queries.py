"""The scheduler component's named SQL queries (scheduler/sql/*.sql), through jobs' one loader."""

from __future__ import annotations

from typing import LiteralString

from jobs import queries


def query(name: str) -> LiteralString:
    """The scheduler component's query ``name``."""
    return queries.load("scheduler")[name]
