"""Generated bad input for every ``tockwork`` command: usage errors, never tracebacks.

The invariant, for every case of the table: the command exits with code 2, writes exactly one
line to stderr that names the offending flag or value, writes nothing to stdout, prints no
traceback, and writes nothing to the database. Nothing hangs (the test has a timeout).

The table is generated from the parser itself, so a new command or flag is covered without
editing this file: every argument type in ``scheduler/cli/common.py`` declares the values it
refuses (``REFUSES``), and each is fed to every flag of that type of every command; every
command that takes ``--database-url`` gets malformed URLs (flag and ``DATABASE_URL``); every
command gets NUL bytes and non-UTF-8 arguments. Hand-written cases follow (``--app`` values that
fail to import, definitions files that are not UTF-8 or not tables, filters, ...). The cases run
in-process through ``main(argv)`` for speed; a handful run as real processes too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from scheduler.cli import build_parser
from scheduler.cli.common import REFUSES
from tests.acceptance.cli_harness import run
from tests.acceptance.conftest import COUNTS

ROOT = Path(__file__).resolve().parents[2]
DB = "<db>"  # replaced by the test's database URL

# The smallest valid arguments of each command (besides --database-url): a case adds one bad
# value to them. A command missing here fails test_every_command_has_minimal_arguments.
MINIMAL: dict[str, list[str]] = {
    "tockwork migrate": [],
    "tockwork worker": ["--app", "tests.acceptance.apps_not_a_mapping:HANDLERS"],
    "tockwork jobs dead": [],
    "tockwork jobs list": ["--status", "dead"],
    "tockwork jobs show": ["1"],
    "tockwork jobs requeue": ["--id", "1"],
    "tockwork jobs cancel": ["--id", "1"],
    "tockwork stats": [],
    "tockwork processes": [],
    "tockwork scheduler": [],
    "tockwork schedules sync": ["<defs>"],
    "tockwork schedules list": [],
    "tockwork schedules show": ["k"],
    "tockwork schedules preview": ["k"],
    "tockwork schedules pause": ["k"],
    "tockwork schedules resume": ["k"],
    "tockwork schedules trigger": ["k"],
    "tockwork schedules backfill": [
        "k",
        "--start",
        "2026-01-01T00:00Z",
        "--end",
        "2026-01-02T00:00Z",
    ],
    "tockwork schedules overdue": [],
    "tockwork relay": ["--app", "tests.acceptance.apps_not_a_mapping:HANDLERS"],
    "tockwork outbox dead": [],
    "tockwork outbox retry": ["--all"],
    "tockwork limits set": ["--queue", "q", "--per-second", "10"],
    "tockwork limits list": [],
    "tockwork limits clear": ["--queue", "q"],
    "tockwork policies set": ["--queue", "q", "--fair"],
    "tockwork policies list": [],
    "tockwork policies clear": ["--queue", "q"],
    "tockwork healthz": [],
    "tockwork metrics-server": ["--port", "0"],
    "tockwork preview": ["daily@08:00", "--zone", "UTC", "--after", "2026-01-01T00:00Z"],
    "tockwork zones": [],
    "tockwork dev-db url": [],
    "tockwork dev-db status": [],
    "tockwork dev-db stop": [],
    "tockwork dev fake-push": [],
    "tockwork dashboard": ["--no-auth", "--port", "0"],
    "tockwork devices add": ["u", "fcm", "token-0123456789"],
    "tockwork devices list": [],
    "tockwork devices show": ["1"],
    "tockwork devices remove": ["1"],
    "tockwork webhooks add": ["https://8.8.8.8/hook"],
    "tockwork webhooks list": [],
    "tockwork webhooks show": ["1"],
    "tockwork webhooks disable": ["1"],
    "tockwork webhooks enable": ["1"],
    "tockwork webhooks rotate-secret": ["1"],
    "tockwork webhooks set-rate-limit": ["1", "--per-second", "10"],
    "tockwork webhooks remove": ["1"],
    "tockwork webhooks redeliver": ["--event", "0193a8e4-0000-7000-8000-000000000000"],
}

BAD_URLS = [
    "postgresql://h:notaport/db",
    "postgresql://h:70000/db",
    "postgresql://h:0/db",
    "host='unterminated",
    "dbname",
    "postgresql://[::1/db",
    "postgres://u@h/db?bogus=1",
    "nosuchkey=1",
    "postgresql://%zz@h/db",
    "http://example.com",
    "   ",
    "",
]

QUEUE_VALUES = [
    "q=99999999999", "q=0", "q=-1", "q=x", "q=1.5", "q=", "Bad Queue=2", "=3", "q\n=1",
    "default\n", "q=٣", "q=1e3", "x" * 300 + "=1",
]  # fmt: skip


@dataclass(frozen=True)
class Case:
    argv: list[str]
    needle: str  # what stderr must contain (the flag or the value)
    env: dict[str, str | None] = field(default_factory=dict)

    def resolve(self, db: str, files: dict[str, str]) -> list[str]:
        out = []
        for raw in self.argv:
            arg = raw.replace(DB, db)
            for key, path in files.items():
                arg = arg.replace(key, path)
            out.append(arg)
        return out


def leaves(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser that runs a command (``tockwork jobs show``, ...)."""
    children = [
        child
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for child in action.choices.values()
    ]
    if not children:
        yield parser
    for child in children:
        yield from leaves(child)


