"""The operator dashboard as an ASGI application: pages, the JSON API, sign-in, actions.

:func:`create_app` returns a Starlette app that ``tockwork dashboard`` serves with uvicorn and
that an application can mount (``Mount("/tockwork", app=create_app(...))``). Every route but
``/login`` and ``/static`` needs credentials (:mod:`scheduler.dashboard.auth`): an API route
without them answers 401, a page sends the browser to the login form; no data is ever served
first. Every action is a POST with a CSRF token, refused in read-only mode, and recorded in the
``dashboard_audit`` table. Output is escaped by Jinja2 (autoescape on), so a payload or an error
text holding ``<script>`` shows as text. Parameters are checked (:mod:`.params`): a bad one is
a 400 naming it. The dashboard's log lines hold the method, the path without its query string
(which may hold an organization id), the status and the duration: never a payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import jinja2
import psycopg
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from jobs import JobNotFound, JobStatus, processes
from jobs.internal import default_name
from jobs.metrics import Metrics
from jobs.processes import ProcessFacts
from scheduler.dashboard import views
from scheduler.dashboard.auth import (
    SESSION_COOKIE,
    SESSION_SECONDS,
    Authenticator,
    Principal,
    check_actor,
    check_token,
)
from scheduler.dashboard.db import ConnectionPool
from scheduler.dashboard.params import Params, id_list
from scheduler.errors import ScheduleNotFound, SchedulerError, WebhookEndpointNotFound
from scheduler.health import ReplicaState, replica_state
from scheduler.model import Overlap
from scheduler.schedules import MAX_NOTE
from timezones import Clock, FoldPolicy, GapPolicy, SystemClock
from timezones.errors import InvalidInput

log = logging.getLogger("tockwork.dashboard")

DEFAULT_REFRESH = 5.0  # seconds between refreshes of a page's live regions (live.js)

JOB_FILTERS = (
    "status",
    "queue",
    "job_type",
    "error_code",
    "idempotency_key",
    "organization_id",
    "since",
    "until",
)


class Forbidden(SchedulerError):
    """An action refused: read-only mode or a missing CSRF token."""


class Dashboard:
    """The app's state: the connection pool, the authenticator, the clock, the templates."""

    def __init__(
        self,
        database_url: str,
        token: str | None,
        read_only: bool,
        clock: Clock | None,
        pool_size: int,
        read_url: str | None = None,
        refresh: float = 0.0,
    ) -> None:
        self.pool = ConnectionPool(database_url, size=pool_size)
        # What only reads may go to a replica (read_url); actions always go to the primary.
        self.read_url = read_url
        self.read_pool = ConnectionPool(read_url, size=pool_size) if read_url else self.pool
        self.replica: ReplicaState | None = None  # the read replica, read with the last page
        self.refresh = refresh
        self.auth = Authenticator(token)
        self.read_only = read_only
        self.clock = clock
        folder = resources.files("scheduler.dashboard").joinpath("templates")
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(folder)),
            autoescape=True,  # every value is escaped: payloads and errors show as text
            undefined=jinja2.StrictUndefined,
        )
        env.filters["age"] = _age
        env.filters["ts"] = _ts
        self.templates = Jinja2Templates(env=env)
        self.facts = ProcessFacts(kind="dashboard", name=default_name("dashboard:"))

    def beat(self) -> bool:
        """One heartbeat of this dashboard in the registry of processes; False when the
        registry's table is missing (said once in the log: the dashboard runs unregistered)."""
        try:
            with self.pool.connection() as conn:
                processes.beat(conn, self.facts, now=self.sql_now())
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as exc:
            log.warning(
                "dashboard %s: not in the registry of processes (%s); run `tockwork migrate`",
                self.facts.name,
                type(exc).__name__,
            )
            return False
        except psycopg.Error as exc:  # a lost connection, a timeout: the next beat
            log.info("dashboard: registry heartbeat failed (%s); trying again", type(exc).__name__)
        return True

    def forget(self) -> None:
        """Delete this dashboard's row from the registry (best effort)."""
        try:
            with self.pool.connection() as conn:
                processes.forget(conn, kind="dashboard", name=self.facts.name)
        except psycopg.Error as exc:
            log.info("dashboard: registry row left to go stale (%s)", type(exc).__name__)

    def close(self) -> None:
        self.pool.close()
        if self.read_pool is not self.pool:
            self.read_pool.close()

    def now(self) -> datetime:
        """The instant of this request: the injected clock, else the wall clock."""
        return (self.clock or SystemClock()).now()

    def sql_now(self) -> datetime | None:
        """``now`` for SQL: the injected clock's, else None (the database clock)."""
        return None if self.clock is None else self.clock.now()


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:.1f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _ts(value: datetime | str | None) -> Markup | str:
    """An instant as ``<time>``: UTC in the page, shown by live.js in the schedule's zone
    (a ``data-zone`` ancestor) or the viewer's, with UTC on hover."""
    if isinstance(value, str):  # an ISO instant from a JSON-ready row
        value = datetime.fromisoformat(value)
    if value is None:
        return "-"
    utc = value.astimezone(UTC)
    return Markup('<time datetime="{}" title="{} UTC">{}</time>').format(
        utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S"), utc.strftime("%Y-%m-%d %H:%M:%SZ")
    )


