"""JMS selectors on SUBSCRIBE against a real listening broker (rules: docs/selectors.md)."""

from __future__ import annotations

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread, restarting
from ..support.stompclient import Client, control
from ..support.stores import make_store_factory
from ..support.waiting import wait_until
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


def test_selector_on_a_browser_is_refused_not_ignored(memory_broker):
    """A consumer that asked for some messages must not get all of them in silence."""
    with Client(memory_broker.port) as c:
        c.frame("SUBSCRIBE", {"destination": "/queue/jobs", "id": "s", "selector": "region = 'eu'",
                              "browser": "true", "receipt": "r"})
        error = c.next()
        assert error.command == "ERROR"
        assert "selector is not supported on browser subscriptions" in error["message"]


@pytest.fixture
def sqlite_broker(tmp_path):
    with BrokerThread(make_store_factory("sqlite", tmp_path), config=BrokerConfig(window=50)).start() as thread:
        yield thread


def test_complementary_queue_selectors_split_the_queue(sqlite_broker):
    """Two consumers of one queue with complementary selectors receive disjoint sets that
    together are everything sent; what one rejects stays for the other."""
    port = sqlite_broker.port
    with Client(port) as eu, Client(port) as other:
        eu.subscribe("/queue/regions", ack="client-individual", selector="region = 'eu'")
        other.subscribe("/queue/regions", ack="client-individual", selector="region <> 'eu'")
        with Client(port) as producer:
            for i in range(300):
                producer.send_to("/queue/regions", f"m{i}", receipt=False,
                                 headers={"region": REGIONS[i % len(REGIONS)]})
        got_eu, got_other = [], []
        while len(got_eu) + len(got_other) < 300:  # (both under their prefetch: ACK as they come)
            for consumer, got in ((eu, got_eu), (other, got_other)):
                if len(got) < 150:
                    got.append(consumer.message())
                    consumer.ack(got[-1], receipt=False)
        eu.expect_nothing()
        other.expect_nothing()
    assert {m["region"] for m in got_eu} == {"eu"} and "eu" not in {m["region"] for m in got_other}
    assert sorted(int(m.body[1:]) for m in got_eu + got_other) == list(range(300))


def test_queue_backlog_nobody_matches_does_not_starve_the_matches(sqlite_broker):
    """2,000 queued messages, 1 in 100 matching, a window of 50: the matching consumer gets its 20,
    in order, and the rest stays queued for a consumer without selector."""
    port = sqlite_broker.port
    with Client(port) as producer:
        for i in range(2000):
            producer.send_to("/queue/backlog", f"m{i}", receipt=False,
                             headers={"kind": "hit" if i % 100 == 42 else "miss"})
        producer.sync()
    with Client(port) as picky:
        picky.subscribe("/queue/backlog", ack="client-individual", selector="kind = 'hit'")
        got = picky.messages(20)
        for m in got:
            picky.ack(m, receipt=False)
        picky.expect_nothing()
    assert [m.body.decode() for m in got] == [f"m{i}" for i in range(42, 2000, 100)]
    with Client(port) as rest:
        rest.subscribe("/queue/backlog")
        assert len(rest.messages(1980)) == 1980


def test_durable_and_exchange_subscriptions_take_selectors(sqlite_broker):
    """A durable topic subscription and an exchange subscription are queues underneath: the
    selector applies to what their queue collects."""
    port = sqlite_broker.port
    with Client(port) as c:
        c.subscribe("/topic/regions", sub_id="d", durable="true", selector="region = 'us'")
        c.subscribe("/exchange/amq.direct/k", sub_id="x", selector="region = 'asia'")
        c.sync()
        with Client(port) as producer:
            publish_regions(port, "regions")
            for region in REGIONS:
                producer.send_to("/exchange/amq.direct/k", region, headers={"region": region})
        got = c.messages(3)
        c.expect_nothing()
    durable = [m.body.decode() for m in got if m["subscription"] == "d"]
    exchange = [m.body.decode() for m in got if m["subscription"] == "x"]
    assert durable == ["m1", "m4"] and exchange == ["asia"]


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