def _takes_url(leaf: argparse.ArgumentParser) -> bool:
    return any("--database-url" in a.option_strings for a in leaf._actions)


def _base(leaf: argparse.ArgumentParser, minimal: list[str] | None = None) -> list[str]:
    words = leaf.prog.split()[1:]
    url = ["--database-url", DB] if _takes_url(leaf) else []
    return [*words, *(MINIMAL[leaf.prog] if minimal is None else minimal), *url]


def generated_cases() -> list[Case]:
    cases: list[Case] = []
    for leaf in leaves(build_parser()):
        for action in leaf._actions:
            refused = REFUSES.get(action.type) if callable(action.type) else None
            if refused is None:
                continue
            for value in refused:
                if action.option_strings:
                    flag = action.option_strings[0]
                    cases.append(Case([*_base(leaf), flag, value], flag))
                else:  # a positional (jobs show ID): the bad value takes its place
                    rest = MINIMAL[leaf.prog][1:]
                    words = leaf.prog.split()[1:]
                    url = ["--database-url", DB] if _takes_url(leaf) else []
                    cases.append(Case([*words, value, *rest, *url], str(action.metavar)))
        if _takes_url(leaf):
            words = leaf.prog.split()[1:]
            for bad_url in BAD_URLS:
                argv = [*words, *MINIMAL[leaf.prog], "--database-url", bad_url]
                cases.append(Case(argv, "url"))
            for bad_url in BAD_URLS[:4]:
                env: dict[str, str | None] = {"DATABASE_URL": bad_url}
                cases.append(Case([*words, *MINIMAL[leaf.prog]], "DATABASE_URL", env))
        # Arguments PostgreSQL could not store: a NUL byte, bytes that are not UTF-8 (as
        # Python decodes them from argv: lone surrogates).
        for bad in ("a\x00b", "\x00", "caf\udce9"):
            cases.append(Case([*_base(leaf), "--name", bad], "argument"))
            cases.append(Case([*_base(leaf)[:-1], bad], "argument") if _takes_url(leaf) else
                         Case([*leaf.prog.split()[1:], bad], "argument"))  # fmt: skip
    for value in QUEUE_VALUES:
        cases.append(Case([*_base(_leaf("tockwork worker")), "--queue", value], "--queue"))
    # One queue given two concurrencies (issue 26: the last one won silently).
    for twice in (["q=1", "q=8"], ["default=2", "q=1", "default=3"]):
        argv = [*_base(_leaf("tockwork worker"))]
        for value in twice:
            argv += ["--queue", value]
        cases.append(Case(argv, "given twice"))
    return cases


def _leaf(prog: str) -> argparse.ArgumentParser:
    return next(p for p in leaves(build_parser()) if p.prog == prog)


