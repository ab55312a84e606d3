"""``Broker.observers.watch``: each observer is asked once per message whether it follows it and told the steps
of those it follows only; a change of observers asks again, so one gone hears nothing more
and one come hears the steps of messages already in flight."""

from __future__ import annotations

from stompmq.broker import Broker
from stompmq.broker.session import Subscription
from stompmq.protocol import Frame
from stompmq.storage.base import StoredMessage
from stompmq.storage.memory import MemoryStore

from .fakes import FakeOutbox


class Recorder:
    """A ``MessageEvents`` following the messages whose body starts with ``prefix``."""

    def __init__(self, prefix: bytes) -> None:
        self.prefix = prefix
        self.asked: list[bytes] = []
        self.told: list[tuple[str, bytes]] = []

    def follows(self, msg: StoredMessage) -> bool:
        self.asked.append(msg.body)
        return msg.body.startswith(self.prefix)

    def published(self, msg: StoredMessage) -> None:
        self.told.append(("publish", msg.body))

    def delivered(self, msg: StoredMessage, sub: Subscription) -> None:
        self.told.append(("deliver", msg.body))

    def acked(self, msg: StoredMessage, sub: Subscription) -> None:
        self.told.append(("ack", msg.body))

    def nacked(self, msg: StoredMessage, sub: Subscription, requeue: bool) -> None:
        self.told.append(("nack", msg.body))

    def dead_lettered(self, msg: StoredMessage, reason: str) -> None:
        self.told.append(("dead-letter", msg.body))

    def expired(self, msg: StoredMessage) -> None:
        self.told.append(("expire", msg.body))


def send(broker: Broker, body: bytes) -> None:
    producer = broker.open_session(f"p-{body.decode()}", "1.2", FakeOutbox())
    broker.handle(producer, Frame("SEND", {"destination": "/queue/q"}, body))


def test_a_message_is_asked_about_once_and_told_to_its_followers_only() -> None:
    broker = Broker(MemoryStore())
    traced = Recorder(b"t")
    broker.observers.watch(traced)
    session = broker.open_session("s", "1.2", FakeOutbox())
    broker.handle(session, Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual"}, b""))
    for body in (b"t1", b"u1", b"t2"):
        send(broker, body)
    broker.handle_frames(session, [Frame("NACK", {"id": "2"}, b""), Frame("ACK", {"id": "1"}, b""),
                                   Frame("ACK", {"id": "3"}, b""), Frame("ACK", {"id": "4"}, b"")])
    assert traced.asked == [b"t1", b"u1", b"t2"]  # once each, though u1 went out twice
    assert traced.told == [("publish", b"t1"), ("deliver", b"t1"), ("publish", b"t2"), ("deliver", b"t2"),
                           ("ack", b"t1"), ("ack", b"t2")]


def test_a_change_of_observers_asks_again() -> None:
    broker = Broker(MemoryStore())
    traced, everything = Recorder(b"t"), Recorder(b"")
    broker.observers.watch(traced)
    send(broker, b"t1")
    send(broker, b"u1")  # both wait: nobody subscribes yet
    broker.observers.watch(everything)
    session = broker.open_session("s", "1.2", FakeOutbox())
    broker.handle(session, Frame("SUBSCRIBE", {"id": "s", "destination": "/queue/q", "ack": "client-individual"}, b""))
    broker.observers.unwatch(traced)
    broker.handle_frames(session, [Frame("ACK", {"id": "1"}, b""), Frame("ACK", {"id": "2"}, b"")])
    assert traced.asked == [b"t1", b"u1", b"t1", b"u1"]
    assert traced.told == [("publish", b"t1"), ("deliver", b"t1")]  # nothing after its unwatch
    assert everything.told == [("deliver", b"t1"), ("deliver", b"u1"), ("ack", b"t1"), ("ack", b"u1")]
    broker.observers.unwatch(everything)
    assert broker.observers.watching == () and broker.dispatcher.watch is None and broker.acks.watch is None

