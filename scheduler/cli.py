"""The ``tockwork`` command line: one sub-command module per area, wired here.

Every sub-command module exposes ``register(subparsers)``, which adds its parsers and sets
``func`` on them; ``func(args) -> int`` returns the exit code. Bad input (a malformed rule, an
unknown zone, a bad flag) exits with code 2 and a message naming the field and the value.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

import psycopg

from jobs.errors import JobsError
from scheduler import cli_jobs, cli_ops, cli_outbox, cli_preview, cli_schedules
from scheduler.cli_common import InputError, SubParsers
from scheduler.errors import SchedulerError

# Each entry adds its sub-commands to the parser.
_MODULES: list[Callable[[SubParsers[argparse.ArgumentParser]], None]] = [
    cli_jobs.register,
    cli_schedules.register,
    cli_outbox.register,
    cli_ops.register,
    cli_preview.register,
]


def _is_input_error(exc: Exception) -> bool:
    """Bad input: our CLI's InputError, or a ValueError raised by one of our packages."""
    if isinstance(exc, InputError):
        return True
    package = type(exc).__module__.split(".")[0]
    return isinstance(exc, ValueError) and package in {"jobs", "timezones", "scheduler"}


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
        if _is_input_error(exc):
            print(f"tockwork {args.command}: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, JobsError | SchedulerError | psycopg.OperationalError):
            # An operational failure (database unreachable, a migration refused): say what,
            # without a traceback.
            print(f"tockwork {args.command}: failed: {exc}", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
