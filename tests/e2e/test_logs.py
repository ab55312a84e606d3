"""What an operator reads in the log: the start-up line, connections, auth failures, JSON lines."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from stompmq.server import ServerSettings

from ..support.broker_process import BrokerProcess
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import wait_until


def test_start_up_and_connection_lines(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker.db", log_level="INFO").start() as broker:
        try:
            with Client(broker.port, login="alice") as c:
                c.send_to("/queue/a", "x")
            wait_until(lambda: "disconnected after" in broker.stderr and "'alice'" in broker.stderr, "log lines")
        finally:
            broker.terminate()
        log = broker.stderr
        [ready] = [line for line in log.splitlines() if " ready: " in line]
        assert "stompmq 0.1.0" in ready and str((tmp_path / "broker.db").resolve()) in ready
        assert f"stomp://127.0.0.1:{broker.port}" in ready
        assert "plugin" not in log.lower() and "Context impl" not in log  # alembic: migrations only
        [connected] = [line for line in log.splitlines() if "connected, login 'alice'" in line]
        assert "from 127.0.0.1:" in connected and "STOMP 1.2" in connected
        [gone] = [line for line in log.splitlines() if "disconnected after" in line and "'alice'" in line]
        assert "frames" in gone and "bytes in" in gone


def test_auth_failure_names_peer_and_login(
    make_memory_broker: Callable[..., BrokerThread], caplog: pytest.LogCaptureFixture
) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, login="alice", passcode="pw"))
    with caplog.at_level(logging.INFO, logger="stompmq"), Client(broker.port, connect=False) as bad:
        bad.frame("CONNECT", {"accept-version": "1.2", "host": "localhost", "login": "mallory", "passcode": "no"})
        bad.expect_error()
    [refused] = [r.getMessage() for r in caplog.records
                 if "failed login" in r.getMessage() and "mallory" in r.getMessage()]
    assert "from 127.0.0.1:" in refused


def test_json_lines_and_a_start_up_line_even_at_warning(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "broker.db", "--log-format", "json", log_level="WARNING").start() as broker:
        broker.terminate()
        entries = [json.loads(line) for line in broker.stderr.splitlines() if line.strip()]
        assert any(" ready: " in e["message"] and e["level"] == "WARNING" for e in entries), entries
        assert all({"time", "level", "logger", "message"} <= e.keys() for e in entries)


def test_json_lines_name_their_connection_in_fields_and_carry_a_zone(tmp_path: Path) -> None:
    from datetime import datetime

    with BrokerProcess(tmp_path / "broker.db", "--log-format", "json", log_level="INFO").start() as broker:
        try:
            with Client(broker.port, login="alice") as c:
                c.send_to("/queue/a", "x")
            with Client(broker.port, connect=False) as early:
                early.frame("SEND", {"destination": "/queue/a"}, b"before CONNECT")
                early.expect_error()
            wait_until(lambda: "disconnected after" in broker.stderr and ": ERROR " in broker.stderr, "log lines")
        finally:
            broker.terminate()
        entries = [json.loads(line) for line in broker.stderr.splitlines() if line.strip()]
        assert all(datetime.fromisoformat(e["time"]).utcoffset() is not None for e in entries)
        [connected] = [e for e in entries if "connected, login 'alice'" in e["message"]]
        assert (connected["login"], connected["vhost"]) == ("alice", "/")
        assert connected["peer"].startswith("127.0.0.1:") and connected["conn"]
        [error] = [e for e in entries if ": ERROR " in e["message"]]
        assert error["peer"].startswith("127.0.0.1:") and error["login"] is None and error["conn"] != connected["conn"]
        assert error["peer"] in error["message"]  # the text line names the peer too
        ready = next(e for e in entries if " ready: " in e["message"])
        assert "conn" not in ready  # not logged for a connection
