"""Tockwork's pytest plugin for applications' test suites, registered as ``tockwork``.

Installed with the package (the ``pytest11`` entry point), so a project that depends on
Tockwork has these fixtures without configuration; ``-p no:tockwork`` turns it off.
docs/testing.md shows them in use.

- ``tockwork_database``: the URL of a database migrated with Tockwork's tables, created once per
  test session (on ``DATABASE_URL``'s server, else the project's embedded development server:
  used when it runs, otherwise started for the session, said so in pytest's output, and
  stopped at the end) and dropped at the end; every test that asks for it starts with those
  tables empty.
- ``frozen_clock``: a :class:`timezones.FrozenClock` at ``2026-01-05T09:00:00Z`` (a Monday), or
  at the instant of the test's ``@pytest.mark.tockwork_now("...")`` marker. ``drain`` runs the
  scheduler and the worker on it, so Python and SQL see the same "now"; pass
  ``now=frozen_clock.now()`` to the API calls a test makes (``jobs.enqueue``,
  ``scheduler.create_schedule``...), which otherwise use the database clock.
- ``drain``: ``drain(handlers)`` runs due schedules once (a scheduler pass) and then the handlers
  (``def`` or ``async def``, single or batch) in-process until no job is ready; it returns the
  worker's :class:`jobs.WorkerStats`.
- ``tockwork_dst``: :func:`scheduler.testing.assert_dst_safe`, the DST assertion over a test's
  schedule definitions; :func:`scheduler.testing.golden_cases` gives the golden DST cases as
  parameters.

The ini option ``tockwork_components`` (one per line) adds opt-in migration components to the
test database (``scheduler.simulated`` for the simulated push provider).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

DEFAULT_NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MIGRATION_TABLE = "tockwork_migration"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "tockwork_components",
        "opt-in Tockwork migration components for tockwork_database (one per line), "
        "e.g. scheduler.simulated",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "tockwork_now(instant): the instant (ISO text or aware datetime) frozen_clock starts at",
    )


@dataclass(frozen=True)
class _SessionDatabase:
    url: str
    tables: tuple[str, ...]


_SAID = pytest.StashKey[list[str]]()


def _say(config: pytest.Config, line: str) -> None:
    """A line for pytest's terminal summary (output during a fixture is captured)."""
    config.stash.setdefault(_SAID, []).append(line)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for line in config.stash.get(_SAID, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def _tockwork_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server of ``DATABASE_URL``; else the project's embedded server, used as it is when it
    runs, or started for the session, said so, and stopped at its end (whoever starts it stops
    it: no server is left running in the project's folder without a word)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    from scheduler import devdb

    pgdata = devdb.project_pgdata(request.config.rootpath)
    if devdb.is_running(pgdata):
        yield devdb.ensure_embedded(pgdata)
        return
    url = devdb.ensure_embedded(pgdata)
    _say(
        request.config,
        f"tockwork: started the embedded development PostgreSQL (data in {pgdata.resolve()}) "
        "for this test session, as DATABASE_URL is not set; it is stopped at the end",
    )
    try:
        yield url
    finally:
        devdb.stop_embedded(pgdata)
        _say(request.config, f"tockwork: stopped the embedded PostgreSQL it started ({pgdata})")


@pytest.fixture(scope="session")
def _tockwork_session_database(
    request: pytest.FixtureRequest, _tockwork_server: str
) -> Iterator[_SessionDatabase]:
    import psycopg

    from scheduler.devdb import throwaway_database
    from scheduler.migrations import COMPONENTS
    from scheduler.queries import query

    extra = [str(c) for c in request.config.getini("tockwork_components")]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"tockwork_pytest_{os.getpid()}_{worker}"
    with throwaway_database(_tockwork_server, name, components=(*COMPONENTS, *extra)) as url:
        with psycopg.connect(url) as conn:
            rows = conn.execute(query("pg_tables_of_schema")).fetchall()
        tables = tuple(r[0] for r in rows if r[0] != MIGRATION_TABLE)
        yield _SessionDatabase(url, tables)


@pytest.fixture
def tockwork_database(_tockwork_session_database: _SessionDatabase) -> str:
    """A migrated database whose Tockwork tables are empty when the test starts (its URL)."""
    import psycopg
    from psycopg import sql

    from scheduler.queries import query

    db = _tockwork_session_database
    if db.tables:
        names = sql.SQL(", ").join(sql.Identifier(t) for t in db.tables)
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(sql.SQL(query("pg_truncate_tables")).format(names))
    return db.url


@pytest.fixture
def frozen_clock(request: pytest.FixtureRequest) -> Any:
    """A FrozenClock at DEFAULT_NOW or at the test's ``tockwork_now`` marker."""
    from timezones.testing import frozen_clock as make_clock

    marker = request.node.get_closest_marker("tockwork_now")
    if marker is None:
        return make_clock(DEFAULT_NOW)
    if len(marker.args) != 1:
        raise pytest.UsageError("@pytest.mark.tockwork_now takes one instant")
    return make_clock(marker.args[0])


class Drain:
    """``drain(handlers, queues=None, *, schedules=True, **worker_options)``.

    Runs a scheduler pass (unless ``schedules=False``), then a worker with ``handlers`` until
    no job is ready and nothing runs. ``queues`` maps queue names to threads; by default every
    queue that holds a job, one thread each (deterministic order). ``worker_options`` go to
    :class:`jobs.Worker` (``retry=``, ``lease=``...). Handlers may be ``def`` or ``async def``,
    single or batch (async ones run on the worker's event loop); a batch handler gets every
    ready job of its type, up to its ``max_batch``, in one call (``prefetch`` defaults to the
    largest ``max_batch`` when a batch handler is given).
    """

    def __init__(self, url: str, clock: Any) -> None:
        self.url = url
        self.clock = clock

    def __call__(
        self,
        handlers: Mapping[str, Any],
        queues: Mapping[str, int] | None = None,
        *,
        schedules: bool = True,
        **worker_options: Any,
    ) -> Any:
        import psycopg

        from jobs import BatchHandler, Worker, WorkerStats, queue_stats
        from scheduler.tick import Scheduler

        if schedules:
            Scheduler(self.url, clock=self.clock).run_until_idle()
        if queues is None:
            with psycopg.connect(self.url) as conn:
                queues = {s.queue: 1 for s in queue_stats(conn)}
        if not queues:
            return WorkerStats()
        options = {"listen": False, **worker_options}
        batch_sizes = [h.max_batch for h in handlers.values() if isinstance(h, BatchHandler)]
        if batch_sizes and "prefetch" not in options:
            # The adaptive claim starts at one job per free thread: a batch handler would get
            # batches of 1, 1, 2... Claiming a batch's worth ahead hands it every ready job of
            # its type (up to max_batch) in one call, as a loaded production worker would.
            options["prefetch"] = max(batch_sizes)
        return Worker(self.url, handlers, queues, clock=self.clock, **options).run_until_idle()


@pytest.fixture
def drain(request: pytest.FixtureRequest, tockwork_database: str) -> Drain:
    """Run due schedules and then handlers in-process until idle (on frozen_clock if used)."""
    uses_clock = "frozen_clock" in request.fixturenames
    clock = request.getfixturevalue("frozen_clock") if uses_clock else None
    return Drain(tockwork_database, clock)


@pytest.fixture
def tockwork_dst() -> Callable[..., Any]:
    """:func:`scheduler.testing.assert_dst_safe`."""
    from scheduler.testing import assert_dst_safe

    return assert_dst_safe
