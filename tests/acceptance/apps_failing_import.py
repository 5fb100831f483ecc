"""An ``--app`` module that raises while it is imported."""

from __future__ import annotations

raise RuntimeError("settings.toml is missing")
