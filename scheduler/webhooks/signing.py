"""Standard Webhooks signatures: the secrets, and the headers of a signed request.

The specification (standardwebhooks.com): a request carries

- ``webhook-id``: the message id, the same for every attempt of one message: the receiver's
  idempotency key (ours is the outbox event's id);
- ``webhook-timestamp``: the attempt's time in integer seconds since the epoch (receivers
  refuse one too far from their clock, which stops replays);
- ``webhook-signature``: space-separated ``v1,<base64 HMAC-SHA256>`` of ``id.timestamp.body``
  under each secret that currently signs (two during a rotation's overlap; the receiver accepts
  the request if any one matches).

A secret is ``whsec_`` followed by the base64 of its key bytes (24 random bytes when we make
it: :func:`generate_secret`); the HMAC key is the decoded bytes. The tests verify our requests
with the specification's reference library (the ``standardwebhooks`` package), not with this
code.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets as random_source
from collections.abc import Sequence

from scheduler.errors import InvalidWebhook

PREFIX = "whsec_"
SECRET_BYTES = 24
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64
_FORM = re.compile(r"^whsec_[A-Za-z0-9+/]+={0,2}$")
SHOWN = "<secret>"  # what an error shows in place of a secret


def generate_secret() -> str:
    """A new secret in the ``whsec_`` form: 24 random bytes, base64."""
    return PREFIX + base64.b64encode(random_source.token_bytes(SECRET_BYTES)).decode()


def check_secret(value: object, field: str = "secret") -> str:
    """A secret given by a caller: ``whsec_`` + base64 of 24 to 64 bytes. The error never
    shows the value."""
    if not isinstance(value, str) or not _FORM.match(value):
        raise InvalidWebhook(field, SHOWN, "must be whsec_ followed by base64")
    key = secret_key(value)
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise InvalidWebhook(
            field, SHOWN, f"must encode {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes"
        )
    return value


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret."""
    body = secret.removeprefix(PREFIX)
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidWebhook("secret", SHOWN, "is not valid base64") from None


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64>`` signature of ``id.timestamp.body``."""
    mac = hmac.new(key, f"{message_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def headers(
    keys: Sequence[bytes], message_id: str, timestamp: int, body: bytes
) -> list[tuple[str, str]]:
    """The three Standard Webhooks headers of a request signed with every key in ``keys``."""
    return [
        ("webhook-id", message_id),
        ("webhook-timestamp", str(timestamp)),
        ("webhook-signature", " ".join(signature(k, message_id, timestamp, body) for k in keys)),
    ]
