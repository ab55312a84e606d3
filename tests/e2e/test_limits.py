"""Limits against abuse through a real broker: connections per source address, subscriptions per connection."""

from __future__ import annotations

from collections.abc import Callable

from stompmq.broker import BrokerConfig
from stompmq.server import ServerSettings

from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient
from ..support.stompclient import Client
from .test_permissions import client_from
from ..support.waiting import wait_until


def test_connections_per_address_are_limited_and_freed(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, max_connections_per_address=2))
    first, second = client_from("127.0.0.2", broker.port), client_from("127.0.0.2", broker.port)
    first.connect()
    second.connect()
    with client_from("127.0.0.2", broker.port) as third:
        assert third.expect_error()["message"] == "too many connections from 127.0.0.2"
    with client_from("127.0.0.3", broker.port) as elsewhere:  # another address is not affected
        elsewhere.connect()
    first.close()
    second.close()

    def third_gets_in() -> bool:
        with client_from("127.0.0.2", broker.port) as client:
            client.frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})
            return client.recv().command == "CONNECTED"

    wait_until(third_gets_in, "a slot freed by closed connections")


def test_subscriptions_per_connection_are_limited(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(config=BrokerConfig(max_subscriptions=3))
    with Client(broker.port) as client:
        for i in range(3):
            client.subscribe(f"/queue/q{i}", str(i))
        client.frame("SUBSCRIBE", {"destination": "/topic/t", "id": "x"})
        assert client.expect_error()["message"] == "too many subscriptions on this connection (at most 3)"
    with RawClient(broker.port) as other:  # the limit is per connection
        other.connect()
        other.frame("SUBSCRIBE", {"destination": "/queue/q0", "id": "1", "receipt": "r"})
        assert other.recv().command == "RECEIPT"
