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

from scheduler.devdb import database_url, throwaway_database
from scheduler.migrations import ALL_COMPONENTS

_counter = itertools.count()


@pytest.fixture(scope="session")
def server_url() -> str:
    return database_url()


@pytest.fixture(scope="session")
def template_db(server_url: str) -> Iterator[str]:
    name = f"tockwork_tpl_{os.getpid()}"
    with throwaway_database(server_url, name, components=ALL_COMPONENTS):
        yield name


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all."""
    with throwaway_database(server_url, f"tockwork_e_{os.getpid()}_{next(_counter)}") as url:
        yield url


@pytest.fixture
def db_url(server_url: str, template_db: str) -> Iterator[str]:
    """A fresh database for this test, migrated with every component (opt-in ones included)."""
    name = f"tockwork_t_{os.getpid()}_{next(_counter)}"
    with throwaway_database(server_url, name, template=template_db) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to this test's database (not autocommit: the test controls transactions)."""
    with psycopg.connect(db_url) as connection:
        yield connection
