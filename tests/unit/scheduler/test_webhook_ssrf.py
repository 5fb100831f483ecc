"""The SSRF guard of webhooks (scheduler/webhooks/ssrf.py), pure: no socket, no database.

Every class of internal address is refused, in each of its spellings (IPv4, IPv6, an IPv4
address carried in IPv6), by address and by a name that resolves there; the allow-list lets a
chosen network through; a URL's form is checked (scheme, credentials, fragment, host).
"""

from __future__ import annotations

import ipaddress

import pytest

from scheduler.errors import InvalidWebhook, UnsafeWebhookUrl
from scheduler.webhooks.ssrf import Guard, classify, networks, parse_url
from timezones.errors import InvalidInput

REFUSED = {
    "127.0.0.1": "loopback",
    "127.8.9.10": "loopback",
    "::1": "loopback",
    "10.1.2.3": "private",
    "172.16.0.1": "private",
    "192.168.1.1": "private",
    "169.254.1.1": "link-local",
    "fe80::1": "link-local",
    "fd12:3456::1": "unique-local",
    "fc00::1": "unique-local",
    "224.0.0.1": "multicast",
    "239.1.2.3": "multicast",
    "ff02::1": "multicast",
    "ff0e::1": "multicast",
    "169.254.169.254": "cloud metadata",
    "fd00:ec2::254": "cloud metadata",
    "100.100.100.200": "cloud metadata",
    "192.0.0.192": "cloud metadata",
    "0.0.0.0": "unspecified",
    "::": "unspecified",
    "100.64.0.1": "reserved",  # carrier-grade NAT
    "240.0.0.1": "private",  # 240/4 is in the standard library's private list
    "198.18.0.1": "private",  # benchmarking
    "192.0.2.1": "private",  # documentation (TEST-NET-1)
}
CARRIED = ["::ffff:127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:7f00:1::1"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "93.184.216.34"]


@pytest.mark.parametrize(("address", "why"), sorted(REFUSED.items()))
def test_every_internal_class_is_refused(address: str, why: str) -> None:
    assert classify(ipaddress.ip_address(address)) == why
    with pytest.raises(UnsafeWebhookUrl) as caught:
        Guard().check_url(f"https://[{address}]/hook" if ":" in address else f"https://{address}/")
    assert caught.value.field == "url" and why in str(caught.value)


@pytest.mark.parametrize("address", CARRIED)
def test_an_ipv4_address_carried_in_ipv6_is_judged_by_it(address: str) -> None:
    why = classify(ipaddress.ip_address(address))
    assert why is not None and "carried in" in why
    with pytest.raises(UnsafeWebhookUrl):
        Guard().check_url(f"http://[{address}]:8080/x")


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert classify(ipaddress.ip_address(address)) is None
    url = f"https://[{address}]/hook" if ":" in address else f"https://{address}/hook"
    assert Guard().check_url(url).url == url


def test_a_name_resolving_to_loopback_is_refused_and_every_address_counts() -> None:
    names = {"evil.example": ["127.0.0.1"], "mixed.example": ["8.8.8.8", "10.0.0.1"],
             "fine.example": ["8.8.8.8"]}  # fmt: skip
    guard = Guard(resolver=lambda host, port: names[host])
    with pytest.raises(UnsafeWebhookUrl, match=r"127\.0\.0\.1, a loopback"):
        guard.check_url("https://evil.example/hook")
    with pytest.raises(UnsafeWebhookUrl, match=r"10\.0\.0\.1, a private"):
        guard.check_url("https://mixed.example/hook")
    assert guard.check_url("https://fine.example:8443/a?b=1").target == "/a?b=1"


def test_internal_names_are_refused_before_resolution() -> None:
    def never(host: str, port: int) -> list[str]:
        raise AssertionError("resolved")

    for url in (
        "http://localhost/",
        "http://api.localhost:8000/",
        "http://metadata.google.internal/",
    ):
        with pytest.raises(UnsafeWebhookUrl, match="internal"):
            Guard(resolver=never).check_url(url)


def test_the_allow_list_lets_a_chosen_network_through() -> None:
    guard = Guard(allow=networks(["127.0.0.1/32"]), resolver=lambda h, p: ["127.0.0.1"])
    assert guard.check_url("http://127.0.0.1:9000/hook").port == 9000
    assert guard.check_url("http://localhost:9000/hook").host == "localhost"
    assert guard.refusal("::ffff:127.0.0.1") is None
    with pytest.raises(UnsafeWebhookUrl):
        guard.check_url("http://127.0.0.2/hook")
    assert Guard.from_env({"TOCKWORK_WEBHOOK_ALLOW": "10.0.0.0/8, ::1"}).refusal("10.9.9.9") is None
    with pytest.raises(InvalidWebhook) as caught:
        Guard.from_env({"TOCKWORK_WEBHOOK_ALLOW": "not-a-network"})
    assert caught.value.field == "TOCKWORK_WEBHOOK_ALLOW"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://8.8.8.8/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://8.8.8.8/", "only http and https"),
        ("https://user:pw@8.8.8.8/x", "credentials"),
        ("https://user@8.8.8.8/x", "credentials"),
        ("https:///nohost", "no host"),
        ("https://8.8.8.8/x#frag", "fragment"),
        ("https://8.8.8.8:99999/", "not a valid URL"),
        ("https://8.8.8.8/a b", "spaces"),
        ("", "1-2048"),
        ("https://8.8.8.8/" + "x" * 2048, "1-2048"),
    ],
)
def test_malformed_urls_are_invalid_input_naming_the_field(url: str, reason: str) -> None:
    with pytest.raises(InvalidWebhook, match=reason) as caught:
        parse_url(url)
    assert isinstance(caught.value, InvalidInput) and caught.value.field == "url"


def test_an_unresolvable_name_is_invalid_input() -> None:
    def nowhere(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(InvalidWebhook, match="does not resolve"):
        Guard(resolver=nowhere).check_url("https://no-such-host.example/")
