"""Producer pacing (broker/pacing.py) in the engine alone: time is what the test gives."""

from __future__ import annotations

from typing import Any

from stompmq.broker import Broker, BrokerConfig
from stompmq.broker.queue import Queue

from .fakes import DictStore, FakeOutbox, run_reads
from .test_engine import connect, frame, send


def setup(window: int = 8, timeout: float = 1.0, ack: str = "client-individual") -> tuple[Broker, Any, Any, FakeOutbox]:
    """A broker whose queue q has one consumer taking one message at a time (client-individual,
    prefetch 1; or ``ack:auto``, held back by its outbox's room only), and a producer."""
    broker = Broker(DictStore(), BrokerConfig(window=window, queue_pace_timeout=timeout))
    broker.advance(100.0, 1_700_000_000.0)
    consumer, outbox = connect(broker, "consumer")
    broker.handle(consumer, frame("SUBSCRIBE", id="s", destination="/queue/q", ack=ack, prefetch="1"))
    run_reads(broker)  # the first page: the queue is empty, so it is all in memory
    producer, _ = connect(broker, "producer")
    return broker, consumer, producer, outbox


def ack_next(broker: Broker, consumer: Any, outbox: FakeOutbox) -> None:
    (msg,) = outbox.take("MESSAGE")
    broker.handle(consumer, frame("ACK", id=msg.headers["ack"]))


def paced_queue(producer: Any) -> Queue:
    (queue,) = producer.paced
    return queue


def test_a_producer_waits_while_the_consumer_is_behind_and_goes_on_when_it_drains() -> None:
    broker, consumer, producer, outbox = setup()
    for _ in range(4):  # one out for delivery, three ready: under half the window of 8
        send(broker, producer, "/queue/q")
    assert producer.paced is None
    send(broker, producer, "/queue/q")  # four ready: half the window
    queue = paced_queue(producer)
    woken: list[bool] = []
    assert broker.pace(queue, lambda: woken.append(True)) == 101.0  # at most --queue-pace-timeout
    ack_next(broker, consumer, outbox)
    ack_next(broker, consumer, outbox)
    assert not woken  # two ready: still a quarter of the window
    ack_next(broker, consumer, outbox)
    assert woken == [True]  # one ready: drained
    assert broker.pace(queue, lambda: None) is None
    assert queue.pace is None and broker.pace_timeouts == 0


def test_past_the_timeout_pacing_stops_and_the_backlog_spills_until_it_is_back_in_memory() -> None:
    broker, consumer, producer, outbox = setup()
    for _ in range(5):
        send(broker, producer, "/queue/q")
    queue = paced_queue(producer)
    producer.paced = None
    woken: list[bool] = []
    assert broker.pace(queue, lambda: woken.append(True)) == 101.0
    broker.advance(100.5, 1_700_000_000.5)
    assert broker.pace(queue, lambda: woken.append(True)) == 101.0  # the episode's start counts
    broker.advance(101.0, 1_700_000_001.0)
    assert broker.pace(queue, lambda: None) is None  # given up: every waiter goes on
    assert woken == [True, True] and broker.pace_timeouts == 1
    for _ in range(20):  # the producer runs at full speed; the backlog leaves memory
        send(broker, producer, "/queue/q")
    assert producer.paced is None  # a queue that gave up is not even offered to the connection
    assert queue.window.spilled and broker.pace(queue, lambda: None) is None
    for _ in range(25):  # the consumer takes all 25: the queue is all in memory again
        ack_next(broker, consumer, outbox)
        run_reads(broker)
    assert not queue.window.spilled and queue.pace is None
    producer.paced = None
    for _ in range(5):
        send(broker, producer, "/queue/q")
    assert broker.pace(paced_queue(producer), lambda: None) == 102.0  # a new episode, from now


def test_a_consumer_that_leaves_releases_the_producers() -> None:
    broker, consumer, producer, outbox = setup()
    for _ in range(5):
        send(broker, producer, "/queue/q")
    queue = paced_queue(producer)
    woken: list[bool] = []
    broker.pace(queue, lambda: woken.append(True))
    broker.close_session(consumer)
    assert woken == [True]
    assert broker.pace(queue, lambda: None) is None


def test_no_pacing_without_subscribers_or_with_a_zero_timeout() -> None:
    broker = Broker(DictStore(), BrokerConfig(window=8))
    producer, _ = connect(broker, "producer")
    for _ in range(20):
        send(broker, producer, "/queue/q")
    assert producer.paced is None
    broker, consumer, producer, outbox = setup(timeout=0.0)
    for _ in range(20):
        send(broker, producer, "/queue/q")
    assert producer.paced is None


def test_a_client_that_consumes_the_queue_is_not_paced_by_it() -> None:
    broker, consumer, producer, outbox = setup()
    for _ in range(5):  # the consumer publishes into its own queue: it drains it with its ACKs
        send(broker, consumer, "/queue/q")
    assert not consumer.paced
    send(broker, producer, "/queue/q")
    assert paced_queue(producer).name == "q"


def test_a_tiny_window_paces_at_one_message_and_drains_at_none() -> None:
    broker, consumer, producer, outbox = setup(window=3)
    send(broker, producer, "/queue/q")  # delivered at once: nothing ready
    assert not producer.paced
    send(broker, producer, "/queue/q")  # one ready: a third of the window
    woken: list[bool] = []
    assert broker.pace(paced_queue(producer), lambda: woken.append(True)) == 101.0
    ack_next(broker, consumer, outbox)  # the ready one goes out: drained
    assert woken == [True]


def test_a_publish_outside_any_clients_frame_paces_nobody() -> None:
    broker, consumer, producer, outbox = setup()
    for _ in range(5):  # a timer's publish (a delayed message come due, a dead letter) backs q up
        broker.dispatcher.publish("q", {}, b"x")
    send(broker, producer, "/queue/elsewhere")
    assert not producer.paced


def test_a_queue_read_with_auto_ack_paces_early_and_until_it_is_empty() -> None:
    # Its consumer lacks room only while its socket is behind: a window of 64 paces at 64/32 = 2
    # ready messages (not half of it), and the producer waits until none is left, so its next
    # SENDs go straight to the consumer.
    broker, consumer, producer, outbox = setup(window=64, ack="auto")
    send(broker, producer, "/queue/q")  # delivered at once
    outbox.room = False  # the consumer's socket is behind
    send(broker, producer, "/queue/q")  # one ready
    assert not producer.paced
    send(broker, producer, "/queue/q")  # two ready: 1/32 of the window
    queue = paced_queue(producer)
    woken: list[bool] = []
    assert broker.pace(queue, lambda: woken.append(True)) == 101.0
    outbox.room = True
    broker.resume(consumer)  # the socket took the output: both ready messages go out
    assert len(outbox.take("MESSAGE")) == 3
    assert woken == [True] and queue.pace is None and queue.window.size == 0


def test_one_subscriber_that_acknowledges_keeps_the_late_thresholds() -> None:
    broker, consumer, producer, outbox = setup(window=64, ack="auto")
    worker, _ = connect(broker, "worker")
    broker.handle(worker, frame("SUBSCRIBE", id="w", destination="/queue/q", ack="client", prefetch="1"))
    outbox.room = False
    for _ in range(20):  # a task queue's burst: one to the worker, 19 ready, under half of 64
        send(broker, producer, "/queue/q")
    assert not producer.paced
    broker.handle(worker, frame("UNSUBSCRIBE", id="w"))  # the worker's message goes back: 20 ready
    send(broker, producer, "/queue/q")  # auto-ack only again: far past 1/32
    assert paced_queue(producer).name == "q"
