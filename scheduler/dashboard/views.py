"""What each page and API route shows, read from the database (sync; the routes call these).

Reads use the dashboard's own queries (scheduler/sql/dashboard.sql) or the owning package's API;
every action goes through the owning package (``jobs.requeue``, ``jobs.cancel``,
``jobs.outbox.retry_dead``, ``scheduler.pause``/``resume``) and writes one audit row in the same
transaction.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, LiteralString

import psycopg
from psycopg.types.json import Jsonb

import jobs
import timezones
from jobs import limits, outbox, processes
from scheduler import runs
from scheduler import schedules as schedule_api
from scheduler.errors import WebhookEndpointNotFound
from scheduler.health import DEFAULT_OVERDUE_AFTER, overdue_count, scheduler_lag
from scheduler.occurrence_job import occurrence_idempotency_key
from scheduler.queries import query
from scheduler.webhooks import delivery as webhook_delivery
from scheduler.webhooks import endpoints as webhook_api
from timezones.errors import InvalidInput

COUNT_CAP = 10_000
COUNT_TIMEOUT = "150ms"  # a count that cannot finish in time is shown as "not counted"
COUNT_TIMEOUT_SCAN = "50ms"  # the same for a filter no index serves (a scan of the table)
STATUS_SORT_CAP = 10_000  # rows of a status filter's partial indexes a page may read and sort
PAGE_SIZE = 50
ACTION_CAP = 10_000  # jobs one dead-letter action may touch
SCAN_WINDOW = 50_000  # ids one page reads at most when no index serves its filter
SCAN_ENTRIES = 10_000  # index entries one page reads at most when other filters are checked
LATENESS_BOUNDS = [0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 3600.0]
LATENESS_SCAN = 100_000  # newest attempts the lateness page reads at most
LATENESS_SAMPLE = 10_000  # first attempts among them it counts at most
CHART_LIVE_BUDGET = 0.06  # seconds the chart may spend counting minutes the rollup lacks
CHART_LIVE_CHUNK = 5  # minutes counted from the attempts per statement
# The minutes the rollup cannot have yet: the open one and those within its settle time (1 min)
# and its run interval (every minute), with a minute to spare. Older ones missing means the
# maintenance is not running.
CHART_OPEN_MINUTES = 4


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The Jobs page's filters (None: not given)."""

    statuses: list[str] | None = None
    queue: str | None = None
    job_type: str | None = None
    error_code: str | None = None
    idempotency_key: str | None = None
    organization_id: uuid.UUID | None = None
    since: datetime | None = None
    until: datetime | None = None

    def params(self) -> dict[str, Any]:
        return {
            "statuses": self.statuses,
            "queue": self.queue,
            "job_type": self.job_type,
            "error_code": self.error_code,
            "idempotency_key": self.idempotency_key,
            "organization_id": self.organization_id,
            "since": self.since,
            "until": self.until,
        }


@dataclass(frozen=True, slots=True)
class Count:
    """A bounded count: ``value`` up to 10,001 (``capped``), or None when not counted in time."""

    value: int | None

    @property
    def capped(self) -> bool:
        return self.value is not None and self.value > COUNT_CAP

    def __str__(self) -> str:
        if self.value is None:
            return "many (not counted)"
        return f"{COUNT_CAP:,}+" if self.capped else f"{self.value:,}"

    def as_json(self) -> dict[str, Any]:
        return {
            "count": None if self.value is None else min(self.value, COUNT_CAP),
            "count_capped": self.capped,
            "counted": self.value is not None,
        }


QUEUE_COUNTS = ("ready", "leased", "retrying", "dead", "scheduled")
INDEXED_STATUSES = frozenset({"pending", "retrying", "leased", "dead"})


def queues(conn: psycopg.Connection[Any], now: datetime | None) -> list[dict[str, Any]]:
    """Per queue: ready, oldest ready age, leased, retrying, dead, scheduled; each count stops
    at 10,000 (``capped`` lists the counts that have more)."""
    result = []
    for queue, ready, oldest, leased, retrying, dead, scheduled in conn.execute(
        query("dashboard_queue_stats"), {"now": now}
    ).fetchall():
        counts = dict(zip(QUEUE_COUNTS, (ready, leased, retrying, dead, scheduled), strict=True))
        result.append(
            {
                "queue": queue,
                **{k: min(v, COUNT_CAP) for k, v in counts.items()},
                "oldest_ready_age_s": round(oldest, 3),
                "capped": [k for k, v in counts.items() if v > COUNT_CAP],
            }
        )
    return result


