"""The SSRF guard: which URLs a webhook may name, and which addresses a delivery may connect to.

A webhook URL is typed by a customer and fetched by our server, from inside our network: left
unchecked, ``http://169.254.169.254/latest/meta-data/`` or ``http://10.0.0.5:5432/`` makes the
server a proxy into places only it can reach. So:

- :func:`parse_url` accepts only ``http`` and ``https``, with a host, without credentials
  (``user:pass@``) and without a fragment, at most 2048 characters;
- :meth:`Guard.refusal` names why an address is refused: loopback, private, link-local,
  unique-local (IPv6 ``fc00::/7``), multicast, unspecified, reserved or otherwise not global,
  and the cloud providers' metadata addresses; an IPv6 address that carries an IPv4 one
  (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4, Teredo) is judged by the IPv4
  address it carries;
- :meth:`Guard.check_url` (registration) resolves the host and refuses the URL if *any* of its
  addresses is refused, or a host name that is one by nature (``localhost``, ``*.localhost``,
  ``metadata.google.internal``). The resolution is bounded (``resolve_timeout``, default
  :data:`DEFAULT_RESOLVE_TIMEOUT`): a name that does not answer in time is refused like one that
  does not resolve, so no URL a user types can hang the call. :meth:`Guard.check_url_async`
  resolves on the running event loop (``loop.getaddrinfo``), never blocking it;
- at delivery (``scheduler.webhooks.http``) the host is resolved again, each address is checked
  again before connecting to *that address* (the resolution is not repeated by the socket
  layer), and the peer address of the connected socket is checked once more: a name whose
  resolution changed since registration (DNS rebinding) reaches nothing it should not.

The allow-list (``TOCKWORK_WEBHOOK_ALLOW``: comma-separated networks such as
``127.0.0.1/32,::1/128``) lets development and tests reach local receivers; it is empty by
default. An allowed network overrides every rule above except the scheme and credential rules.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import SplitResult, urlsplit

from scheduler.errors import InvalidWebhook, UnsafeWebhookUrl

MAX_URL = 2048
ALLOW_ENV = "TOCKWORK_WEBHOOK_ALLOW"
DEFAULT_RESOLVE_TIMEOUT = 5.0
"""Seconds a host name's resolution may take at registration before the URL is refused."""
MAX_RESOLVE_TIMEOUT = 60.0

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# A resolver: host name and port -> its addresses (text). The default is getaddrinfo.
Resolver = Callable[[str, int], list[str]]

# Cloud metadata services, refused whatever the other rules say (most are link-local or
# private already; Oracle's and Alibaba's are not).
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.123",  # AWS time sync
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
# Names that are internal by nature, refused before any resolution.
_NAMES = ("localhost", "metadata.google.internal", "metadata", "instance-data")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True, slots=True)
class WebhookUrl:
    """A checked URL: its text and the parts a connection needs."""

    url: str
    scheme: str
    host: str  # a name, or an address without brackets
    port: int
    target: str  # path and query, for the request line

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(value: object) -> WebhookUrl:
    """Check a URL's form (not where it points); raises :class:`InvalidWebhook` on ``url``."""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_URL:
        raise InvalidWebhook("url", value, f"must be a URL of 1-{MAX_URL} characters")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise InvalidWebhook("url", value, "must not contain spaces or control characters")
    try:
        parts: SplitResult = urlsplit(value)
        port = parts.port
        host = parts.hostname
    except ValueError as exc:
        raise InvalidWebhook("url", value, f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidWebhook("url", value, "only http and https URLs are allowed")
    if parts.username is not None or parts.password is not None:
        raise InvalidWebhook("url", value, "must not contain credentials (user:password@)")
    if not host:
        raise InvalidWebhook("url", value, "has no host")
    if parts.fragment:
        raise InvalidWebhook("url", value, "must not have a fragment (#...)")
    if port == 0:
        raise InvalidWebhook("url", value, "port 0 is not a port")
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return WebhookUrl(
        url=value,
        scheme=parts.scheme,
        host=host.rstrip(".").lower() if not _is_address(host) else host,
        port=port or (443 if parts.scheme == "https" else 80),
        target=target,
    )


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo), else None."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def classify(address: Address) -> str | None:
    """Why ``address`` is refused (a class name), or None when it is a public address."""
    inner = embedded_ipv4(address)
    if inner is not None:
        why = classify(inner)
        return None if why is None else f"{why} (carried in {address})"
    if address in METADATA:
        return "cloud metadata"
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL:
        return "unique-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")


