"""The operator dashboard: queues, jobs, dead letters, schedules with DST marks, lateness, outbox.

``create_app(database_url, token=..., read_only=...)`` returns the ASGI app (Starlette, Jinja2
templates with autoescape, server-rendered SVG, no JavaScript build); ``tockwork dashboard``
serves it with uvicorn. Needs the ``dashboard`` extra (``pip install 'tockwork[dashboard]'``).
See docs/dashboard.md.
"""

from scheduler.dashboard.app import close, create_app

__all__ = ["close", "create_app"]
