"""Shared fixtures: a real PostgreSQL (DATABASE_URL, or the embedded server), one database per test.

A template database is migrated once per session; each test that asks for ``db_url`` gets a
fresh database cloned from it (``CREATE DATABASE ... TEMPLATE``), so tests never see each
other's rows and may run concurrent connections freely.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from jobs.devdb import database_url
from jobs.migrate import migrate
from scheduler.db import COMPONENTS

_counter = itertools.count()


def _admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="session")
def server_url() -> str:
    return database_url()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"tockwork_tpl_{os.getpid()}"
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(server_url, dbname=name)
    with psycopg.connect(url) as conn:
        migrate(conn, COMPONENTS)
    yield name
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all."""
    name = f"tockwork_e_{os.getpid()}_{next(_counter)}"
    with _admin(server_url) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield make_conninfo(server_url, dbname=name)
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    name = f"tockwork_t_{os.getpid()}_{next(_counter)}"
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    yield make_conninfo(server_url, dbname=name)
    with _admin(server_url) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to this test's database (not autocommit: the test controls transactions)."""
    with psycopg.connect(db_url) as connection:
        yield connection