def attempt_minutes(conn: psycopg.Connection[Any], now: datetime | None) -> dict[str, Any]:
    """The last hour's completions and failures per minute, for the chart.

    Closed minutes come from the rollup (``job_attempt_minutes``, 60 primary-key probes); the
    minutes it lacks (always the open ones; all of them when the maintenance is not running)
    are counted from the attempts, newest first, ``CHART_LIVE_CHUNK`` minutes per statement,
    for at most ``CHART_LIVE_BUDGET`` seconds: the minutes left when the budget runs out are
    ``"source": "not counted"`` (zeros), so the page stays bounded however many attempts an
    hour holds. Returns ``minutes`` (60, oldest first, each with its ``source``: ``rollup``,
    ``live`` or ``not counted``), ``lacking`` (closed minutes older than the rollup's usual
    lag that it has no row for) and ``not_counted``."""
    rows = conn.execute(query("dashboard_attempt_minutes"), {"now": now}).fetchall()
    minutes = [
        {"minute": m, "succeeded": ok, "failed": bad, "source": "rollup" if rolled else "live"}
        for m, rolled, ok, bad in rows
    ]
    by_minute = {m["minute"]: m for m in minutes}
    missing = [m["minute"] for m in reversed(minutes) if m["source"] == "live"]
    chunks: list[list[datetime]] = []
    for minute in missing:  # newest first, consecutive minutes together
        last = chunks[-1] if chunks else None
        if last and last[-1] - minute == timedelta(minutes=1) and len(last) < CHART_LIVE_CHUNK:
            last.append(minute)
        else:
            chunks.append([minute])
    deadline = time.monotonic() + CHART_LIVE_BUDGET
    for i, chunk in enumerate(chunks):
        live = _live_minutes(conn, chunk, deadline - time.monotonic(), now)
        if live is None:
            for rest in chunks[i:]:
                for minute in rest:
                    by_minute[minute]["source"] = "not counted"
            break
        for minute, ok, bad in live:
            if minute in by_minute:
                by_minute[minute].update(succeeded=ok, failed=bad)
    lacking = 0
    if minutes:
        open_from = minutes[-1]["minute"] - timedelta(minutes=CHART_OPEN_MINUTES - 1)
        lacking = sum(1 for m in missing if m < open_from)
    return {
        "minutes": minutes,
        "lacking": lacking,
        "not_counted": sum(1 for m in minutes if m["source"] == "not counted"),
    }


def _live_minutes(
    conn: psycopg.Connection[Any], chunk: list[datetime], seconds: float, now: datetime | None
) -> list[tuple[datetime, int, int]] | None:
    """Count these consecutive minutes (newest first) from the attempts within ``seconds``;
    None when there is no time left or the statement ran out of it."""
    if seconds < 0.001:
        return None
    try:
        with conn.transaction():
            conn.execute(query("dashboard_local_timeout"), {"timeout": f"{seconds * 1000:.0f}ms"})
            rows = conn.execute(
                query("dashboard_attempt_minutes_live"),
                {"start": chunk[-1], "stop": chunk[0] + timedelta(minutes=1), "now": now},
            ).fetchall()
    except psycopg.errors.QueryCanceled:
        return None
    return [(m, ok, bad) for m, ok, bad in rows]


def served_queues(conn: psycopg.Connection[Any], now: datetime | None) -> list[dict[str, Any]]:
    """:func:`queues`, with the live workers of each (the registry of processes), and the
    known queues that hold no unfinished job (all zeros): those a live worker serves or that
    have a claim policy or a rate limit. ``unserved``: ready jobs and no live worker."""
    served = {w.queue: w for w in processes.queue_workers(conn, now=now)}
    rows = {q["queue"]: q for q in queues(conn, now)}
    known = set(served)
    known.update(p.queue for p in jobs.queue_policies(conn))
    known.update(
        s.limit.name for s in limits.list_limits(conn, now=now) if s.limit.scope == "queue"
    )
    for name in known - rows.keys():
        rows[name] = {
            "queue": name,
            **dict.fromkeys(QUEUE_COUNTS, 0),
            "oldest_ready_age_s": 0.0,
            "capped": [],
        }
    result = []
    for name in sorted(rows):
        row, w = rows[name], served.get(name)
        row["workers"] = w.workers if w else 0
        row["concurrency"] = w.concurrency if w else 0
        row["unserved"] = row["ready"] > 0 and w is None
        result.append(row)
    return result