def system_resolver(host: str, port: int) -> list[str]:
    """Every address of ``host`` (getaddrinfo, TCP)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _bounded(resolver: Resolver, host: str, port: int, timeout: float) -> list[str]:
    """``resolver(host, port)`` within ``timeout`` seconds, else :class:`TimeoutError`.

    The call runs in a daemon thread of its own: a blocking resolver cannot be interrupted, and
    one that never answers then holds only that thread (it does not delay the interpreter's
    exit, as a pool's worker would).
    """
    done = threading.Event()
    outcome: list[list[str] | BaseException] = []

    def call() -> None:
        try:
            outcome.append(resolver(host, port))
        except BaseException as exc:  # handed to the caller below
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=call, name="tockwork-resolve", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer within {timeout:g} s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


class _Answers:
    """A resolver that answers one host with the addresses already found (no second lookup)."""

    def __init__(self, host: str, addresses: list[str]) -> None:
        self.host = host
        self.found = addresses

    def __call__(self, host: str, port: int) -> list[str]:
        if host != self.host:
            raise OSError(f"no answer kept for {host!r}")
        return list(self.found)


def parse_allow(text: str, field_name: str = ALLOW_ENV) -> tuple[Network, ...]:
    """An allow-list's text: comma-separated networks (``127.0.0.1/32,::1``)."""
    networks: list[Network] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise InvalidWebhook(
                field_name, item, "must be networks such as 127.0.0.1/32"
            ) from None
    return tuple(networks)


@dataclass(frozen=True)
class Guard:
    """Where webhook requests may go (module docstring).

    ``allow``: networks reachable whatever the rules; ``resolver``: host name -> addresses (the
    system's by default; tests inject one to play DNS rebinding); ``resolve_timeout``: seconds
    a resolution at registration may take.
    """

    allow: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False, repr=False)
    resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT

    def __post_init__(self) -> None:
        timeout = self.resolve_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or math.isnan(timeout)
            or not 0 < timeout <= MAX_RESOLVE_TIMEOUT
        ):
            raise InvalidWebhook(
                "resolve_timeout",
                timeout,
                f"must be seconds above 0, at most {MAX_RESOLVE_TIMEOUT:g}",
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Guard:
        """The guard the environment configures (``TOCKWORK_WEBHOOK_ALLOW``)."""
        source = os.environ if env is None else env
        return cls(allow=parse_allow(source.get(ALLOW_ENV, "")))

    def allowed(self, address: Address) -> bool:
        return any(address.version == n.version and address in n for n in self.allow)

    def refusal(self, address: Address | str) -> str | None:
        """Why a connection to ``address`` is refused, or None when it may go there."""
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        if self.allowed(ip):
            return None
        inner = embedded_ipv4(ip)
        if inner is not None and self.allowed(inner):
            return None
        return classify(ip)

    def name_refusal(self, host: str) -> str | None:
        """Why a host *name* is refused before resolution (internal by nature), or None."""
        name = host.rstrip(".").lower()
        if name in _NAMES or name.endswith(".localhost") or name.endswith(".internal"):
            return f"the name {name!r} is internal"
        return None

    def _named(self, url: WebhookUrl) -> str | None:
        """Why ``url``'s host name is internal by nature (None: not, or an address); refused
        at once unless an allow-list may make it reachable."""
        if _is_address(url.host):
            return None
        named = self.name_refusal(url.host)
        if named is not None and not self.allow:
            raise UnsafeWebhookUrl("url", url.url, f"refused: {named}")
        return named

    def _unresolved(self, url: WebhookUrl, exc: BaseException) -> InvalidWebhook:
        if isinstance(exc, TimeoutError):
            why = f"does not resolve within {self.resolve_timeout:g} s"
        else:
            why = f"does not resolve ({exc})"
        return InvalidWebhook("url", url.url, f"the host {url.host!r} {why}")

    def _checked(self, url: WebhookUrl, candidates: list[str], named: str | None) -> list[Address]:
        if not candidates:
            raise InvalidWebhook("url", url.url, f"the host {url.host!r} has no address")
        result: list[Address] = []
        for text in candidates:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
            why = self.refusal(ip)
            if why is not None:
                raise UnsafeWebhookUrl(
                    "url", url.url, f"refused: {url.host} resolves to {ip}, a {why} address"
                )
            result.append(ip)
        if named is not None and not all(self.allowed(ip) for ip in result):
            # An internal name is reachable only when the allow-list names where it points.
            raise UnsafeWebhookUrl("url", url.url, f"refused: {named}")
        return result

    def addresses(self, url: WebhookUrl) -> list[Address]:
        """The addresses ``url``'s host resolves to, every one checked; raises
        :class:`UnsafeWebhookUrl` when one is refused, :class:`InvalidWebhook` when the name
        does not resolve (within ``resolve_timeout``)."""
        named = self._named(url)
        if _is_address(url.host):
            return self._checked(url, [url.host], None)
        try:
            candidates = _bounded(self.resolver, url.host, url.port, self.resolve_timeout)
        except (OSError, UnicodeError) as exc:  # TimeoutError is an OSError
            raise self._unresolved(url, exc) from None
        return self._checked(url, candidates, named)

    async def addresses_async(self, url: WebhookUrl) -> list[Address]:
        """:meth:`addresses` on the running event loop: the system's resolver through
        ``loop.getaddrinfo`` (another resolver in the loop's executor), within
        ``resolve_timeout``; the loop is never blocked."""
        named = self._named(url)
        if _is_address(url.host):
            return self._checked(url, [url.host], None)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.resolve_timeout):
                if self.resolver is system_resolver:
                    infos = await loop.getaddrinfo(url.host, url.port, type=socket.SOCK_STREAM)
                    candidates = list(dict.fromkeys(str(info[4][0]) for info in infos))
                else:
                    candidates = await loop.run_in_executor(None, self.resolver, url.host, url.port)
        except (OSError, UnicodeError) as exc:  # TimeoutError is an OSError
            raise self._unresolved(url, exc) from None
        return self._checked(url, candidates, named)

    def check_url(self, value: object) -> WebhookUrl:
        """A URL fit to register: its form (:func:`parse_url`) and where it points."""
        url = parse_url(value)
        self.addresses(url)
        return url

    async def check_url_async(self, value: object) -> tuple[WebhookUrl, Guard]:
        """:meth:`check_url` on the running event loop; with the URL, this guard answering its
        host with the addresses just checked (for a later step that must not resolve again)."""
        url = parse_url(value)
        found = await self.addresses_async(url)
        return url, replace(self, resolver=_Answers(url.host, [str(ip) for ip in found]))


def networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Networks from their texts (for a :class:`Guard` built in code)."""
    return parse_allow(",".join(values), "allow")
