"""``--app`` targets with nothing to serve: a worker without handlers or a relay without
projections would serve nothing, and is refused with exit 2."""

from __future__ import annotations

from typing import Any

from jobs.outbox import Projection, Projections

EMPTY: dict[str, Any] = {}
NO_PROJECTIONS = Projections()
NO_PROJECTION_LIST: list[Projection] = []


def empty() -> dict[str, Any]:
    return {}


def no_projections() -> Projections:
    return Projections()