def written_cases() -> list[Case]:
    w = ["worker", "--database-url", DB, "--app"]
    r = ["relay", "--database-url", DB, "--app"]
    apps = {
        "tests.acceptance.apps_failing_factory:app": "the factory 'app' failed: KeyError",
        "tests.acceptance.apps_failing_import:app": "RuntimeError: settings.toml is missing",
        "tests.acceptance.apps_exit_on_import:app": "SystemExit: run me as a script",
        "tests.acceptance.apps_not_a_mapping:HANDLERS": "must name",
        "tests.acceptance.apps_not_a_mapping:handlers": "must name",
        "tests.acceptance.apps_not_a_mapping:missing": "has no 'missing'",
        "no_such_module_xyz:handlers": "cannot import 'no_such_module_xyz'",
        "no_such_module_xyz.sub:handlers": "cannot import",
        "handlers": "module:attribute",
        ":handlers": "module:attribute",
        "os:": "module:attribute",
        "..x:y": "'..x'",
        "x" * 5000 + ":y": "cannot import",
    }
    cases = [Case([*w, app], needle) for app, needle in apps.items()]
    cases += [Case([*r, app], needle) for app, needle in apps.items()]
    # A worker with no handler would serve nothing (issue 26): refused.
    for app in ("tests.acceptance.apps_empty:EMPTY", "tests.acceptance.apps_empty:empty"):
        cases.append(Case([*w, app], "has no handler"))
    # A relay with no projection would project nothing (issue 26): refused the same way.
    for app in ("NO_PROJECTIONS", "NO_PROJECTION_LIST", "no_projections"):
        cases.append(Case([*r, f"tests.acceptance.apps_empty:{app}"], "has no projection"))
    sync = ["schedules", "sync", "--database-url", DB]
    for key, needle in {
        "<nonutf8>": "is not UTF-8",
        "<five>": "array of tables",
        "<listfive>": "array of tables",
        "<nottoml>": "is not valid TOML",
        "<dir>": "cannot be read",
        "<missing>": "no such file",
        "<badrule>": "31 2",
        "<unknownkey>": "unknown top-level keys",
        "<badoverlap>": "x.overlap",
        "<badmaxruns>": "x.max_runs",
        "<endbeforestart>": "must be after start_at",
    }.items():
        cases.append(Case([*sync, key], needle))
        cases.append(Case([*sync, key, "--dry-run"], needle))
        cases.append(Case(["scheduler", "--database-url", DB, "--definitions", key], needle))
    j = ["jobs"]
    cases += [
        Case([*j, "requeue", "--database-url", DB], "--id, --queue, --job-type or --error-code"),
        Case([*j, "requeue", "--since", "2026-01-01T00:00Z", "--database-url", DB], "filter"),
        Case([*j, "cancel", "--database-url", DB], "--id, --queue, --job-type or --error-code"),
        Case([*j, "cancel", "--database-url", DB, "--reason", "r"], "filter"),
        Case([*j, "requeue", "--queue", "q", "--since", "2026-02-01T00:00Z",
              "--until", "2026-01-01T00:00Z", "--database-url", DB], "--since"),
        Case([*j, "requeue", "--queue", "q", "--since", "yesterday"], "yesterday"),
        Case([*j, "requeue", "--queue", "q", "--until", "2026-01-01T00:00"], "offset"),
        Case([*j, "requeue", "--queue", "q", "--status", "leased"], "--status"),
        Case([*j, "list", "--database-url", DB], "--status"),
        Case([*j, "list", "--status", "bogus", "--database-url", DB], "bogus"),
        Case([*j, "show", "999999", "--database-url", DB], "no job with id 999999"),
        Case([*j, "cancel", "--id", "1", "--reason", "r" * 501], "--reason"),
        Case([*j, "nosuch"], "nosuch"),
        # Schedule operations (issue 24): an empty range, unknown overlap policies, a pause
        # that ends at no instant, a note too long.
        Case(["schedules", "backfill", "k", "--start", "2026-01-02T00:00Z",
              "--end", "2026-01-01T00:00Z", "--database-url", DB], "--end"),
        Case(["schedules", "backfill", "k", "--start", "2026-01-01T00:00Z",
              "--end", "2026-01-02T00:00Z", "--overlap", "queue", "--database-url", DB],
             "--overlap"),
        Case(["schedules", "trigger", "k", "--overlap", "queue", "--database-url", DB],
             "--overlap"),
        Case(["schedules", "trigger", "k", "--at", "2026-01-01T00:00", "--database-url", DB],
             "offset"),
        Case(["schedules", "pause", "k", "--until", "tomorrow", "--database-url", DB],
             "tomorrow"),
        Case(["schedules", "pause", "k", "--note", "n" * 501, "--database-url", DB], "--note"),
        Case(["schedules", "pause", "404", "--database-url", DB], "no schedule"),
        # Rate limits: a rate of zero, negative or not an integer, a queue name no job could
        # have, both or neither of --queue and --job-type.
        Case(["limits", "set", "--queue", "Bad Queue", "--per-second", "5",
              "--database-url", DB], "--queue 'Bad Queue'"),
        Case(["limits", "set", "--queue", "q", "--per-second", "0", "--database-url", DB],
             "--per-second"),
        Case(["limits", "set", "--queue", "q", "--per-second", "-3", "--database-url", DB],
             "--per-second"),
        Case(["limits", "set", "--queue", "q", "--per-second", "2.5", "--database-url", DB],
             "--per-second"),
        Case(["limits", "set", "--queue", "q", "--per-second", "ten", "--database-url", DB],
             "--per-second"),
        Case(["limits", "set", "--queue", "q", "--per-second", "5", "--per-minute", "0",
              "--database-url", DB], "--per-minute"),
        Case(["limits", "set", "--queue", "q", "--job-type", "t", "--per-second", "5",
              "--database-url", DB], "--job-type"),
        Case(["limits", "set", "--per-second", "5", "--database-url", DB], "--queue"),
        Case(["limits", "set", "--queue", "q", "--database-url", DB], "--per-second"),
        Case(["limits", "clear", "--database-url", DB], "--queue"),
        Case(["limits", "clear", "--queue", "Q!", "--database-url", DB], "--queue 'Q!'"),
        # Queue policies: a queue name no job could have, a per-key limit of zero, negative,
        # too large or not an integer, --fair with --no-fair, no --queue.
        Case(["policies", "set", "--queue", "Bad Queue", "--fair", "--database-url", DB],
             "--queue 'Bad Queue'"),
        Case(["policies", "set", "--queue", "q", "--concurrency-per-key", "0",
              "--database-url", DB], "--concurrency-per-key"),
        Case(["policies", "set", "--queue", "q", "--concurrency-per-key", "-2",
              "--database-url", DB], "--concurrency-per-key"),
        Case(["policies", "set", "--queue", "q", "--concurrency-per-key", "1.5",
              "--database-url", DB], "--concurrency-per-key"),
        Case(["policies", "set", "--queue", "q", "--concurrency-per-key", "100001",
              "--database-url", DB], "--concurrency-per-key"),
        Case(["policies", "set", "--queue", "q", "--fair", "--no-fair", "--database-url", DB],
             "--no-fair"),
        Case(["policies", "set", "--fair", "--database-url", DB], "--queue"),
        Case(["policies", "clear", "--database-url", DB], "--queue"),
        Case(["policies", "clear", "--queue", "Q!", "--database-url", DB], "--queue 'Q!'"),
        Case(["outbox", "retry", "--database-url", DB], "--id EVENT_ID"),
        Case(["outbox", "retry", "--id", "not-a-uuid", "--database-url", DB], "not-a-uuid"),
        Case(["schedules", "show", "no-such-key", "--database-url", DB], "no-such-key"),
        Case(["schedules", "preview", "no-such-key", "--database-url", DB], "no-such-key"),
        # Digits of other scripts are not an id (issue 26: '٣' showed schedule 3, '²' crashed).
        Case(["schedules", "show", "\u0663", "--database-url", DB], "'\u0663'"),
        Case(["schedules", "show", "\u00b2", "--database-url", DB], "'\u00b2'"),
        Case(["schedules", "preview", "\u0663", "--database-url", DB], "'\u0663'"),
        Case(["schedules", "preview", "k", "--after", "soon", "--database-url", DB], "soon"),
        Case(["relay", "--database-url", DB, "--app", "m:a", "--lease", "1", "--poll", "2"],
             "--lease must be longer than --poll"),
        Case(["migrate", "--with", "bogus", "--database-url", DB], "bogus"),
        Case(["nosuchcommand"], "nosuchcommand"),
        Case([], "COMMAND"),
        Case(["--no-such-flag"], "COMMAND"),
        Case(["stats", "--no-such-flag"], "--no-such-flag"),
        Case(["stats", "--watch", "--interval", "-1", "--database-url", DB], "--interval"),
        Case(["healthz", "--timeout", "-1", "--database-url", DB], "--timeout"),
        Case(["schedules", "list", "--limit", "-1", "--database-url", DB], "--limit"),
        Case(["worker", "--app", "x:y", "--lease", "inf", "--database-url", DB], "--lease"),
        Case(["worker", "--app", "x:y", "--metrics-port", "70000"], "--metrics-port"),
        Case(["preview", "every:1s", "--zone", "UTC", "--count", "1000000000"], "--count"),
    ]  # fmt: skip
    # Values the API refuses, named by the command's flag (not the API's argument).
    for command in (["jobs", "dead"], ["jobs", "list", "--status", "dead"],
                    ["jobs", "requeue"], ["jobs", "cancel"]):  # fmt: skip
        for queue in ("Bad Queue", "UPPER", "_lead", "q" * 64, "q/x", "ü"):
            cases.append(
                Case([*command, "--queue", queue, "--database-url", DB], "invalid --queue")
            )
    p = ["preview"]
    for rule, needle in {
        "daily@25:00": "'daily@25:00'",
        "cron:61 * * * *": "61",
        "cron:0 0 31 2 *": "31 2",
        "": "RULE",
        "rrule:FREQ=SOMETIMES": "SOMETIMES",
        "x" * 1_000_000: "RULE",
        '{"kind": "cron"}': "RULE",
        "every:0s": "RULE",
        # Rules that never fire, or would search without end (refused at parse time).
        "rrule:FREQ=DAILY;INTERVAL=0": "INTERVAL",
        "rrule:FREQ=DAILY;COUNT=0": "COUNT",
        "rrule:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=-31": "never",
        "rrule:FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=-30": "never",
        "rrule:FREQ=YEARLY;BYYEARDAY=366;BYMONTH=1": "never",
        "weekly:monkey@08:00": "monkey",
        "monthly:\u0663": "RULE",
        "cron:" + "1," * 300_000 + "1 * * * *": "RULE",
    }.items():
        cases.append(Case([*p, rule, "--zone", "UTC", "--after", "2026-01-01T00:00Z"], needle))
    for zone, needle in {
        "Europe/Pariss": "did you mean 'Europe/Paris'",
        "+05:00": "fixed UTC offset",
        "": "--zone",
        "z" * 1_000_000: "--zone",
    }.items():
        cases.append(Case([*p, "daily@08:00", "--zone", zone], needle))
    cases += [
        Case([*p, "daily@08:00", "--zone", "UTC", "--gap", "later"], "--gap: unknown policy"),
        Case([*p, "daily@08:00", "--zone", "UTC", "--fold", "x"], "--fold: unknown policy"),
        Case([*p, "daily@08:00", "--zone", "UTC", "--after", "2026-01-01T00:00"], "--after"),
        Case([*p, "daily@08:00", "--zone", "UTC", "--after", "tomorrow"], "tomorrow"),
    ]
    # The commands deployed in production refuse the embedded server unless asked.
    no_url: dict[str, str | None] = {"DATABASE_URL": None, "TOCKWORK_DEV_DB": None}
    cases += [
        Case(["worker", "--app", "x:y"], "DATABASE_URL", no_url),
        Case(["scheduler"], "DATABASE_URL", no_url),
        Case(["relay", "--app", "x:y"], "DATABASE_URL", no_url),
        Case(["worker", "--app", "x:y"], "DATABASE_URL", {**no_url, "TOCKWORK_DEV_DB": "0"}),
    ]
    return cases


