"""What every ``tockwork`` sub-command shares: the parser class, argument types, ``--app``,
the database URL (and when the embedded development server may be used), the schema check.

Argument types are declared once here and raise :class:`argparse.ArgumentTypeError`, so a bad
value is a usage error: one line ``tockwork SUBCOMMAND: error: ...`` on stderr and exit code 2.
Every value a message embeds is bounded (:func:`timezones.errors.shown`).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import re
import sys
import uuid
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import psycopg
from psycopg import conninfo as pg_conninfo

from jobs import connect as jobs_connect
from jobs import connect_kwargs as jobs_connect_kwargs
from jobs import pooler_mode
from jobs.internal import LISTEN_URL_ENV, POOLER_ENV, POOLERS, Pooler, redaction
from jobs.internal import config_settings as jobs_settings
from jobs.internal import listen_url as jobs_listen_url
from jobs.primary import REQUIRE_SYNC_ENV, require_sync_replication
from scheduler.devdb import DEFAULT_DIR, DEV_DB_VARIABLE, database_url, dev_db_allowed, is_running
from scheduler.migrations import COMPONENTS
from timezones.errors import InvalidInput, shown

SubParsers = argparse._SubParsersAction  # the type of ``parser.add_subparsers()``
C = TypeVar("C")

# Upper bounds of the numeric flags: large enough for any real use, small enough that nothing
# overflows (a timedelta, a PostgreSQL integer) or runs for ever.
MAX_SECONDS = 366 * 24 * 3600  # a year, for every duration flag
MAX_COUNT = 100_000  # --limit, --count
MAX_CONCURRENCY = 1024  # handler threads of one queue in one worker
MAX_ID = 2**63 - 1  # a bigint


# Values each argument type refuses, by type function: the generated bad-input suite
# (tests/acceptance/test_cli_bad_input.py) feeds every one of them to every flag of that type.
REFUSES: weakref.WeakKeyDictionary[Callable[[str], Any], tuple[str, ...]] = (
    weakref.WeakKeyDictionary()
)

_NOT_NUMBERS = ("x", "", " ", "inf", "-inf", "nan", "1e309", "0x10", "1_0_", "٣")


class InputError(InvalidInput):
    """A command's input is invalid; the CLI prints the message and exits with code 2."""


class HelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: X)`` to an option's help unless it says its default itself, or has
    none worth saying (``None``, ``False``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" not in text
            and default is not None
            and default is not False
            and default is not argparse.SUPPRESS
            and (action.option_strings or action.nargs in (argparse.OPTIONAL, "*"))
        ):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line naming the sub-command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        one_line = " ".join(message.split())
        # "argument --lease: --lease must be ..." -> "--lease must be ...": a type's message
        # names its flag already.
        match = re.fullmatch(r"argument (\S+?)(?:/\S+)?: (\1\b.*)", one_line)
        if match:
            one_line = match.group(2)
        self.exit(2, f"{self.prog}: error: {one_line} (see {self.prog} --help)\n")


# -- argument types ---------------------------------------------------------------------------


