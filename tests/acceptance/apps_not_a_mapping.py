"""``--app`` targets of the wrong shape: the CLI says what it needed, exit 2."""

from __future__ import annotations

HANDLERS = 5


def handlers() -> list[int]:
    return [1, 2]
