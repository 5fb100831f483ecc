"""The operator dashboard: queues, jobs, dead letters, schedules with DST marks, lateness, outbox.

``create_app(database_url, token=..., read_only=...)`` returns the ASGI app (Starlette, Jinja2
templates with autoescape, server-rendered SVG, no JavaScript build); ``tockwork dashboard``
serves it with uvicorn; ``wsgi_app(...)`` is the same app as a WSGI callable (a2wsgi), to mount
in Flask or Django under WSGI. Needs the ``dashboard`` extra
(``pip install 'tockwork[dashboard]'``). See docs/dashboard.md.
"""

from scheduler.dashboard.app import close, create_app
from scheduler.dashboard.wsgi import WSGIDashboard, wsgi_app

__all__ = ["WSGIDashboard", "close", "create_app", "wsgi_app"]
