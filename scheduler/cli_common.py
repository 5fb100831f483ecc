"""What every ``tockwork`` sub-command shares."""

from __future__ import annotations

import argparse

SubParsers = argparse._SubParsersAction  # the type of ``parser.add_subparsers()``


class InputError(Exception):
    """A command's input is invalid; the CLI prints the message and exits with code 2."""