def process_list(conn: psycopg.Connection[Any], now: datetime | None) -> list[dict[str, Any]]:
    """The registry of processes, live ones first, stale ones (not yet pruned) after."""
    return [p.as_json() for p in processes.list_processes(conn, include_stale=True, now=now)]


def overview(conn: psycopg.Connection[Any], now: datetime | None) -> dict[str, Any]:
    chart = attempt_minutes(conn, now)
    workers = conn.execute(query("dashboard_workers"), {"now": now}).fetchall()
    maintenance = conn.execute(query("dashboard_maintenance_runs")).fetchall()
    box = outbox.stats(conn, now=now)
    lag = scheduler_lag(conn, now)
    return {
        "queues": served_queues(conn, now),
        "processes": process_list(conn, now),
        "minutes": chart["minutes"],
        "chart_lacking": chart["lacking"],
        "chart_not_counted": chart["not_counted"],
        "scheduler_lag_s": lag,
        # Schedules past their next occurrence with no job for it (scheduler.health: every
        # replica stopped or stuck); the same count as `tockwork schedules overdue`.
        "overdue": None if lag is None else overdue_count(conn, now=now),
        "overdue_after_s": DEFAULT_OVERDUE_AFTER.total_seconds(),
        "outbox": {"pending": box.pending, "dead": box.dead, "lag_s": box.oldest_pending_age},
        "workers": [
            {
                "worker": w,
                "leases": n,
                "oldest_claim_age_s": age,
                "heartbeat_age_s": beat,
                "stalest_heartbeat_age_s": stalest,
                "first_lease_ends_in_s": ends,
            }
            for w, n, age, beat, stalest, ends in workers
        ],
        "maintenance": [
            {"key": k, "paused": p, "last_run_at": last, "next_run_at": nxt}
            for k, p, last, nxt in maintenance
        ],
    }


_JOB_COLUMNS = (
    "id",
    "organization_id",
    "queue",
    "job_type",
    "status",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "last_error_code",
    "last_error_summary",
    "completed_at",
    "created_at",
    "idempotency_key",
)


_LOWEST_ID = -(2**63)
_FLOORS: dict[str, LiteralString] = {
    "error_code": "dashboard_job_error_code_floor",
    "dead": "dashboard_job_dead_floor",
}


def job_plan(conn: psycopg.Connection[Any], flt: JobFilter) -> str:
    """How a filter's pages are read (migration 0011's indexes; docs/dashboard.md):

    * ``"index"``: an index holds exactly this filter's rows in id order: an error code alone
      (jobs_error_code_idx), the dead letters alone or of one organization
      (jobs_dead_recent_idx, jobs_dead_organization_idx), or an idempotency key (one probe of
      jobs_idempotency_uq). The page reads it backwards and stops after one page.
    * ``"error_code"`` / ``"dead"``: that index with other filters besides (a queue, a job type,
      a time range...). Read backwards with the others checked in the heap, a filter that
      matches rarely would read the whole index, so a page reads at most SCAN_ENTRIES entries of
      it (below the cursor) and says how far it looked.
    * ``"status"``: statuses whose partial indexes hold at most STATUS_SORT_CAP rows (for the
      queue): read them all and sort by id. A backlog of ready jobs is too many to sort on every
      page: a status filter over one takes the window.
    * ``"window"``: the primary key backwards, at most SCAN_WINDOW ids a page."""
    if flt.idempotency_key is not None:
        return "index"
    given = {k for k, v in flt.params().items() if v is not None}
    if flt.error_code is not None:
        return "index" if given == {"error_code"} else "error_code"
    if flt.statuses == ["dead"]:
        return "index" if given <= {"statuses", "organization_id"} else "dead"
    if flt.statuses is not None and set(flt.statuses) <= INDEXED_STATUSES:
        wanted = set(flt.statuses)
        row = conn.execute(
            query("dashboard_job_status_rows"),
            {
                "ready": bool(wanted & {"pending", "retrying"}),
                "leased": "leased" in wanted,
                "dead": "dead" in wanted,
                "queue": flt.queue,
                "cap": STATUS_SORT_CAP + 1,
            },
        ).fetchone()
        if row is not None and row[0] <= STATUS_SORT_CAP:
            return "status"
    return "window"


