"""The scheduler component's named SQL queries (scheduler/sql/queries.sql)."""

from __future__ import annotations

from typing import LiteralString

from jobs.queries import load


def query(name: str) -> LiteralString:
    return load("scheduler")[name]
