"""JMS selectors on SUBSCRIBE against a real listening broker (rules: docs/selectors.md)."""

from __future__ import annotations

import pytest

from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.stompclient import Client
from .test_http import Api

REGIONS = ["eu", "us", "eu", "asia", "us", "eu"]


def publish_regions(port: int, topic: str) -> None:
    with Client(port) as producer:
        for i, region in enumerate(REGIONS):
            producer.send_to(f"/topic/{topic}", f"m{i}", headers={"region": region, "price": str(i + 0.5)})


def test_complementary_topic_selectors_split_the_messages(memory_broker):
    """The reported bug: ``selector:region = 'eu'`` got every region.  Two subscribers with
    complementary selectors get disjoint sets that together are everything published."""
    with Client(memory_broker.port) as eu, Client(memory_broker.port) as other, Client(memory_broker.port) as all_:
        eu.subscribe("/topic/regions", selector="region = 'eu'")
        other.subscribe("/topic/regions", selector="NOT region = 'eu'")
        all_.subscribe("/topic/regions")
        publish_regions(memory_broker.port, "regions")
        everything = [m.body.decode() for m in all_.messages(len(REGIONS))]
        got_eu = [m.body.decode() for m in eu.messages(3)]
        got_other = [m.body.decode() for m in other.messages(3)]
        eu.expect_nothing()
        other.expect_nothing()
    assert got_eu == ["m0", "m2", "m5"]
    assert got_other == ["m1", "m3", "m4"]
    assert sorted(got_eu + got_other) == sorted(everything)


def test_numeric_header_compares_as_a_number(memory_broker):
    """``price BETWEEN 1 AND 3`` matches ``price:1.5`` and ``price:2.5`` (ActiveMQ compares the
    header as a string and matches nothing)."""
    with Client(memory_broker.port) as c:
        c.subscribe("/topic/prices", selector="price BETWEEN 1 AND 3 AND \"region\" IN ('us', 'eu')")
        publish_regions(memory_broker.port, "prices")
        assert [m["price"] for m in c.messages(2)] == ["1.5", "2.5"]
        c.expect_nothing()


@pytest.mark.parametrize(("selector", "position"), [("region = ", 10), ("region == 'eu'", 9), ("count + 1", 7)])
def test_malformed_selector_is_an_error_naming_the_position(memory_broker, selector, position):
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "s", "selector": selector, "receipt": "r"})
        error = c.next()
        assert error.command == "ERROR"
        assert f"invalid selector at character {position}" in error["message"]
    with Client(memory_broker.port) as other:  # the broker carries on
        other.subscribe("/topic/t")


def test_stream_selector_passes_over_what_it_rejects(memory_broker):
    """A stream reader with a selector gets the matching entries, in offset order, from anywhere in
    the stream; another reader of the same stream still gets everything."""
    with Client(memory_broker.port) as producer:
        for i, region in enumerate(REGIONS):
            producer.send_to("/stream/regions", f"m{i}", headers={"region": region})
    with Client(memory_broker.port) as c, Client(memory_broker.port) as everything:
        c.subscribe("/stream/regions", ack="client-individual", selector="region IN ('us', 'asia')",
                    x_stream_offset="first")
        everything.subscribe("/stream/regions", x_stream_offset="first")
        assert [m.body.decode() for m in c.messages(3)] == ["m1", "m3", "m4"]
        c.expect_nothing()
        assert len(everything.messages(len(REGIONS))) == len(REGIONS)


@pytest.mark.parametrize("destination", ["/queue/jobs", "/exchange/amq.direct/k"])
def test_selector_where_not_supported_is_refused_not_ignored(memory_broker, destination):
    """A consumer that asked for some messages must not get all of them in silence."""
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": destination, "id": "s", "selector": "region = 'eu'", "receipt": "r"})
        error = c.next()
        assert error.command == "ERROR"
        assert "selector is supported on streams and non-durable topic subscriptions only" in error["message"]


def test_connection_api_shows_the_selector(make_broker):
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port))
    api = Api(port)
    with Client(broker.port) as c:
        c.subscribe("/topic/x", sub_id="s1", selector="region = 'eu'")
        c.subscribe("/topic/y", sub_id="s2")
        [conn] = api.get("/api/connections")["items"]
        subs = {s["id"]: s["selector"] for s in api.get(f"/api/connections/{conn['id']}")["subscriptions"]}
    assert subs == {"s1": "region = 'eu'", "s2": None}


def test_a_redelivered_message_carries_its_delivery_count(memory_broker):
    """ActiveMQ's JMSXDeliveryCount (this delivery included) beside redelivery-count; a selector
    can read it."""
    with Client(memory_broker.port) as c:
        c.send_to("/queue/counted", "x")
        c.subscribe("/queue/counted", ack="client-individual")
        first = c.message()
        assert "JMSXDeliveryCount" not in first.headers
        c.nack(first)
        second = c.message()
        assert (second["redelivery-count"], second["JMSXDeliveryCount"]) == ("1", "2")
        c.nack(second)
        assert c.message()["JMSXDeliveryCount"] == "3"
