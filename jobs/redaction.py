"""Secrets are never printed: one redactor for every message, log line and error summary.

:func:`redact` masks, with ``***``:

- the password of a URL (``postgresql://user:PASSWORD@host``) and of a conninfo
  (``password=PASSWORD``, quoted or not);
- a bearer or basic credential (``Bearer TOKEN``, ``Authorization: ...``);
- a webhook signing secret (``whsec_...``, Stripe's and Svix's form);
- a query parameter or ``key=value`` pair named like a secret (``token=``, ``secret=``,
  ``api_key=``, ``access_token=``, ``client_secret=``...);
- a PEM private key block and a service account's ``"private_key": "..."`` (FCM credentials),
  a JSON Web Token (``eyJ...``: an OAuth access token, an APNs provider token);
- every value registered with :func:`register` (the password of the database URL a command
  was given, the dashboard's token, push credentials read from files), wherever it appears.

Where it applies: :func:`jobs.retry.summarize` (what the jobs table keeps of an error, so the
CLI and the dashboard never show one either), :class:`RedactingFilter` on the handler that
:func:`jobs.logs.configure` installs (each record's message, its traceback and its job fields),
and the CLI's one-line errors (``scheduler/cli``). A value shorter than
:data:`MIN_REGISTERED` characters is not registered: masking ``abc`` everywhere would garble
messages and protect nothing.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

MASK = "***"
MIN_REGISTERED = 6

_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    # A PEM private key, whole (before anything else cuts it into pieces).
    (
        re.compile(
            r"-----BEGIN ([A-Z ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|$)", re.DOTALL
        ),
        r"-----BEGIN \1PRIVATE KEY-----" + MASK + r"-----END \1PRIVATE KEY-----",
    ),
    # A service account's key in JSON (escaped newlines and all).
    (re.compile(r'("private_key"\s*:\s*")(?:[^"\\]|\\.)*(")'), r"\1" + MASK + r"\2"),
    # The password of a URL: scheme://user:PASSWORD@host.
    (re.compile(r"(://[^:/@\s]*:)[^@\s]+@"), r"\1" + MASK + "@"),
    # password=... in a conninfo, quoted or not.
    (re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE), r"\1" + MASK),
    # Authorization headers and bearer tokens.
    # (a credential is long and not a word: "bearer token" stays as it is).
    (
        re.compile(
            r"(\b(?:bearer|basic)\s+)(?=[A-Za-z]*[0-9._~+/=-])[A-Za-z0-9._~+/=-]{12,}",
            re.IGNORECASE,
        ),
        r"\1" + MASK,
    ),
    (re.compile(r"(\bauthorization\s*[:=]\s*)(?!\*\*\*)\S+", re.IGNORECASE), r"\1" + MASK),
    # A JSON Web Token (an OAuth access token, an APNs provider token, an assertion).
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), MASK),
    # Webhook signing secrets.
    (re.compile(r"\bwhsec_[A-Za-z0-9+/=_-]+"), "whsec_" + MASK),
    # key=value pairs and query parameters named like a secret (not "CSRF token: reload",
    # nor a value already shortened for display: "token='…a1b2c3'", "token=...").
    (
        re.compile(
            r"(\b(?:[a-z_]*_)?(?:token|secret|api[_-]?key|apikey|passwd|pwd)=['\"]?)"
            r"(?!\*\*\*|…|\.\.\.)[^\s&\"',;)]+",
            re.IGNORECASE,
        ),
        r"\1" + MASK,
    ),
    # The same in JSON: "client_secret": "...".
    (
        re.compile(
            r'("(?:[a-z_]*_)?(?:token|secret|api[_-]?key|apikey|passwd|password)"\s*:\s*")'
            r'(?!\*\*\*)(?:[^"\\]|\\.)+(")',
            re.IGNORECASE,
        ),
        r"\1" + MASK + r"\2",
    ),
]

_lock = threading.Lock()
_registered: set[str] = set()
_registered_re: re.Pattern[str] | None = None


def register(value: str | None) -> None:
    """Mask ``value`` wherever it appears from now on (a secret this process was given)."""
    global _registered_re
    if not value or len(value) < MIN_REGISTERED:
        return
    with _lock:
        if value in _registered:
            return
        _registered.add(value)
        # Longest first: a secret that contains another is masked whole.
        ordered = sorted(_registered, key=len, reverse=True)
        _registered_re = re.compile("|".join(re.escape(v) for v in ordered))


def redact(text: str) -> str:
    """``text`` with every secret it holds masked (see the module docstring)."""
    if not text:
        return text
    registered = _registered_re
    if registered is not None:
        text = registered.sub(MASK, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_value(value: Any) -> Any:
    """A log field's value, redacted when it is text."""
    return redact(value) if isinstance(value, str) else value


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message, traceback and ``job`` fields (on a handler)."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        job = getattr(record, "job", None)
        if isinstance(job, dict):
            record.job = {k: redact_value(v) for k, v in job.items()}
        return True