def _state(request: Request) -> Dashboard:
    state: Dashboard = request.app.state.dashboard
    return state


def _principal(request: Request) -> Principal:
    principal: Principal = request.state.principal
    return principal


def _is_api(request: Request) -> bool:
    return request.url.path[len(request.scope.get("root_path", "")) :].startswith("/api/")


def _base(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID | timedelta):
        return str(value)
    raise TypeError(type(value).__name__)


def _json(data: Any, status: int = 200) -> Response:
    body = json.dumps(data, default=_json_default, ensure_ascii=False)
    return Response(body, status_code=status, media_type="application/json")


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    state = _state(request)
    principal: Principal | None = getattr(request.state, "principal", None)
    context = {
        "base": _base(request),
        "read_only": state.read_only,
        "replication": state.pool.primary.current,
        "read_replica": state.read_url is not None,
        "replica": state.replica,
        "csrf": state.auth.csrf(principal),
        "principal": principal,
        "auth_enabled": state.auth.enabled,
        "refresh": f"{state.refresh:g}",
        "path": request.url.path,
        **context,
    }
    return state.templates.TemplateResponse(request, name, context, status_code=status)


async def _db(request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(conn, *args)`` on a pooled connection in the thread pool: of the read replica
    when the dashboard has one (``read_url``), else of the primary. Actions use :func:`_act`."""
    state = _state(request)

    def call() -> Any:
        with state.read_pool.connection() as conn:
            result = fn(conn, *args, **kwargs)
            if state.read_url is not None:
                state.replica = replica_state(conn)
            return result

    return await run_in_threadpool(call)


async def _act(request: Request, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(conn, *args)`` on a connection to the primary: every action, and what selects
    the rows an action applies to, whatever ``read_url`` says."""
    state = _state(request)

    def call() -> Any:
        with state.pool.connection() as conn:
            return fn(conn, *args, **kwargs)

    return await run_in_threadpool(call)


async def _action_form(request: Request) -> FormData:
    """The form of an action: refused in read-only mode or without the page's CSRF token."""
    state = _state(request)
    if state.read_only:
        raise Forbidden("the dashboard is read-only: actions are disabled")
    form = await request.form()
    token = form.get("csrf")
    if not state.auth.csrf_ok(_principal(request), token if isinstance(token, str) else None):
        raise Forbidden("missing or invalid CSRF token: reload the page and try again")
    return form


def _api_action_check(request: Request) -> None:
    state = _state(request)
    if state.read_only:
        raise Forbidden("the dashboard is read-only: actions are disabled")
    if not state.auth.csrf_ok(_principal(request), request.headers.get("x-csrf-token")):
        raise Forbidden("missing or invalid CSRF token (send X-CSRF-Token, or use a bearer token)")


def _form_text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


# -- authentication ---------------------------------------------------------------------------


class AuthMiddleware(BaseHTTPMiddleware):
    """Credentials first: a bearer token, a session cookie, or (no_auth) nobody to check."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        started = time.monotonic()
        response = await self._dispatch(request, call_next)
        # The path only: a query string may hold an organization id.
        log.info(
            "%s %s %d %.1fms",
            request.method,
            request.url.path,
            response.status_code,
            (time.monotonic() - started) * 1000,
        )
        return response

    async def _dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        state = _state(request)
        path = request.url.path[len(request.scope.get("root_path", "")) :]
        request.state.principal = None
        if path.startswith("/static/") or path == "/login":
            return await call_next(request)
        if not state.auth.enabled:
            request.state.principal = Principal("none", "anonymous")
            return await call_next(request)
        bearer = state.auth.bearer(request.headers.get("authorization"))
        if bearer:
            actor = request.headers.get("x-tockwork-actor", "api-token")
            try:
                actor = check_actor(actor)
            except InvalidInput:
                actor = "api-token"
            request.state.principal = Principal("bearer", actor)
            return await call_next(request)
        principal = None
        if bearer is None:
            principal = state.auth.session(request.cookies.get(SESSION_COOKIE), state.now())
        if principal is not None:
            request.state.principal = principal
            return await call_next(request)
        if _is_api(request) or bearer is False or request.method != "GET":
            return (
                JSONResponse(
                    {"error": "unauthorized: send Authorization: Bearer <token>"},
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="tockwork"'},
                )
                if _is_api(request)
                else _page(
                    request, "login.html", {"error": "sign in first", "next": path}, status=401
                )
            )
        target = path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(
            f"{_base(request)}/login?{urlencode({'next': target})}", status_code=303
        )


def _safe_next(value: str | None) -> str:
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


async def login_page(request: Request) -> Response:
    state = _state(request)
    if not state.auth.enabled:
        return RedirectResponse(f"{_base(request)}/", status_code=303)
    return _page(
        request, "login.html", {"error": None, "next": _safe_next(request.query_params.get("next"))}
    )


async def login(request: Request) -> Response:
    state = _state(request)
    form = await request.form()
    nxt = _safe_next(_form_text(form, "next"))
    if not state.auth.enabled:
        return RedirectResponse(f"{_base(request)}/", status_code=303)
    if not state.auth.csrf_ok(None, _form_text(form, "csrf")):
        return _page(
            request, "login.html", {"error": "the form expired: try again", "next": nxt}, status=403
        )
    if not state.auth.bearer(f"Bearer {_form_text(form, 'token')}"):
        return _page(request, "login.html", {"error": "wrong token", "next": nxt}, status=401)
    try:
        actor = check_actor(_form_text(form, "name") or "operator")
    except InvalidInput as exc:
        return _page(request, "login.html", {"error": str(exc), "next": nxt}, status=400)
    response = RedirectResponse(f"{_base(request)}{nxt}", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        state.auth.new_session(actor, state.now()),
        max_age=SESSION_SECONDS,
        path=_base(request) or "/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    await _action_form_any(request)
    response = RedirectResponse(f"{_base(request)}/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=_base(request) or "/")
    return response


async def _action_form_any(request: Request) -> FormData:
    """A form with a valid CSRF token (read-only mode allows it: signing out is not an action)."""
    form = await request.form()
    if not _state(request).auth.csrf_ok(_principal(request), _form_text(form, "csrf")):
        raise Forbidden("missing or invalid CSRF token: reload the page and try again")
    return form


# -- pages --------------------------------------------------------------------------------------


def _chart(minutes: list[dict[str, Any]]) -> dict[str, Any]:
    """Bars per minute of the last hour (server-rendered SVG), from :func:`views.attempt_minutes`
    (60 minutes, oldest first); a minute not counted in time is a gap marked as such."""
    bars, peak = [], 1
    for i, m in enumerate(minutes):
        bars.append(
            {
                "x": i * 10,
                "ok": m["succeeded"],
                "failed": m["failed"],
                "label": m["minute"].astimezone(UTC).strftime("%H:%M"),
                "counted": m["source"] != "not counted",
            }
        )
        peak = max(peak, m["succeeded"] + m["failed"])
    for bar in bars:
        bar["ok_h"] = round(100 * bar["ok"] / peak, 1)
        bar["failed_h"] = round(100 * bar["failed"] / peak, 1)
    total_ok = sum(b["ok"] for b in bars)
    total_failed = sum(b["failed"] for b in bars)
    return {"bars": bars, "peak": peak, "ok": total_ok, "failed": total_failed}


async def overview_page(request: Request) -> Response:
    Params(request.query_params, [])
    state = _state(request)
    data = await _db(request, views.overview, state.sql_now())
    chart = _chart(data["minutes"])
    return _page(request, "overview.html", {"data": data, "chart": chart})


async def processes_page(request: Request) -> Response:
    Params(request.query_params, [])
    found = await _db(request, views.process_list, _state(request).sql_now())
    return _page(request, "processes.html", {"processes": found})


def _job_filter(p: Params) -> views.JobFilter:
    return views.JobFilter(
        statuses=p.statuses("status"),
        queue=p.queue("queue"),
        job_type=p.text("job_type"),
        error_code=p.text("error_code"),
        idempotency_key=p.text("idempotency_key"),
        organization_id=p.uuid("organization_id"),
        since=p.instant("since"),
        until=p.instant("until"),
    )


def _filters_query(request: Request, names: tuple[str, ...], **extra: Any) -> str:
    values = {n: request.query_params[n] for n in names if request.query_params.get(n)}
    values.update({k: v for k, v in extra.items() if v is not None})
    return urlencode(values)


async def jobs_page(request: Request) -> Response:
    p = Params(request.query_params, [*JOB_FILTERS, "before"])
    flt, before = _job_filter(p), p.integer("before")

    def load(conn: Any) -> tuple[Any, Any, Any, views.Count, str]:
        plan = views.job_plan(conn, flt)
        page, nxt, scanned = views.job_page_scan(conn, flt, before, plan=plan)
        return page, nxt, scanned, views.job_count(conn, flt, plan), plan

    page, nxt, scanned, count, plan = await _db(request, load)
    return _page(
        request,
        "jobs.html",
        {
            "jobs": page,
            "count": count,
            "scanned_down_to": scanned,
            "scan_note": _scan_note(plan),
            "filters": {n: request.query_params.get(n, "") for n in JOB_FILTERS},
            "next_query": _filters_query(request, JOB_FILTERS, before=nxt) if nxt else None,
            "first_query": _filters_query(request, JOB_FILTERS) if before else None,
            "statuses": [s.value for s in JobStatus],
        },
    )


def _scan_note(plan: str) -> str:
    """Why a page stopped looking (shown with how far it looked)."""
    if plan == "window":
        return f"no index serves this filter, so a page reads at most {views.SCAN_WINDOW:,} ids"
    what = "dead jobs" if plan == "dead" else "jobs with this error code"
    return (
        f"the other filters are checked job by job, so a page reads at most "
        f"{views.SCAN_ENTRIES:,} {what}"
    )


def _job_id(request: Request) -> int:
    raw = request.path_params["job_id"]
    return Params({"job_id": raw}, ["job_id"]).integer("job_id") or 0


async def job_page(request: Request) -> Response:
    p = Params(request.query_params, ["done", "action"])
    done = p.choice("done", ["requeue", "cancel", "nothing"])
    detail = await _db(request, views.job_detail, _job_id(request))
    return _page(request, "job.html", {"job": detail, "done": done})


async def job_action(request: Request) -> Response:
    """``POST /jobs/{id}/requeue`` or ``/cancel`` from the job's page (CSRF, audited)."""
    await _action_form(request)
    job_id = _job_id(request)
    action = "requeue" if request.url.path.endswith("/requeue") else "cancel"
    state = _state(request)
    changed = await _act(
        request,
        views.act_on_job,
        action,
        job_id,
        actor=_principal(request).actor,
        now=state.sql_now(),
    )
    done = action if changed else "nothing"
    return RedirectResponse(f"{_base(request)}/jobs/{job_id}?done={done}", status_code=303)


async def search_page(request: Request) -> Response:
    """``/search?q=``: a job id, an idempotency key or a subject. One match goes straight to
    its page; otherwise the matches are listed."""
    p = Params(request.query_params, ["q"])
    text = (p.text("q") or "").strip()
    if not text:
        return _page(request, "search.html", {"q": "", "found": None})
    found = await _db(request, views.search, text)
    base = _base(request)
    schedules = found["schedules"]
    targets = []
    if found["job"] is not None:
        targets.append(f"{base}/jobs/{found['job']['id']}")
    if found["key_jobs"]:
        targets.append(f"{base}/jobs?{urlencode({'idempotency_key': text})}")
    if len(schedules) == 1:
        targets.append(f"{base}/schedules/{schedules[0]['id']}")
    elif schedules:
        targets.append(f"{base}/schedules?{urlencode({'subject': text})}")
    if len(targets) == 1:
        return RedirectResponse(targets[0], status_code=303)
    return _page(request, "search.html", {"q": text, "found": found})


DEAD_FILTERS = ("queue", "job_type", "error_code")


async def dead_page(request: Request) -> Response:
    p = Params(request.query_params, [*DEAD_FILTERS, "before", "done", "action"])
    flt = views.JobFilter(
        statuses=["dead"],
        queue=p.queue(),
        job_type=p.text("job_type"),
        error_code=p.text("error_code"),
    )
    before = p.integer("before")
    done = p.integer("done", low=0)
    action = p.choice("action", ["requeue", "cancel"])

    def load(conn: Any) -> tuple[Any, Any, Any, views.Count, Any, str]:
        plan = views.job_plan(conn, flt)
        page, nxt, scanned = views.job_page_scan(conn, flt, before, plan=plan)
        count = views.job_count(conn, flt, plan)
        return page, nxt, scanned, count, views.recent_audit(conn), plan

    page, nxt, scanned, count, audit, plan = await _db(request, load)
    return _page(
        request,
        "dead.html",
        {
            "jobs": page,
            "count": count,
            "scanned_down_to": scanned,
            "scan_note": _scan_note(plan),
            "audit": audit,
            "filters": {n: request.query_params.get(n, "") for n in DEAD_FILTERS},
            "next_query": _filters_query(request, DEAD_FILTERS, before=nxt) if nxt else None,
            "done": done,
            "action": action,
        },
    )


async def dead_confirm(request: Request) -> Response:
    form = await _action_form(request)
    action = Params({"action": _form_text(form, "action")}, ["action"]).choice(
        "action", ["requeue", "cancel"]
    )
    if action is None:
        raise InvalidInput("action", None, "choose requeue or cancel")
    scope = _form_text(form, "scope") or "selected"
    filters = {n: _form_text(form, n) for n in DEAD_FILTERS}
    if scope == "filter":
        p = Params(filters, DEAD_FILTERS)
        queue, job_type, error_code = p.queue(), p.text("job_type"), p.text("error_code")
        ids = await _act(request, views.dead_ids, queue, job_type, error_code)
        if len(ids) > views.ACTION_CAP:
            raise InvalidInput(
                "filter",
                {k: v for k, v in filters.items() if v},
                f"selects more than {views.ACTION_CAP:,} dead jobs: narrow it",
            )
        selection: dict[str, Any] = {"filter": {k: v for k, v in filters.items() if v}}
    elif scope == "selected":
        ids = id_list("id", " ".join(str(v) for v in form.getlist("id")))
        selection = {"ids": ids}
    else:
        raise InvalidInput("scope", scope, "must be selected or filter")
    return _page(
        request,
        "confirm.html",
        {
            "action": action,
            "ids": ",".join(map(str, ids)),
            "n": len(ids),
            "selection": json.dumps(selection),
            "filters": filters,
        },
    )


async def dead_apply(request: Request) -> Response:
    form = await _action_form(request)
    action = Params({"action": _form_text(form, "action")}, ["action"]).choice(
        "action", ["requeue", "cancel"]
    )
    ids = id_list("ids", _form_text(form, "ids"))
    try:
        selection = json.loads(_form_text(form, "selection") or "{}")
    except ValueError:
        raise InvalidInput("selection", _form_text(form, "selection")[:100], "not JSON") from None
    if not isinstance(selection, dict):
        selection = {}
    selection["ids"] = ids
    state = _state(request)
    done = await _act(
        request,
        views.act_on_dead,
        action or "",
        ids,
        actor=_principal(request).actor,
        selection=selection,
        now=state.sql_now(),
    )
    return RedirectResponse(
        f"{_base(request)}/dead?{urlencode({'done': len(done), 'action': action})}",
        status_code=303,
    )


SCHEDULE_FILTERS = ("key", "subject", "zone", "job_type")


def _schedule_filters(p: Params) -> dict[str, str | None]:
    return {
        "key": p.text("key"),
        "subject": p.text("subject"),
        "zone": p.text("zone"),
        "job_type": p.text("job_type"),
    }


async def schedules_page(request: Request) -> Response:
    p = Params(request.query_params, [*SCHEDULE_FILTERS, "after"])
    filters, after = _schedule_filters(p), p.integer("after")
    page, nxt = await _db(request, views.schedule_page, filters, after)
    return _page(
        request,
        "schedules.html",
        {
            "schedules": page,
            "filters": {n: request.query_params.get(n, "") for n in SCHEDULE_FILTERS},
            "next_query": _filters_query(request, SCHEDULE_FILTERS, after=nxt) if nxt else None,
        },
    )


def _schedule_id(request: Request) -> int:
    raw = request.path_params["schedule_id"]
    return Params({"schedule_id": raw}, ["schedule_id"]).integer("schedule_id") or 0


async def schedule_page(request: Request) -> Response:
    p = Params(request.query_params, ["after", "count", "marked"])
    state = _state(request)
    after = p.instant("after")
    count = p.integer("count", high=views.OCCURRENCES_MAX) or 10
    marked = p.choice("marked", ["1", "0"]) == "1"
    detail = await _db(
        request,
        views.schedule_detail,
        _schedule_id(request),
        after or state.now(),
        count=count,
        marked_only=marked,
    )
    form = {n: request.query_params.get(n, "") for n in ("after", "count")}
    return _page(request, "schedule.html", {**detail, "form": form, "marked": marked})


async def schedule_pause(request: Request) -> Response:
    form = await _action_form(request)
    schedule_id = _schedule_id(request)
    paused = request.url.path.endswith("/pause")
    state = _state(request)
    p = Params({n: _form_text(form, n) for n in ("note", "until")}, ["note", "until"])
    await _act(
        request,
        views.set_paused,
        schedule_id,
        paused,
        actor=_principal(request).actor,
        now=state.sql_now(),
        note=p.text("note", max_length=MAX_NOTE) if paused else None,
        until=p.instant("until") if paused else None,
    )
    return RedirectResponse(f"{_base(request)}/schedules/{schedule_id}", status_code=303)


async def schedule_trigger(request: Request) -> Response:
    """Trigger now (CSRF, audit): an extra occurrence, its nominal time ``at`` or now."""
    form = await _action_form(request)
    schedule_id = _schedule_id(request)
    at = Params({"at": _form_text(form, "at")}, ["at"]).instant("at")
    state = _state(request)
    await _act(
        request,
        views.trigger_now,
        schedule_id,
        at=at,
        actor=_principal(request).actor,
        now=state.sql_now(),
    )
    return RedirectResponse(f"{_base(request)}/schedules/{schedule_id}", status_code=303)


BACKFILL_FIELDS = ["start", "end", "overlap", "action"]


async def schedule_backfill(request: Request) -> Response:
    """Backfill preview (``action=preview``, writes nothing) or run (``action=run``: up to
    10,000 occurrences, audited; the page offers the rest): the schedule's page with the
    result."""
    form = await _action_form(request)
    schedule_id = _schedule_id(request)
    p = Params({n: _form_text(form, n) for n in BACKFILL_FIELDS}, BACKFILL_FIELDS)
    start, end = p.instant("start"), p.instant("end")
    if start is None or end is None:
        raise InvalidInput("start" if start is None else "end", None, "is required")
    overlap = p.choice("overlap", [str(o) for o in Overlap])
    dry_run = p.choice("action", ["preview", "run"], "preview") == "preview"
    state = _state(request)
    result = await _act(
        request,
        views.backfill,
        schedule_id,
        start=start,
        end=end,
        overlap=overlap,
        dry_run=dry_run,
        actor=_principal(request).actor,
        now=state.sql_now(),
    )
    detail = await _db(request, views.schedule_detail, schedule_id, state.now())
    counts = {k: result.count(k) for k in sorted({o.outcome for o in result.occurrences})}
    if not dry_run:  # committed by the action's transaction
        Metrics.for_registry().backfilled.inc(counts.get("created", 0))
    detail["backfill"] = {
        "dry_run": dry_run,
        "start": start,
        "end": end,
        "overlap": overlap or "",
        "counts": counts,
        "resume_from": result.resume_from,
        "occurrences": result.occurrences[:50],
    }
    return _page(
        request, "schedule.html", {**detail, "form": {"after": "", "count": ""}, "marked": False}
    )


async def preview_page(request: Request) -> Response:
    p = Params(request.query_params, ["rule", "zone", "after", "count", "gap", "fold"])
    rule, zone = p.text("rule"), p.text("zone")
    gap = p.choice("gap", [g.value for g in GapPolicy])
    fold = p.choice("fold", [f.value for f in FoldPolicy])
    form = {
        n: request.query_params.get(n, "")
        for n in ("rule", "zone", "after", "count", "gap", "fold")
    }
    context: dict[str, Any] = {
        "rows": None,
        "form": form,
        "error": None,
        "gaps": [g.value for g in GapPolicy],
        "folds": [f.value for f in FoldPolicy],
        "max_count": views.OCCURRENCES_MAX,
    }
    try:
        # As many rows as `tockwork preview --count` allows.
        count = p.integer("count", high=views.OCCURRENCES_MAX) or 10
        after = p.instant("after") or _state(request).now()
        if rule is not None or zone is not None:
            if rule is None:
                raise InvalidInput("rule", None, "give a rule, for example daily@08:00")
            if zone is None:
                raise InvalidInput("zone", None, "give an IANA zone, for example Europe/Berlin")
            context["rows"] = await run_in_threadpool(
                views.preview, rule, zone, after, count, gap, fold
            )
    except InvalidInput as exc:
        # The form keeps what was typed, with the error above it.
        context["error"] = str(exc)
        return _page(request, "preview.html", context, status=400)
    return _page(request, "preview.html", context)


def _bucket_percentiles(counts: list[int], labels: list[str]) -> list[tuple[str, str]]:
    """p50, p90, p99 of a histogram: the bucket each falls in (its label, an upper bound but
    for the last bucket), as the counts are bucketed in SQL."""
    total, result = sum(counts), []
    for pct in (50, 90, 99):
        rank, seen = total * pct / 100, 0
        for label, n in zip(labels, counts, strict=True):
            seen += n
            if seen >= rank:
                result.append((f"p{pct}", label))
                break
    return result


async def lateness_page(request: Request) -> Response:
    p = Params(request.query_params, ["window", "queue"])
    window = p.duration("window", default="1h", maximum=timedelta(days=7))
    queue = p.queue()
    state = _state(request)
    data = await _db(request, views.lateness, window, queue, state.sql_now())
    labels = views.lateness_labels()
    charts = []
    for q, kinds in sorted(data["queues"].items()):
        for kind in ("start", "nominal"):
            counts = kinds[kind]
            total = sum(counts)
            if not total:
                continue
            peak = max(counts)
            charts.append(
                {
                    "queue": q,
                    "kind": kind,
                    "total": total,
                    "percentiles": _bucket_percentiles(counts, labels),
                    "bars": [
                        {"label": label, "n": n, "h": round(100 * n / peak, 1), "x": i * 60}
                        for i, (label, n) in enumerate(zip(labels, counts, strict=True))
                    ],
                }
            )
    return _page(
        request,
        "lateness.html",
        {
            "charts": charts,
            "counted": data["counted"],
            "since": data["since"],
            "sample": views.LATENESS_SAMPLE,
            "scan": views.LATENESS_SCAN,
            "window": request.query_params.get("window") or "1h",
            "queue": queue or "",
        },
    )


async def outbox_page(request: Request) -> Response:
    p = Params(request.query_params, ["before", "done"])
    before = p.instant("before")
    done = p.integer("done", low=0)
    state = _state(request)
    data = await _db(request, views.outbox_page, before, state.sql_now())
    return _page(request, "outbox.html", {"data": data, "done": done})


async def outbox_retry(request: Request) -> Response:
    form = await _action_form(request)
    raw = [v for v in form.getlist("id") if isinstance(v, str)]
    ids: list[uuid.UUID] | None = None
    if _form_text(form, "scope") != "all":
        ids = []
        for value in raw:
            try:
                ids.append(uuid.UUID(value))
            except ValueError:
                raise InvalidInput("id", value, "must be an event id (UUID)") from None
        if not ids:
            raise InvalidInput("id", None, "select at least one event")
    state = _state(request)
    n = await _act(
        request, views.retry_outbox, ids, actor=_principal(request).actor, now=state.sql_now()
    )
    return RedirectResponse(f"{_base(request)}/outbox?done={n}", status_code=303)


async def webhooks_page(request: Request) -> Response:
    p = Params(request.query_params, ["after"])
    data = await _db(request, views.webhooks, p.integer("after", low=0))
    return _page(request, "webhooks.html", {"data": data})


def _endpoint_id(request: Request) -> int:
    raw = request.path_params["endpoint_id"]
    return Params({"endpoint_id": raw}, ["endpoint_id"]).integer("endpoint_id") or 0


async def webhook_page(request: Request) -> Response:
    p = Params(request.query_params, ["done"])
    done = p.integer("done", low=0)
    state = _state(request)
    detail = await _db(request, views.webhook_detail, _endpoint_id(request), state.sql_now())
    return _page(request, "webhook.html", {**detail, "done": done})


async def webhook_action(request: Request) -> Response:
    form = await _action_form(request)
    endpoint_id = _endpoint_id(request)
    action = request.url.path.rsplit("/", 1)[-1]
    since = None
    if action == "redeliver":
        since = Params({"since": _form_text(form, "since")}, ["since"]).instant("since")
    state = _state(request)
    n = await _act(
        request,
        views.webhook_action,
        endpoint_id,
        action,
        since=since,
        actor=_principal(request).actor,
        now=state.sql_now(),
    )
    return RedirectResponse(f"{_base(request)}/webhooks/{endpoint_id}?done={n}", status_code=303)


# -- JSON API -----------------------------------------------------------------------------------


async def api_queues(request: Request) -> Response:
    Params(request.query_params, [])
    return _json(await _db(request, views.served_queues, _state(request).sql_now()))


async def api_processes(request: Request) -> Response:
    Params(request.query_params, [])
    return _json(await _db(request, views.process_list, _state(request).sql_now()))


async def api_overview(request: Request) -> Response:
    """The overview's figures as JSON: queues (with live workers), the last hour per minute,
    lags, processes, leases, maintenance."""
    Params(request.query_params, [])
    return _json(await _db(request, views.overview, _state(request).sql_now()))


async def api_jobs(request: Request) -> Response:
    p = Params(request.query_params, [*JOB_FILTERS, "before", "limit"])
    flt, before = _job_filter(p), p.integer("before")
    limit = p.integer("limit", high=500) or views.PAGE_SIZE

    def load(conn: Any) -> dict[str, Any]:
        plan = views.job_plan(conn, flt)
        page, nxt, scanned = views.job_page_scan(conn, flt, before, limit, plan)
        return {
            "jobs": page,
            "next_before": nxt,
            "scanned_down_to": scanned,
            **views.job_count(conn, flt, plan).as_json(),
        }

    return _json(await _db(request, load))


async def api_job(request: Request) -> Response:
    Params(request.query_params, [])
    detail = await _db(request, views.job_detail, _job_id(request))
    detail.pop("payload_text")
    detail["attempts_history"] = detail.pop("attempt_history")
    return _json(detail)


async def api_schedules(request: Request) -> Response:
    p = Params(request.query_params, [*SCHEDULE_FILTERS, "after", "limit"])
    filters, after = _schedule_filters(p), p.integer("after")
    limit = p.integer("limit", high=500) or views.PAGE_SIZE
    page, nxt = await _db(request, views.schedule_page, filters, after, limit)
    return _json({"schedules": page, "next_after": nxt})


async def _api_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise InvalidInput("body", None, "must be a JSON object") from None
    if not isinstance(body, dict):
        raise InvalidInput("body", type(body).__name__, "must be a JSON object")
    return body


async def api_dead_action(request: Request) -> Response:
    """``POST /api/jobs/requeue`` (or ``/cancel``): ``{"ids": [...]}`` or a filter
    ``{"queue": ..., "job_type": ..., "error_code": ...}`` over the dead jobs."""
    _api_action_check(request)
    action = "requeue" if request.url.path.endswith("/requeue") else "cancel"
    body = await _api_body(request)
    unknown = set(body) - {"ids", *DEAD_FILTERS}
    if unknown:
        raise InvalidInput(
            sorted(unknown)[0], None, "unknown field (ids, queue, job_type, error_code)"
        )
    if "ids" in body:
        raw = body["ids"]
        if not isinstance(raw, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in raw
        ):
            raise InvalidInput("ids", raw, "must be a list of job ids")
        ids = id_list("ids", " ".join(map(str, raw)))
        selection: dict[str, Any] = {"ids": ids}
    else:
        filters = {k: body.get(k) for k in DEAD_FILTERS}
        for k, v in filters.items():
            if v is not None and not isinstance(v, str):
                raise InvalidInput(k, v, "must be a string")
        p = Params({k: v for k, v in filters.items() if v is not None}, DEAD_FILTERS)
        queue, job_type, error_code = p.queue(), p.text("job_type"), p.text("error_code")
        if queue is None and job_type is None and error_code is None:
            raise InvalidInput(
                "filter", None, "give ids or at least one of queue, job_type, error_code"
            )
        ids = await _act(request, views.dead_ids, queue, job_type, error_code)
        if len(ids) > views.ACTION_CAP:
            raise InvalidInput(
                "filter", filters, f"selects more than {views.ACTION_CAP:,} dead jobs: narrow it"
            )
        selection = {"filter": {k: v for k, v in filters.items() if v is not None}}
    done: list[int] = []
    if ids:
        selection["ids"] = ids
        done = await _act(
            request,
            views.act_on_dead,
            action,
            ids,
            actor=_principal(request).actor,
            selection=selection,
            now=_state(request).sql_now(),
        )
    key = "requeued" if action == "requeue" else "cancelled"
    return _json({key: done, "count": len(done)})


# -- errors -------------------------------------------------------------------------------------


def _error(request: Request, status: int, message: str, field: str | None = None) -> Response:
    if _is_api(request):
        body: dict[str, Any] = {"error": message}
        if field is not None:
            body["parameter"] = field
        return _json(body, status)
    return _page(request, "error.html", {"status": status, "message": message}, status=status)


async def _invalid(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidInput)
    return _error(request, 400, str(exc), exc.field)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _forbidden(request: Request, exc: Exception) -> Response:
    return _error(request, 403, str(exc))


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, str(exc.detail))


