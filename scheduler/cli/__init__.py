"""The ``tockwork`` command line: one sub-command module per command group, wired here.

- ``worker.py``: ``migrate``, ``worker``
- ``jobs.py``: ``jobs dead|list|show|requeue|cancel``, ``stats``
- ``schedules.py``: ``scheduler``, ``schedules sync|list|show|preview``
- ``outbox.py``: ``relay``, ``outbox dead|retry``
- ``devices.py``: ``devices add|list|show|remove`` (the device registry)
- ``limits.py``: ``limits set|list|clear`` (global rate limits)
- ``policies.py``: ``policies set|list|clear`` (fairness and per-key concurrency per queue)
- ``webhooks.py``: ``webhooks add|list|show|disable|enable|rotate-secret|remove|redeliver``
- ``ops.py``: ``healthz``, ``metrics-server``
- ``processes.py``: ``processes`` (the registry of running processes)
- ``preview.py``: ``preview``, ``zones`` (no database)
- ``dev.py``: ``dev-db url|status|stop`` (the embedded development server), ``dev fake-push``
  (local FCM and APNs fakes)
- ``common.py``: the parser class, argument types, ``--app`` import, the database URL and the
  schema check

Every sub-command module exposes ``register(subparsers)``, which adds its parsers and sets
``func`` on them; ``func(args) -> int`` returns the exit code.

Exit codes, and what reaches stderr (always one line, never a traceback unless ``--debug`` or
``TOCKWORK_DEBUG=1``): a usage error (a bad flag or value, caught by argparse and the types in
``common.py``) or bad input (:class:`~timezones.errors.InvalidInput`, raised by the API or a
command) is 2; an operational failure (any other Tockwork error, a lost or unreachable
database, an action by id that matched nothing) is 1; an unexpected exception is 1 too, with
its class named; Ctrl-C is 130. Every message starts with the sub-command
(``tockwork jobs show: error: no job with id 4711``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from functools import cache
from importlib import metadata

import psycopg

from scheduler.cli import dashboard as dashboard_command
from scheduler.cli import (
    dev,
    devices,
    limits,
    ops,
    outbox,
    policies,
    preview,
    processes,
    schedules,
    webhooks,
    worker,
)
from scheduler.cli import jobs as jobs_commands
from scheduler.cli.common import (
    Parser,
    SubParsers,
    check_argv,
    redact,
    register_secrets,
    unmigrated,
)
from timezones.errors import InvalidInput, TockworkError

# Each entry adds its sub-commands to the parser.
_MODULES: list[Callable[[SubParsers[argparse.ArgumentParser]], None]] = [
    worker.register,
    jobs_commands.register,
    schedules.register,
    outbox.register,
    devices.register,
    webhooks.register,
    limits.register,
    policies.register,
    ops.register,
    processes.register,
    preview.register,
    dev.register,
    dashboard_command.register,
]

DEBUG_VARIABLE = "TOCKWORK_DEBUG"


def version() -> str:
    try:
        return metadata.version("tockwork")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="tockwork",
        description="PostgreSQL-backed job queue, scheduler and recurring reminders. "
        "Every command takes --help.",
        epilog="Exit codes: 0 done, 1 operational failure (database unreachable, nothing "
        "matched an id), 2 bad input or usage, 130 interrupted. Without DATABASE_URL or "
        "--database-url, commands use the embedded development server in ./.pgdata (see "
        "'tockwork dev-db'); worker, scheduler and relay refuse to unless given --dev-db.",
    )
    parser.add_argument("--version", action="version", version=f"tockwork {version()}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help=f"print the traceback of an unexpected error (also {DEBUG_VARIABLE}=1)",
    )
    sub: SubParsers[argparse.ArgumentParser] = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Parser
    )
    for register in _MODULES:
        register(sub)
    _name_leaves(parser)
    return parser


@cache
def _parser() -> argparse.ArgumentParser:
    # Building the tree costs tens of milliseconds; parsing never changes it, so main() (run
    # thousands of times in-process by the bad-input suite) builds it once.
    return build_parser()


def _name_leaves(parser: argparse.ArgumentParser) -> None:
    """Give every parser its full name as a default (``tockwork jobs show``): messages of the
    command it runs start with it."""
    flags = frozenset(flag for action in parser._actions for flag in action.option_strings)
    parser.set_defaults(prog=parser.prog, flags=flags)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _name_leaves(child)


def _as_flag(exc: InvalidInput, flags: frozenset[str]) -> str:
    """The message of an error the API raised, naming the command's flag rather than the API's
    argument (``invalid --queue 'Bad Queue'``, not ``invalid queue 'Bad Queue'``)."""
    text = _one_line(exc)
    field = exc.field
    for name in (field, field.removesuffix("s")):  # ids -> --id, statuses -> --status
        flag = "--" + name.replace("_", "-")
        if name and flag in flags:
            for head in (f"invalid {field} ", f"{field}: "):
                if text.startswith(head):
                    return text.replace(field, flag, 1)
    return text


def _one_line(exc: BaseException, limit: int = 500) -> str:
    """An error's message on one bounded line, a password in a database URL masked (psycopg
    quotes a connection string it cannot parse whole, password included)."""
    text = redact(" ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tockwork ARGV`` and return its exit code (argparse raises ``SystemExit`` for
    ``--help``, ``--version`` and usage errors, as it always does)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    problem = check_argv(arguments)
    if problem is not None:
        print(f"tockwork: error: {problem}", file=sys.stderr)
        return 2
    try:
        args = _parser().parse_args(arguments)
    except KeyboardInterrupt:
        return 130
    register_secrets(args)  # before anything can print them
    debug = bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_VARIABLE, "") == "1"
    prog: str = getattr(args, "prog", "tockwork")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `tockwork zones | head -1`: the reader left; nothing more to say, and nothing for
        # Python to complain about when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):  # a captured stdout has no descriptor
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except InvalidInput as exc:
        print(f"{prog}: error: {_as_flag(exc, args.flags)}", file=sys.stderr)
        return 2
    except psycopg.errors.UndefinedTable:
        # A command that reads the tables directly on a database nobody migrated: the same line
        # and exit code as the commands that check the schema first (ensure_schema).
        url = getattr(args, "database_url", None) or os.environ.get("DATABASE_URL") or ""
        where = unmigrated(url) if url else unmigrated("dbname=development")
        print(f"{prog}: error: {where}", file=sys.stderr)
        return 2
    except (TockworkError, psycopg.OperationalError) as exc:
        # An operational failure (database unreachable, a migration refused): say what.
        print(f"{prog}: failed: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        if debug:
            print(redact(traceback.format_exc()), end="", file=sys.stderr)
        else:
            print(
                f"{prog}: unexpected error: {type(exc).__name__}: {_one_line(exc)} "
                f"(run with --debug or {DEBUG_VARIABLE}=1 for the traceback)",
                file=sys.stderr,
            )
        return 1
