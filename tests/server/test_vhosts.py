"""Which vhost CONNECT's host header selects (server/vhosts.py), table-driven."""

from __future__ import annotations

import pytest

from stompmq.server.vhosts import ANY_HOST, LOOPBACK_NAMES, machine_names, own_host, vhost_for_host

DECLARED = {"/", "dev", "localhost.dev", "10.0.0.1"}
LOCAL = LOOPBACK_NAMES | {"broker-7", "broker-7.example.com"}


@pytest.mark.parametrize("host, vhost", [
    (None, "/"),
    ("", "/"),
    ("/", "/"),
    ("dev", "dev"),
    ("localhost.dev", "localhost.dev"),  # a declared vhost wins over a name of this machine
    ("10.0.0.1", "10.0.0.1"),  # ... and over an address
    ("localhost", "/"),
    ("LocalHost:61613", "/"),
    ("127.0.0.1", "/"),
    ("127.0.0.1:61613", "/"),
    ("192.168.1.20", "/"),
    ("::1", "/"),
    ("[::1]", "/"),
    ("[::1]:61613", "/"),
    ("fe80::1", "/"),
    ("broker-7", "/"),
    ("BROKER-7.example.com:61614", "/"),
    ("Dev", None),  # vhost names are case-sensitive, as in RabbitMQ
    ("staging", None),
    ("broker-8.example.com", None),
    ("localhost:http", None),
    ("[::1", None),
])
def test_host_header_to_vhost(host: str | None, vhost: str | None) -> None:
    assert vhost_for_host(host, DECLARED, LOCAL) == vhost


def test_machine_names_include_loopback_and_the_extra_names_lowercased() -> None:
    names = machine_names(("Broker.Example.COM",))
    assert "localhost" in names and "broker.example.com" in names


@pytest.mark.parametrize("host, names, ok", [
    ("localhost", LOOPBACK_NAMES, True),
    ("LocalHost:15674", LOOPBACK_NAMES, True),
    ("127.0.0.1:61680", LOOPBACK_NAMES, True),
    ("[::1]:61680", LOOPBACK_NAMES, True),
    ("10.1.2.3", LOOPBACK_NAMES, True),  # an address literal is no name an attacker controls
    ("evil.example", LOOPBACK_NAMES, False),  # DNS rebinding
    ("evil.example:15674", LOOPBACK_NAMES, False),
    ("localhost.evil.example", LOOPBACK_NAMES, False),
    ("", LOOPBACK_NAMES, False),
    (None, LOOPBACK_NAMES, False),
    ("broker.example:80", LOOPBACK_NAMES | {"broker.example"}, True),  # --host-names
    ("evil.example", LOOPBACK_NAMES | {ANY_HOST}, True),  # --host-names '*'
])
def test_which_hosts_are_the_brokers(host: str | None, names: frozenset[str], ok: bool) -> None:
    assert own_host(host, names) is ok
