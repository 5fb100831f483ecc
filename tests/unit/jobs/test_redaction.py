"""jobs.redaction: every kind of secret is masked, ordinary text is left alone."""

from __future__ import annotations

import logging

import pytest

from jobs import redaction
from jobs.retry import summarize

PEM = (
    "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n"
    "-----END PRIVATE KEY-----"
)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("postgresql://u:s3cr3t-pw@db:5432/app", "s3cr3t-pw"),
        ("host=db password=s3cr3t-pw dbname=app", "s3cr3t-pw"),
        ("host=db password='s3 cr3t' dbname=app", "s3 cr3t"),
        ("Authorization: Bearer abcDEF0123456789xyz", "abcDEF0123456789xyz"),
        ("signature mismatch with whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "MfKQ9r8GKYqrTwj"),
        ("GET /hook?token=tok-8d7f6e5d&x=1", "tok-8d7f6e5d"),
        ('{"client_secret": "cs-998877", "a": 1}', "cs-998877"),
        ("api_key=AKIA1234567890", "AKIA1234567890"),
        (f"bad key {PEM} here", "MIGHAgEAMBMGByqGSM49"),
        ('{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQ\\n-----END"}', "MIIEvQ"),
        ("token eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJURUFNIn0.c2lnbmF0dXJl refused", "c2lnbmF0"),
    ],
)
def test_each_kind_of_secret_is_masked(text: str, secret: str) -> None:
    masked = redaction.redact(text)
    assert secret not in masked
    assert redaction.MASK in masked


@pytest.mark.parametrize(
    "text",
    [
        "invalid --token None: a token is configured (--token or $TOCKWORK_DASHBOARD_TOKEN)",
        "send it as a bearer token in the Authorization header",
        "max_tokens=5 concurrency=3 queue=default",
        "the database 'app' on db:5432 is behind: run 'tockwork migrate'",
        "push to user 42 (idempotency key job:7:push)",
        "missing or invalid CSRF token: reload the page and try again",
        "the dashboard needs a token (TOCKWORK_DASHBOARD_TOKEN or token=...); set it",
        "Device(id=3, token='…a1b2c3', platform='ios')",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redaction.redact(text) == text


def test_a_registered_value_is_masked_anywhere_and_short_ones_are_not_registered() -> None:
    redaction.register("Planted-Value-9f8e7d")
    redaction.register("abc")  # too short to register: it would garble messages
    assert redaction.redact("x Planted-Value-9f8e7dy abc") == "x ***y abc"


def test_error_summaries_and_log_records_are_masked() -> None:
    exc = RuntimeError(
        "callback refused whsec_abcdefABCDEF0123456789 for postgresql://u:pw9876@h/d"
    )
    summary = summarize(exc)
    assert "whsec_abcdef" not in summary and "pw9876" not in summary
    record = logging.LogRecord(
        "tockwork.jobs", logging.WARNING, __file__, 1, "failed: %s", (exc,), None
    )
    try:
        raise exc
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    record.job = {"error": str(exc), "attempt": 2}
    assert redaction.RedactingFilter().filter(record)
    assert "pw9876" not in record.getMessage()
    assert record.exc_text is not None and "pw9876" not in record.exc_text
    assert "pw9876" not in record.job["error"] and record.job["attempt"] == 2  # type: ignore[attr-defined]
