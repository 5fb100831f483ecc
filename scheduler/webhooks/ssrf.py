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
  ``metadata.google.internal``);
- at delivery (``scheduler.webhooks.http``) the host is resolved again, each address is checked
  again before connecting to *that address* (the resolution is not repeated by the socket
  layer), and the peer address of the connected socket is checked once more: a name whose
  resolution changed since registration (DNS rebinding) reaches nothing it should not.

The allow-list (``TOCKWORK_WEBHOOK_ALLOW``: comma-separated networks such as
``127.0.0.1/32,::1/128``) lets development and tests reach local receivers; it is empty by
default. An allowed network overrides every rule above except the scheme and credential rules.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from scheduler.errors import InvalidWebhook, UnsafeWebhookUrl

MAX_URL = 2048
ALLOW_ENV = "TOCKWORK_WEBHOOK_ALLOW"

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
    system's by default; tests inject one to play DNS rebinding).
    """

    allow: tuple[Network, ...] = ()
    resolver: Resolver = field(default=system_resolver, compare=False, repr=False)

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

    def addresses(self, url: WebhookUrl) -> list[Address]:
        """The addresses ``url``'s host resolves to, every one checked; raises
        :class:`UnsafeWebhookUrl` when one is refused, :class:`InvalidWebhook` when the name
        does not resolve."""
        named = None
        if _is_address(url.host):
            candidates = [url.host]
        else:
            named = self.name_refusal(url.host)
            if named is not None and not self.allow:
                raise UnsafeWebhookUrl("url", url.url, f"refused: {named}")
            try:
                candidates = self.resolver(url.host, url.port)
            except (OSError, UnicodeError) as exc:
                raise InvalidWebhook(
                    "url", url.url, f"the host {url.host!r} does not resolve ({exc})"
                ) from None
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

    def check_url(self, value: object) -> WebhookUrl:
        """A URL fit to register: its form (:func:`parse_url`) and where it points."""
        url = parse_url(value)
        self.addresses(url)
        return url


def networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Networks from their texts (for a :class:`Guard` built in code)."""
    return parse_allow(",".join(values), "allow")
