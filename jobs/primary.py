"""Which server is the primary, and what its commits wait for: read at every new connection.

A replicated cluster with automatic failover (Patroni) moves the primary: the services reconnect
through a multi-host URL (``host=a,b,c`` with ``target_session_attrs=read-write``) and carry on
against a different server. Two facts name the server that accepts the writes:

- the **system identifier** (``pg_control_system()``): the same for a primary and its physical
  standbys, another one for another cluster (a restore, a URL pointed elsewhere);
- the **timeline** of the WAL it writes: a promotion starts a new one. The claim's fencing
  token carries it in its high 32 bits (``job_lease_token_floor`` in ``jobs/sql/job.sql``), so
  a token issued after a failover is above every token issued before it, also those the new
  primary never received.

What a failover may lose depends on the replication mode. **Synchronous**
(``synchronous_standby_names`` set and ``synchronous_commit`` at ``on``, ``remote_write`` or
``remote_apply``; Patroni's ``synchronous_mode: true``): a commit is acknowledged once a standby
has it, and Patroni promotes only that standby, so nothing acknowledged is lost. **Asynchronous**:
a commit is acknowledged before any standby has it, and the last ones (the replica's lag) are
lost when the primary dies: enqueues the caller saw commit, completions (the job runs again:
at-least-once holds, an effect not recorded with ``record_once`` is done twice).

Every service (:class:`jobs.Service`: worker, relay, scheduler; and the dashboard) keeps a
:class:`PrimaryWatch`: on its first connection it says which mode the primary runs in (a
warning when acknowledged work can be lost) and, with ``require_sync_replication``
(``--require-sync-replication``, ``TOCKWORK_REQUIRE_SYNC_REPLICATION=1``), refuses to start
without synchronous replication (:class:`jobs.errors.SyncReplicationRequired`, exit code 2 on the
command line). After a reconnect it logs once that the primary changed (timeline, system
identifier) or that the mode changed. ``tockwork healthz``, the dashboard and the metric
``tockwork_replication_synchronous`` show the mode too (docs/operations.md, "Failover").
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from psycopg.pq import TransactionStatus

from jobs.errors import InvalidJob, SyncReplicationRequired
from jobs.queries import query

REQUIRE_SYNC_ENV = "TOCKWORK_REQUIRE_SYNC_REPLICATION"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
# The commit levels that wait for a synchronous standby (when one is configured).
_WAITING_LEVELS = ("on", "remote_write", "remote_apply")


@dataclass(frozen=True, slots=True)
class ServerIdentity:
    """What one connection found: which server, and what its commits wait for."""

    system_identifier: int
    timeline: int | None  # None on a standby (in recovery)
    standby_names: str  # synchronous_standby_names
    commit_level: str  # this session's synchronous_commit
    sync_standbys: int | None  # synchronous standbys attached now; None when hidden from us
    standbys: int = 0  # standbys attached now (WAL senders)

    @property
    def synchronous(self) -> bool:
        """Whether an acknowledged commit is on a standby too (survives a failover)."""
        return self.standby_names.strip() != "" and self.commit_level in _WAITING_LEVELS

    @property
    def stalled(self) -> bool:
        """Synchronous, and no synchronous standby is attached: every commit waits until one
        attaches (nothing is lost, nothing is written meanwhile)."""
        return self.synchronous and self.sync_standbys == 0

    @property
    def primary(self) -> tuple[int, int | None]:
        """The server as a failover changes it: (system identifier, timeline)."""
        return (self.system_identifier, self.timeline)

    def replication(self) -> str:
        """The replication mode in words, as the logs, healthz and the dashboard say it."""
        if self.synchronous:
            attached = "" if self.sync_standbys is None else f", {self.sync_standbys} attached"
            stalled = ": none attached, every commit waits until one is" if self.stalled else ""
            return (
                f"synchronous (synchronous_standby_names '{self.standby_names}'{attached}, "
                f"synchronous_commit {self.commit_level}){stalled}"
            )
        return f"asynchronous ({self._why()}): acknowledged work can be lost at failover"

    def _why(self) -> str:
        if not self.standby_names.strip():
            return "synchronous_standby_names is empty"
        return f"synchronous_commit is {self.commit_level}"

    def refusal(self) -> str:
        """Why a service that requires synchronous replication refuses this server."""
        return (
            f"the primary (system {self.system_identifier}, timeline {self.timeline}) does not "
            f"replicate synchronously ({self._why()}): acknowledged work can be lost at failover"
        )


def server_identity(conn: psycopg.Connection[Any]) -> ServerIdentity:
    """Read :class:`ServerIdentity` on ``conn``: one statement, in the caller's transaction if
    one is open; a transaction it had to open is rolled back (nothing was written)."""
    opened = not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
    row = conn.execute(query("pg_server_identity")).fetchone()
    if opened:
        conn.rollback()
    assert row is not None
    system, timeline, names, level, attached, standbys = row
    return ServerIdentity(
        int(system),
        None if timeline is None else int(timeline),
        str(names),
        str(level),
        None if attached is None else int(attached),
        int(standbys),
    )


def require_sync_replication(given: bool | None = None) -> bool:
    """``given`` if not None, else ``$TOCKWORK_REQUIRE_SYNC_REPLICATION`` (1/true/yes/on or
    0/false/no/off/empty), else False. Another value is an :class:`jobs.InvalidJob`."""
    if given is not None:
        return bool(given)
    raw = os.environ.get(REQUIRE_SYNC_ENV, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidJob(REQUIRE_SYNC_ENV, raw[:40], "must be 1/true/yes/on or 0/false/no/off")


class PrimaryWatch:
    """One service's view of the primary across its connections (module docstring)."""

    def __init__(self, label: str, log: logging.Logger, *, require_sync: bool = False) -> None:
        self.label = label
        self.log = log
        self.require_sync = require_sync
        self.current: ServerIdentity | None = None
        self.changes = 0  # changes of primary seen after the first connection

    def observe(self, conn: psycopg.Connection[Any]) -> ServerIdentity:
        """Read the identity on a new connection; say what changed since the last one.

        The first connection says the replication mode and, when synchronous replication is
        required and absent, raises :class:`SyncReplicationRequired`. Later ones log a change of
        primary or of mode once (a reconnect to the same primary says nothing).
        """
        found = server_identity(conn)
        last, self.current = self.current, found
        if last is None:
            if self.require_sync and not found.synchronous:
                self.current = None
                raise SyncReplicationRequired("require_sync_replication", True, found.refusal())
            # A warning where a failover can lose acknowledged work: standbys are attached and
            # none is synchronous. A server without any standby (development, tests) has no
            # failover to lose work in: said as information.
            # So is a synchronous primary with no synchronous standby: its commits wait.
            lossy = found.standbys > 0 and not found.synchronous
            level = logging.WARNING if lossy or found.stalled else logging.INFO
            self.log.log(
                level,
                "%s: primary system %d timeline %s; replication %s",
                self.label,
                found.system_identifier,
                found.timeline,
                found.replication(),
            )
            return found
        if found.primary != last.primary:
            self.changes += 1
            what = (
                "another cluster (system identifier changed)"
                if found.system_identifier != last.system_identifier
                else "a failover or switchover (timeline changed)"
            )
            self.log.warning(
                "%s: the primary changed: system %d timeline %s -> system %d timeline %s, %s; "
                "leases issued before it are fenced; replication %s",
                self.label,
                last.system_identifier,
                last.timeline,
                found.system_identifier,
                found.timeline,
                what,
                found.replication(),
            )
        elif found.synchronous != last.synchronous:
            self.log.warning("%s: replication is now %s", self.label, found.replication())
        return found


def replication_families(
    conn: psycopg.Connection[Any], found: ServerIdentity | None = None
) -> list[Metric]:
    """The scrape-time gauges of the primary (:class:`jobs.metrics.DatabaseCollector`):
    ``tockwork_replication_synchronous`` and ``tockwork_server_timeline`` (of ``found``, the
    identity already read on ``conn``, else read here)."""
    found = server_identity(conn) if found is None else found
    synchronous = GaugeMetricFamily(
        "tockwork_replication_synchronous",
        "1 if a commit waits for a synchronous standby (nothing acknowledged is lost at "
        "failover), 0 if acknowledged work can be lost at failover.",
    )
    synchronous.add_metric([], 1.0 if found.synchronous else 0.0)
    timeline = GaugeMetricFamily(
        "tockwork_server_timeline",
        "The timeline of the server the scrape reached (a failover starts a new one).",
    )
    timeline.add_metric([], float(found.timeline or 0))
    return [synchronous, timeline]
