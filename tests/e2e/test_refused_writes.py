"""One client's write the database refuses never stops the others' , end to end.

The range checks (docs/limits.md) keep every value a client can send within what the store
holds, so to test the second line of defence a value must slip past them: the engine's
``send_options`` is wrapped to give a SEND carrying ``x-poison`` (and a ``ttl``, so the engine
reads its options) an expiry past 64 bits, which SQLite's driver refuses.  The poisoned SEND must get an ERROR (and its message never be
delivered nor stored) while another client's receipted SEND, sent right after it, gets its
RECEIPT within 2 s; and ``/readyz`` must say not ready while the store is down.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stompmq.broker import BrokerConfig
from stompmq.broker.kinds import base as kinds_base
from stompmq.broker.send_headers import SendOptions
from stompmq.server.settings import ServerSettings
from stompmq.storage.groupcommit import GroupCommitStore

from ..storage.test_sqlite_store import ControlledBackend
from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client, control
from ..support.waiting import wait_until
from .test_http import Api

real_send_options = kinds_base.send_options
POISON = {"x-poison": "1", "ttl": "60000"}


def poisoned_send_options(headers: dict[str, str], now_ms: int) -> SendOptions:
    priority, ack_timeout, expires, due = real_send_options(headers, now_ms)
    return priority, ack_timeout, 2**70 if "x-poison" in headers else expires, due


@pytest.fixture
def poisonable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds_base, "send_options", poisoned_send_options)  # a SEND's options (kinds/)


def test_a_refused_send_gets_an_error_and_the_others_their_receipts(poisonable, tmp_path: Path) -> None:
    backend = ControlledBackend(tmp_path / "s.db")
    with BrokerThread(lambda: GroupCommitStore(backend, flush_interval=0.01),
                      config=BrokerConfig(store_timeout=30)).start() as broker:
        with Client(broker.port) as poisoner, Client(broker.port) as other, Client(broker.port) as consumer:
            for i in range(5):
                other.send_to("/queue/work", f"before-{i}")
            poisoner.frame("SEND", {"destination": "/queue/work", **POISON, "receipt": "bad"}, b"poison")
            started = time.monotonic()
            other.send_to("/queue/work", "after")  # waits for its RECEIPT (an ERROR would raise)
            assert time.monotonic() - started < 2.0
            error = poisoner.expect_error()
            assert error["receipt-id"] == "bad"
            assert "could not store" in error["message"] and "not stored" in error["message"]
            consumer.subscribe("/queue/work")
            bodies = [consumer.message().body for _ in range(6)]
            assert bodies == [f"before-{i}".encode() for i in range(5)] + [b"after"]
            consumer.expect_nothing(0.2)
            assert control(other, "count-msgs/queue/work")["num-messages"] == "0"
        # the store goes on accepting writes
        with Client(broker.port) as c:
            c.send_to("/queue/later", "fine")
            assert control(c, "count-msgs/queue/later")["num-messages"] == "1"


def test_a_refused_send_without_receipt_is_never_delivered(poisonable, tmp_path: Path) -> None:
    backend = ControlledBackend(tmp_path / "s.db")
    with BrokerThread(lambda: GroupCommitStore(backend, flush_interval=0.01)).start() as broker:
        with Client(broker.port) as producer:
            producer.send_to("/queue/nr", "poison", receipt=False, headers=POISON)
            producer.send_to("/queue/nr", "good")
            with Client(broker.port) as consumer:
                consumer.subscribe("/queue/nr")
                assert consumer.message().body == b"good"
                consumer.expect_nothing(0.2)


def test_readyz_is_not_ready_while_the_store_is_down(tmp_path: Path) -> None:
    backend = ControlledBackend(tmp_path / "s.db")
    port = free_port()
    api = Api(port)
    with BrokerThread(lambda: GroupCommitStore(backend, flush_interval=0.01),
                      settings=ServerSettings(port=0, http_port=port),
                      config=BrokerConfig(store_timeout=60)).start() as broker:
        wait_until(lambda: api.call("GET", "/readyz")[0] == 200, "the API answers")
        backend.failures = 10**9
        with Client(broker.port) as producer:
            producer.send_to("/queue/down", "x", receipt=False)
            producer.frame("SEND", {"destination": "/queue/down", "receipt": "r"}, b"y")
            wait_until(lambda: api.call("GET", "/readyz") == (503, {"status": "store unavailable", "backlog": 2}),
                       "/readyz says not ready")
            backend.failures = 0
            producer.wait_receipt("r", timeout=10)
        wait_until(lambda: api.call("GET", "/readyz")[0] == 200, "/readyz says ready again")