def job_page(
    conn: psycopg.Connection[Any], flt: JobFilter, before: int | None, limit: int = PAGE_SIZE
) -> tuple[list[dict[str, Any]], int | None]:
    """One page of jobs (newest first) and the cursor of the next page (None: the last).

    A filter no index serves scans at most SCAN_WINDOW ids below the cursor: the page may then
    hold fewer than ``limit`` jobs (even none) and still have a next page, which goes on below
    the window (:func:`job_page_scan` says how far it looked)."""
    page, nxt, _ = job_page_scan(conn, flt, before, limit)
    return page, nxt


def job_page_scan(
    conn: psycopg.Connection[Any],
    flt: JobFilter,
    before: int | None,
    limit: int = PAGE_SIZE,
    plan: str | None = None,
) -> tuple[list[dict[str, Any]], int | None, int | None]:
    """:func:`job_page`, and the lowest id its bounded scan looked at (None: not bounded, or
    the scan reached the first job). ``plan``: :func:`job_plan`'s answer, if already asked."""
    params = flt.params() | {"before": before, "limit": limit + 1}
    plan = plan or job_plan(conn, flt)
    if plan == "index":
        name, floor = "dashboard_job_page", None
    elif plan == "status":
        name, floor = "dashboard_job_page_indexed", None
    elif plan in ("error_code", "dead"):
        # The SCAN_ENTRIES-th newest entry of the index below the cursor, and whether any is
        # left below it (an index-only read): the page reads the entries down to it.
        ids = [
            row[0]
            for row in conn.execute(
                query(_FLOORS[plan]),
                {"before": before, "error_code": flt.error_code, "skip": SCAN_ENTRIES - 1},
            ).fetchall()
        ]
        floor = ids[0] if len(ids) > 1 else None
        name, params["floor"] = "dashboard_job_page_window", ids[0] if ids else _LOWEST_ID
    else:
        bounds = conn.execute(query("dashboard_job_id_bounds")).fetchone()
        lowest, highest = bounds if bounds is not None else (None, None)
        if lowest is None or highest is None:
            return [], None, None
        start = highest + 1 if before is None else min(before, highest + 1)
        floor = start - SCAN_WINDOW
        name, floor = "dashboard_job_page_window", (floor if floor > lowest else None)
        params["floor"] = floor if floor is not None else lowest
    rows = conn.execute(query(name), params).fetchall()
    page = [dict(zip(_JOB_COLUMNS, row, strict=True)) for row in rows[:limit]]
    if len(rows) > limit:
        return page, page[-1]["id"], None
    return page, floor, floor


def job_count(conn: psycopg.Connection[Any], flt: JobFilter, plan: str | None = None) -> Count:
    """Matching jobs, up to 10,001, or not counted if that takes longer than COUNT_TIMEOUT
    (COUNT_TIMEOUT_SCAN for a filter no index serves: its count reads the table until it finds
    10,001 or runs out of time, so it gets less of the page's time)."""
    plan = plan or job_plan(conn, flt)
    timeout = COUNT_TIMEOUT_SCAN if plan == "window" else COUNT_TIMEOUT
    try:
        with conn.transaction():
            conn.execute(query("dashboard_local_timeout"), {"timeout": timeout})
            name = (
                "dashboard_job_count"
                if flt.error_code is None
                else "dashboard_job_count_error_code"
            )
            row = conn.execute(query(name), flt.params()).fetchone()
    except psycopg.errors.QueryCanceled:
        return Count(None)
    assert row is not None
    return Count(int(row[0]))


