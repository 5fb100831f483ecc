"""Django adapter: enqueue on Django's connection, inside ``transaction.atomic()`` when open.

::

    from django.db import transaction
    from jobs.integrations import django as tw

    with transaction.atomic():
        user = User.objects.create(...)
        tw.enqueue("send_welcome", {"user_id": user.id})  # commits (or rolls back) with it

Django must use its PostgreSQL backend on psycopg 3 (Django 4.2+ picks psycopg 3 when it is
installed). Inside ``atomic()`` the job joins Django's transaction; outside it, Django runs in
autocommit and the enqueue commits at once, like any ORM write. :func:`connection` gives the
raw psycopg connection for anything else Tockwork takes a connection for
(``scheduler.create_schedule(connection(), ...)``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import psycopg

from jobs.enqueue import enqueue as _enqueue
from jobs.enqueue import enqueue_many as _enqueue_many
from jobs.errors import InvalidJob
from jobs.model import Enqueued, JobSpec

__all__ = ["connection", "enqueue", "enqueue_many"]


def connection(using: str = "default") -> psycopg.Connection[Any]:
    """The psycopg connection behind Django's connection ``using`` (opened if needed)."""
    from django.db import connections

    if not isinstance(using, str) or using not in connections:
        raise InvalidJob("using", using, "is not a database alias in Django's DATABASES")
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        raise InvalidJob(
            "using", using, f"is a {wrapper.vendor} database: Tockwork needs PostgreSQL"
        )
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise InvalidJob(
            "using", using, "Django's PostgreSQL backend runs on psycopg2: install psycopg 3"
        )
    return raw


def enqueue(
    job_type: str, payload: Any = None, *, using: str = "default", **options: Any
) -> Enqueued:
    """:func:`jobs.enqueue` on Django's connection ``using``, in its current transaction."""
    return _enqueue(connection(using), job_type, payload, **options)


def enqueue_many(
    specs: Iterable[JobSpec | Mapping[str, Any]], *, using: str = "default", **options: Any
) -> list[Enqueued]:
    """:func:`jobs.enqueue_many` on Django's connection ``using``."""
    return _enqueue_many(connection(using), specs, **options)
