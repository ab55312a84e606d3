"""The kombu transport on its own (no Celery worker), against a broker in a thread: routing by
the broker's exchanges across connections, queue arguments, declare-ok counts, auto_delete
queues, ack, reject and requeue, and a plain STOMP message read by kombu."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

pytest.importorskip("kombu")
from kombu import Connection, Consumer, Exchange, Producer, Queue  # noqa: E402

import stompmq.integrations.celery  # noqa: E402,F401  (registers stompmq://)

from ..support.stompclient import Client, control  # noqa: E402

pytestmark = pytest.mark.celery


@pytest.fixture
def url(memory_broker) -> Iterator[str]:
    yield f"stompmq://127.0.0.1:{memory_broker.port}//"


def drain_until(conn: Connection, got: list, n: int) -> None:
    for _ in range(50):
        if len(got) >= n:
            return
        try:
            conn.drain_events(timeout=0.2)
        except TimeoutError:
            pass
    assert len(got) >= n, got


def collect(conn: Connection, queue: Queue, got: list, ack: bool = True) -> Consumer:
    def on(body, message):  # type: ignore[no-untyped-def]
        got.append((body, message))
        if ack:
            message.ack()

    consumer = Consumer(conn.channel(), [queue], callbacks=[on])
    consumer.consume()
    return consumer


def test_fanout_and_topic_exchanges_route_in_the_broker_across_connections(url: str) -> None:
    fan, topic = Exchange("t-fan", type="fanout"), Exchange("t-ev", type="topic")
    queues = [Queue("t-a", fan), Queue("t-b", fan), Queue("t-tasks", topic, routing_key="task.#")]
    with Connection(url) as consumer_side, Connection(url) as producer_side:
        for q in queues:
            q(consumer_side.default_channel).declare()
        producer = Producer(producer_side.channel())  # knows nothing of the bindings
        producer.publish({"to": "all"}, exchange=fan, routing_key="")
        producer.publish({"ev": 1}, exchange=topic, routing_key="task.succeeded")
        producer.publish({"ev": 2}, exchange=topic, routing_key="worker.heartbeat")  # no binding: dropped
        got: list = []
        for q in queues:
            collect(consumer_side, q, got)
        drain_until(consumer_side, got, 3)
    assert sorted(str(body) for body, _ in got) == ["{'ev': 1}", "{'to': 'all'}", "{'to': 'all'}"]


def test_declare_ok_counts_and_queue_arguments(url: str, memory_broker) -> None:
    with Connection(url) as conn:
        channel = conn.default_channel
        Producer(channel).publish("x", routing_key="t-count")
        ok = channel.queue_declare("t-count", arguments={"x-message-ttl": 5000, "x-expires": 10000})
        assert ok[0] == "t-count" and (ok.message_count, ok.consumer_count) == (1, 0)
        name, ready, subscribers = ok
        assert (name, ready, subscribers) == ("t-count", 1, 0)
    assert memory_broker.call(lambda: memory_broker.broker.dispatcher.bounds.policy("t-count").message_ttl) == 5000


def test_an_auto_delete_queue_goes_with_its_last_consumer(url: str, memory_broker) -> None:
    queue = Queue("t-reply", auto_delete=True)
    with Connection(url) as conn:
        got: list = []
        consumer = collect(conn, queue, got)
        queue(conn.default_channel).declare()
        Producer(conn.default_channel).publish("r", routing_key="t-reply")
        drain_until(conn, got, 1)
        with Client(memory_broker.port) as c:
            assert "t-reply" in control(c, "list-queues").headers.values()
        consumer.cancel()
    with Client(memory_broker.port) as c:
        assert "t-reply" not in control(c, "list-queues").headers.values()


def test_reject_requeue_and_ack(url: str) -> None:
    with Connection(url) as conn:
        Producer(conn.default_channel).publish("once", routing_key="t-rej", priority=7)
        got: list = []
        collect(conn, Queue("t-rej"), got, ack=False)
        drain_until(conn, got, 1)
        first = got[0][1]
        assert first.delivery_info["priority"] == 7 and not first.delivery_info["redelivered"]
        first.requeue()
        drain_until(conn, got, 2)
        again = got[1][1]
        assert again.delivery_info["redelivered"]
        again.reject()  # requeue=False: dropped
        with pytest.raises(socket.timeout):
            conn.drain_events(timeout=0.5)


def test_a_plain_stomp_message_reaches_kombu_with_its_headers(url: str, memory_broker) -> None:
    with Client(memory_broker.port) as c:
        c.send_to("/queue/t-plain", b'{"n": 1}', headers={"content-type": "application/json", "colour": "blue"})
    with Connection(url) as conn:
        got: list = []
        collect(conn, Queue("t-plain"), got)
        drain_until(conn, got, 1)
    body, message = got[0]
    assert body == {"n": 1} and message.headers["colour"] == "blue"
