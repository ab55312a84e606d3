"""The engine's queries (``broker/queries.py``) in the engine alone: what the management API and
/metrics read answer from the engine's state, with no event loop and no socket."""

from __future__ import annotations

from stompmq.broker import Broker
from stompmq.protocol import Frame
from stompmq.storage.memory import MemoryStore

from .fakes import FakeOutbox, run_reads


def handle(broker: Broker, session: object, command: str, **headers: str) -> None:
    broker.handle(session, Frame(command, headers))  # type: ignore[arg-type]


def test_consumers_and_subscriptions_are_counted_per_queue_and_in_all() -> None:
    broker = Broker(MemoryStore())
    a = broker.open_session("a", "1.2", FakeOutbox())
    b = broker.open_session("b", "1.2", FakeOutbox())
    handle(broker, a, "SUBSCRIBE", id="1", destination="/queue/q")
    handle(broker, b, "SUBSCRIBE", id="1", destination="/queue/q")
    handle(broker, b, "SUBSCRIBE", id="2", destination="/topic/t")
    assert broker.consumer_count("q") == 2
    assert broker.consumer_count("nobody-reads-this") == 0
    assert broker.subscription_count() == 3
    broker.close_session(b)
    assert broker.consumer_count("q") == 1
    assert broker.subscription_count() == 1


def test_exchange_names_are_the_declared_ones_of_every_type_without_the_built_ins() -> None:
    broker = Broker(MemoryStore())
    a = broker.open_session("a", "1.2", FakeOutbox())
    handle(broker, a, "SEND", destination="/control/declare/exchange/orders", type="direct")
    handle(broker, a, "SEND", destination="/control/declare/exchange/hashed", type="consistent-hash")
    run_reads(broker)
    assert broker.exchange_names() == ["hashed", "orders"]


def test_a_stream_unknown_here_has_no_groups() -> None:
    broker = Broker(MemoryStore())
    assert broker.stream_group_lags("none") == []
    assert broker.stream_group_lags() == []
    assert broker.delayed_in_memory() == 0