def _number(field: str, text: str, kind: type[int] | type[float]) -> float:
    try:
        if not text.isascii():  # int() and float() take any script's digits ('٣' is 3)
            raise ValueError(text)
        value = kind(text.strip()) if kind is int else float(text)
    except (ValueError, OverflowError):
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{field} must be {noun}, got {shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{field} must be a finite number, got {shown(text)}")
    return value


def integer(field: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type: an integer from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        value = int(_number(field, text, int))
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{field} must be from {minimum:,} to {maximum:,}, got {shown(text)}"
            )
        return value

    REFUSES[parse] = (*_NOT_NUMBERS, "1.5", str(minimum - 1), str(maximum + 1), "9" * 30)
    return parse


def positive_int(field: str, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type: an integer from 1 to ``maximum``."""
    return integer(field, 1, maximum)


def job_id(field: str = "--id") -> Callable[[str], int]:
    """An argparse type: a job id (a positive bigint)."""
    return integer(field, 1, MAX_ID)


def seconds(
    field: str, *, positive: bool = False, minimum: float = 0.0, maximum: float = MAX_SECONDS
) -> Callable[[str], timedelta]:
    """An argparse type: a finite number of seconds from ``minimum`` (above it when
    ``positive``) to ``maximum``, as a timedelta."""

    def parse(text: str) -> timedelta:
        value = _number(field, text, float)
        if value < minimum or (positive and value == minimum):
            bound = f"greater than {minimum:g}" if positive else f"at least {minimum:g}"
            raise argparse.ArgumentTypeError(
                f"{field} must be a number of seconds {bound}, got {shown(text)}"
            )
        if value > maximum:
            raise argparse.ArgumentTypeError(
                f"{field} must be at most {maximum:,.0f} seconds, got {shown(text)}"
            )
        return timedelta(seconds=value)

    low = [str(minimum)] if positive else [str(minimum - 0.001), "-1"]
    REFUSES[parse] = (*_NOT_NUMBERS, *low, str(maximum * 2), "9" * 400)
    return parse


def event_id(text: str) -> str:
    """An argparse type: an outbox event id (a UUID)."""
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--id must be an event id (a UUID), got {shown(text)}"
        ) from None


def positive_float(field: str, maximum: float = MAX_SECONDS) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds above 0, as a float."""
    parse_seconds = seconds(field, positive=True, maximum=maximum)

    def parse(text: str) -> float:
        return parse_seconds(text).total_seconds()

    REFUSES[parse] = REFUSES[parse_seconds]
    return parse


def port(field: str) -> Callable[[str], int]:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    return integer(field, 0, 65535)


def text(field: str, maximum: int = 200) -> Callable[[str], str]:
    """An argparse type: a non-empty line of text of at most ``maximum`` characters."""

    def parse(value: str) -> str:
        if not value or len(value) > maximum or value != value.strip() or "\n" in value:
            raise argparse.ArgumentTypeError(
                f"{field} must be a non-empty line of at most {maximum} characters without "
                f"leading or trailing spaces, got {shown(value)}"
            )
        return value

    REFUSES[parse] = ("", " x", "x ", "a\nb", "x" * (maximum + 1))
    return parse


def after_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--after ID``: a list command's keyset cursor (the last id of the previous page)."""
    parser.add_argument(
        "--after",
        type=integer("--after", 0, MAX_ID),
        metavar="ID",
        help=f"the page after this {what} id (the last id of the previous page)",
    )


def instant(text: str) -> datetime:
    """An argparse type: an aware ISO 8601 instant (``Z`` or an offset required)."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 instant such as 2026-12-01T08:00Z, got {shown(text)}"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"the instant {shown(text)} needs an offset or Z")
    return value


def check_argv(argv: list[str]) -> str | None:
    """Why ``argv`` cannot be used, or ``None``: a NUL byte, or bytes that are not UTF-8 (the
    database takes neither, so no flag may carry them)."""
    for index, arg in enumerate(argv, 1):
        if "\x00" in arg:
            return f"argument {index} contains a NUL byte: {shown(arg)}"
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {index} is not valid UTF-8: {shown(arg)}"
    return None


# -- shared options ---------------------------------------------------------------------------


def config_args(parser: argparse.ArgumentParser, config: type[Any], *names: str) -> None:
    """Add the options of a service's config (:mod:`jobs.config`): the fields ``names``, in
    that order, each from its declaration (flag, default, bounds, help): nothing typed again.

    A ``timedelta`` takes seconds, an ``int`` an integer, a ``bool`` defaulting to true a
    ``--no-<name>`` switch. Each option's value lands in ``args.<field name>`` (a switch's in
    ``args.no_<name>``); build the config with :func:`config_from_args`.
    """
    declared = {f.name: (f, s) for f, s in jobs_settings(config)}
    for name in names:
        field, setting = declared[name]
        flag, default = setting.flag, field.default
        assert flag is not None, f"{config.__name__}.{name} has no flag"
        if isinstance(default, bool):
            # A switch that turns a default off: args.no_<name> is true when given.
            assert default and flag == f"--no-{name}", f"{flag}: a switch turns a default off"
            parser.add_argument(flag, action="store_true", help=setting.help)
        elif isinstance(default, timedelta):
            maximum = MAX_SECONDS if setting.maximum is None else setting.maximum
            parser.add_argument(
                flag,
                dest=name,
                type=seconds(
                    flag,
                    minimum=float(setting.minimum),
                    positive=setting.positive,
                    maximum=maximum,
                ),
                default=f"{default.total_seconds():g}",
                metavar=setting.metavar,
                help=setting.help,
            )
        elif isinstance(default, int):
            low = int(setting.minimum) + (1 if setting.positive else 0)
            high = MAX_COUNT if setting.maximum is None else int(setting.maximum)
            parser.add_argument(
                flag,
                dest=name,
                type=integer(flag, low, high),
                default=default,
                metavar=setting.metavar,
                help=setting.help,
            )
        else:
            raise TypeError(f"{config.__name__}.{name}: no option type for {default!r}")


def config_from_args(config: type[C], args: argparse.Namespace, **given: Any) -> C:
    """The config built from the options :func:`config_args` added (and ``given`` fields)."""
    values: dict[str, Any] = {}
    for f, setting in jobs_settings(config):
        if setting.flag is not None and f.name in args:
            values[f.name] = getattr(args, f.name)
        elif setting.flag == f"--no-{f.name}" and f"no_{f.name}" in args:
            values[f.name] = not getattr(args, f"no_{f.name}")
    return config(**values, **given)


def database_arg(parser: argparse.ArgumentParser, *, production: bool = False) -> None:
    """``--database-url``; production commands (worker, scheduler, relay) also get ``--dev-db``."""
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="PostgreSQL URL or key=value conninfo (default: $DATABASE_URL; without it, "
        + (
            f"refuses to start unless --dev-db or {DEV_DB_VARIABLE}=1)"
            if production
            else "the embedded development server of the project when it runs: see "
            "'tockwork dev-db')"
        ),
    )
    parser.add_argument(
        "--pooler",
        choices=POOLERS,
        help="what --database-url reaches: 'session' (PostgreSQL, or a session-mode pooler) or "
        "'transaction' (e.g. PgBouncer's pool_mode=transaction: no prepared statements, "
        "nothing that needs a session, LISTEN only over --listen-url) "
        f"(default: ${POOLER_ENV}, else session)",
    )
    parser.set_defaults(production=production, dev_db=False)
    if production:
        replication_arg(parser)
        parser.add_argument(
            "--dev-db",
            action="store_true",
            help="without a URL, run against the project's embedded development server, "
            f"starting it if needed (also {DEV_DB_VARIABLE}=1); never in production",
        )


def replication_arg(parser: argparse.ArgumentParser) -> None:
    """``--require-sync-replication``: the services, the dashboard and the health checks."""
    parser.add_argument(
        "--require-sync-replication",
        action="store_true",
        default=None,
        help="refuse to start (exit 2) unless the primary replicates synchronously, so that "
        "nothing acknowledged is lost at failover; healthz then fails without it "
        f"(default: ${REQUIRE_SYNC_ENV}, else off)",
    )


READ_URL_ENV = "TOCKWORK_READ_URL"


def read_url_arg(parser: argparse.ArgumentParser, *, health_checks: bool = False) -> None:
    """``--read-url``: what only reads (the dashboard's pages, stats, the metrics' gauges, the
    health checks that only read)."""
    what = (
        "what only reads (the gauges; the schema and scheduler-lag checks, with a check of "
        "the replica's lag); the database, LISTEN and replication checks stay on "
        "--database-url"
        if health_checks
        else "what only reads (figures, pages); actions always go to --database-url"
    )
    parser.add_argument(
        "--read-url",
        metavar="URL",
        help=f"a streaming replica's PostgreSQL URL for {what} "
        f"(default: ${READ_URL_ENV}, else --database-url)",
    )


def read_url(args: argparse.Namespace) -> str | None:
    """``--read-url``, else ``$TOCKWORK_READ_URL``, else None (read from the primary)."""
    given = getattr(args, "read_url", None) or os.environ.get(READ_URL_ENV) or None
    return None if given is None else check_url(given, "--read-url")


def read_replica(
    args: argparse.Namespace, *, reachable: bool = True, timeout: float = 5.0
) -> str | None:
    """:func:`read_url`, checked to reach a replica when the command starts.

    A server that is not in recovery is refused (:class:`InputError`, exit code 2): the read
    URL would put the reads on a primary while saying they come from a replica. One that cannot
    be reached raises :class:`scheduler.errors.ReadReplicaUnavailable` (exit code 1), unless
    ``reachable`` is False (``healthz``, whose ``replica`` check reports it). ``timeout``: the
    connection's (seconds).
    """
    url = read_url(args)
    if url is None:
        return None
    from scheduler.errors import ReadReplicaUnavailable
    from scheduler.health import replica_state

    try:
        with jobs_connect(url, autocommit=True, connect_timeout=max(1, round(timeout))) as conn:
            state = replica_state(conn)
    except (psycopg.OperationalError, OSError) as exc:
        if not reachable:
            return url
        raise ReadReplicaUnavailable(
            f"--read-url {database_name(url)}: cannot connect ({redact(_line(exc))})"
        ) from None
    if not state.in_recovery:
        problem = state.problem()
        assert problem is not None
        raise InputError("--read-url", redact(url), problem)
    return url


def require_sync(args: argparse.Namespace) -> bool:
    """``--require-sync-replication``, else ``$TOCKWORK_REQUIRE_SYNC_REPLICATION``, else off.

    Exported as the variable, as the pooler mode is (:func:`pooler`): the services read it when
    they are built. A bad value of the variable is an input error.
    """
    required = require_sync_replication(getattr(args, "require_sync_replication", None))
    os.environ[REQUIRE_SYNC_ENV] = "1" if required else "0"
    return required


def listen_url_arg(parser: argparse.ArgumentParser) -> None:
    """``--listen-url``: the services that LISTEN (the worker, the relay)."""
    parser.add_argument(
        "--listen-url",
        help="a direct PostgreSQL URL (no transaction pooler) for LISTEN wake-ups, when "
        "--database-url goes through a transaction-mode pooler; without one such a service "
        f"polls only (default: ${LISTEN_URL_ENV})",
    )


def pooler(args: argparse.Namespace) -> Pooler:
    """The command's pooler mode (``--pooler``, else ``$TOCKWORK_POOLER``, else session).

    The mode is exported as ``TOCKWORK_POOLER`` so that every connection of this process
    follows it, the ones an application's handlers open with ``jobs.connect`` included (as
    ``DATABASE_URL`` tells them the URL). A bad ``$TOCKWORK_POOLER`` is an input error.
    """
    mode = pooler_mode(getattr(args, "pooler", None))
    os.environ[POOLER_ENV] = mode
    return mode


def listen_url(args: argparse.Namespace) -> str | None:
    """``--listen-url``, else ``$TOCKWORK_LISTEN_URL``, else None."""
    return jobs_listen_url(getattr(args, "listen_url", None))


def connect_kwargs(args: argparse.Namespace, **kwargs: Any) -> dict[str, Any]:
    """``psycopg.connect`` keyword arguments for the command's pooler mode (services); exports
    the replication requirement (:func:`require_sync`) as well."""
    require_sync(args)
    return jobs_connect_kwargs(pooler(args), **kwargs)


def connect(
    args: argparse.Namespace, *, schema: bool = True, **kwargs: Any
) -> psycopg.Connection[Any]:
    """Open a connection to the command's database (``--database-url``) in its pooler mode.

    ``schema``: first check that the database is migrated as far as this code (else
    :class:`InputError`: the one line of :func:`unmigrated`, exit code 2), so that no command
    runs on a database nobody migrated or one behind the code (issue 26); ``migrate`` passes
    False. The check reads ``tockwork_migrations`` and leaves no transaction open.
    """
    url = resolve_url(args.database_url, args)
    conn = jobs_connect(url, pooler=pooler(args), **kwargs)
    if schema:
        from jobs.internal import pending_migrations

        try:
            missing = pending_migrations(conn, COMPONENTS)
            if not conn.autocommit:
                conn.rollback()
        except BaseException:
            conn.close()
            raise
        if missing:
            conn.close()
            raise InputError(unmigrated(url, missing))
    return conn


def log_args(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-json``: every long-running command logs the same way."""
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="the lowest level logged to stderr",
    )
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")


