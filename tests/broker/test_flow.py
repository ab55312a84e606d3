"""The engine's side of flow control (broker/flow.py): why a session's reader must wait after a
read, in order, and what it waits for, handed over once."""

from __future__ import annotations

from stompmq.broker.flow import Hold, held_by, holds, take_queues, take_subscribers

from .fakes import FakeOutbox
from .test_engine import frame, send
from .test_pacing import setup


class FullOutbox(FakeOutbox):
    """A topic subscriber's output over its hard limit."""

    def can_take_transient(self) -> bool:
        return False


def test_a_session_nothing_holds() -> None:
    broker, consumer, producer, _ = setup()
    send(broker, producer, "/queue/q")
    assert holds(producer) == () and not any(held_by(producer, hold) for hold in Hold)


def test_topic_then_pace_each_handed_over_once() -> None:
    broker, consumer, producer, _ = setup()
    subscriber = broker.open_session("subscriber", "1.2", FullOutbox())
    broker.handle(subscriber, frame("SUBSCRIBE", id="t", destination="/topic/t"))
    for _ in range(5):  # four ready: the queue is backed up
        send(broker, producer, "/queue/q")
    send(broker, producer, "/topic/t")
    assert holds(producer) == (Hold.TOPIC, Hold.PACE)
    assert list(take_subscribers(producer).values()) == [subscriber]
    assert holds(producer) == (Hold.PACE,) and take_subscribers(producer) == {}
    (queue,) = take_queues(producer)
    assert queue.name == "q" and holds(producer) == () and take_queues(producer) == set()


def test_an_empty_record_holds_nobody() -> None:
    """A producer that publishes into a queue it consumes itself is not paced by it."""
    broker, consumer, producer, _ = setup()
    for _ in range(5):
        send(broker, consumer, "/queue/q")
    assert consumer.paced == set() and holds(consumer) == ()
