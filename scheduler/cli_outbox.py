"""Placeholder: sub-commands added by issue 5 work in progress."""

from __future__ import annotations

import argparse

from scheduler.cli_common import SubParsers


def register(sub: SubParsers[argparse.ArgumentParser]) -> None:
    """Adds no sub-command yet."""
