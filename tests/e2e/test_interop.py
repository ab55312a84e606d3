"""Habits of real clients (stomp.py, stompngo, RabbitMQ's and ActiveMQ's users) that STOMP leaves
room for, against a real listening broker on every store."""

from __future__ import annotations

import pytest

from ..support.stompclient import Client
from .test_stomp_py import Peer


# ---------------------------------------------------------------------------- ACK/NACK subscription


@pytest.mark.parametrize("version", ["1.0", "1.1"])
@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_ack_with_a_wrong_subscription_header_acts_on_the_message(broker, version, command):
    if command == "NACK" and version == "1.0":
        pytest.skip("no NACK in STOMP 1.0")
    c = Client(broker.port, version)
    c.subscribe("/queue/wrongsub", "real", ack="client-individual")
    c.send_to("/queue/wrongsub", "m")
    msg = c.message()
    c.request(command, {"message-id": msg["message-id"], "subscription": "random-4711"})
    if command == "ACK":
        c.expect_nothing()
    else:
        again = c.message()  # requeued, and we are the only subscriber
        assert again["message-id"] == msg["message-id"] and again["redelivered"] == "true"


def test_ack_naming_nothing_unacked_is_still_an_error(broker):
    c = Client(broker.port, "1.1")
    c.subscribe("/queue/wrongsub2", "real", ack="client-individual")
    c.frame("ACK", {"message-id": "999999", "subscription": "real"})
    assert "999999" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- 1.0 UNSUBSCRIBE


def test_10_unsubscribe_by_destination_ends_a_subscription_that_has_an_id(broker):
    c = Client(broker.port, None)  # no accept-version: STOMP 1.0
    c.subscribe("/queue/ngo", "stompngo-id-1")
    c.request("UNSUBSCRIBE", {"destination": "/queue/ngo"})
    other = Client(broker.port)
    other.send_to("/queue/ngo", "after")
    c.expect_nothing()
    assert int(other.request("SEND", {"destination": "/control/count-subscribers/queue/ngo"})["num-subscribers"]) == 0


def test_10_unsubscribe_of_an_unknown_destination_is_an_error(broker):
    c = Client(broker.port, None)
    c.frame("UNSUBSCRIBE", {"destination": "/queue/never"})
    assert "/queue/never" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- booleans


@pytest.mark.parametrize("value", ["False", "FALSE", "false"])
def test_requeue_is_case_insensitive(broker, value):
    c = Client(broker.port)
    c.subscribe("/queue/bools", ack="client-individual")
    c.send_to("/queue/bools", "m")
    c.nack(c.message(), requeue=value)
    c.expect_nothing()  # discarded, not redelivered


def test_a_boolean_header_that_is_not_a_boolean_is_an_error(broker):
    c = Client(broker.port)
    c.subscribe("/queue/bools2", ack="client-individual")
    c.send_to("/queue/bools2", "m")
    c.frame("NACK", {"id": c.message()["ack"], "requeue": "maybe"})
    assert "requeue" in c.expect_error()["message"]


def test_stomp_py_nack_requeue_false_discards(broker):
    peer = Peer(broker.port, "1.2").connect()
    peer.subscribe("/queue/stomppy-nack", "s", ack="client-individual")
    peer.send("/queue/stomppy-nack", "m")
    frame = peer.rec.message()
    peer.conn.nack(frame.headers["ack"], requeue=False)  # stomp.py writes requeue:False
    peer.sync()
    peer.rec.no_message()
    peer.conn.disconnect()


# ---------------------------------------------------------------------------- transactional receipts


@pytest.mark.parametrize("end", ["COMMIT", "ABORT"])
def test_receipts_of_transactional_frames_wait_for_the_transaction_end(broker, end):
    c = Client(broker.port)
    c.subscribe("/queue/txr-src", ack="client-individual")
    c.send_to("/queue/txr-src", "to-ack")
    msg = c.message()
    c.frame("BEGIN", {"transaction": "t"})
    c.frame("SEND", {"destination": "/queue/txr", "transaction": "t", "receipt": "send-1"}, b"x")
    c.frame("ACK", {"id": msg["ack"], "transaction": "t", "receipt": "ack-1"})
    c.sync()
    assert not [f for f in c.stash if f.headers.get("receipt-id") in ("send-1", "ack-1")]
    c.frame(end, {"transaction": "t", "receipt": "end"})
    order = [c.next()["receipt-id"] for _ in range(3)]
    assert order == ["send-1", "ack-1", "end"]
    count = c.request("SEND", {"destination": "/control/count-msgs/queue/txr"})
    assert count["num-messages"] == ("1" if end == "COMMIT" else "0")
