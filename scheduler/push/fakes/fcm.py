"""A protocol-faithful fake of FCM HTTP v1 and Google's OAuth 2.0 token endpoint.

:class:`FcmFake` is an application for :class:`~scheduler.push.fakes.server.FakeServer`. It
verifies what Google verifies and answers in Google's documented shapes (checked against
Google's own SDK, ``firebase-admin``, in ``tests/integration/push/test_fcm_fake.py``):

- :meth:`FcmFake.service_account` makes a test service-account JSON (RSA 2048 key, ``token_uri``
  pointing at the fake's ``/token``); the fake keeps the public key.
- ``POST /token`` (``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=...``)
  verifies the RS256 JWT (signature, ``kid``, ``iss`` = ``client_email``, ``aud`` =
  ``https://oauth2.googleapis.com/token`` (or the file's ``token_uri``), a scope allowing FCM
  (``firebase.messaging`` or ``cloud-platform``), ``iat`` not in the future, ``exp - iat`` at
  most one hour) and answers ``{"access_token", "expires_in", "token_type": "Bearer"}`` or
  ``400 {"error": "invalid_grant" | "invalid_scope" | "unsupported_grant_type",
  "error_description"}``. ``access_token_ttl`` is the access tokens'
  lifetime (short in tests, to make refreshes happen).
- ``POST /v1/projects/{project_id}/messages:send`` (to a ``token``, or an ``fid``: the
  installation id firebase-admin 7.7 sends in its place): an issued, unexpired bearer token, else
  ``401 UNAUTHENTICATED``; another project: ``403 PERMISSION_DENIED``; the body validated as FCM
  v1 does (``400 INVALID_ARGUMENT`` with ``google.rpc.BadRequest`` field violations and an
  ``FcmError``); then the configured token sets: :attr:`FcmFake.unregistered` (``404 NOT_FOUND``,
  ``UNREGISTERED``), :attr:`~FcmFake.sender_mismatch` (``403``, ``SENDER_ID_MISMATCH``),
  :attr:`~FcmFake.third_party_auth` (``401``, ``THIRD_PARTY_AUTH_ERROR``),
  :attr:`~FcmFake.quota_exceeded` (``429 RESOURCE_EXHAUSTED``, ``QUOTA_EXCEEDED``, Retry-After),
  :attr:`~FcmFake.unavailable` (``503``), :attr:`~FcmFake.internal` (``500``). Success:
  ``{"name": "projects/{p}/messages/{id}"}``.

What it received is recorded (the last ``max_records``, with the receive time) and every delivery
counted per (token, ``data.tockwork_key``), so a test can assert that nothing was delivered twice
(:meth:`FcmFake.duplicates`); :meth:`FcmFake.summary` is the printable account.

Control endpoints (for a separate process): ``GET /_fake/fcm/summary``, ``GET
/_fake/fcm/credentials`` (the service-account JSON), ``POST /_fake/fcm/config`` (token sets as
lists, ``access_token_ttl``, ``quota_retry_after``), ``POST /_fake/fcm/revoke`` (every access
token issued so far stops working), ``POST /_fake/fcm/reset`` (records and counts), ``GET
/_fake/fcm/received?offset=0&limit=10000`` (the kept records compactly, oldest first:
``{"total": n, "received": [[at, token, tockwork_key], ...]}``; ``at`` is the receive time,
``time.time()``; how many are kept: ``--max-records``). Plus the framework's ``/_fake/faults``
and ``/_fake/counters``.

As a process: ``python -m scheduler.push.fakes.fcm [--port N] [--tls] [--dir DIR]`` prints one
JSON line ``{"url", "port", "credentials", "ca_file", "pid"}`` when it listens, and serves until
SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import secrets
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import orjson
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from scheduler.push.fakes.server import (
    FakeRequest,
    FakeResponse,
    FakeServer,
    make_certificate,
    serve_until_signalled,
)

FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
CLOUD_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
GRANT_TYPE = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# The audience Google documents for the assertion (google-auth always sends it, whatever the
# file's token_uri); the fake also accepts its own token_uri.
GOOGLE_TOKEN_AUDIENCE = "https://oauth2.googleapis.com/token"
FCM_ERROR = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
MAX_PAYLOAD = 4096  # FCM's limit on a message's payload (notification + data)

_SEND = re.compile(r"^/v1/projects/([^/]+)/messages:send$")
_TOKEN = re.compile(r"^[A-Za-z0-9_:\-.]{8,4096}$")
_TTL = re.compile(r"^\d{1,12}(\.\d{1,9})?s$")
_MESSAGE_FIELDS = frozenset(
    {
        "name",
        "token",
        "fid",
        "topic",
        "condition",
        "data",
        "notification",
        "android",
        "apns",
        "webpush",
        "fcm_options",
        "fcmOptions",
    }
)
_ANDROID_FIELDS = frozenset(
    {
        "collapse_key",
        "collapseKey",
        "priority",
        "ttl",
        "restricted_package_name",
        "restrictedPackageName",
        "data",
        "notification",
        "fcm_options",
        "fcmOptions",
        "direct_boot_ok",
        "directBootOk",
    }
)
_APNS_FIELDS = frozenset({"headers", "payload", "fcm_options", "fcmOptions", "live_activity_token"})
_NOTIFICATION_FIELDS = frozenset({"title", "body", "image"})


@dataclass(frozen=True, slots=True)
class Received:
    """One delivered message as the fake received it."""

    at: float  # time.time() when it was accepted
    token: str
    key: str | None  # data.tockwork_key
    message: Mapping[str, Any]
    http_version: str


def _error(
    http: int,
    status: str,
    message: str,
    fcm_code: str | None = None,
    violations: list[tuple[str, str]] | None = None,
    headers: list[tuple[str, str]] | None = None,
) -> FakeResponse:
    details: list[dict[str, Any]] = []
    if fcm_code is not None:
        details.append({"@type": FCM_ERROR, "errorCode": fcm_code})
    if violations:
        details.append(
            {
                "@type": BAD_REQUEST,
                "fieldViolations": [{"field": f, "description": d} for f, d in violations],
            }
        )
    error: dict[str, Any] = {"code": http, "message": message, "status": status}
    if details:
        error["details"] = details
    return FakeResponse(
        http,
        [("content-type", "application/json; charset=UTF-8"), *(headers or [])],
        orjson.dumps({"error": error}),
    )


def _invalid(field: str, description: str, message: str | None = None) -> FakeResponse:
    return _error(
        400, "INVALID_ARGUMENT", message or description, "INVALID_ARGUMENT", [(field, description)]
    )


def _unknown_field(name: str, where: str) -> FakeResponse:
    text = (
        f"Invalid JSON payload received. Unknown name \"{name}\" at '{where}': Cannot find field."
    )
    return _error(400, "INVALID_ARGUMENT", text, None, [(where, text)])


class FcmFake:
    """The fake FCM HTTP v1 service and token endpoint (module docstring)."""

    def __init__(
        self,
        *,
        project_id: str = "tockwork-test",
        access_token_ttl: int = 3600,
        quota_retry_after: int = 60,
        max_records: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.project_id = project_id
        self.access_token_ttl = access_token_ttl
        self.quota_retry_after = quota_retry_after
        self.clock = clock
        self.client_email = f"firebase-adminsdk@{project_id}.iam.gserviceaccount.com"
        self.private_key_id = secrets.token_hex(20)
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = self._key.public_key()
        self.token_uri: str | None = None
        self.unregistered: set[str] = set()
        self.sender_mismatch: set[str] = set()
        self.third_party_auth: set[str] = set()
        self.quota_exceeded: set[str] = set()
        self.unavailable: set[str] = set()
        self.internal: set[str] = set()
        self._access: dict[str, float] = {}  # access token -> expiry (clock)
        self._ids = itertools.count(1)
        self.received: deque[Received] = deque(maxlen=max_records)
        self.counts: Counter[tuple[str, str | None]] = Counter()
        self.errors: Counter[str] = Counter()
        self.token_requests = 0
        self.tokens_issued = 0
        self.token_rejections: Counter[str] = Counter()
        self.unauthorized = 0  # 401 UNAUTHENTICATED for a missing/unknown/expired bearer

    # -- credentials ---------------------------------------------------------------------

    def service_account(self, base_url: str) -> dict[str, str]:
        """A service-account JSON whose ``token_uri`` is ``{base_url}/token`` (the fake's)."""
        self.token_uri = f"{base_url.rstrip('/')}/token"
        pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        return {
            "type": "service_account",
            "project_id": self.project_id,
            "private_key_id": self.private_key_id,
            "private_key": pem,
            "client_email": self.client_email,
            "client_id": "100000000000000000000",
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "universe_domain": "googleapis.com",
        }

    def write_credentials(self, path: str | os.PathLike[str], base_url: str) -> str:
        """Write :meth:`service_account` to ``path`` (mode 0600); returns the path."""
        target = Path(path)
        target.write_text(json.dumps(self.service_account(base_url), indent=2))
        target.chmod(0o600)
        return str(target)

    def revoke_access_tokens(self) -> None:
        """Every access token issued so far is rejected from now on (401)."""
        self._access.clear()

    def reset(self) -> None:
        """Forget what was received and counted (not the issued tokens)."""
        self.received.clear()
        self.counts.clear()
        self.errors.clear()

    # -- accounting ----------------------------------------------------------------------

    @property
    def delivered(self) -> int:
        return sum(self.counts.values())

    def duplicates(self) -> dict[tuple[str, str | None], int]:
        """(token, tockwork_key) delivered more than once, with the count."""
        return {k: n for k, n in self.counts.items() if n > 1}

    def summary(self) -> dict[str, Any]:
        return {
            "delivered": self.delivered,
            "distinct": len(self.counts),
            "duplicates": sum(n - 1 for n in self.counts.values() if n > 1),
            "errors": dict(self.errors),
            "token_requests": self.token_requests,
            "tokens_issued": self.tokens_issued,
            "token_rejections": dict(self.token_rejections),
            "unauthorized": self.unauthorized,
        }

    # -- the application -----------------------------------------------------------------

    async def app(self, request: FakeRequest) -> FakeResponse:
        """The application as a coroutine (:meth:`handle` is the same, plain: faster)."""
        return self.handle(request)

    def handle(self, request: FakeRequest) -> FakeResponse:
        """The application (what :class:`FakeServer` serves; nothing in it waits)."""
        path = request.path
        if path.startswith("/v1/"):
            return self._send(request)
        if path == "/token":
            return self._token(request)
        if path.startswith("/_fake/fcm/"):
            return self._control(request)
        return _error(404, "NOT_FOUND", "Not Found")

    def _token(self, request: FakeRequest) -> FakeResponse:
        self.token_requests += 1
        if request.method != "POST":
            return self._token_error("invalid_request", "Method not allowed", 405)
        form = parse_qs(request.body.decode("utf-8", "replace"))
        if form.get("grant_type", [""])[0] != GRANT_TYPE:
            return self._token_error("unsupported_grant_type", "Invalid grant_type: ")
        assertion = form.get("assertion", [""])[0]
        try:
            header = jwt.get_unverified_header(assertion)
            claims = jwt.decode(
                assertion,
                self.public_key,
                algorithms=["RS256"],
                audience=[GOOGLE_TOKEN_AUDIENCE, *([self.token_uri] if self.token_uri else [])],
                issuer=self.client_email,
                options={"require": ["iss", "aud", "iat", "exp"]},
                leeway=60,
            )
        except jwt.InvalidSignatureError:
            return self._token_error("invalid_grant", "Invalid JWT Signature.")
        except jwt.InvalidAudienceError:
            return self._token_error(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived "
                "token (60 minutes) and in a reasonable timeframe.",
            )
        except jwt.PyJWTError as exc:
            return self._token_error("invalid_grant", f"Invalid JWT: {type(exc).__name__}")
        if header.get("kid") not in (None, self.private_key_id):
            return self._token_error("invalid_grant", "Invalid JWT Signature.")
        now = self.clock()
        iat, exp = claims["iat"], claims["exp"]
        if not (isinstance(iat, int | float) and isinstance(exp, int | float)) or (
            iat > now + 60 or exp - iat > 3600 or exp <= iat
        ):
            return self._token_error(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived "
                "token (60 minutes) and in a reasonable timeframe. Check "
                "your iat and exp values in the JWT claim.",
            )
        scopes = str(claims.get("scope", "")).split()
        if FCM_SCOPE not in scopes and CLOUD_SCOPE not in scopes:
            return self._token_error(
                "invalid_scope", "Invalid OAuth scope or ID token audience provided."
            )
        token = "ya29.fake-" + secrets.token_urlsafe(32)
        self._access[token] = now + self.access_token_ttl
        self.tokens_issued += 1
        return FakeResponse(
            200,
            [("content-type", "application/json; charset=utf-8"), ("cache-control", "no-store")],
            orjson.dumps(
                {"access_token": token, "expires_in": self.access_token_ttl, "token_type": "Bearer"}
            ),
        )

    def _token_error(self, error: str, description: str, http: int = 400) -> FakeResponse:
        self.token_rejections[error] += 1
        return FakeResponse.json(http, {"error": error, "error_description": description})

    def _send(self, request: FakeRequest) -> FakeResponse:
        match = _SEND.match(request.path)
        if match is None or request.method != "POST":
            return _error(404, "NOT_FOUND", "Requested entity was not found.")
        auth = request.headers.get("authorization", "")
        expiry = self._access.get(auth[7:]) if auth[:7].lower() == "bearer " else None
        if expiry is None or expiry <= self.clock():
            self.unauthorized += 1
            self.errors["UNAUTHENTICATED"] += 1
            return _error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, "
                "login cookie or other valid authentication credential. See "
                "https://developers.google.com/identity/sign-in/web/devconsole-project.",
            )
        project = match.group(1)
        if project != self.project_id:
            self.errors["PERMISSION_DENIED"] += 1
            return _error(
                403,
                "PERMISSION_DENIED",
                f"Permission 'cloudmessaging.messages.create' denied on resource "
                f"'//cloudresourcemanager.googleapis.com/projects/{project}' (or it may not "
                f"exist).",
            )
        response = self._validate_and_deliver(request)
        if response.status != 200:
            self.errors[_status_of(response)] += 1
        return response

    def _validate_and_deliver(self, request: FakeRequest) -> FakeResponse:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            text = "Invalid JSON payload received. Unexpected token."
            return _error(400, "INVALID_ARGUMENT", text, None, [("", text)])
        if not isinstance(body, dict):
            text = "Invalid JSON payload received. Expected an object."
            return _error(400, "INVALID_ARGUMENT", text, None, [("", text)])
        for name in body:
            if name not in ("message", "validate_only", "validateOnly"):
                return _unknown_field(name, "")
        message = body.get("message")
        if not isinstance(message, dict):
            return _invalid("message", "Message is required.")
        problem = self._check_message(message)
        if problem is not None:
            return problem
        token = message.get("token") or message["fid"]
        if token in self.unregistered:
            return _error(404, "NOT_FOUND", "Requested entity was not found.", "UNREGISTERED")
        if token in self.sender_mismatch:
            return _error(403, "PERMISSION_DENIED", "SenderId mismatch", "SENDER_ID_MISMATCH")
        if token in self.third_party_auth:
            return _error(
                401,
                "UNAUTHENTICATED",
                "Auth error from APNS or Web Push Service",
                "THIRD_PARTY_AUTH_ERROR",
            )
        if token in self.quota_exceeded:
            return _error(
                429,
                "RESOURCE_EXHAUSTED",
                "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per "
                "minute' of service 'fcm.googleapis.com'.",
                "QUOTA_EXCEEDED",
                headers=[("retry-after", str(self.quota_retry_after))],
            )
        if token in self.unavailable:
            return _error(
                503, "UNAVAILABLE", "The service is currently unavailable.", "UNAVAILABLE"
            )
        if token in self.internal:
            return _error(500, "INTERNAL", "Internal error encountered.", "INTERNAL")
        if body.get("validate_only") or body.get("validateOnly"):
            name = f"projects/{self.project_id}/messages/fake_message_id"
        else:
            data = message.get("data") or {}
            key = data.get("tockwork_key")
            self.counts[(token, key)] += 1
            self.received.append(Received(time.time(), token, key, message, request.http_version))
            name = f"projects/{self.project_id}/messages/0:{next(self._ids)}%fake"
        return FakeResponse(
            200, [("content-type", "application/json; charset=UTF-8")], orjson.dumps({"name": name})
        )

    def _check_message(self, message: dict[str, Any]) -> FakeResponse | None:
        for name in message:
            if name not in _MESSAGE_FIELDS:
                return _unknown_field(name, "message")
        targets = [t for t in ("token", "fid", "topic", "condition") if message.get(t) is not None]
        if not targets:
            return _invalid("message", "Recipient of the message is not set.")
        if len(targets) > 1:
            return _invalid(
                "message",
                f"Invalid value at 'message' (oneof field 'target' is "
                f"already set. Cannot set '{targets[1]}')",
            )
        target = targets[0]
        if target not in ("token", "fid"):
            return _invalid(f"message.{target}", "Only device tokens are served by this fake.")
        token = message[target]
        if not isinstance(token, str) or not _TOKEN.match(token):
            return _invalid(
                f"message.{target}",
                "Invalid registration token",
                "The registration token is not a valid FCM registration token",
            )
        size = 0
        notification = message.get("notification")
        if notification is not None:
            if not isinstance(notification, dict):
                return _invalid(
                    "message.notification",
                    "Invalid value at 'message.notification': expected an object",
                )
            for name, value in notification.items():
                if name not in _NOTIFICATION_FIELDS:
                    return _unknown_field(name, "message.notification")
                if not isinstance(value, str):
                    return _invalid(
                        f"message.notification.{name}",
                        f"Invalid value at 'message.notification.{name}' "
                        f"(TYPE_STRING), {json.dumps(value)}",
                    )
                size += len(value.encode())
        data = message.get("data")
        if data is not None:
            if not isinstance(data, dict):
                return _invalid("message.data", "Invalid value at 'message.data': expected a map")
            for index, (name, value) in enumerate(data.items()):
                if not isinstance(value, str):
                    return _invalid(
                        f"message.data[{index}].value",
                        f"Invalid value at 'message.data[{index}].value' (TYPE_STRING), "
                        f"{json.dumps(value)}",
                    )
                size += len(name.encode()) + len(value.encode())
        android = message.get("android")
        if android is not None:
            if not isinstance(android, dict):
                return _invalid("message.android", "Invalid value at 'message.android'")
            for name in android:
                if name not in _ANDROID_FIELDS:
                    return _unknown_field(name, "message.android")
            ttl = android.get("ttl")
            if ttl is not None and (not isinstance(ttl, str) or not _TTL.match(ttl)):
                return _invalid(
                    "message.android.ttl",
                    "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf"
                    ".Duration), Field 'ttl', Illegal duration format; duration must end with 's'",
                )
            priority = android.get("priority")
            if priority is not None and priority not in ("HIGH", "NORMAL", "high", "normal"):
                return _invalid(
                    "message.android.priority",
                    f"Invalid value at 'message.android.priority' (type.googleapis.com/google."
                    f"firebase.fcm.v1.AndroidMessagePriority), {json.dumps(priority)}",
                )
            collapse = android.get("collapse_key", android.get("collapseKey"))
            if collapse is not None and not isinstance(collapse, str):
                return _invalid(
                    "message.android.collapse_key",
                    "Invalid value at 'message.android.collapse_key' (TYPE_STRING)",
                )
        apns = message.get("apns")
        if apns is not None:
            problem = self._check_apns(apns)
            if problem is not None:
                return problem
        if size > MAX_PAYLOAD:
            return _invalid("message", "Message is too big", "Message is too big")
        return None

    def _check_apns(self, apns: Any) -> FakeResponse | None:
        if not isinstance(apns, dict):
            return _invalid("message.apns", "Invalid value at 'message.apns'")
        for name in apns:
            if name not in _APNS_FIELDS:
                return _unknown_field(name, "message.apns")
        headers = apns.get("headers") or {}
        if not isinstance(headers, dict):
            return _invalid("message.apns.headers", "Invalid value at 'message.apns.headers'")
        for name, value in headers.items():
            if not isinstance(value, str):
                return _invalid(
                    "message.apns.headers",
                    f"Invalid value at 'message.apns.headers[{name}]"
                    f".value' (TYPE_STRING), {json.dumps(value)}",
                )
        if headers.get("apns-priority", "10") not in ("1", "5", "10"):
            return _invalid("message.apns.headers", "Invalid apns-priority")
        expiration = headers.get("apns-expiration")
        if expiration is not None and not expiration.isdigit():
            return _invalid("message.apns.headers", "Invalid apns-expiration")
        collapse = headers.get("apns-collapse-id")
        if collapse is not None and len(collapse.encode()) > 64:
            return _invalid("message.apns.headers", "apns-collapse-id exceeds 64 bytes")
        payload = apns.get("payload")
        if payload is not None and not isinstance(payload, dict):
            return _invalid("message.apns.payload", "Invalid value at 'message.apns.payload'")
        return None

    def _control(self, request: FakeRequest) -> FakeResponse:
        path = request.path
        if path == "/_fake/fcm/summary":
            return FakeResponse.json(200, self.summary())
        if path == "/_fake/fcm/credentials":
            if self.token_uri is None:
                return FakeResponse.json(409, {"error": "no credentials written yet"})
            return FakeResponse.json(200, self.service_account(self.token_uri[: -len("/token")]))
        if path == "/_fake/fcm/revoke" and request.method == "POST":
            self.revoke_access_tokens()
            return FakeResponse.json(200, {"revoked": True})
        if path.startswith("/_fake/fcm/received?") or path == "/_fake/fcm/received":
            return self._received(path)
        if path == "/_fake/fcm/reset" and request.method == "POST":
            self.reset()
            return FakeResponse.json(200, self.summary())
        if path == "/_fake/fcm/config" and request.method == "POST":
            try:
                values = json.loads(request.body or b"{}")
                for name in (
                    "unregistered",
                    "sender_mismatch",
                    "third_party_auth",
                    "quota_exceeded",
                    "unavailable",
                    "internal",
                ):
                    if name in values:
                        setattr(self, name, set(values.pop(name)))
                for name in ("access_token_ttl", "quota_retry_after"):
                    if name in values:
                        setattr(self, name, int(values.pop(name)))
                if values:
                    raise ValueError(f"unknown field(s): {', '.join(sorted(values))}")
            except (ValueError, TypeError) as exc:
                return FakeResponse.json(400, {"error": str(exc)})
            return FakeResponse.json(200, {"ok": True})
        return FakeResponse.json(404, {"error": "unknown control endpoint"})

    def _received(self, path: str) -> FakeResponse:
        """A page of the kept records, compact: receive time, token, tockwork_key."""
        query = parse_qs(urlsplit(path).query)
        try:
            offset = int(query.get("offset", ["0"])[0])
            limit = int(query.get("limit", ["10000"])[0])
            if offset < 0 or not 1 <= limit <= 100_000:
                raise ValueError("offset must be >= 0 and limit from 1 to 100000")
        except ValueError as exc:
            return FakeResponse.json(400, {"error": str(exc)})
        page = itertools.islice(self.received, offset, offset + limit)
        rows = [[r.at, r.token, r.key] for r in page]
        return FakeResponse(
            200,
            [("content-type", "application/json; charset=UTF-8")],
            orjson.dumps({"total": len(self.received), "received": rows}),
        )


