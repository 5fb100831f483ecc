"""Who may look and act: the bearer token, the browser's signed session cookie, CSRF tokens.

One secret, the configured token, authenticates everything:

* scripts send ``Authorization: Bearer <token>`` on every request (compared in constant time);
* a browser signs in once on the login form with the token (and a name for the audit trail); the
  dashboard answers with a session cookie ``<name>.<issued>.<signature>``, an HMAC-SHA256 under
  a key derived from the token, valid for :data:`SESSION_SECONDS`. Changing the token signs
  every browser out;
* every POST from a browser carries a CSRF token, an HMAC of the session cookie under a second
  derived key, embedded in the page's forms (a cross-site page can neither read it nor forge it).
  A bearer request needs none: a browser never adds that header by itself.

Without a token (``no_auth``, for loopback or behind the application's own authentication) the
keys are random per process: there are no sessions, but POSTs still need the page's CSRF token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from timezones.errors import InvalidInput

SESSION_COOKIE = "tockwork_dashboard"
SESSION_SECONDS = 12 * 3600
MIN_TOKEN_LENGTH = 16
MAX_ACTOR_LENGTH = 100


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: how (``bearer``, ``session``, ``none``) and the name it gave."""

    kind: str
    actor: str
    session: str | None = None  # the session cookie's value, which the CSRF token is bound to


def check_token(token: str | None, *, no_auth: bool) -> None:
    """Refuse a missing or weak token (unless authentication is explicitly off)."""
    if token is None:
        if not no_auth:
            raise InvalidInput(
                "token",
                None,
                "the dashboard needs a token (TOCKWORK_DASHBOARD_TOKEN or token=...); "
                "no_auth=True turns authentication off",
            )
        return
    if no_auth:
        raise InvalidInput("token", "<hidden>", "give a token or no_auth, not both")
    if len(token) < MIN_TOKEN_LENGTH or not token.isprintable() or token.strip() != token:
        raise InvalidInput(
            "token",
            "<hidden>",
            f"must be at least {MIN_TOKEN_LENGTH} printable characters without surrounding "
            "spaces (for example: python -c 'import secrets; print(secrets.token_urlsafe())')",
        )


def check_actor(name: str) -> str:
    """The name a browser signs in with (it goes into the audit trail)."""
    value = name.strip()
    if not 1 <= len(value) <= MAX_ACTOR_LENGTH or not value.isprintable():
        raise InvalidInput("name", name, f"must be 1 to {MAX_ACTOR_LENGTH} printable characters")
    return value


class Authenticator:
    """Checks credentials and mints and checks sessions and CSRF tokens for one token."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        root = (
            hashlib.sha256(b"tockwork-dashboard\0" + token.encode()).digest()
            if token is not None
            else secrets.token_bytes(32)
        )
        self._session_key = hmac.digest(root, b"session", "sha256")
        self._csrf_key = hmac.digest(root, b"csrf", "sha256")

    @property
    def enabled(self) -> bool:
        return self.token is not None

    def bearer(self, header: str | None) -> bool | None:
        """None without an Authorization header, else whether it carries the token."""
        if header is None:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or self.token is None:
            return False
        return hmac.compare_digest(value.strip().encode(), self.token.encode())

    def _sign(self, text: str) -> str:
        digest = hmac.digest(self._session_key, text.encode(), "sha256")
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def new_session(self, actor: str, now: datetime) -> str:
        name = base64.urlsafe_b64encode(actor.encode()).decode().rstrip("=")
        body = f"{name}.{int(now.timestamp())}"
        return f"{body}.{self._sign(body)}"

    def session(self, value: str | None, now: datetime) -> Principal | None:
        """The principal of a valid, unexpired session cookie, else None."""
        if value is None or self.token is None or len(value) > 1024:
            return None
        body, _, signature = value.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        name, _, issued = body.partition(".")
        try:
            age = now.timestamp() - int(issued)
            actor = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
        except ValueError:
            return None
        if not 0 <= age <= SESSION_SECONDS:
            return None
        return Principal("session", actor, value)

    def csrf(self, principal: Principal | None) -> str:
        """The CSRF token of the pages served to this caller."""
        bound = principal.session if principal is not None and principal.session else "anonymous"
        digest = hmac.digest(self._csrf_key, bound.encode(), "sha256")
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def csrf_ok(self, principal: Principal | None, value: str | None) -> bool:
        if principal is not None and principal.kind == "bearer":
            return True
        return value is not None and hmac.compare_digest(
            value.encode(), self.csrf(principal).encode()
        )