def job_detail(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    record = jobs.get_job(conn, job_id)
    detail = asdict(record)
    detail["status"] = str(record.status)
    detail["payload_text"] = json.dumps(record.payload, indent=2, ensure_ascii=False)
    history = [asdict(a) for a in jobs.job_attempts(conn, job_id)]
    # A requeue starts the job's attempt counter again: number the rows in order, keep the
    # counter beside it, and mark where a requeue started a new run.
    previous = 0
    for number, a in enumerate(history, 1):
        a["number"] = number
        a["after_requeue"] = a["attempt"] <= previous
        previous = a["attempt"]
    detail["attempt_history"] = history
    detail["actions"] = job_actions(record.status)
    return detail


def job_actions(status: jobs.JobStatus) -> list[str]:
    """What the job's own page offers: requeue a dead or cancelled job, cancel a waiting or
    dead one (a leased job is running: it finishes or its lease expires first)."""
    actions = []
    if status in (jobs.JobStatus.DEAD, jobs.JobStatus.CANCELLED):
        actions.append("requeue")
    if status in (jobs.JobStatus.PENDING, jobs.JobStatus.RETRYING, jobs.JobStatus.DEAD):
        actions.append("cancel")
    return actions


def act_on_job(
    conn: psycopg.Connection[Any], action: str, job_id: int, *, actor: str, now: datetime | None
) -> bool:
    """Requeue or cancel one job from its page and record it, in one transaction; False when
    its status no longer allows it (it changed since the page was shown)."""
    with conn.transaction():
        if action == "requeue":
            done = list(jobs.requeue(conn, ids=[job_id], statuses=("dead", "cancelled"), now=now))
        elif action == "cancel":
            done = jobs.cancel(
                conn,
                ids=[job_id],
                statuses=("pending", "retrying", "dead"),
                reason="cancelled from the dashboard",
                now=now,
            )
        else:
            raise InvalidInput("action", action, "must be requeue or cancel")
        audit(conn, actor, action, {"ids": [job_id], "from": "job page"}, len(done), now)
    return bool(done)


def search(conn: psycopg.Connection[Any], text: str) -> dict[str, Any]:
    """What ``text`` names: a job by id (digits), the jobs holding it as idempotency key, the
    schedules of that subject (each bounded)."""
    found: dict[str, Any] = {"job": None, "key_jobs": None, "schedules": []}
    if text.isascii() and text.isdigit() and 1 <= int(text) <= 2**63 - 1:
        try:
            record = jobs.get_job(conn, int(text))
            found["job"] = {"id": record.id, "status": str(record.status), "type": record.job_type}
        except jobs.JobNotFound:
            pass
    if len(text) <= 255:
        flt = JobFilter(idempotency_key=text)
        found["key_jobs"] = job_count(conn, flt, "index").value
        filters = {"key": None, "subject": text, "zone": None, "job_type": None}
        found["schedules"], _ = schedule_page(conn, filters, None, 20)
    return found


def dead_ids(
    conn: psycopg.Connection[Any], queue: str | None, job_type: str | None, error_code: str | None
) -> list[int]:
    """The dead jobs a filter selects, at most ACTION_CAP + 1 (more: the filter is too wide)."""
    params = {
        "queue": queue,
        "job_type": job_type,
        "error_code": error_code,
        "limit": ACTION_CAP + 1,
    }
    if error_code is not None:
        sql = query("dashboard_dead_ids_by_code")
        return [row[0] for row in conn.execute(sql, params).fetchall()]
    if queue is None and job_type is None:
        return [row[0] for row in conn.execute(query("dashboard_dead_ids"), params).fetchall()]
    # A bitmap scan of the dead letters' (queue, job_type) index, not an index scan in id order
    # over every dead letter (see the statement), then the setting as it was.
    with conn.transaction():
        row = conn.execute(query("dashboard_index_scans"), {"value": "off"}).fetchone()
        ids = [r[0] for r in conn.execute(query("dashboard_dead_ids"), params)]
        conn.execute(query("dashboard_index_scans"), {"value": row[0] if row else "on"})
    return ids


def audit(
    conn: psycopg.Connection[Any],
    actor: str,
    action: str,
    selection: dict[str, Any],
    affected: int,
    now: datetime | None,
) -> None:
    conn.execute(
        query("dashboard_audit_insert"),
        {
            "actor": actor,
            "action": action,
            "filter": Jsonb(selection),
            "affected": affected,
            "now": now,
        },
    )


def recent_audit(conn: psycopg.Connection[Any], limit: int = 20) -> list[dict[str, Any]]:
    rows = conn.execute(query("dashboard_audit_recent"), {"limit": limit}).fetchall()
    return [
        {
            "id": i,
            "at": at,
            "actor": actor,
            "action": action,
            "filter": json.dumps(f),
            "affected": n,
        }
        for i, at, actor, action, f, n in rows
    ]


# What the dashboard's requeue and cancel act on: dead letters and expired jobs (issue 24).
_FINISHED_UNRUN = ("dead", "expired")


def act_on_dead(
    conn: psycopg.Connection[Any],
    action: str,
    ids: Sequence[int],
    *,
    actor: str,
    selection: dict[str, Any],
    now: datetime | None,
) -> list[int]:
    """Requeue or cancel these dead (or expired) jobs (those still so) and record it, in one
    transaction."""
    done: list[int]
    with conn.transaction():
        if action == "requeue":
            # A job whose unique key an active job holds is skipped (not in done).
            done = jobs.requeue(conn, ids=ids, statuses=_FINISHED_UNRUN, now=now)
        elif action == "cancel":
            done = jobs.cancel(
                conn,
                ids=ids,
                statuses=_FINISHED_UNRUN,
                reason="cancelled from the dashboard",
                now=now,
            )
        else:
            raise InvalidInput("action", action, "must be requeue or cancel")
        audit(conn, actor, action, selection, len(done), now)
    return done


_SCHEDULE_COLUMNS = (
    "id",
    "organization_id",
    "key",
    "subject",
    "job_type",
    "queue",
    "zone",
    "rule",
    "paused",
    "next_run_at",
    "last_occurrence_at",
    "enqueued_count",
    "source",
    "pause_note",
    "paused_until",
    "finished_at",
)


def schedule_page(
    conn: psycopg.Connection[Any],
    filters: dict[str, str | None],
    after: int | None,
    limit: int = PAGE_SIZE,
) -> tuple[list[dict[str, Any]], int | None]:
    params = filters | {"after": after, "limit": limit + 1}
    rows = conn.execute(query("dashboard_schedule_search"), params).fetchall()
    page = []
    for row in rows[:limit]:
        item = dict(zip(_SCHEDULE_COLUMNS, row, strict=True))
        item["rule_text"] = rule_text(item["rule"])
        page.append(item)
    return page, (page[-1]["id"] if len(rows) > limit else None)


def rule_text(raw: Any) -> str:
    try:
        return str(timezones.parse_rule(json.dumps(raw) if not isinstance(raw, str) else raw))
    except timezones.TimezoneError:
        return json.dumps(raw)


def offset_text(occ: timezones.Occurrence) -> str:
    offset = occ.local.utcoffset()
    minutes = 0 if offset is None else int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def occurrence_rows(found: Sequence[timezones.Occurrence]) -> list[dict[str, Any]]:
    """Occurrences as ``tockwork preview`` prints them: local time, offset, UTC, DST mark."""
    return [
        {
            "local": occ.local.strftime("%a %Y-%m-%d %H:%M"),
            "offset": offset_text(occ),
            "utc": occ.at.strftime("%Y-%m-%dT%H:%MZ"),
            "key": occ.key,
            "mark": None if occ.adjusted is None else occ.adjusted.value,
            "repeated": bool(occ.fold_index),
        }
        for occ in found
    ]


OCCURRENCES_MAX = 1000  # occurrences the schedule and preview pages compute at most


def schedule_detail(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    now: datetime,
    *,
    count: int = 10,
    marked_only: bool = False,
) -> dict[str, Any]:
    """A schedule, its next ``count`` occurrences after ``now`` (or only those a DST policy
    adjusted or that fall in a repeated hour, among the next ``count``), its recent jobs."""
    s = schedule_api.get_schedule(conn, schedule_id)
    prefix = occurrence_idempotency_key(s.id, "")
    recent = conn.execute(
        query("dashboard_schedule_jitter"),
        {
            "organization_id": s.organization_id,
            "job_type": s.job_type,
            "prefix": prefix,
            "prefix_end": prefix[:-1] + chr(ord(prefix[-1]) + 1),
        },
    ).fetchall()
    jitters = [r[4] for r in recent if r[4] is not None]
    return {
        "schedule": s,
        "rule_text": rule_text(s.rule_raw),
        "occurrences": [
            o
            for o in occurrence_rows(schedule_api.preview(s, now, count))
            if not marked_only or o["mark"] or o["repeated"]
        ],
        "recent": [
            {
                "job_id": i,
                "occurrence": o,
                "nominal_at": nominal,
                "run_at": run,
                "jitter_s": j,
                "status": st,
            }
            for i, o, nominal, run, j, st in recent
        ],
        "jitter_spread": (min(jitters), max(jitters)) if jitters else None,
    }


def set_paused(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    paused: bool,
    *,
    actor: str,
    now: datetime | None,
    note: str | None = None,
    until: datetime | None = None,
) -> None:
    """Pause (with its note and end) or resume; the API writes the audit row, in the same
    transaction."""
    with conn.transaction():
        if paused:
            schedule_api.pause(conn, schedule_id, note=note, until=until, actor=actor, now=now)
        else:
            schedule_api.resume(conn, schedule_id, actor=actor, now=now)


def trigger_now(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    *,
    at: datetime | None,
    actor: str,
    now: datetime | None,
) -> runs.OccurrenceRun:
    """Trigger now (its nominal time ``at``, default now), audited."""
    with conn.transaction():
        run = runs.trigger(conn, schedule_id, at=at, now=now)
        selection = {"schedule_id": schedule_id, "occurrence": run.occurrence_key,
                     "outcome": run.outcome}  # fmt: skip
        audit(conn, actor, "trigger", selection, 1 if run.outcome == "created" else 0, now)
    return run


def backfill(
    conn: psycopg.Connection[Any],
    schedule_id: int,
    *,
    start: datetime,
    end: datetime,
    overlap: str | None,
    dry_run: bool,
    actor: str,
    now: datetime | None,
) -> runs.Backfill:
    """One backfill call of up to :data:`scheduler.runs.MAX_BACKFILL_BATCH` occurrences (the
    page says where to continue); a run is audited, a preview writes nothing."""
    with conn.transaction():
        result = runs.backfill(
            conn, schedule_id, start=start, end=end, overlap=overlap, dry_run=dry_run,
            batch=runs.MAX_BACKFILL_BATCH, now=now,
        )  # fmt: skip
        if not dry_run:
            selection = {
                "schedule_id": schedule_id, "start": start.isoformat(), "end": end.isoformat(),
                "overlap": overlap or "allow",
                "resume_from": result.resume_from.isoformat() if result.resume_from else None,
            }  # fmt: skip
            audit(conn, actor, "backfill", selection, result.count("created"), now)
    return result


def preview(
    rule: str, zone: str, after: datetime, count: int, gap: str | None, fold: str | None
) -> list[dict[str, Any]]:
    try:
        parsed = timezones.parse_rule(rule)
    except timezones.TimezoneError as exc:
        raise InvalidInput("rule", rule, str(exc)) from None
    try:
        timezones.get_zone(zone)
    except timezones.TimezoneError as exc:
        raise InvalidInput("zone", zone, str(exc)) from None
    found = list(timezones.occurrences(parsed, zone, after, count=count, gap=gap, fold=fold))
    return occurrence_rows(found)


def lateness(
    conn: psycopg.Connection[Any], window: timedelta, queue: str | None, now: datetime | None
) -> dict[str, Any]:
    """``{"queues": {queue: {"start": counts, "nominal": counts}}, "counted": n, "since":
    instant}``: one count per bucket of LATENESS_BOUNDS (index 0: below 0 s, i: below
    bounds[i-1]... see the labels) over the latest first attempts of the window, at most
    LATENESS_SAMPLE of them among the newest LATENESS_SCAN attempts; ``counted`` first attempts
    were counted, the earliest finished at ``since`` (None: none)."""
    rows = conn.execute(
        query("dashboard_lateness"),
        {
            "now": now,
            "window": window,
            "queue": queue,
            "bounds": LATENESS_BOUNDS,
            "scan": LATENESS_SCAN,
            "sample": LATENESS_SAMPLE,
        },
    ).fetchall()
    result: dict[str, dict[str, list[int]]] = {}
    counted, since = (rows[0][4], rows[0][5]) if rows else (0, None)
    for q, kind, bucket, n, _, _ in rows:
        per = result.setdefault(
            q,
            {
                "start": [0] * (len(LATENESS_BOUNDS) + 1),
                "nominal": [0] * (len(LATENESS_BOUNDS) + 1),
            },
        )
        per[kind][bucket] += n
    return {"queues": result, "counted": counted, "since": since}


def lateness_labels() -> list[str]:
    def short(s: float) -> str:
        return f"{s:g}s" if s < 60 else (f"{s / 60:g}m" if s < 3600 else f"{s / 3600:g}h")

    labels = [f"< {short(LATENESS_BOUNDS[0])}"]
    labels += [f"{short(a)}-{short(b)}" for a, b in itertools.pairwise(LATENESS_BOUNDS)]
    return [*labels, f"> {short(LATENESS_BOUNDS[-1])}"]


def outbox_page(
    conn: psycopg.Connection[Any], before: datetime | None, now: datetime | None
) -> dict[str, Any]:
    box = outbox.stats(conn, now=now)
    rows = conn.execute(
        query("dashboard_outbox_dead_page"), {"before": before, "limit": PAGE_SIZE + 1}
    ).fetchall()
    names = (
        "id",
        "aggregate_type",
        "aggregate_id",
        "event_type",
        "occurred_at",
        "attempts",
        "last_error",
        "dead_at",
    )
    page = [dict(zip(names, r, strict=True)) for r in rows[:PAGE_SIZE]]
    return {
        "stats": {"pending": box.pending, "dead": box.dead, "lag_s": box.oldest_pending_age},
        "dead": page,
        "next_before": page[-1]["dead_at"].isoformat() if len(rows) > PAGE_SIZE else None,
    }


def retry_outbox(
    conn: psycopg.Connection[Any],
    ids: list[uuid.UUID] | None,
    *,
    actor: str,
    now: datetime | None,
) -> int:
    with conn.transaction():
        done = outbox.retry_dead(conn, ids, now=now)
        selection: dict[str, Any] = {"ids": [str(i) for i in ids]} if ids else {"all": True}
        audit(conn, actor, "outbox_retry", selection, len(done), now)
    return len(done)


# -- webhooks ---------------------------------------------------------------------------------

WEBHOOK_PAGE = 200
WEBHOOK_ACTIONS = ("disable", "enable", "redeliver")


def _endpoint_view(endpoint: webhook_api.Endpoint) -> dict[str, Any]:
    """What the pages show of an endpoint: never a secret (an Endpoint holds none)."""
    return {
        "id": endpoint.id,
        "organization_id": endpoint.organization_id,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": ", ".join(endpoint.event_types) if endpoint.event_types else "all",
        "rate_limit": endpoint.rate_limit,
        "enabled": endpoint.enabled,
        "disabled_at": endpoint.disabled_at,
        "disabled_reason": endpoint.disabled_reason,
        "consecutive_failures": endpoint.consecutive_failures,
        "failing_since": endpoint.failing_since,
        "last_success_at": endpoint.last_success_at,
        "last_failure_at": endpoint.last_failure_at,
    }


def webhooks(conn: psycopg.Connection[Any], after: int | None) -> dict[str, Any]:
    """The endpoints page: every endpoint with its health, a page at a time."""
    items = webhook_api.list_endpoints(conn, after=after, limit=WEBHOOK_PAGE)
    return {
        "endpoints": [_endpoint_view(e) for e in items],
        "next_after": items[-1].id if len(items) == WEBHOOK_PAGE else None,
    }


def webhook_detail(
    conn: psycopg.Connection[Any], endpoint_id: int, now: datetime | None
) -> dict[str, Any]:
    """One endpoint: its health, when its secrets stop signing, its recent attempts."""
    endpoint = webhook_api.get_endpoint(conn, endpoint_id)
    if endpoint is None:
        raise WebhookEndpointNotFound(endpoint_id)
    return {
        "endpoint": _endpoint_view(endpoint),
        "secrets": webhook_api.endpoint_secrets(conn, endpoint_id, now=now),
        "attempts": webhook_api.recent_attempts(conn, endpoint_id, limit=50),
        "audit": recent_audit(conn),
    }


def webhook_action(
    conn: psycopg.Connection[Any],
    endpoint_id: int,
    action: str,
    *,
    since: datetime | None,
    actor: str,
    now: datetime | None,
) -> int:
    """Disable, enable, or requeue the failed deliveries since a time, audited in the same
    transaction; how many deliveries it requeued (1 for a state change)."""
    if action not in WEBHOOK_ACTIONS:
        raise InvalidInput("action", action, f"must be one of {list(WEBHOOK_ACTIONS)}")
    with conn.transaction():
        if webhook_api.get_endpoint(conn, endpoint_id) is None:
            raise WebhookEndpointNotFound(endpoint_id)
        selection: dict[str, Any] = {"endpoint_id": endpoint_id}
        if action == "disable":
            webhook_api.disable_endpoint(conn, endpoint_id, reason=f"disabled by {actor}", now=now)
            affected = 1
        elif action == "enable":
            affected = len(webhook_api.enable_endpoint(conn, endpoint_id, now=now).requeued)
        else:
            if since is None:
                raise InvalidInput("since", None, "give the time to requeue failures from")
            selection["since"] = since.isoformat()
            affected = len(
                webhook_delivery.redeliver_failed(conn, endpoint_id, since=since, now=now)
            )
        audit(conn, actor, f"webhook_{action}", selection, affected, now)
    return affected