def list_args(parser: argparse.ArgumentParser, *, default: int = 100) -> None:
    """``--limit N`` (1 to :data:`MAX_COUNT`) and ``--json`` of a command that lists rows."""
    parser.add_argument(
        "--limit",
        type=positive_int("--limit", MAX_COUNT),
        default=default,
        metavar="N",
        help=f"at most this many (1 to {MAX_COUNT:,})",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list")


def metrics_args(parser: argparse.ArgumentParser, default_max_lag: timedelta) -> None:
    """``--metrics-port``, ``--metrics-host`` and ``--max-scheduler-lag`` of a service."""
    parser.add_argument(
        "--metrics-port",
        type=port("--metrics-port"),
        metavar="PORT",
        help="serve /metrics and /healthz on this port (0: any free port; default: no server)",
    )
    parser.add_argument(
        "--metrics-host", default="0.0.0.0", metavar="HOST", help="address to serve metrics on"
    )
    parser.add_argument(
        "--max-scheduler-lag",
        type=seconds("--max-scheduler-lag"),
        default=str(int(default_max_lag.total_seconds())),
        metavar="SECONDS",
        help="/healthz fails when a schedule is overdue by more (seconds; 0: do not check)",
    )


# -- --app ------------------------------------------------------------------------------------


def import_attribute(spec: str, flag: str = "--app") -> object:
    """Import ``module:attribute`` and return the attribute, called if it is a plain function
    (a factory). Modules resolve from the current directory first, as ``celery -A`` and
    ``procrastinate --app`` do. Failures raise :class:`InputError` naming the flag and value."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{flag} must look like module:attribute, got {shown(spec)}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            f"{flag} {shown(spec)}: cannot import {shown(module_name)} ({_line(exc)}; modules "
            f"resolve from the current directory {cwd})"
        ) from None
    except BaseException as exc:  # the module itself raised while importing (SystemExit too)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise InputError(
            f"{flag} {shown(spec)}: importing {shown(module_name)} failed: "
            f"{type(exc).__name__}: {_line(exc)}"
        ) from None
    try:
        value: object = getattr(module, attr)
    except AttributeError:
        raise InputError(
            f"{flag} {shown(spec)}: module {shown(module_name)} has no {shown(attr)}"
        ) from None
    if inspect.isfunction(value):
        try:
            value = value()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the factory raised: say so on one line
            raise InputError(
                f"{flag} {shown(spec)}: the factory {shown(attr)} failed: "
                f"{type(exc).__name__}: {_line(exc)}"
            ) from None
    return value


def _line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message on one bounded line."""
    message = " ".join(str(exc).split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


# -- the database URL -------------------------------------------------------------------------


def redact(text: str) -> str:
    """``text`` (a URL, a message) with every secret masked: the password of a URL or conninfo,
    tokens, keys, and the secrets this process was given (:mod:`jobs.redaction`)."""
    return redaction.redact(text)


def register_secrets(args: argparse.Namespace) -> None:
    """Register the secrets a command was given, so that nothing it prints shows them: the
    passwords of its database URLs (flags and environment) and the dashboard's token."""
    for url in (
        getattr(args, "database_url", None),
        os.environ.get("DATABASE_URL"),
        getattr(args, "listen_url", None),
        os.environ.get(LISTEN_URL_ENV),
        getattr(args, "read_url", None),
        os.environ.get(READ_URL_ENV),
    ):
        if url:
            try:
                password = pg_conninfo.conninfo_to_dict(url).get("password")
            except Exception:  # unparsable: its password is masked by pattern
                password = None
            redaction.register(str(password) if password else None)
    redaction.register(getattr(args, "token", None))
    redaction.register(os.environ.get("TOCKWORK_DASHBOARD_TOKEN"))


def check_url(url: str, field: str) -> str:
    """Raise :class:`InputError` unless libpq can parse ``url`` (and its ports are numbers)."""
    if not url.strip():
        raise InputError(field, url, "is empty")
    try:
        params = pg_conninfo.conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
        raise InputError(
            field, redact(url), f"not a PostgreSQL URL or conninfo ({redact(_line(exc))})"
        ) from None
    ports = str(params.get("port") or "")
    for item in filter(None, ports.split(",")):
        if not item.isdigit() or not 1 <= int(item) <= 65535:
            raise InputError(field, redact(url), f"port {shown(item)} is not from 1 to 65535")
    return url


def demo_url() -> str:
    """The server of a command that says it starts the embedded development server (``make
    demo``, ``make demo-queue``): ``DATABASE_URL`` when set (checked), else the embedded server
    in the checkout's ``.pgdata``, started if needed (and said so)."""
    env = os.environ.get("DATABASE_URL")
    return check_url(env, "DATABASE_URL") if env else database_url(DEFAULT_DIR)


def resolve_url(flag: str | None, args: argparse.Namespace | None = None) -> str:
    """``--database-url`` if given, else ``DATABASE_URL``, else the embedded development server.

    A production command (``args.production``: worker, scheduler, relay) uses the embedded
    server only when asked (``--dev-db`` or ``TOCKWORK_DEV_DB=1``): a deployment that forgot
    ``DATABASE_URL`` must fail loudly, not run against a private empty database.
    """
    if flag is not None:
        return check_url(flag, "--database-url")
    env = os.environ.get("DATABASE_URL")
    if env:
        return check_url(env, "DATABASE_URL")
    production = args is not None and getattr(args, "production", False)
    if production and not (getattr(args, "dev_db", False) or dev_db_allowed()):
        raise InputError(
            "no database given: set DATABASE_URL or pass --database-url "
            f"(for development, --dev-db or {DEV_DB_VARIABLE}=1 uses the embedded server)"
        )
    if not production and not is_running(DEFAULT_DIR):
        # Only what says so starts the embedded server (--dev-db, 'tockwork dev-db url'): a
        # command typed in a new shell must not start one, empty, where it happens to run.
        raise InputError(
            "no database given: set DATABASE_URL or pass --database-url (for development, "
            f"'tockwork dev-db url' starts the embedded server in {DEFAULT_DIR}, which the "
            "commands then use)"
        )
    return database_url()


def ensure_schema(url: str, *, apply: bool, flag: bool = False) -> None:
    """Apply the core migrations (``apply``) or refuse to start on an out-of-date schema.

    Raises :class:`InputError` (exit code 2) with one line naming the database and the command
    to run, so a command started against a database nobody migrated says what to do.
    ``flag``: the command has ``--migrate`` (say so). Connects in the pooler mode of the
    process (:func:`pooler` exported it).
    """
    from jobs import migrate
    from jobs.internal import pending_migrations as pending

    with jobs_connect(url) as conn:
        if apply:
            migrate(conn, COMPONENTS)
            return
        missing = pending(conn, COMPONENTS)
    if missing:
        raise InputError(unmigrated(url, missing, flag=flag))


def unmigrated(url: str, missing: Sequence[str] = (), *, flag: bool = False) -> str:
    """The one line every command prints on a database without the schema (or behind it)."""
    where = database_name(url)
    state = (
        f"is behind this version of Tockwork ({len(missing)} migration(s) to apply, first "
        f"{missing[0]})"
        if missing and not any(m.startswith("jobs/0001_") for m in missing)
        else "has no Tockwork schema"
    )
    also = " (or start this command with --migrate)" if flag else ""
    return f"the database {where} {state}: run 'tockwork migrate'{also}"


def database_name(url: str) -> str:
    """``dbname on host:port`` of a URL or conninfo, for messages (never the password)."""
    try:
        params = pg_conninfo.conninfo_to_dict(url)
    except Exception:
        return shown(redact(url))
    name = params.get("dbname") or params.get("user") or "postgres"
    host = str(params.get("host") or "localhost")
    port = params.get("port")
    return f"'{name}' on {host}{':' + str(port) if port else ''}"
