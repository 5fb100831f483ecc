"""The one-job enqueue, accounted: ``jobs.enqueue`` beside PgQueuer's ``Queries.enqueue``.

``python -m bench.enqueue_one [--n 2000] [--rounds 3] [--profile] [--peer-python PATH]`` creates a
throwaway database (``tockwork_enqueue_one_<pid>``, migrated, PgQueuer's tables installed beside
Tockwork's, dropped at the end) and enqueues one job per statement on an autocommit connection
with each library, alternating in rounds (the shape of the ``peers`` phase of
``bench/queue.py``). Each side's tables are emptied before its pass; the pass includes its
connection's 20 warm-up enqueues (prepared statements), so the server-side counts are divided
by every job inserted and the times by the measured jobs only. Per job it prints:

- statements sent (each one round trip: no pipeline on either side) and transactions
  committed (``pg_stat_database.xact_commit``);
- rows written per table (``pg_stat_user_tables.n_tup_ins``, read after the client's
  connection closed, so that its counters were flushed);
- index entries written: for every index of a written table, the rows its predicate holds
  (the table is emptied before each pass) over the rows inserted;
- trigger function calls (``pg_stat_user_functions``; ``track_functions = 'pl'`` is set on the
  database) and NOTIFYs received by a connection listening on both libraries' channels, with
  their payload bytes;
- WAL bytes and records (``pg_current_wal_lsn`` and ``pg_stat_wal`` deltas: cluster-wide, so
  exact only on a server nobody else writes to; the report says so);
- wall time, the client's CPU (``time.process_time``) and the server backend's CPU
  (``/proc/<pid>/stat``; the server must run on this machine, else it is left out).

``--profile`` also runs Tockwork's loop under cProfile and prints where the client's time goes
(validation, ``tracing.capture``, psycopg's execute and fetch). PgQueuer runs in its own venv
(``make bench-peers``) through ``bench/peer_pgqueuer.py account``; without it only Tockwork's
column is printed.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import time
from collections import defaultdict
from typing import Any, Self

import psycopg
from psycopg import sql

import jobs
from bench.queue import PEER_PYTHON, PeerUnavailable, peer, peer_python
from scheduler import devdb
from scheduler.devdb import database_url

WARMUP = 20  # both sides: bench/peer_pgqueuer.py account warms up with 20 enqueues too
TOCKWORK_TABLES = ("jobs",)
PGQUEUER_TABLES = ("pgqueuer", "pgqueuer_log")
CHANNELS = ("tockwork_jobs", "ch_pgqueuer")


class CountingCursor(psycopg.Cursor[Any]):
    """Counts the statements a ``jobs.enqueue`` sends (a ``cursor_factory``; changes nothing)."""

    statements = 0

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Self:
        CountingCursor.statements += 1
        return super().execute(query, params, **kwargs)


def proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a local process (a server backend), None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapshot(url: str, tables: tuple[str, ...]) -> dict[str, float]:
    """The server counters one pass changes (a fresh connection: a fresh stats snapshot)."""
    with psycopg.connect(url, autocommit=True) as conn:
        out: dict[str, float] = {}
        row = conn.execute(
            "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_records, wal_fpi, wal_bytes"
            " FROM pg_stat_wal"
        ).fetchone()
        assert row is not None
        out["wal_lsn"], out["wal_records"], out["wal_fpi"], out["wal_bytes"] = map(float, row)
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        out["xact_commit"] = float(row[0])
        for name, inserted in conn.execute(
            "SELECT relname, n_tup_ins FROM pg_stat_user_tables WHERE relname = ANY(%s)",
            (list(tables),),
        ):
            out[f"rows {name}"] = float(inserted)
        calls = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions")
        row = calls.fetchone()
        assert row is not None
        out["trigger calls"] = float(row[0])
    return out


def index_entries(url: str, tables: tuple[str, ...]) -> dict[str, float]:
    """Per index of ``tables``: the rows its predicate holds (all of them without one)."""
    out: dict[str, float] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT t.relname, i.relname, pg_get_expr(x.indpred, x.indrelid), am.amname"
            " FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
            " JOIN pg_class t ON t.oid = x.indrelid JOIN pg_am am ON am.oid = i.relam"
            " WHERE t.relname = ANY(%s) ORDER BY t.relname, i.relname",
            (list(tables),),
        ).fetchall()
        for table, index, predicate, method in found:
            where = sql.SQL(predicate) if predicate else sql.SQL("true")
            # A predicate read back from the catalog: trusted text of our own database.
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE {}").format(sql.Identifier(table), where)
            ).fetchone()
            assert row is not None
            label = f"{table}.{index}" + (f" ({method})" if method != "btree" else "")
            out[label] = float(row[0])
    return out


def drain_notifies(listener: psycopg.Connection[Any], wait: float) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=wait)]


def tockwork_pass(url: str, n: int) -> dict[str, float]:
    CountingCursor.statements = 0
    with psycopg.connect(url, autocommit=True, cursor_factory=CountingCursor) as conn:
        for i in range(WARMUP):
            jobs.enqueue(conn, "noop", {"i": i})
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = int(row[0])
        CountingCursor.statements = 0
        server0 = proc_cpu(pid)
        cpu0, start = time.process_time(), time.perf_counter()
        for i in range(n):
            jobs.enqueue(conn, "noop", {"i": i})
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
        server1 = proc_cpu(pid)
    server = None if server0 is None or server1 is None else server1 - server0
    return {
        "seconds": seconds,
        "cpu": cpu,
        "server_cpu": -1.0 if server is None else server,
        "statements": float(CountingCursor.statements),
    }


def profile_tockwork(url: str, n: int) -> None:
    """Where the client's time goes in ``jobs.enqueue`` (cProfile inflates Python: read shares)."""
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(WARMUP):
            jobs.enqueue(conn, "noop", {"i": i})
        profiler = cProfile.Profile()
        profiler.enable()
        for i in range(n):
            jobs.enqueue(conn, "noop", {"i": i})
        profiler.disable()
    stats = pstats.Stats(profiler)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in raw.values())
    cumulative: dict[str, float] = defaultdict(float)
    wanted = {
        ("enqueue.py", "enqueue"): "jobs.enqueue (all of it)",
        ("enqueue.py", "_params"): "  _params (validation + capture)",
        ("tracing.py", "capture"): "    tracing.capture()",
        ("validate.py", "payload"): "    validate.payload (JSON)",
        ("cursor.py", "execute"): "  psycopg Cursor.execute (adapt, send, wait)",
        ("cursor.py", "fetchone"): "  psycopg Cursor.fetchone",
        ("connection.py", "cursor"): "  psycopg Connection.cursor",
    }
    for (filename, _, func), (_, _, _, ct, _) in raw.items():
        label = wanted.get((os.path.basename(filename), func))
        if label:
            cumulative[label] = max(cumulative[label], ct)
    print(f"\ncProfile of {n:,} jobs.enqueue (autocommit): client time per job, inflated")
    for label in wanted.values():
        if label in cumulative:
            print(f"  {label:<46} {cumulative[label] / n * 1e6:8.1f} us")
    print(f"  {'(profiled total)':<46} {total / n * 1e6:8.1f} us")
    print("  top functions by own time:")
    top = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:14]
    for (filename, line, func), (_, calls, tt, _, _) in top:
        where = f"{os.path.basename(filename)}:{line} {func}"
        print(f"    {where:<56} {tt / n * 1e6:7.1f} us  ({calls / n:.0f}/job)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="measured jobs per side per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    parser.add_argument("--profile", action="store_true", help="cProfile Tockwork's client")
    parser.add_argument("--peer-python", default=str(PEER_PYTHON), help="PgQueuer's venv")
    args = parser.parse_args(argv)
    server = database_url()
    with psycopg.connect(server, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
        others = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    assert version is not None and fsync is not None and others is not None
    print(
        f"PostgreSQL {version[0]} (fsync={fsync[0]}); {others[0]} other client connection(s) "
        "on the server (WAL counters are cluster-wide)",
        flush=True,
    )
    name = f"tockwork_enqueue_one_{os.getpid()}"
    with devdb.throwaway_database(server, name, components=("jobs",)) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET track_functions = 'pl'").format(sql.Identifier(name))
            )
        sides: dict[str, tuple[str, ...]] = {"Tockwork": TOCKWORK_TABLES}
        python = None
        try:
            python = peer_python(args.peer_python)
            peer(python, url, "install")
            sides["PgQueuer"] = PGQUEUER_TABLES
        except (PeerUnavailable, RuntimeError, subprocess.SubprocessError) as exc:
            print(f"PgQueuer left out: {exc}")
        totals: dict[str, dict[str, float]] = {s: defaultdict(float) for s in sides}
        entries: dict[str, dict[str, float]] = {s: defaultdict(float) for s in sides}
        payloads: dict[str, list[str]] = {s: [] for s in sides}
        with psycopg.connect(url, autocommit=True) as listener:
            for channel in CHANNELS:
                listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            for _ in range(args.rounds):
                for side, tables in sides.items():
                    with psycopg.connect(url, autocommit=True) as conn:
                        conn.execute(
                            sql.SQL("TRUNCATE {}").format(
                                sql.SQL(", ").join(map(sql.Identifier, tables))
                            )
                        )
                    drain_notifies(listener, 0.2)  # the TRUNCATE's own (PgQueuer's trigger)
                    before = snapshot(url, tables)
                    if side == "Tockwork":
                        run = tockwork_pass(url, args.n)
                    else:
                        assert python is not None
                        run = peer(python, url, "account", args.n)
                        run["server_cpu"] = -1.0 if run["server_cpu"] is None else run["server_cpu"]
                    payloads[side] += drain_notifies(listener, 0.5)
                    time.sleep(1.0)  # the client's backend has exited: its stats are flushed
                    after = snapshot(url, tables)
                    for key, value in after.items():
                        totals[side][key] += value - before.get(key, 0.0)
                    for key in ("seconds", "cpu", "server_cpu", "statements"):
                        totals[side][key] += float(run[key])
                    for key, value in index_entries(url, tables).items():
                        entries[side][key] += value
        report(args, sides, totals, entries, payloads)
        if args.profile:
            profile_tockwork(url, args.n)
    return 0


def report(
    args: argparse.Namespace,
    sides: dict[str, tuple[str, ...]],
    totals: dict[str, dict[str, float]],
    entries: dict[str, dict[str, float]],
    payloads: dict[str, list[str]],
) -> None:
    measured = args.n * args.rounds
    inserted = (args.n + WARMUP) * args.rounds
    names = list(sides)
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, values: list[str]) -> None:
        rows.append((label, values))

    add("jobs/s (wall, autocommit)", [f"{measured / totals[s]['seconds']:,.0f}" for s in names])
    add("wall per job", [f"{totals[s]['seconds'] / measured * 1e6:.0f} us" for s in names])
    add("client CPU per job", [f"{totals[s]['cpu'] / measured * 1e6:.0f} us" for s in names])
    server = [totals[s]["server_cpu"] for s in names]
    add(
        "server backend CPU per job",
        ["-" if c < 0 else f"{c / measured * 1e6:.0f} us" for c in server],
    )
    statements = [totals[s]["statements"] / measured for s in names]
    add("statements = round trips per job", [f"{x:.2f}" for x in statements])
    commits = [totals[s]["xact_commit"] / inserted for s in names]
    add("transactions per job (with autovacuum's)", [f"{x:.2f}" for x in commits])
    for s in names:
        for table in sides[s]:
            add(
                f"rows written: {table}",
                [f"{totals[o][f'rows {table}'] / inserted:.2f}" if o == s else "-" for o in names],
            )
    for s in names:
        for label, value in sorted(entries[s].items()):
            add(
                f"index entries: {label}",
                [f"{value / inserted:.2f}" if o == s else "-" for o in names],
            )
        add(
            f"index entries, {s} total",
            [f"{sum(entries[s].values()) / inserted:.2f}" if o == s else "-" for o in names],
        )
    triggers = [totals[s]["trigger calls"] / inserted for s in names]
    add("trigger function calls per job", [f"{x:.2f}" for x in triggers])
    add("NOTIFYs per job", [f"{len(payloads[s]) / inserted:.2f}" for s in names])
    add(
        "NOTIFY payload bytes",
        [
            f"{sum(len(p.encode()) for p in payloads[s]) / max(1, len(payloads[s])):.0f}"
            for s in names
        ],
    )
    add("WAL bytes per job (LSN delta)", [f"{totals[s]['wal_lsn'] / inserted:.0f}" for s in names])
    add("WAL records per job", [f"{totals[s]['wal_records'] / inserted:.2f}" for s in names])
    add("WAL full-page images per job", [f"{totals[s]['wal_fpi'] / inserted:.3f}" for s in names])
    width = max(len(label) for label, _ in rows)
    print(f"\n{args.rounds} rounds of {args.n:,} measured jobs (+{WARMUP} warm-up) per side")
    print(f"{'':<{width}}  " + "  ".join(f"{s:>12}" for s in names))
    for label, values in rows:
        print(f"{label:<{width}}  " + "  ".join(f"{v:>12}" for v in values))
    if len(names) == 2:
        a, b = (measured / totals[s]["seconds"] for s in names)
        print(f"Tockwork / PgQueuer: {a / b:.2f}x")


if __name__ == "__main__":
    raise SystemExit(main())
