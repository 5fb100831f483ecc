"""``--app`` targets with no handler: a worker that would serve nothing is refused, exit 2."""

from __future__ import annotations

from typing import Any

EMPTY: dict[str, Any] = {}


def empty() -> dict[str, Any]:
    return {}
