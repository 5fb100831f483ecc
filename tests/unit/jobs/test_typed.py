"""Typed job definitions without a database: payload validation and the typing contract.

mypy --strict runs over this file with ``warn_unused_ignores``: each ``# type: ignore`` below
marks a call the type checker must reject, so the ParamSpec typing is tested too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

import jobs
from jobs import InvalidJob, PermanentError
from jobs.model import Job


@jobs.job("send_welcome", queue="emails", max_attempts=5)
def send_welcome(user_id: int, locale: str = "en") -> str:
    return f"{user_id}:{locale}"


class Reminder(pydantic.BaseModel):
    user_id: int
    text: str


@jobs.job("remind")
def remind(reminder: Reminder) -> str:
    return f"{reminder.user_id}:{reminder.text}"


def _job(job_type: str, payload: Any) -> Job:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Job(
        id=1,
        queue="emails",
        job_type=job_type,
        payload=payload,
        attempt=1,
        max_attempts=5,
        idempotency_key=None,
        organization_id=None,
        priority=0,
        run_at=at,
        created_at=at,
        lease_token=1,
    )


def test_payload_is_the_arguments_by_name() -> None:
    assert send_welcome.payload(42) == {"user_id": 42, "locale": "en"}
    assert send_welcome.payload(user_id=7, locale="de") == {"user_id": 7, "locale": "de"}
    spec = send_welcome.spec(user_id=1)
    assert (spec.job_type, spec.queue, spec.max_attempts) == ("send_welcome", "emails", 5)


def test_a_model_parameter_is_the_whole_payload() -> None:
    assert remind.payload(Reminder(user_id=4, text="hi")) == {"user_id": 4, "text": "hi"}
    assert remind(_job("remind", {"user_id": 4, "text": "hi"})) == "4:hi"


def test_the_handler_validates_the_stored_payload() -> None:
    assert send_welcome(_job("send_welcome", {"user_id": "42"})) == "42:en"  # lax like pydantic
    with pytest.raises(PermanentError, match="user_id") as info:
        send_welcome(_job("send_welcome", {"user_id": "abc"}))
    assert info.value.code == "invalid_payload"
    with pytest.raises(PermanentError, match="Extra inputs"):
        send_welcome(_job("send_welcome", {"user_id": 1, "admin": True}))
    with pytest.raises(PermanentError, match="text"):
        remind(_job("remind", {"user_id": 1}))


def test_bad_arguments_are_typed_errors_naming_the_field() -> None:
    with pytest.raises(InvalidJob) as info:
        send_welcome.payload(user_id="not a number")  # type: ignore[arg-type]
    assert info.value.field == "send_welcome.user_id"
    with pytest.raises(InvalidJob, match="arguments"):
        send_welcome.payload()  # type: ignore[call-arg]
    with pytest.raises(InvalidJob, match="arguments"):
        send_welcome.payload(1, nickname="x")  # type: ignore[call-arg]


def test_options_are_checked_where_they_are_given() -> None:
    with pytest.raises(InvalidJob, match="queue"):
        jobs.job("x", queue="bad queue!")
    with pytest.raises(InvalidJob, match="priority"):
        send_welcome.with_options(priority=2**40)
    with pytest.raises(InvalidJob, match="run_at"):
        send_welcome.with_options(run_at=datetime(2026, 1, 1))
    keyed = send_welcome.with_options(idempotency_key="welcome-1", priority=3)
    assert (keyed.spec(1).idempotency_key, keyed.spec(1).priority, keyed.spec(1).queue) == (
        "welcome-1",
        3,
        "emails",
    )
    assert send_welcome.spec(1).idempotency_key is None  # the original is unchanged


def test_definitions_refuse_what_cannot_be_a_payload() -> None:
    def star(*args: int) -> None: ...

    with pytest.raises(InvalidJob, match="args"):
        jobs.job("star")(star)

    async def coroutine(user_id: int) -> None: ...

    with pytest.raises(InvalidJob, match="async"):
        jobs.job("co")(coroutine)
    with pytest.raises(InvalidJob, match="twice"):
        jobs.handlers(send_welcome, send_welcome)
    assert set(jobs.handlers(send_welcome, remind)) == {"send_welcome", "remind"}


def test_call_bypasses_the_queue() -> None:
    assert send_welcome.call(3, locale="fr") == "3:fr"
