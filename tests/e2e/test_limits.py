"""Limits against abuse through a real broker: connections per source address, the budget and frame limit
of connections not logged in yet, subscriptions per connection."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings
from stompmq.server.logins import CONNECT_MAX_BYTES

from ..support.broker_process import BrokerProcess
from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient
from ..support.stompclient import Client
from ..support.waiting import wait_until
from .test_permissions import client_from


def test_connections_per_address_are_limited_and_freed(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, max_connections_per_address=2))
    first, second = client_from("127.0.0.2", broker.port), client_from("127.0.0.2", broker.port)
    first.connect()
    second.connect()
    with client_from("127.0.0.2", broker.port) as third:
        assert third.expect_error()["message"] == "too many connections from 127.0.0.2"
    with client_from("127.0.0.3", broker.port) as elsewhere:  # another address is not affected
        elsewhere.connect()
    first.close()
    second.close()

    def third_gets_in() -> bool:
        with client_from("127.0.0.2", broker.port) as client:
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
            return client.recv().command == "CONNECTED"

    wait_until(third_gets_in, "a slot freed by closed connections")


def test_subscriptions_per_connection_are_limited(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_subscriptions=3))
    with Client(broker.port) as client:
        for i in range(3):
            client.subscribe(f"/queue/q{i}", str(i))
        client.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "x"})
        assert client.expect_error()["message"] == ("too many subscriptions on this connection (at most 3) "
                                                    "(limit max-subscriptions)")
    with RawClient(broker.port) as other:  # the limit is per connection
        other.connect()
        other.frame("SUBSCRIBE", {"destination": "/queue/q0", "id": "1", "receipt": "r"})
        assert other.recv().command == "RECEIPT"


def test_refusals_by_address_do_not_count_against_max_connections(
    make_memory_broker: Callable[..., BrokerThread],
) -> None:
    """A refused connection lingers (until its peer reads the ERROR and closes): it must not
    take one of --max-connections meanwhile, or one address could lock everybody out."""
    broker = make_memory_broker(settings=ServerSettings(port=0, max_connections=3, max_connections_per_address=1))
    with client_from("127.0.0.2", broker.port) as served:
        served.connect()
        refused = [client_from("127.0.0.2", broker.port) for _ in range(4)]  # kept open: they linger
        try:
            for client in refused:
                assert client.recv()["message"] == "too many connections from 127.0.0.2"
            with client_from("127.0.0.3", broker.port) as other:
                assert other.connect().command == "CONNECTED"
        finally:
            for client in refused:
                client.close()


def test_connections_not_logged_in_share_a_budget(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, max_login_bytes=2 * CONNECT_MAX_BYTES))
    first, second = RawClient(broker.port), RawClient(broker.port)  # connected, not logged in
    try:
        with RawClient(broker.port) as third:  # the budget is spent: refused before any CONNECT
            assert third.expect_error()["message"] == "too many connections logging in, retry later"
        assert first.connect().command == "CONNECTED"  # gives its share back
        with RawClient(broker.port) as fourth:
            assert fourth.connect().command == "CONNECTED"
        assert second.connect().command == "CONNECTED"
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("pipelined", [b"", b"SEND\ndestination:/queue/q\nreceipt:r\n\n" + b"x" * 300_000 + b"\0"])
def test_before_connected_one_small_connect_frame_is_all(
    make_memory_broker: Callable[..., BrokerThread], pipelined: bytes
) -> None:
    broker = make_memory_broker()
    with RawClient(broker.port) as client:
        client.send(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n" + b"x" * (CONNECT_MAX_BYTES + 1))
        assert client.expect_error()["message"] == f"CONNECT frame exceeds {CONNECT_MAX_BYTES} bytes"
    with RawClient(broker.port) as client:  # a large frame right behind CONNECT is not part of it
        client.send(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0" + pipelined)
        assert client.recv().command == "CONNECTED"
        if pipelined:
            assert client.recv()["receipt-id"] == "r"


def _rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


@pytest.mark.slow
def test_huge_connect_frames_from_many_connections_cost_little_memory(tmp_path: Path) -> None:
    """30 connections each send CONNECT and 15 MiB without the NUL that would end it: the
    broker's peak memory grows by far less than 64 MB, and a normal client meanwhile gets in
    within a second."""
    with BrokerProcess(tmp_path / "b.db").start() as broker:
        assert broker.proc is not None
        before = _rss_kib(broker.proc.pid)["VmRSS"]
        chunk = b"x" * (1024 * 1024)
        started = threading.Barrier(31)

        def flood() -> None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", broker.port)) as sock:
                started.wait(10)
                sock.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:x\n\n")
                for _ in range(15):
                    sock.sendall(chunk)

        floods = [threading.Thread(target=flood) for _ in range(30)]
        for thread in floods:
            thread.start()
        started.wait(10)
        start = time.monotonic()
        with RawClient(broker.port) as client:
            assert client.connect().command == "CONNECTED"
        took = time.monotonic() - start
        for thread in floods:
            thread.join(60)
        growth = _rss_kib(broker.proc.pid)["VmHWM"] - before
        assert growth < 64 * 1024, f"peak RSS grew by {growth} KiB"
        assert took < 1.0, took
        assert broker.running
