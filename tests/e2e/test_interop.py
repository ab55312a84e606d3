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


@pytest.mark.parametrize("requeue", ["true", "false"])
def test_stomp10_client_nacks_like_rabbitmq(broker, requeue):
    """NACK is not in STOMP 1.0, but RabbitMQ takes it there (by message-id, as a 1.0 ACK):
    a 1.0 client written against RabbitMQ NACKs and carries on instead of getting an ERROR."""
    c = Client(broker.port, None)  # no accept-version: STOMP 1.0
    c.subscribe("/queue/nack10-" + requeue, ack="client")
    c.send_to("/queue/nack10-" + requeue, "m")
    msg = c.message()
    c.nack(msg, requeue=requeue)
    if requeue == "true":
        again = c.message()  # requeued, and we are the only subscriber
        assert (again.body, again["message-id"], again["redelivered"]) == (b"m", msg["message-id"], "true")
    else:
        c.expect_nothing()  # discarded


def test_ack_naming_nothing_unacked_is_still_an_error(broker):
    c = Client(broker.port, "1.1")
    c.subscribe("/queue/wrongsub2", "real", ack="client-individual")
    c.frame("ACK", {"message-id": "999999", "subscription": "real"})
    assert "999999" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- exchange subscriptions


@pytest.mark.parametrize("ack", ["auto", "client-individual"])
def test_exchange_subscriber_sees_the_destination_it_subscribed_to_like_rabbitmq(broker, ack):
    """RabbitMQ's MESSAGE names the exchange destination, not the subscription's generated
    queue: a client that dispatches on ``destination`` finds its handler."""
    c = Client(broker.port)
    c.subscribe("/exchange/amq.direct/route", "s", ack=ack)
    c.send_to("/exchange/amq.direct/route", "m")
    msg = c.message()
    assert msg["destination"] == "/exchange/amq.direct/route"
    if ack != "auto":
        c.nack(msg)  # redelivered from the same queue, under the same name
        assert c.message()["destination"] == "/exchange/amq.direct/route"


def test_exchange_subscription_queue_is_named_by_x_queue_name_like_rabbitmq(broker):
    """RabbitMQ names an exchange subscription's queue by ``x-queue-name``: the client finds it
    under that name (counts, /amq/queue/); it goes with the subscription, and the name can be
    taken again afterwards."""
    c = Client(broker.port)
    c.subscribe("/exchange/amq.direct/feed", "s", **{"x-queue-name": "feed-of-c"})
    c.send_to("/exchange/amq.direct/feed", "m")
    assert c.message()["destination"] == "/exchange/amq.direct/feed"
    with Client(broker.port) as other:
        assert other.request("SEND", {"destination": "/control/count-subscribers/queue/feed-of-c"})[
            "num-subscribers"] == "1"
        other.send_to("/amq/queue/feed-of-c", "by name")  # an existing queue now
    assert c.message().body == b"by name"
    c.unsubscribe("s")
    with Client(broker.port) as other:
        assert other.request("SEND", {"destination": "/control/count-msgs/queue/feed-of-c"})["num-messages"] == "0"
    c.subscribe("/exchange/amq.direct/feed", "again", **{"x-queue-name": "feed-of-c"})
    c.send_to("/exchange/amq.direct/feed", "again")
    assert c.message().body == b"again"


@pytest.mark.parametrize(
    "name, complaint",
    [("jobs", "'jobs'"), ("taken", "'taken' names a queue in use"), ("amq.gen.x", "reserved")],
)
def test_x_queue_name_never_takes_over_a_queue_in_use(broker, name, complaint):
    """The subscription's end deletes its queue: a name already in use (messages, another
    subscription) or reserved is an ERROR, and the queue keeps what it had."""
    with Client(broker.port) as owner:
        owner.send_to("/queue/jobs", "keep me")
        holder = Client(broker.port)
        holder.subscribe("/exchange/amq.fanout", **{"x-queue-name": "taken"})
        c = Client(broker.port)
        c.frame("SUBSCRIBE", {"id": "s", "destination": "/exchange/amq.direct/k", "x-queue-name": name,
                              "receipt": "r"})
        error = c.expect_error()
        assert complaint in error["message"] and error["receipt-id"] == "r", error
        assert owner.request("SEND", {"destination": "/control/count-msgs/queue/jobs"})["num-messages"] == "1"
        owner.send_to("/exchange/amq.fanout", "still bound")
        assert holder.message().body == b"still bound"


# ---------------------------------------------------------------------------- prefetch


def test_activemq_pull_consumer_prefetch_0_gets_one_at_a_time(broker):
    """ActiveMQ's ``activemq.prefetchSize:0`` is a consumer that pulls; STOMP has no pull, so
    the nearest meaning is prefetch 1: one unacked message at a time, never an ERROR."""
    c = Client(broker.port)
    c.subscribe("/queue/pull0", ack="client-individual", **{"activemq.prefetchSize": "0"})
    for body in ("a", "b"):
        c.send_to("/queue/pull0", body)
    first = c.message()
    c.expect_nothing()  # the second waits for the first's ACK
    c.ack(first)
    assert c.message().body == b"b"


# ---------------------------------------------------------------------------- heart-beats


@pytest.mark.parametrize("asked", [None, "0,0"])
def test_client_without_heart_beats_is_told_0_0_like_rabbitmq(memory_broker, asked):
    """RabbitMQ and ActiveMQ answer ``heart-beat:0,0`` to a client that asks for none (no header,
    or 0,0); a client that checks the answer sees that nothing will beat either way."""
    headers = {} if asked is None else {"heart_beat": asked}
    with Client(memory_broker.port, **headers) as c:
        assert c.connected["heart-beat"] == "0,0"


def test_client_that_asks_for_heart_beats_gets_the_servers_offer(memory_broker):
    with Client(memory_broker.port, heart_beat="0,5000") as c:
        assert c.connected["heart-beat"] == "10000,10000"  # the default --heart-beat


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
