"""A protocol-faithful fake of APNs (Apple Push Notification service), for tests.

It checks what Apple checks and answers as Apple documents ("Handling notification responses
from APNs"), so a channel that passes against it has met the real service's rules:

- the method (``POST``, else 405 ``MethodNotAllowed``) and the path (``/3/device/<token>``, else
  404 ``BadPath``; a token that is not hex: 400 ``BadDeviceToken``);
- the provider token: ``authorization: bearer <JWT>`` (else 403 ``MissingProviderToken``), an
  ES256 signature by a known key (``kid``) of the team (``iss``), checked with ``cryptography``
  directly, not with the JWT library the channel signs with (else 403 ``InvalidProviderToken``);
  ``iat`` not in the future (``InvalidProviderToken``) nor older than an hour (403
  ``ExpiredProviderToken``); a new token for a key less than 20 minutes after that key's previous
  one: 429 ``TooManyProviderTokenUpdates``. Apple documents that rule per connection; the fake
  applies it per key, which is stricter: several signers of one key (processes that each sign
  their own token) have been reported to get that 429 from APNs, and the fake shows it;
- the headers: ``apns-topic`` (missing: 400 ``MissingTopic``; not the app's: 400
  ``TopicDisallowed``), ``apns-push-type`` (400 ``InvalidPushType``), ``apns-priority`` 10, 5 or 1
  (400 ``BadPriority``), ``apns-expiration`` an integer (400 ``BadExpirationDate``),
  ``apns-collapse-id`` at most 64 bytes (400 ``BadCollapseId``), ``apns-id`` a UUID (400
  ``BadMessageId``; echoed in the answer's ``apns-id``, generated when absent);
- the body: not empty (400 ``PayloadEmpty``), at most 4096 bytes (413 ``PayloadTooLarge``), a
  JSON object with an ``aps`` object (400 ``PayloadEmpty``: Apple documents no other reason);
- the device: tokens in ``bad_tokens`` get 400 ``BadDeviceToken``, in ``other_topic_tokens``
  400 ``DeviceTokenNotForTopic``, in ``unregistered`` 410 ``Unregistered`` with the
  ``timestamp`` (ms) since when; ``scripted`` answers any status and reason for a token.

Error bodies are ``{"reason": "..."}``. A delivered notification is recorded (the last
``max_records``) with its receive time, and counted per (device token, ``tockwork_key``): a
count above one is a duplicate delivery. :meth:`ApnsFake.handle` is the whole protocol as a pure
function of the request; :meth:`ApnsFake.app` serves it on the fake-server framework
(:mod:`scheduler.push.fakes.server`), HTTP/2 only, as Apple serves (an HTTP/1.1 request gets 505).

Process mode: ``python -m scheduler.push.fakes.apns [--tls] [--dir D] [--topic T]`` prints one
JSON line (``url``, ``port``, ``key_file``, ``key_id``, ``team_id``, ``topic``, ``ca_file``,
``pid``) and serves until SIGTERM, then prints its summary on stderr. Another process reads
``GET /_fake/apns/summary``, clears with ``POST /_fake/apns/reset`` and sets the token sets with
``POST /_fake/apns/config`` (``{"unregistered": [...], "bad_tokens": [...],
"other_topic_tokens": [...], "scripted": {token: [status, reason]}}``); the framework's
``/_fake/faults`` and ``/_fake/counters`` work as for every fake.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import os
import re
import sys
import tempfile
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from time import time
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from scheduler.push.fakes.server import (
    Certificate,
    FakeRequest,
    FakeResponse,
    FakeServer,
    Faults,
    make_certificate,
    serve_until_signalled,
)
from timezones.errors import TockworkError

MAX_PAYLOAD: Final = 4096
MAX_COLLAPSE_ID: Final = 64
TOKEN_MAX_AGE: Final = 3600.0
TOKEN_UPDATE_FLOOR: Final = 1200.0
PUSH_TYPES: Final = frozenset(
    {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm",
     "liveactivity", "pushtotalk", "widgets", "controls"}
)  # fmt: skip
PRIORITIES: Final = frozenset({"10", "5", "1"})
_PATH = re.compile(r"/3/device/([^/?]*)")
_HEX = re.compile(r"[0-9a-fA-F]+")


@dataclass(frozen=True)
class ApnsKey:
    """A signing key as Apple issues one: a ``.p8`` file (PKCS#8 PEM, EC P-256), its key id and
    the team's id. :meth:`generate` makes a test key; the fake keeps only the public half."""

    key_id: str
    team_id: str
    pem: bytes = field(repr=False)

    @classmethod
    def generate(cls, key_id: str = "KEYID12345", team_id: str = "TEAMID6789") -> ApnsKey:
        private = ec.generate_private_key(ec.SECP256R1())
        pem = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cls(key_id, team_id, pem)

    def write(self, path: str | Path) -> Path:
        """Write the ``.p8`` file at ``path`` (owner-readable only) and return its path."""
        target = Path(path)
        target.write_bytes(self.pem)
        target.chmod(0o600)
        return target

    def public_key(self) -> ec.EllipticCurvePublicKey:
        private = serialization.load_pem_private_key(self.pem, password=None)
        assert isinstance(private, ec.EllipticCurvePrivateKey)
        return private.public_key()


@dataclass(frozen=True, slots=True)
class Notification:
    """A notification the fake accepted."""

    token: str
    apns_id: str
    topic: str
    push_type: str
    priority: str
    expiration: int | None
    collapse_id: str | None
    payload: Mapping[str, Any]
    received_at: float  # the fake's clock (epoch seconds)

    @property
    def tockwork_key(self) -> str | None:
        key = self.payload.get("tockwork_key")
        return key if isinstance(key, str) else None


@dataclass(frozen=True, slots=True)
class Answer:
    """What the fake answers: status, headers (lower-case names), body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @property
    def reason(self) -> str | None:
        if not self.body:
            return None
        reason = json.loads(self.body).get("reason")
        return reason if isinstance(reason, str) else None


class _Refused(TockworkError):  # a control-flow signal inside handle(), never raised out
    def __init__(self, status: int, reason: str, **extra: Any) -> None:
        self.status, self.reason, self.extra = status, reason, extra


class ApnsFake:
    """The fake APNs (module docstring). ``clock`` (epoch seconds) judges token ages."""

    def __init__(
        self,
        *,
        keys: Iterable[ApnsKey],
        topic: str,
        clock: Callable[[], float] = time,
        max_records: int = 10_000,
    ) -> None:
        self.topic = topic
        self.clock = clock
        self._keys = {k.key_id: (k.team_id, k.public_key()) for k in keys}
        self.bad_tokens: set[str] = set()
        self.other_topic_tokens: set[str] = set()
        self.unregistered: dict[str, int] = {}  # token -> since (ms since the epoch)
        self.scripted: dict[str, tuple[int, str]] = {}  # token -> (status, reason)
        self.notifications: deque[Notification] = deque(maxlen=max_records)
        self.counts: Counter[tuple[str, str | None]] = Counter()
        self.reasons: Counter[str] = Counter()  # answers by reason ("delivered" for 200)
        self.requests = 0
        # Per key id: every token accepted (-> when first seen), to spot a new one.
        self._tokens: dict[str, dict[str, float]] = {}
        self.token_updates: Counter[str] = Counter()  # per key id: new tokens accepted
        # Tokens whose signature verified (a signature is checked once, as a server would cache).
        self._verified: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    # -- what a test reads ---------------------------------------------------------------------

    def duplicates(self) -> dict[tuple[str, str | None], int]:
        """(device token, tockwork_key) delivered more than once -> how many times."""
        return {k: n for k, n in self.counts.items() if n > 1}

    def provider_tokens(self) -> set[str]:
        """Every provider token the fake has accepted (a test looks for them in logs)."""
        return {token for seen in self._tokens.values() for token in seen}

    def unregister(self, token: str, since_ms: int | None = None) -> None:
        self.unregistered[token] = int(self.clock() * 1000) if since_ms is None else since_ms

    # -- serving -------------------------------------------------------------------------------

    async def app(self, request: FakeRequest) -> FakeResponse:
        """The fake as an application of :class:`~scheduler.push.fakes.server.FakeServer`.

        APNs speaks HTTP/2 only: an HTTP/1.1 request is not served (505, no APNs reason).
        """
        if request.path.startswith("/_fake/apns/"):
            return self._control(request)
        if request.http_version != "2":
            self.reasons["http/1.1 refused"] += 1
            return FakeResponse(505, [("content-type", "text/plain")], b"HTTP/2 required")
        answer = self.handle(request.method, request.path, request.headers.items(), request.body)
        return FakeResponse(answer.status, list(answer.headers), answer.body)

    def server(
        self, *, tls: bool | Certificate = False, faults: Faults | None = None
    ) -> FakeServer:
        """A server for this fake (start it with ``async with``; ``.url`` is the channel's)."""
        return FakeServer(self.app, tls=tls, faults=faults)

    def summary(self) -> dict[str, Any]:
        """What the fake saw, as JSON (the control endpoint ``/_fake/apns/summary``)."""
        return {
            "requests": self.requests,
            "delivered": self.reasons["delivered"],
            "reasons": dict(self.reasons),
            "duplicates": len(self.duplicates()),
            "token_updates": dict(self.token_updates),
        }

    def reset(self) -> None:
        """Forget what was received (not the token sets, nor the provider tokens seen)."""
        self.notifications.clear()
        self.counts.clear()
        self.reasons.clear()
        self.requests = 0

    def _control(self, request: FakeRequest) -> FakeResponse:
        """Another process's view and settings (process mode): summary, reset, config."""
        path = request.path
        if path == "/_fake/apns/summary":
            return FakeResponse.json(200, self.summary())
        if path == "/_fake/apns/reset" and request.method == "POST":
            self.reset()
            return FakeResponse.json(200, self.summary())
        if path == "/_fake/apns/config" and request.method == "POST":
            try:
                values = json.loads(request.body or b"{}")
                for name in ("bad_tokens", "other_topic_tokens"):
                    if name in values:
                        setattr(self, name, set(values.pop(name)))
                if "unregistered" in values:
                    now_ms = int(self.clock() * 1000)
                    self.unregistered = dict.fromkeys(values.pop("unregistered"), now_ms)
                if "scripted" in values:
                    scripted = values.pop("scripted")
                    self.scripted = {t: (int(a[0]), str(a[1])) for t, a in scripted.items()}
                if values:
                    raise ValueError(f"unknown field(s): {', '.join(sorted(values))}")
            except (ValueError, TypeError, AttributeError, IndexError) as exc:
                return FakeResponse.json(400, {"error": str(exc)})
            return FakeResponse.json(200, {"ok": True})
        return FakeResponse.json(404, {"error": "unknown control endpoint"})

    # -- the protocol --------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes
    ) -> Answer:
        """APNs' answer to one request (the whole protocol; module docstring)."""
        self.requests += 1
        fields: dict[str, list[str]] = {}
        for name, value in headers:
            fields.setdefault(name.lower(), []).append(value)
        message_id = _first(fields, "apns-id")
        try:
            message_id = self._check(method, path, fields, body)
        except _Refused as refused:
            self.reasons[refused.reason] += 1
            answer_id = message_id if message_id and _is_uuid(message_id) else str(uuid.uuid4())
            return Answer(
                refused.status,
                (("apns-id", answer_id), ("content-type", "application/json")),
                json.dumps({"reason": refused.reason, **refused.extra}).encode(),
            )
        self.reasons["delivered"] += 1
        return Answer(200, (("apns-id", message_id),), b"")

    def _check(self, method: str, path: str, fields: dict[str, list[str]], body: bytes) -> str:
        if method != "POST":
            raise _Refused(405, "MethodNotAllowed")
        match = _PATH.fullmatch(path)
        if match is None:
            raise _Refused(404, "BadPath")
        token = match.group(1)
        if not token:
            raise _Refused(400, "MissingDeviceToken")
        duplicated = [
            n for n in ("apns-id", "apns-topic", "apns-priority") if len(fields.get(n, ())) > 1
        ]
        if duplicated:
            raise _Refused(400, "DuplicateHeaders")
        self._check_provider_token(_first(fields, "authorization"))
        message_id = _first(fields, "apns-id")
        if message_id is None:
            message_id = str(uuid.uuid4())
        elif not _is_uuid(message_id):
            raise _Refused(400, "BadMessageId")
        topic = _first(fields, "apns-topic")
        if topic is None:
            raise _Refused(400, "MissingTopic")
        if topic != self.topic:
            raise _Refused(400, "TopicDisallowed")
        push_type = _first(fields, "apns-push-type") or "alert"
        if push_type not in PUSH_TYPES:
            raise _Refused(400, "InvalidPushType")
        priority = _first(fields, "apns-priority") or "10"
        if priority not in PRIORITIES:
            raise _Refused(400, "BadPriority")
        expiration_text = _first(fields, "apns-expiration")
        expiration = None
        if expiration_text is not None:
            if not re.fullmatch(r"\d{1,12}", expiration_text):
                raise _Refused(400, "BadExpirationDate")
            expiration = int(expiration_text)
        collapse = _first(fields, "apns-collapse-id")
        if collapse is not None and len(collapse.encode()) > MAX_COLLAPSE_ID:
            raise _Refused(400, "BadCollapseId")
        if not body:
            raise _Refused(400, "PayloadEmpty")
        if len(body) > MAX_PAYLOAD:
            raise _Refused(413, "PayloadTooLarge")
        try:
            document = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise _Refused(400, "PayloadEmpty") from None
        if not isinstance(document, dict) or not isinstance(document.get("aps"), dict):
            raise _Refused(400, "PayloadEmpty")
        if not _HEX.fullmatch(token) or len(token) % 2 or token in self.bad_tokens:
            raise _Refused(400, "BadDeviceToken")
        if token in self.scripted:
            status, reason = self.scripted[token]
            raise _Refused(status, reason)
        if token in self.other_topic_tokens:
            raise _Refused(400, "DeviceTokenNotForTopic")
        if token in self.unregistered:
            raise _Refused(410, "Unregistered", timestamp=self.unregistered[token])
        now = self.clock()
        notification = Notification(
            token, message_id, topic, push_type, priority, expiration, collapse, document, now
        )
        self.notifications.append(notification)
        self.counts[(token, notification.tockwork_key)] += 1
        return message_id

    def _check_provider_token(self, authorization: str | None) -> None:
        if authorization is None or not authorization.lower().startswith("bearer "):
            raise _Refused(403, "MissingProviderToken")
        token = authorization[len("bearer ") :].strip()
        verified = self._verified.get(token)
        if verified is None:
            verified = self._verify(token)
            if len(self._verified) >= 1000:
                self._verified.clear()
            self._verified[token] = verified
        header, claims = verified
        now = self.clock()
        iat = claims["iat"]
        if iat > now:
            raise _Refused(403, "InvalidProviderToken")
        if now - iat > TOKEN_MAX_AGE:
            raise _Refused(403, "ExpiredProviderToken")
        seen = self._tokens.setdefault(header["kid"], {})
        if token not in seen:
            if seen and now - max(seen.values()) < TOKEN_UPDATE_FLOOR:
                raise _Refused(429, "TooManyProviderTokenUpdates")
            seen[token] = now
            if len(seen) > 1:
                self.token_updates[header["kid"]] += 1
            for old in [t for t, at in seen.items() if now - at > 2 * TOKEN_MAX_AGE]:
                del seen[old]

    def _verify(self, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The header and claims of ``token`` if an ES256 signature by a known key, else 403."""
        parts = token.split(".")
        if len(parts) != 3:
            raise _Refused(403, "InvalidProviderToken")
        try:
            header = json.loads(_b64(parts[0]))
            claims = json.loads(_b64(parts[1]))
            signature = _b64(parts[2])
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise _Refused(403, "InvalidProviderToken") from None
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise _Refused(403, "InvalidProviderToken")
        known = self._keys.get(header.get("kid"))  # type: ignore[arg-type]
        if header.get("alg") != "ES256" or known is None or len(signature) != 64:
            raise _Refused(403, "InvalidProviderToken")
        team_id, public_key = known
        der = encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        )
        try:
            public_key.verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            raise _Refused(403, "InvalidProviderToken") from None
        iat = claims.get("iat")
        if claims.get("iss") != team_id or not isinstance(iat, int) or isinstance(iat, bool):
            raise _Refused(403, "InvalidProviderToken")
        return header, claims


@dataclass
class RunningApnsFake:
    """An :class:`ApnsFake` on a :class:`FakeServer`, with its key file written."""

    fake: ApnsFake
    server: FakeServer
    key: ApnsKey
    key_file: str

    @property
    def url(self) -> str:
        return self.server.url


async def start_apns_fake(
    *,
    topic: str = "com.example.tockwork",
    tls: bool = False,
    directory: str | os.PathLike[str] | None = None,
    port: int = 0,
    key: ApnsKey | None = None,
    max_concurrent_streams: int = 1000,
) -> RunningApnsFake:
    """Start an APNs fake on this loop with a new key (or ``key``), its ``.p8`` written in
    ``directory`` (default a new temporary one). Stop it with ``await running.server.stop()``."""
    folder = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="apns-"))
    folder.mkdir(parents=True, exist_ok=True)
    key = key or ApnsKey.generate()
    fake = ApnsFake(keys=[key], topic=topic)
    server = FakeServer(
        fake.app,
        port=port,
        tls=make_certificate(folder) if tls else False,
        max_concurrent_streams=max_concurrent_streams,
    )
    await server.start()
    key_file = key.write(folder / f"AuthKey_{key.key_id}.p8")
    return RunningApnsFake(fake, server, key, str(key_file))


def main(argv: list[str] | None = None) -> None:
    """Run the fake as a process: one JSON line on stdout says where (url, key file, key id, team
    id, topic, CA file); SIGTERM stops it and prints its summary on stderr."""
    parser = argparse.ArgumentParser(description="Run the APNs fake.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tls", action="store_true", help="TLS with ALPN h2")
    parser.add_argument("--dir", help="where to write the .p8 key and certificates")
    parser.add_argument("--topic", default="com.example.tockwork")
    parser.add_argument("--key-id", default="KEYID12345")
    parser.add_argument("--team-id", default="TEAMID6789")
    args = parser.parse_args(argv)

    async def serve() -> None:
        running = await start_apns_fake(
            topic=args.topic,
            tls=args.tls,
            directory=args.dir,
            port=args.port,
            key=ApnsKey.generate(args.key_id, args.team_id),
        )
        info = {
            "key_file": running.key_file,
            "key_id": running.key.key_id,
            "team_id": running.key.team_id,
            "topic": args.topic,
        }
        await serve_until_signalled(
            running.server,
            info,
            lambda: print(json.dumps(running.fake.summary()), file=sys.stderr, flush=True),
        )

    asyncio.run(serve())


def _first(fields: Mapping[str, list[str]], name: str) -> str | None:
    values = fields.get(name)
    return values[0] if values else None


def _is_uuid(value: str) -> bool:
    return re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", value) is not None


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


if __name__ == "__main__":
    main()


__all__ = ["Answer", "ApnsFake", "ApnsKey", "Notification", "RunningApnsFake", "start_apns_fake"]
