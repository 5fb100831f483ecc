"""What every ``tockwork`` sub-command shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime, timedelta

SubParsers = argparse._SubParsersAction  # the type of ``parser.add_subparsers()``


class InputError(Exception):
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
