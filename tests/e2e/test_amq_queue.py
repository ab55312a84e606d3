"""RabbitMQ's ``/amq/queue/NAME`` (an existing queue; ERROR naming it if missing) against a real
listening broker on every store, including a queue the broker only knows from its store."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import send_all


def expect_error(c: Client, text: str) -> None:
    error = c.next()
    assert error.command == "ERROR" and text in error["message"], error


def test_amq_queue_reaches_a_queue_in_use(broker):
    send_all(broker.port, "/queue/known", [b"one"])
    with Client(broker.port) as c:
        c.subscribe("/amq/queue/known")
        c.request("SEND", {"destination": "/amq/queue/known"}, b"two")
        assert [c.message().body, c.message().body] == [b"one", b"two"]


@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_amq_queue_that_does_not_exist_is_an_error_naming_it(broker, command):
    with Client(broker.port) as c:
        c.frame(command, {"destination": "/amq/queue/nowhere", "id": "1", "receipt": "r1"})
        error = c.next()
        assert error.command == "ERROR" and "'nowhere'" in error["message"], error
        assert error["receipt-id"] == "r1"


@pytest.mark.parametrize("destination", ["/amq/topic/x", "/amq/queue/", "/amq/"])
def test_bad_amq_destinations_are_errors(memory_broker, destination):
    with Client(memory_broker.port) as c:
        c.frame("SEND", {"destination": destination})
        expect_error(c, destination)


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_amq_queue_known_only_to_the_store_keeps_the_frames_in_order(tmp_path: Path, store_kind):
    make = make_store_factory(store_kind, tmp_path)
    with BrokerThread(make).start() as first:
        send_all(first.port, "/queue/kept", [b"before-restart"])
        send_all(first.port, "/queue/other", [b"a"])
    with BrokerThread(make).start() as broker:
        with Client(broker.port) as c:
            # pipelined: the first frame waits for the store; the others must not overtake it
            c.frame("SEND", {"destination": "/amq/queue/kept"}, b"1")
            c.frame("SEND", {"destination": "/queue/kept", "receipt": "r2"}, b"2")
            c.frame("SUBSCRIBE", {"destination": "/amq/queue/kept", "id": "s"})
            c.wait_receipt("r2")
            assert [m.body for m in c.messages(3)] == [b"before-restart", b"1", b"2"]
            c.frame("SEND", {"destination": "/amq/queue/gone", "receipt": "r3"}, b"x")
            error = c.next()
            assert error.command == "ERROR" and "'gone'" in error["message"] and error["receipt-id"] == "r3"
        with Client(broker.port) as c:  # DISCONNECT's RECEIPT comes after the waiting SEND is handled
            c.frame("SEND", {"destination": "/amq/queue/other"}, b"b")
            c.frame("DISCONNECT", {"receipt": "bye"})
            c.wait_receipt("bye")
        with Client(broker.port) as c:
            assert c.request("SEND", {"destination": "/control/count-msgs/queue/other"})["num-messages"] == "2"