CASES = generated_cases() + written_cases()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    contents: dict[str, bytes] = {
        "<defs>": b'[[schedule]]\nkey = "k"\nrule = "daily@08:00"\nzone = "UTC"\njob_type = "t"\n',
        "<nonutf8>": b'[[schedule]]\nkey = "caf\xe9"\n',
        "<five>": b"schedule = 5\n",
        "<listfive>": b"schedule = [5]\n",
        "<nottoml>": b"[[schedule]\n",
        "<badrule>": b'[[schedule]]\nkey = "x"\nrule = "cron:0 0 31 2 *"\nzone = "UTC"\n'
        b'job_type = "t"\n',
        "<unknownkey>": b"[other]\nx = 1\n",
        # Issue 24: an unknown overlap policy, a run limit below one, an end before the start.
        "<badoverlap>": b'[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\n'
        b'overlap = "queue"\n',
        "<badmaxruns>": b'[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\n'
        b"max_runs = 0\n",
        "<endbeforestart>": b'[[schedule]]\nkey = "x"\nrule = "every:1m"\njob_type = "t"\n'
        b"start_at = 2030-02-01T00:00:00Z\nend_at = 2030-01-01T00:00:00Z\n",
    }
    out = {}
    for key, data in contents.items():
        path = tmp_path / (key.strip("<>") + ".toml")
        path.write_bytes(data)
        out[key] = str(path)
    (tmp_path / "adir").mkdir()
    out["<dir>"] = str(tmp_path / "adir")
    out["<missing>"] = str(tmp_path / "missing.toml")
    return out