async def _heartbeats(state: Dashboard, stop: asyncio.Event) -> None:
    """Keep this dashboard's row in the registry of processes until ``stop`` (a beat under way
    finishes first: its connection goes back to the pool before the pool closes)."""
    while await run_in_threadpool(state.beat):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), processes.DEFAULT_BEAT.total_seconds())
        if stop.is_set():
            return


def _lifespan(state: Dashboard) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        stop = asyncio.Event()
        beats = asyncio.create_task(_heartbeats(state, stop))
        try:
            yield
        finally:
            stop.set()
            await beats
            await run_in_threadpool(state.forget)
            state.close()

    return lifespan


def create_app(
    database_url: str,
    *,
    token: str | None,
    read_only: bool = False,
    no_auth: bool = False,
    clock: Clock | None = None,
    pool_size: int = 4,
    read_url: str | None = None,
    refresh: float = DEFAULT_REFRESH,
) -> Starlette:
    """The dashboard as an ASGI app over ``database_url``.

    ``token`` authenticates every request (bearer header or the login form's session cookie);
    ``token=None`` is refused unless ``no_auth=True`` (for loopback, or behind the mounting
    application's own authentication). ``read_only`` hides and refuses every action. ``clock``
    pins the time the pages compute with (tests); by default the database's clock answers.
    ``read_url`` (a streaming replica) serves what the pages and the API read, with its lag on
    every page; every action, and the selection an action applies to, goes to the primary.
    ``refresh`` is how often, in seconds, a page's live regions refresh in the browser (0:
    never, up to 3600).
    """
    check_token(token, no_auth=no_auth)
    if (
        isinstance(refresh, bool)
        or not isinstance(refresh, int | float)
        or not 0 <= refresh <= 3600
    ):
        raise InvalidInput("refresh", refresh, "must be a number of seconds from 0 to 3600")
    state = Dashboard(database_url, token, read_only, clock, pool_size, read_url, float(refresh))
    static = resources.files("scheduler.dashboard").joinpath("static")
    routes = [
        Route("/", overview_page),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/jobs", jobs_page),
        Route("/jobs/{job_id}", job_page),
        Route("/jobs/{job_id}/requeue", job_action, methods=["POST"]),
        Route("/jobs/{job_id}/cancel", job_action, methods=["POST"]),
        Route("/search", search_page),
        Route("/dead", dead_page),
        Route("/webhooks", webhooks_page),
        Route("/webhooks/{endpoint_id}", webhook_page),
        Route("/webhooks/{endpoint_id}/disable", webhook_action, methods=["POST"]),
        Route("/webhooks/{endpoint_id}/enable", webhook_action, methods=["POST"]),
        Route("/webhooks/{endpoint_id}/redeliver", webhook_action, methods=["POST"]),
        Route("/dead/confirm", dead_confirm, methods=["POST"]),
        Route("/dead/apply", dead_apply, methods=["POST"]),
        Route("/schedules", schedules_page),
        Route("/schedules/{schedule_id}", schedule_page),
        Route("/schedules/{schedule_id}/pause", schedule_pause, methods=["POST"]),
        Route("/schedules/{schedule_id}/resume", schedule_pause, methods=["POST"]),
        Route("/schedules/{schedule_id}/trigger", schedule_trigger, methods=["POST"]),
        Route("/schedules/{schedule_id}/backfill", schedule_backfill, methods=["POST"]),
        Route("/preview", preview_page),
        Route("/lateness", lateness_page),
        Route("/outbox", outbox_page),
        Route("/outbox/retry", outbox_retry, methods=["POST"]),
        Route("/processes", processes_page),
        Route("/api/overview", api_overview),
        Route("/api/processes", api_processes),
        Route("/api/queues", api_queues),
        Route("/api/jobs", api_jobs),
        Route("/api/jobs/requeue", api_dead_action, methods=["POST"]),
        Route("/api/jobs/cancel", api_dead_action, methods=["POST"]),
        Route("/api/jobs/{job_id}", api_job),
        Route("/api/schedules", api_schedules),
        Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        InvalidInput: _invalid,
        JobNotFound: _not_found,
        ScheduleNotFound: _not_found,
        WebhookEndpointNotFound: _not_found,
        Forbidden: _forbidden,
        HTTPException: _http,
    }
    app = Starlette(
        routes=routes,
        middleware=[Middleware(AuthMiddleware)],
        exception_handlers=handlers,
        lifespan=_lifespan(state),
    )
    app.state.dashboard = state
    return app


def close(app: Starlette) -> None:
    """Close the idle database connections of an app :func:`create_app` made.

    Served on its own (``tockwork dashboard``, uvicorn) the app does this at shutdown; a parent
    app that mounts it should call this from its own lifespan (Starlette does not run a mounted
    app's lifespan).
    """
    state: Dashboard = app.state.dashboard
    state.close()
