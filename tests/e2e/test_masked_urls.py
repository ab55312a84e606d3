"""Passwords in store and shovel URLs are hidden whole, whatever they hold (``@``, ``:``, ``%``,
``/``): parsed, never matched with a pattern; in the API, the CLI and every log line."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from stompmq.cli import main
from stompmq.logs import masked
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from .test_http import Api

#: A password with every troublesome character, as written in a URL (%25 is "%", %2F is "/").
PASSWORD = "Secr@t:Pa%25ss%2Fw0rd@x"
SECRET_PARTS = ("Secr", "t:Pa", "%25ss", "%2Fw0rd", "w0rd@x")


@pytest.mark.parametrize("url, shown", [
    ("stomp://admin:Secr@tPassw0rd@host/queue/x", "stomp://admin:***@host/queue/x"),
    ("stomp://ad%40min:p%3Aw%25@h:1/q", "stomp://ad%40min:***@h:1/q"),
    ("postgresql://u:p:w@db/x", "postgresql://u:***@db/x"),
    ("stomp://u:pa/ss@h/q", "stomp://u:***@h/q"),  # a raw "/" in a password: still hidden
    ("stomp://u@h/q", "stomp://u@h/q"),
    ("stomp://h/queue/a@b", "stomp://h/queue/a@b"),
    ("sqlite:///var/lib/stompmq.db", "sqlite:///var/lib/stompmq.db"),
])
def test_a_password_is_hidden_whole(url: str, shown: str) -> None:
    assert masked(url) == shown


def test_a_shovel_password_shows_nowhere(make_memory_broker: Callable[..., BrokerThread],
                                         capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    broker = make_memory_broker(settings=ServerSettings(port=0, http_port=port))
    api = Api(port)
    source = f"stomp://ad%40min%3Ax:{PASSWORD}@127.0.0.1:{broker.port}/queue/in"
    with caplog.at_level(logging.DEBUG):
        status, body = api.call("PUT", "/api/shovels/s1", {"from": source, "to": "stomp://127.0.0.1:1/queue/out"})
        assert status == 201, body
        listed = api.get("/api/shovels")
        assert main(["admin", "--url", f"http://127.0.0.1:{port}", "list-shovels"]) == 0
        assert main(["admin", "--url", f"http://127.0.0.1:{port}", "--json", "list-shovels"]) == 0
    out = capsys.readouterr().out
    assert listed["items"][0]["from"] == f"stomp://ad%40min%3Ax:***@127.0.0.1:{broker.port}/queue/in"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for where, text in (("API", str(body) + str(listed)), ("CLI", out), ("log", logged)):
        for part in SECRET_PARTS:
            assert part not in text, (where, part)