def _fingerprint(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    """Rows of every table: a bad input writes nothing."""
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
    ]
    counts = tuple(
        conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(t))).fetchone()
        for t in tables
    )
    conn.rollback()
    return tuple(tables), counts


def test_every_command_has_minimal_arguments() -> None:
    """The generator knows how to call every command (else a new command would go untested)."""
    assert sorted(p.prog for p in leaves(build_parser())) == sorted(MINIMAL)


@pytest.mark.timeout(240)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    db_url: str, conn: psycopg.Connection[Any], files: dict[str, str]
) -> None:
    """Every case: exit 2, one stderr line naming the flag or value, empty stdout, no
    traceback, the database unchanged."""
    before = _fingerprint(conn)
    failures = []
    for case in CASES:
        argv = case.resolve(db_url, files)
        result = run(argv, case.env)
        lines = result.err.strip().splitlines()
        ok = (
            result.code == 2
            and len(lines) == 1
            and case.needle in result.err
            and "Traceback" not in result.err
            and result.out == ""
            and len(result.err) < 2000
        )
        if not ok:
            failures.append(f"{[a[:80] for a in argv]}: exit {result.code}, {result.err[:400]!r}")
    assert _fingerprint(conn) == before
    COUNTS["CLI bad input (in-process)"] = len(CASES)
    assert not failures, f"{len(failures)} of {len(CASES)} cases failed:\n" + "\n".join(
        failures[:40]
    )
    assert len(CASES) >= 500