def _status_of(response: FakeResponse) -> str:
    try:
        error = orjson.loads(response.body)["error"]
        for detail in error.get("details", []):
            if detail.get("@type") == FCM_ERROR:
                return str(detail["errorCode"])
        return str(error["status"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"http_{response.status}"


@dataclass
class RunningFcmFake:
    """An :class:`FcmFake` on a :class:`FakeServer`, with its credentials file written."""

    fake: FcmFake
    server: FakeServer
    credentials: str  # the service-account JSON file

    @property
    def url(self) -> str:
        return self.server.url


async def start_fcm_fake(
    *,
    tls: bool = False,
    directory: str | os.PathLike[str] | None = None,
    port: int = 0,
    fake: FcmFake | None = None,
    max_concurrent_streams: int = 1000,
) -> RunningFcmFake:
    """Start an FCM fake on this loop and write its credentials file (``directory``, default a
    new temporary one). Stop it with ``await running.server.stop()``."""
    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="fcm-"))
    folder.mkdir(parents=True, exist_ok=True)  # as start_apns_fake: dev fake-push passes DIR/fcm
    fake = fake or FcmFake()
    server = FakeServer(
        fake.handle,
        port=port,
        tls=make_certificate(folder) if tls else False,
        max_concurrent_streams=max_concurrent_streams,
    )
    await server.start()
    credentials = fake.write_credentials(folder / "service-account.json", server.url)
    return RunningFcmFake(fake, server, credentials)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the FCM HTTP v1 fake.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", action="store_true", help="TLS with ALPN h2/http1.1")
    parser.add_argument("--dir", help="where to write credentials and certificates")
    parser.add_argument("--project", default="tockwork-test")
    parser.add_argument("--access-token-ttl", type=int, default=3600)
    parser.add_argument("--max-concurrent-streams", type=int, default=1000)
    parser.add_argument(
        "--max-records", type=int, default=100_000, help="received messages kept (the newest)"
    )
    args = parser.parse_args(argv)

    async def serve() -> None:
        running = await start_fcm_fake(
            tls=args.tls,
            directory=args.dir,
            port=args.port,
            fake=FcmFake(
                project_id=args.project,
                access_token_ttl=args.access_token_ttl,
                max_records=args.max_records,
            ),
            max_concurrent_streams=args.max_concurrent_streams,
        )
        await serve_until_signalled(
            running.server,
            {"credentials": running.credentials},
            lambda: print(json.dumps(running.fake.summary()), file=sys.stderr, flush=True),
        )

    asyncio.run(serve())


if __name__ == "__main__":
    main()


__all__ = ["FcmFake", "Received", "RunningFcmFake", "start_fcm_fake"]
