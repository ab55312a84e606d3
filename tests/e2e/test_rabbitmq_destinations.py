"""RabbitMQ's destinations and durable topic subscriptions (RabbitMQ's and ActiveMQ's forms),
against a real listening broker on every store."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client, control
from ..support.stores import make_store_factory


def bodies(c: Client, n: int) -> list[bytes]:
    return sorted(m.body for m in c.messages(n))


def test_amq_direct_routes_by_exact_key(broker):
    a, b = Client(broker.port), Client(broker.port)
    a.subscribe("/exchange/amq.direct/k1")
    b.subscribe("/exchange/amq.direct/k2")
    with Client(broker.port) as p:
        p.send_to("/exchange/amq.direct/k1", "one")
        p.send_to("/exchange/amq.direct/k2", "two")
        p.send_to("/exchange/amq.direct/k3", "nobody")  # unroutable: dropped and counted
        p.send_to("/exchange/amq.direct", "header", headers={"routing-key": "k1"})
        stats = control(p, "stats/exchange/amq.direct")
    assert bodies(a, 2) == [b"header", b"one"]
    assert b.message().body == b"two"
    a.expect_nothing()
    assert stats["num-unroutable"] == "1" and stats["type"] == "direct"


def test_amq_fanout_copies_to_every_bound_queue(broker):
    subs = [Client(broker.port) for _ in range(3)]
    for s in subs:
        s.subscribe("/exchange/amq.fanout")
    with Client(broker.port) as p:
        p.send_to("/exchange/amq.fanout/any-key", "all")
    assert [s.message().body for s in subs] == [b"all"] * 3


@pytest.mark.parametrize(
    "pattern, matching",
    [
        ("a.*", ["a.b"]),
        ("a.#", ["a", "a.b", "a.b.c"]),
        ("#.c", ["a.b.c", "x.c", "c"]),
        ("*.b.*", ["a.b.c"]),
        ("#", ["a", "a.b", "a.b.c", "x.c", "c", "q.r.s.t"]),
    ],
)
def test_amq_topic_patterns(broker, pattern, matching):
    s = Client(broker.port)
    s.subscribe("/exchange/amq.topic/" + pattern)
    keys = ["a", "a.b", "a.b.c", "x.c", "c", "q.r.s.t"]
    with Client(broker.port) as p:
        for key in keys:
            p.send_to("/exchange/amq.topic/" + key, key)
    assert bodies(s, len(matching)) == sorted(k.encode() for k in matching)
    s.expect_nothing()


def test_topic_and_amq_topic_are_one_namespace_for_sends(broker):
    transient, bound = Client(broker.port), Client(broker.port)
    transient.subscribe("/topic/news.eu")
    bound.subscribe("/exchange/amq.topic/news.*")
    with Client(broker.port) as p:
        p.send_to("/topic/news.eu", "via-topic")
        p.send_to("/exchange/amq.topic/news.eu", "via-exchange")
    assert bodies(transient, 2) == [b"via-exchange", b"via-topic"]
    assert bodies(bound, 2) == [b"via-exchange", b"via-topic"]


def test_declared_exchanges_bind_with_routing_keys(broker):
    with Client(broker.port) as c:
        control(c, "declare/exchange/orders", type="topic")
        control(c, "declare/exchange/orders", type="topic")  # idempotent
        control(c, "bind/exchange/orders", queue="/queue/eu-orders", **{"routing-key": "order.eu.#"})
        control(c, "bind/exchange/orders", queue="/queue/all-orders", **{"routing-key": "order.#"})
        listing = control(c, "list-bindings/exchange/orders")
        assert listing["num-bindings"] == "2"
        assert (listing["binding-0-queue"], listing["binding-0-routing-key"]) == ("/queue/all-orders", "order.#")
        c.send_to("/exchange/orders/order.eu.fr", "fr")
        c.send_to("/exchange/orders/order.us", "us")
        assert control(c, "count-msgs/queue/eu-orders")["num-messages"] == "1"
        assert control(c, "count-msgs/queue/all-orders")["num-messages"] == "2"
        control(c, "unbind/exchange/orders", queue="/queue/all-orders", **{"routing-key": "order.#"})
        c.frame("SEND", {"destination": "/control/declare/exchange/orders", "type": "direct", "receipt": "r"})
        assert "topic" in c.expect_error()["message"]


def test_unknown_exchange_is_an_error_naming_it(broker):
    with Client(broker.port) as c:
        c.frame("SEND", {"destination": "/exchange/nosuch/k", "receipt": "r"}, b"x")
        assert "nosuch" in c.expect_error()["message"]


# ---------------------------------------------------------------------------- durable topic subscriptions


def durable_headers(form: str) -> tuple[dict[str, str], dict[str, str]]:
    """(CONNECT headers, SUBSCRIBE/UNSUBSCRIBE headers) of one durable subscription."""
    if form == "rabbitmq":
        return {}, {"durable": "True"}
    return {"client_id": "app-1"}, {"activemq.subscriptionName": "audit"}


@pytest.mark.parametrize("form", ["rabbitmq", "activemq"])
def test_durable_subscription_keeps_messages_while_away_and_across_restarts(tmp_path: Path, form):
    connect, durable = durable_headers(form)
    make = make_store_factory("sqlite", tmp_path)
    with BrokerThread(make).start() as broker:
        c = Client(broker.port, **connect)
        c.subscribe("/topic/audit.events", "d1", ack="client-individual", **durable)
        with Client(broker.port) as p:
            p.send_to("/topic/audit.events", "while-here")
        msg = c.message()
        assert (msg.body, msg["destination"]) == (b"while-here", "/topic/audit.events")
        c.ack(msg)
        c.disconnect()
        with Client(broker.port) as p:
            p.send_to("/topic/audit.events", "while-away")
    broker = BrokerThread(make).start()  # the message and the binding were stored
    try:
        with Client(broker.port) as p:
            p.send_to("/topic/audit.events", "after-restart")
        c = Client(broker.port, **connect)
        c.subscribe("/topic/audit.events", "d1", ack="client-individual", **durable)
        got = c.messages(2)
        assert [m.body for m in got] == [b"while-away", b"after-restart"]
        for m in got:
            c.ack(m)
        c.request("UNSUBSCRIBE", {"id": "d1", **durable})  # deletes it
        with Client(broker.port) as p:
            p.send_to("/topic/audit.events", "gone")
            assert control(p, "list-bindings/exchange/amq.topic")["num-bindings"] == "0"
        c.subscribe("/topic/audit.events", "d1", **durable)
        c.expect_nothing()
    finally:
        broker.stop()


def test_plain_unsubscribe_keeps_a_durable_subscription(broker):
    c = Client(broker.port)
    c.subscribe("/topic/kept", "k", persistent="true")
    c.unsubscribe("k")
    with Client(broker.port) as p:
        p.send_to("/topic/kept", "kept")
    c.subscribe("/topic/kept", "k", persistent="true")
    assert c.message().body == b"kept"


def test_activemq_durable_subscription_needs_a_client_id(broker):
    c = Client(broker.port)
    c.frame("SUBSCRIBE", {"destination": "/topic/x", "id": "s", "activemq.subscriptionName": "n"})
    assert "client-id" in c.expect_error()["message"]


def test_durable_prefix_subscription_is_an_error(broker):
    c = Client(broker.port)
    c.frame("SUBSCRIBE", {"destination": "/topic/pre*", "id": "s", "durable": "true"})
    assert "/topic/pre*" in c.expect_error()["message"]


def test_persistent_true_on_send_is_accepted_and_forwarded(broker):
    c = Client(broker.port)
    c.subscribe("/queue/persist")
    c.send_to("/queue/persist", "p", headers={"persistent": "true"})
    assert c.message()["persistent"] == "true"
