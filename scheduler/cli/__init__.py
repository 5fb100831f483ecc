"""The ``tockwork`` command line: one sub-command module per command group, wired here.

- ``worker.py``: ``migrate``, ``worker``
- ``jobs.py``: ``jobs dead|list|show|requeue|cancel``, ``stats``
- ``schedules.py``: ``scheduler``, ``schedules sync|list|show|preview``
- ``outbox.py``: ``relay``, ``outbox dead|retry``
- ``ops.py``: ``healthz``, ``metrics-server``
- ``preview.py``: ``preview``, ``zones`` (no database)
- ``common.py``: argument types, ``--app`` import, the database URL and the schema check

Every sub-command module exposes ``register(subparsers)``, which adds its parsers and sets
``func`` on them; ``func(args) -> int`` returns the exit code. Bad input (a malformed rule, an
unknown zone, a bad flag) exits with code 2 and a message naming the field and the value.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import psycopg

from scheduler.cli import dashboard as dashboard_command
from scheduler.cli import jobs as jobs_commands
from scheduler.cli import ops, outbox, preview, schedules, worker
from scheduler.cli.common import SubParsers
from timezones.errors import InvalidInput, TockworkError

# Each entry adds its sub-commands to the parser.
_MODULES: list[Callable[[SubParsers[argparse.ArgumentParser]], None]] = [
    worker.register,
    jobs_commands.register,
    schedules.register,
    outbox.register,
    ops.register,
    preview.register,
    dashboard_command.register,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tockwork",
        description="PostgreSQL-backed job queue, scheduler and recurring reminders.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _MODULES:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # argparse exits with code 2 on a bad flag
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except Exception as exc:
        # Exit codes by class: bad input (InvalidInput, the root every package's input errors
        # share) is 2; any other Tockwork error or a lost database is an operational failure, 1.
        if isinstance(exc, InvalidInput):
            print(f"tockwork {args.command}: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, TockworkError | psycopg.OperationalError):
            # An operational failure (database unreachable, a migration refused): say what,
            # without a traceback.
            print(f"tockwork {args.command}: failed: {exc}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        return 130
