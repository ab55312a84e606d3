"""Which vhost CONNECT's host header selects (server/vhosts.py), table-driven."""

from __future__ import annotations

import pytest

from stompmq.server.vhosts import LOOPBACK_NAMES, machine_names, vhost_for_host

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
