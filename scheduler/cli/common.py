"""What every ``tockwork`` sub-command shares."""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from datetime import datetime, timedelta

from scheduler.devdb import database_url
from scheduler.migrations import COMPONENTS
from timezones.errors import InvalidInput

SubParsers = argparse._SubParsersAction  # the type of ``parser.add_subparsers()``


class InputError(InvalidInput):
    """A command's input is invalid; the CLI prints the message and exits with code 2."""


def seconds(field: str) -> Callable[[str], timedelta]:
    """An argparse type: a non-negative number of seconds, as a timedelta."""

    def parse(text: str) -> timedelta:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{field} must be a number of seconds, got {text!r}"
            ) from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{field} must not be negative, got {text!r}")
        return timedelta(seconds=value)

    return parse


def instant(text: str) -> datetime:
    """An argparse type: an aware ISO 8601 instant (``Z`` or an offset required)."""
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 instant, got {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"the instant {text!r} needs an offset or Z")
    return value


def database_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL (default: $DATABASE_URL, else the project's embedded server)",
    )


def log_args(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-json``: every long-running command logs the same way."""
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")


def metrics_args(parser: argparse.ArgumentParser, default_max_lag: timedelta) -> None:
    """``--metrics-port``, ``--metrics-host`` and ``--max-scheduler-lag`` of a service."""
    parser.add_argument(
        "--metrics-port", type=int, help="serve /metrics and /healthz on this port (0: any)"
    )
    parser.add_argument("--metrics-host", default="0.0.0.0", help="address to serve metrics on")
    parser.add_argument(
        "--max-scheduler-lag",
        type=seconds("--max-scheduler-lag"),
        default=default_max_lag,
        help="/healthz fails when a schedule is overdue by more (seconds; 0: do not check)",
    )


def import_attribute(spec: str, flag: str = "--app") -> object:
    """Import ``module:attribute`` and return the attribute, called if it is a plain function
    (a factory). Failures raise :class:`InputError` naming the flag and the value."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InputError(f"{flag} must look like module:attribute, got {spec!r}")
    # Modules resolve from the current directory, as with ``celery -A`` and ``procrastinate
    # --app`` (the same change as helper E's branch; take theirs at merge).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(f"{flag} {spec!r}: cannot import {module_name!r} ({exc})") from None
    except Exception as exc:  # the module itself raised while importing
        raise InputError(
            f"{flag} {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value: object = getattr(module, attr)
    except AttributeError:
        raise InputError(f"{flag} {spec!r}: module {module_name!r} has no {attr!r}") from None
    if inspect.isfunction(value):
        try:
            value = value()
        except InvalidInput:
            raise
        except Exception as exc:  # the factory raised: say so on one line
            raise InputError(
                f"{flag} {spec!r}: the factory {attr!r} failed: {type(exc).__name__}: {exc}"
            ) from None
    return value


def resolve_url(flag: str | None) -> str:
    """``--database-url`` if given, else ``DATABASE_URL``, else the embedded server."""
    return flag or database_url()


def ensure_schema(url: str, *, apply: bool) -> None:
    """Apply the core migrations (``apply``) or refuse to start on an out-of-date schema.

    Raises :class:`InputError` naming what is missing, so a command started against a database
    nobody migrated exits with a clear message (code 2).
    """
    import psycopg

    from jobs import migrate
    from jobs import pending_migrations as pending

    with psycopg.connect(url) as conn:
        if apply:
            migrate(conn, COMPONENTS)
            return
        missing = pending(conn, COMPONENTS)
    if missing:
        raise InputError(
            f"the database schema is not up to date (missing {', '.join(missing)}): "
            "run 'tockwork migrate' or start with --migrate"
        )
