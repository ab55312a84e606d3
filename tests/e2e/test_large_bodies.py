"""Large bodies through a real broker: assembled from many reads, sent by scatter/gather over TCP
and joined over TLS and WebSocket, in order with the small frames around them."""

from __future__ import annotations

from collections.abc import Callable

import trustme

from stompmq.protocol.encoder import LARGE_BODY
from stompmq.server import ServerSettings
from stompmq.server.listeners import listener_port

from ..support.broker_thread import BrokerThread
from ..support.rawclient import RawClient
from ..support.wsclient import WSClient
from .test_tls import client_context, tls_client, write_cert

#: Bodies of every kind: small ones batched, one just at the threshold, several reads long.
BODIES = [b"a", bytes(range(256)) * (LARGE_BODY // 256), b"b" * 1000, b"c" * (3 << 20) + b"\n\0end", b"",
          b"d" * (200 * 1024)]
TIMEOUT = 30.0


def _exchange(sub: RawClient, pub: RawClient, destination: str, subscribers: int = 1) -> None:
    """``pub`` sends BODIES in one write behind a SUBSCRIBE of ``sub``'s; each arrives whole."""
    sub.connect()
    for i in range(subscribers):
        sub.frame("SUBSCRIBE", {"id": str(i), "destination": destination, "receipt": f"r{i}"})
        assert sub.recv(TIMEOUT).headers["receipt-id"] == f"r{i}"
    pub.connect()
    pub.send(b"".join(b"SEND\ndestination:%s\nn:%d\ncontent-length:%d\n\n%s\0" % (destination.encode(), i, len(body),
                                                                                      body)
                      for i, body in enumerate(BODIES)))
    got = [sub.recv(TIMEOUT) for _ in range(len(BODIES) * subscribers)]
    for i in range(subscribers):
        mine = [m for m in got if m["subscription"] == str(i)]
        assert [int(m["n"]) for m in mine] == list(range(len(BODIES)))
        assert [m.body for m in mine] == BODIES
        assert all(m["content-length"] == str(len(m.body)) for m in mine)


def test_large_bodies_to_a_queue_and_a_topic_over_tcp(memory_broker: BrokerThread) -> None:
    with RawClient(memory_broker.port) as sub, RawClient(memory_broker.port) as pub:
        _exchange(sub, pub, "/queue/large")
    with RawClient(memory_broker.port) as sub, RawClient(memory_broker.port) as pub:
        _exchange(sub, pub, "/topic/large", subscribers=2)  # one tail, the body by reference twice


def test_large_bodies_over_tls(tmp_path, make_memory_broker: Callable[..., BrokerThread]) -> None:
    ca = trustme.CA()
    cert, key = write_cert(ca, tmp_path)
    broker = make_memory_broker(settings=ServerSettings(port=0, tls_port=0, tls_cert=cert, tls_key=key))
    port = listener_port(broker.listeners[1])
    with tls_client(port, client_context(ca)) as sub, tls_client(port, client_context(ca)) as pub:
        _exchange(sub, pub, "/queue/large")


def test_large_bodies_over_websocket(make_memory_broker: Callable[..., BrokerThread]) -> None:
    broker = make_memory_broker(settings=ServerSettings(port=0, ws_port=0))
    with WSClient(listener_port(broker.listeners[1])) as sub, RawClient(broker.port) as pub:
        _exchange(sub, pub, "/queue/large")
