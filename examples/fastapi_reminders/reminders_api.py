"""A FastAPI service that creates users' reminder schedules (asyncio end to end).

Run it with ``uvicorn reminders_api:app`` from this folder (``DATABASE_URL`` set, the schema
migrated with ``tockwork migrate --with simulated``), and deliver with
``tockwork worker --app scheduler.delivery:simulated_app --queue reminders=8`` beside
``tockwork scheduler``. ``POST /users/42/reminders {"rule": "weekdays@08:00", "zone":
"America/Chicago", "message": "stand up"}`` creates the schedule in the request's own async
transaction; a bad rule or zone is a 422 naming the field.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel
from scheduler import InvalidInput, create_schedule_async, list_schedules_async

app = FastAPI(title="reminders")


class ReminderIn(BaseModel):
    rule: str
    zone: str
    message: str


async def _connect() -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(os.environ["DATABASE_URL"])


@app.post("/users/{user_id}/reminders", status_code=201)
async def create_reminder(user_id: int, body: ReminderIn) -> dict[str, Any]:
    async with await _connect() as conn:
        try:
            schedule = await create_schedule_async(
                conn,
                job_type="reminder",
                rule=body.rule,
                zone=body.zone,
                queue="reminders",
                subject=user_id,
                payload={"subject": user_id, "message": body.message},
            )
        except InvalidInput as exc:
            raise HTTPException(422, {"field": exc.field, "error": str(exc)}) from None
    return {"id": schedule.id, "next_run_at": schedule.next_run_at.isoformat()}


@app.get("/users/{user_id}/reminders")
async def reminders(user_id: int) -> list[dict[str, Any]]:
    async with await _connect() as conn:
        found = await list_schedules_async(conn, subject=str(user_id))
    return [{"id": s.id, "rule": str(s.rule), "zone": s.zone} for s in found]
