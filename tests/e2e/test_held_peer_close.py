"""A reader held by an alarm still notices its peer closing, end to end (server/connection.py).

While a resource alarm holds a producer at its SEND, its reader does not read its socket, so
the EOF of a client that gave up waiting sat unread: the session stayed, and with it its open
transaction and its unacked messages (which an alarm on memory may be waiting for).  Now the
held reader looks at its socket every ``PEER_CHECK_SECONDS``: the session closes, its unacked
message goes to another consumer (redelivered), its transaction is dropped.  So it does under
TLS and WebSocket (on TCP and on TLS), whether the peer just closes its socket or first says
so in the layer's own terms (a TLS close_notify, a WebSocket Close), which the broker must
read through the layers to tell from frames (server/transport.py: ``Transport._read_rest``).
A producer that closed with a frame still unread keeps it: stored once the hold ends.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trustme
from wsproto.events import CloseConnection

from stompmq.server.listeners import listener_port
from stompmq.server.settings import ServerSettings
from stompmq.server.transport import PEER_CHECK_SECONDS

from ..support.broker_process import free_port
from ..support.broker_thread import BrokerThread
from ..support.stompclient import Client
from ..support.stores import make_store_factory
from ..support.waiting import holds_for, wait_sessions, wait_until
from ..support.wsclient import WSStompClient
from .test_http import Api
from .test_tls import client_context, write_cert

#: (transport, how the peer closes): "close" shuts the socket; "layer" first sends the layer's close.
CASES = [("tcp", "close"), ("tls", "close"), ("tls", "layer"), ("ws", "close"), ("ws", "layer"),
         ("wss", "close"), ("wss", "layer")]


def open_client(transport: str, port: int, context: ssl.SSLContext) -> Client:
    """A logged-in client of the broker's ``transport`` listener on ``port``."""
    if transport in ("ws", "wss"):
        return WSStompClient(port, context=context if transport == "wss" else None)
    if transport == "tcp":
        return Client(port)
    client = Client(port, connect=False)
    client.sock = context.wrap_socket(client.sock, server_hostname="localhost")
    client.connected = client.connect()
    return client


def close_layer(client: Client) -> None:
    """Say goodbye in the layer's terms, without waiting for an answer the held broker won't send."""
    if isinstance(client, WSStompClient):
        client.sock.sendall(client.ws.send(CloseConnection(code=1000)))
        return
    assert isinstance(client.sock, ssl.SSLSocket)
    client.sock.setblocking(False)
    try:
        client.sock.unwrap()  # sends close_notify, then would wait for the broker's
    except ssl.SSLWantReadError:
        pass


@contextmanager
def held_producer(tmp_path: Path, transport: str) -> Iterator[tuple[BrokerThread, Api, Client]]:
    """A broker with a ``transport`` listener, and its client holding message "one" unacked and
    transaction "tx" open, held by a memory alarm at its SEND of "blocked"."""
    port = free_port()
    api = Api(port)
    ca = trustme.CA()
    cert, key = write_cert(ca, tmp_path)
    extra = {"tcp": {}, "tls": {"tls_port": 0}, "ws": {"ws_port": 0}, "wss": {"wss_port": 0}}[transport]
    settings = ServerSettings(port=0, http_port=port, tls_cert=cert, tls_key=key, **extra)
    with BrokerThread(make_store_factory("sqlite", tmp_path), settings=settings).start() as broker:
        wait_until(lambda: api.call("GET", "/readyz")[0] == 200, "the API answers")
        with Client(broker.port) as producer:
            producer.send_to("/queue/held", "one")
        held = open_client(transport, listener_port(broker.listeners[-1]), client_context(ca))
        held.subscribe("/queue/held", "s", ack="client-individual")
        assert held.message().body == b"one"  # unacked
        held.frame("BEGIN", {"transaction": "tx"})
        held.send_to("/queue/held", "in tx", receipt=False, headers={"transaction": "tx"})
        held.sync()
        assert api.call("PUT", "/api/alarms", {"memory_high_watermark": 1000})[0] == 200
        held.send_to("/queue/held", "blocked", receipt=False)
        wait_until(lambda: [api.get(f"/api/connections/{c['id']}")["held_by"]
                            for c in api.get("/api/connections")["items"]] == ["alarm"],
                   "the producer is held by the alarm")
        yield broker, api, held


@pytest.mark.parametrize("transport, closing", CASES)
def test_a_peer_that_closes_while_held_by_an_alarm_is_released(tmp_path: Path, transport: str,
                                                                closing: str) -> None:
    with held_producer(tmp_path, transport) as (broker, api, held):
        if closing == "layer":
            close_layer(held)
        held.close()  # gives up: FIN, with nothing unread after the SEND that waits
        closed_at = time.monotonic()
        wait_sessions(broker, 0)
        released_in = time.monotonic() - closed_at
        assert api.call("PUT", "/api/alarms", {"memory_high_watermark": None})[0] == 200
        with Client(broker.port) as consumer:
            consumer.subscribe("/queue/held", "c")
            again = consumer.message()
            assert again.body == b"one" and again.headers.get("redelivered") == "true"
            consumer.expect_nothing(0.3)  # neither the transaction's SEND nor the held one
        assert released_in < 3.0


@pytest.mark.parametrize("transport, closing", CASES)
def test_a_held_peer_that_closes_with_a_frame_unread_keeps_it(tmp_path: Path, transport: str,
                                                              closing: str) -> None:
    with held_producer(tmp_path, transport) as (broker, api, held):
        held.send_to("/queue/held", "after", receipt=False)  # unread: the reader is held
        if closing == "layer":
            close_layer(held)
        held.close()
        holds_for(lambda: broker.call(lambda: len(broker.broker.sessions)) == 1, "the held session stays",
                  3 * PEER_CHECK_SECONDS)
        assert api.call("PUT", "/api/alarms", {"memory_high_watermark": None})[0] == 200
        wait_sessions(broker, 0)  # its frames read and handled, then its end of stream
        with Client(broker.port) as consumer:
            consumer.subscribe("/queue/held", "c")
            bodies = {consumer.message().body for _ in range(3)}
            assert bodies == {b"one", b"blocked", b"after"}
            consumer.expect_nothing(0.3)  # not the transaction's SEND
