"""File descriptors: the broker raises its open-file limit, refuses clients beyond
``--max-connections`` with an ERROR at once, and logs accept failures once per episode."""

from __future__ import annotations

import socket
from pathlib import Path

from ..support.broker_process import BrokerProcess
from ..support.rawclient import RawClient
from ..support.waiting import wait_until


def _connected(port: int, n: int) -> list[RawClient]:
    clients = []
    for _ in range(n):
        client = RawClient(port)
        assert client.connect().command == "CONNECTED"
        clients.append(client)
    return clients


def test_the_soft_limit_is_raised_and_extra_clients_are_refused_at_once(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "db", log_level="INFO", open_files=(40, 72)).start() as broker:
        # 72 - 32 reserved = 40 connections; start() used (and closed) one already
        assert "open-file limit 72; serving at most 40 connections" in broker.stderr
        clients = _connected(broker.port, 40)
        try:
            extra = RawClient(broker.port)
            error = extra.recv()  # before any CONNECT: the refusal does not wait for one
            assert error.command == "ERROR" and error["message"] == "too many connections (at most 40)"
            extra.assert_closed()
            extra.close()
            clients.pop().close()
            wait_until(lambda: _served(broker.port), "a free connection slot")
        finally:
            for client in clients:
                client.close()
        assert broker.stderr.count("refusing connections") == 1
        assert "Traceback" not in broker.stderr


def _served(port: int) -> bool:
    with RawClient(port) as client:
        client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
        return client.recv().command == "CONNECTED"


def test_running_out_of_descriptors_is_one_warning_not_a_traceback_per_retry(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "db", "--max-connections", "1000", open_files=(48, 48)).start() as broker:
        socks = []
        try:
            for _ in range(60):  # more than the broker has descriptors for
                sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
                socks.append(sock)
            wait_until(lambda: "cannot accept connections" in broker.stderr, "the accept warning")
            for sock in socks:
                sock.close()
            socks.clear()
            wait_until(lambda: "accepting connections on" in broker.stderr, "accepting again")
            assert _served(broker.port)
        finally:
            for sock in socks:
                sock.close()
        assert broker.stderr.count("cannot accept connections") == 1
        assert "Traceback" not in broker.stderr
