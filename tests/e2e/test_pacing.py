"""Producer pacing through a real broker (broker/pacing.py): a queue whose consumer falls behind
holds its producer back instead of spilling, and for no longer than --queue-pace-timeout."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.waiting import pace, wait_until
from .test_http import Api


def _produce_past(broker: BrokerThread, destination: str, count: int, subscription: dict[str, str],
                  take: Callable[[Client], bytes]) -> None:
    """A producer sends ``count`` numbered messages as fast as it can while a consumer thread takes
    them with ``take``: every one arrives once and in order, and the queue never leaves memory
    (the first page read is the only one, and pacing never gave up)."""
    got: list[bytes] = []
    with Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe(destination, "s", **subscription)
        producer.send_to(destination, "first")  # the queue is in memory from here on
        take(consumer)

        def consume() -> None:
            for _ in range(count):
                got.append(take(consumer))

        reader = threading.Thread(target=consume)
        reader.start()
        for i in range(count):
            producer.send_to(destination, f"{i:0100d}", receipt=False)
        producer.sync(timeout=120)  # generous: on a loaded machine the paced tail drains slowly
        reader.join(120)
    assert got == [f"{i:0100d}".encode() for i in range(count)]
    engine = broker.broker
    assert broker.call(lambda: (engine.page_reads, engine.pace_timeouts)) == (1, 0)  # the first page only


# The memory store keeps every queue in memory: nothing to pace.
@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_a_consumer_behind_paces_the_producer_and_nothing_spills(
    store_kind: str, make_broker: Callable[..., BrokerThread]
) -> None:
    # A window of 3,000 with a tail of 1,500: the producer is paced at 1,500 ready messages, and
    # one socket read (256 KiB, under 2,000 of these SENDs) on top of that still fits in memory.
    broker = make_broker(config=BrokerConfig(window=3000, queue_pace_timeout=60.0))

    def take(consumer: Client) -> bytes:  # one message at a time: far slower than the producer
        msg = consumer.message()
        consumer.ack(msg, receipt=False)
        return msg.body

    _produce_past(broker, "/queue/paced", 10_000, {"ack": "client-individual", "prefetch": "1"}, take)


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_an_auto_ack_consumer_whose_socket_is_behind_paces_the_producer_early(
    store_kind: str, make_broker: Callable[..., BrokerThread]
) -> None:
    # An auto-ack queue is paced at 1/32 of its window (93 of 3,000 messages) until it is empty
    # (the thresholds: tests/broker/test_pacing.py).  Through real sockets: the consumer reads
    # in bursts with pauses, the producer sends as fast as it can, each wait ends, and every
    # message arrives once and in order without the queue ever leaving memory.
    broker = make_broker(config=BrokerConfig(window=3000, queue_pace_timeout=60.0))
    taken = itertools.count()

    def take(consumer: Client) -> bytes:
        if next(taken) % 2000 == 0:
            pace(0.05)  # a slow consumer: the socket's buffers fill meanwhile
        return consumer.message().body

    _produce_past(broker, "/queue/streamed", 20_000, {"ack": "auto"}, take)


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
def test_a_stalled_consumer_holds_the_producer_back_only_for_the_timeout(
    store_kind: str, make_broker: Callable[..., BrokerThread]
) -> None:
    http_port = free_port()
    broker = make_broker(settings=ServerSettings(port=0, http_port=http_port),
                         config=BrokerConfig(window=100, queue_pace_timeout=0.2))
    count = 1000
    engine = broker.broker
    with Client(broker.port) as consumer, Client(broker.port) as producer:
        consumer.subscribe("/queue/stalled", "s", "client-individual", prefetch="1")
        for i in range(count):
            producer.send_to("/queue/stalled", str(i), receipt=False)
        wait_until(lambda: broker.call(lambda: engine.pace_timeouts) == 1, "the producer to be let go")
        producer.send_to("/queue/stalled", str(count))  # answered: pacing stopped for this backlog
        assert broker.call(lambda: engine.pace_timeouts) == 1
        assert "stompmq_queue_pace_timeouts_total 1.0" in Api(http_port).call("GET", "/metrics")[1]
        for i in range(count + 1):  # the backlog went to the store; nothing is lost, nothing reordered
            msg = consumer.message()
            assert msg.body == str(i).encode()
            consumer.ack(msg, receipt=False)
