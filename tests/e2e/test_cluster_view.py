"""The cluster view: two brokers on one PostgreSQL database, each with its management API.

A queue's counters and /metrics' per-queue counters are the asked broker's own (named by
``broker``), its ready/unacked counts are the database's; ``/api/cluster`` lists what every
broker counted as of its last lease renewal and sums them with what the brokers that left
counted (stored: cumulative across restarts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import TEST_LEASE, make_store_factory
from ..support.waiting import send_all, wait_until
from .test_http import Api

pytestmark = pytest.mark.postgres

#: Seconds for a renewal to carry the latest counters (one every lease / 3) and a hand-over.
SETTLE = 3 * TEST_LEASE + 10


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[list[tuple[BrokerThread, Api]]]:
    """Two brokers on one database, in threads of this process, each with an HTTP port."""
    store = make_store_factory("postgres", tmp_path)
    started: list[tuple[BrokerThread, Api]] = []
    try:
        for _ in range(2):
            http_port = free_port()
            settings = ServerSettings(port=0, http_port=http_port, metrics_top_queues=10)
            started.append((BrokerThread(store, settings=settings).start(), Api(http_port)))
        yield started
    finally:
        for broker, _ in started:
            broker.stop()


def node_id(broker: BrokerThread) -> str:
    assert broker.broker is not None
    return broker.broker.store.node_id


def test_cluster_totals_are_the_sum_of_each_brokers_own_counters(pair: list[tuple[BrokerThread, Api]]) -> None:
    (a, api_a), (b, api_b) = pair
    send_all(a.port, "/queue/view", ["from a"] * 3)
    send_all(b.port, "/queue/view", ["from b"] * 2)
    send_all(a.port, "/queue/left", ["stays"] * 2)
    with Client(b.port) as consumer:  # b delivers what a stored too
        consumer.subscribe("/queue/view", ack="client-individual")
        for msg in [consumer.message(timeout=SETTLE) for _ in range(5)]:
            consumer.ack(msg)

    own = {node_id(a): api_a.get("/api/overview")["totals"], node_id(b): api_b.get("/api/overview")["totals"]}
    assert own[node_id(a)]["published"] == 5 and own[node_id(b)]["published"] == 2
    assert own[node_id(b)]["delivered"] == own[node_id(b)]["acked"] == 5 and own[node_id(a)]["acked"] == 0
    summed = {key: own[node_id(a)][key] + own[node_id(b)][key] for key in own[node_id(a)]}

    def listed() -> bool:
        cluster = api_a.get("/api/cluster")
        return cluster["totals"] == summed and {x["id"]: x["counters"] for x in cluster["brokers"]} == own

    wait_until(listed, "both brokers' counters written at a renewal", SETTLE)
    cluster = api_b.get("/api/cluster")  # every broker lists the same
    assert cluster["totals"] == summed and [x["this"] for x in cluster["brokers"]] == [
        x["id"] == node_id(b) for x in cluster["brokers"]]

    for broker, api in pair:  # each names itself; ready/unacked are the database's, the same on both
        this = node_id(broker)
        assert api.get("/api/overview")["broker"] == this
        items = {q["name"]: q for q in api.get("/api/queues")["items"]}
        assert {q["broker"] for q in items.values()} == {this}
        assert items["left"]["ready"] == 2 and api.get("/api/queues/%2F/left")["broker"] == this
        metrics = api.get("/metrics")
        assert f'stompmq_queue_published_total{{broker="{this}",queue="view",vhost="/"}}' in metrics
        assert re.search(rf'^stompmq_build_info\{{broker="{this}",', metrics, re.MULTILINE)
    assert items["left"].get("published", 0) == 0  # b counted nothing of a's queue "left"

    gone = node_id(b)
    b.stop()  # a clean stop takes b off the list; what it counted stays in the totals (stored)
    wait_until(lambda: gone not in {x["id"] for x in api_a.get("/api/cluster")["brokers"]}, "b off the list", SETTLE)
    assert api_a.get("/api/cluster")["totals"] == summed
