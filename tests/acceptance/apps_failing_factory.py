"""An ``--app`` whose factory raises: the CLI must say so in one line, exit 2, no traceback."""

from __future__ import annotations


def app() -> dict[str, object]:
    raise KeyError("PROVIDER_TOKEN")