def test_queue_consumers_show_their_selector_and_priority_in_the_api_and_control(make_broker):
    port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=port))
    api = Api(port)
    with Client(broker.port) as c:
        c.subscribe("/queue/work", sub_id="eu", selector="region = 'eu'", **{"x-priority": "5"})
        c.subscribe("/queue/work", sub_id="any")
        shown = {s["subscription"]: (s["selector"], s["priority"]) for s in api.get("/api/queues/%2F/work/consumers")["items"]}
        receipt = control(c, "list-consumers/queue/work")
    assert shown == {"eu": ("region = 'eu'", 5), "any": (None, 0)}
    assert receipt["num-consumers"] == "2"
    assert (receipt["consumer-0-subscription"], receipt["consumer-0-selector"], receipt["consumer-0-priority"]) == (
        "eu", "region = 'eu'", "5")
    assert receipt["consumer-1-subscription"] == "any" and "consumer-1-selector" not in receipt.headers


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


def count(c: Client, queue: str) -> int:
    return int(control(c, f"count-msgs/queue/{queue}")["num-messages"])


def test_a_queue_message_no_selector_matches_still_expires(broker):
    """Sifted out (no subscriber's selector matches it), a message still expires at its TTL and
    leaves the queue, as any other does."""
    with Client(broker.port) as c:
        c.subscribe("/queue/sifted", ack="client-individual", selector="region = 'eu'")
        c.send_to("/queue/sifted", "late", headers={"region": "us", "ttl": "100"})
        c.send_to("/queue/sifted", "stays", headers={"region": "us", "ttl": "600000"})
        wait_until(lambda: count(c, "sifted") == 1, "the expired message left the queue")
        assert broker.call(lambda: broker.broker.queue_stats["sifted"].expired) == 1
        c.expect_nothing(0.1)


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_a_sifted_message_expires_after_a_restart(store_kind, tmp_path):
    with restarting(store_kind, tmp_path) as start:
        with Client(start().port) as c:
            c.subscribe("/queue/sifted", ack="client-individual", selector="region = 'eu'")
            c.send_to("/queue/sifted", "late", headers={"region": "us", "ttl": "1500"})
            c.send_to("/queue/sifted", "stays", headers={"region": "us"})
        broker = start()
        with Client(broker.port) as c:
            c.subscribe("/queue/sifted", ack="client-individual", selector="region = 'eu'")
            wait_until(lambda: count(c, "sifted") == 1, "the expired message left the queue")
            c.expect_nothing(0.1)
            c.subscribe("/queue/sifted", ack="auto")
            assert c.message().body == b"stays"


def test_a_backlog_on_disk_is_filtered_in_the_store_and_read_again_for_a_newcomer(tmp_path):
    """2,000 messages on disk (a restart wrote them out), a window of 50: SQLite's scan leaves
    out what the subscriber's selector cannot match (storage/header_filter.py), so its 20 come in
    a few page reads, not 40; a subscriber joining later with another selector gets its own from
    the rows left out, and one without a selector the rest."""
    factory = make_store_factory("sqlite", tmp_path)
    kinds = {42: "hit", 7: "other"}
    with BrokerThread(factory).start() as first, Client(first.port) as producer:
        for i in range(2000):
            producer.send_to("/queue/backlog", f"m{i}", receipt=False,
                             headers={"kind": kinds.get(i % 100, "miss"), "n": str(i)})
        producer.sync()
    with BrokerThread(factory, config=BrokerConfig(window=50)).start() as broker:
        port = broker.port
        with Client(port) as hits, Client(port) as others:
            hits.subscribe("/queue/backlog", ack="client-individual", selector="kind = 'hit' AND n >= 0")
            got = hits.messages(20)
            assert [m.body.decode() for m in got] == [f"m{i}" for i in range(42, 2000, 100)]
            assert broker.call(lambda: broker.broker.page_reads) < 10
            others.subscribe("/queue/backlog", ack="client-individual", selector="kind IN ('other')")
            theirs = others.messages(20)
            assert [m.body.decode() for m in theirs] == [f"m{i}" for i in range(7, 2000, 100)]
            hits.expect_nothing(0.1)
            others.expect_nothing(0.1)
            for consumer, taken in ((hits, got), (others, theirs)):
                for m in taken:
                    consumer.ack(m, receipt=False)
                consumer.sync()
        with Client(port) as rest:
            rest.subscribe("/queue/backlog")
            rest_bodies = {m.body.decode() for m in rest.messages(1960)}
            rest.expect_nothing(0.1)
    assert rest_bodies == {f"m{i}" for i in range(2000) if i % 100 not in kinds}
