"""How Tockwork connects: directly (or through a session pooler), or through a transaction pooler.

A *transaction-mode* pooler (PgBouncer's ``pool_mode = transaction``) hands the client a server
connection for one transaction at a time; the next transaction may run on another server
connection that other clients used in between. Whatever lives in a *session* is therefore lost
or, worse, seen by somebody else. What Tockwork's connections do, checked against that:

- **server-side prepared statements**: psycopg prepares a statement after it ran
  ``prepare_threshold`` (5) times on a connection, and ``executemany`` prepares at once; a
  prepared statement lives on one server connection, so the next transaction may find it
  missing, or find another client's statement under the same name (``bind message supplies 15
  parameters, but prepared statement "_pg3_1" requires 0``; PgBouncer only tracks them from
  1.21 with ``max_prepared_statements``). ``pooler="transaction"`` sets
  ``prepare_threshold=None``, which psycopg honours for every execution, ``executemany`` and
  pipelines included.
- **LISTEN** needs a session: through a transaction pooler it succeeds, and the notifications
  never arrive. The worker and the relay listen over a separate direct URL
  (``listen_conninfo``, ``--listen-url``, ``TOCKWORK_LISTEN_URL``) when one is given, and
  otherwise poll only and say so once in the log (:meth:`jobs.service.Service._listen`).
- **session settings**: none. Timeouts are set with ``set_config(..., true)`` (transaction
  local) inside the transaction that needs them (``/metrics``, ``/healthz``).
- **advisory locks**: only transaction-scoped ones (``pg_advisory_xact_lock``,
  ``pg_try_advisory_xact_lock``), released at commit.
- **temporary tables, WITH HOLD cursors, server-side cursors**: none.
- **COPY** (``enqueue_many``'s binary COPY) runs inside one transaction: it works.

The mode comes from the caller (``pooler="transaction"``, ``--pooler transaction``), else from
``TOCKWORK_POOLER``, else it is ``"session"``: a process started with
``TOCKWORK_POOLER=transaction`` never prepares a statement, also in the connections an
application's handlers open through :func:`connect`.
"""

from __future__ import annotations

import json
import os
from typing import Any, Literal

import orjson
import psycopg

from jobs.errors import InvalidJob

Pooler = Literal["session", "transaction"]
POOLERS: tuple[Pooler, ...] = ("session", "transaction")
# PostgreSQL's other names of the zone 'UTC' (tzdata links, the same rules). psycopg loads a
# timestamptz into the session's zone, through datetime.timezone.utc for 'UTC' and a ZoneInfo
# for these (0.17 against 0.40 us a value): the worker's and the delivery's own sessions in
# one of them are set to 'UTC' (never through a transaction-mode pooler).
UTC_ALIASES = frozenset(
    {"Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"}
)

POOLER_ENV = "TOCKWORK_POOLER"
LISTEN_URL_ENV = "TOCKWORK_LISTEN_URL"


def pooler_mode(pooler: str | None = None) -> Pooler:
    """``pooler`` if given, else ``$TOCKWORK_POOLER``, else ``"session"``.

    Raises :class:`jobs.InvalidJob` (an ``InvalidInput``) naming the field for any other value.
    """
    field = "pooler"
    if pooler is None:
        pooler = os.environ.get(POOLER_ENV) or None
        field = POOLER_ENV
        if pooler is None:
            return "session"
    if pooler == "session":
        return "session"
    if pooler == "transaction":
        return "transaction"
    shown: object = pooler[:40] if isinstance(pooler, str) else pooler
    raise InvalidJob(field, shown, "must be 'session' or 'transaction'")


def listen_url(given: str | None = None) -> str | None:
    """The direct URL LISTEN uses: ``given``, else ``$TOCKWORK_LISTEN_URL``, else None."""
    return given or os.environ.get(LISTEN_URL_ENV) or None


def connect_kwargs(pooler: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """``kwargs`` for ``psycopg.connect``, made safe for the pooler mode.

    In transaction mode ``prepare_threshold`` is None whatever ``kwargs`` say: a prepared
    statement cannot survive the pooler.
    """
    settings = dict(kwargs)
    if pooler_mode(pooler) == "transaction":
        settings["prepare_threshold"] = None
    return settings


def connect(conninfo: str, *, pooler: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(conninfo, **kwargs)`` with the pooler mode's settings
    (``jobs.connect(url, pooler="transaction")``; :func:`pooler_mode` says which mode)."""
    return psycopg.connect(conninfo, **connect_kwargs(pooler, **kwargs))


def json_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """JSON from the database: orjson, or the standard library for what orjson refuses
    (integers beyond 64 bits), so the values are those ``json.loads`` gives."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)