def _process(args: list[str], env: dict[str, str | None] | None = None, cwd: Path = ROOT) -> Any:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_handful_as_real_processes(db_url: str, files: dict[str, str], tmp_path: Path) -> None:
    """The same invariant through a real process (argv from the OS, the real stderr)."""
    picked = [
        Case(["jobs", "dead", "--database-url", "postgresql://h:notaport/db"], "notaport"),
        Case(["worker", "--database-url", DB, "--app",
              "tests.acceptance.apps_failing_factory:app"], "KeyError"),
        Case(["schedules", "sync", "<nonutf8>", "--database-url", DB], "is not UTF-8"),
        Case(["schedules", "sync", "<five>", "--database-url", DB], "array of tables"),
        Case(["healthz", "--timeout", "-1", "--database-url", DB], "--timeout"),
        Case(["preview", "every:1s", "--zone", "UTC", "--count", "1000000000"], "--count"),
        Case(["worker", "--app", "x:y", "--queue", "q=99999999999"], "--queue"),
        Case(["worker", "--app", "x:y"], "DATABASE_URL",
             {"DATABASE_URL": None, "TOCKWORK_DEV_DB": None,
              "TOCKWORK_PGDATA": str(tmp_path / "never")}),
    ]  # fmt: skip
    for case in picked:
        result = _process(case.resolve(db_url, files), case.env)
        assert result.returncode == 2, (case.argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert case.needle in result.stderr and "Traceback" not in result.stderr
        assert result.stdout == ""
    assert not (tmp_path / "never").exists()  # the refusal started no embedded server
    COUNTS["CLI bad input (processes)"] = len(picked)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:s3cret@y/z",  # libpq cannot parse it and psycopg quotes it whole
        "postgresql://u:s3cret@h:notaport/db",
        "host=x password=s3cret port=abc",
        "postgresql://u:s3cret@127.0.0.1:1/db",  # parses, unreachable: the failure line
    ],
)
def test_a_password_in_the_database_url_is_never_echoed(url: str) -> None:
    """Whatever is wrong with the URL, the one line the command prints masks its password."""
    result = _process(["stats"], {"DATABASE_URL": url, "PGCONNECT_TIMEOUT": "2"})
    assert result.returncode in (1, 2), result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
