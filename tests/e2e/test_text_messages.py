"""ActiveMQ's text/bytes convention through stompmq, over raw sockets: a SEND without
``content-length`` (a TextMessage to ActiveMQ) is delivered without it, a SEND with it (a
BytesMessage) with it, kept in the store across a restart (docs/decisions/text-messages.md)."""

from __future__ import annotations

import pytest

from ..support.broker_thread import restarting
from ..support.rawclient import RawClient, RawFrame


def received(port: int, destination: str, count: int) -> list[RawFrame]:
    with RawClient(port) as c:
        c.connect()
        c.frame("SUBSCRIBE", {"id": "s", "destination": destination, "ack": "auto"})
        return [c.recv() for _ in range(count)]


def send_both(c: RawClient, destination: str) -> None:
    c.frame("SEND", {"destination": destination}, b"text")
    c.frame("SEND", {"destination": destination, "content-length": "5"}, b"bytes")
    c.frame("SEND", {"destination": destination, "amq-msg-type": "text", "content-length": "4"}, b"said")
    c.frame("SEND", {"destination": destination, "amq-msg-type": "text", "content-length": "3", "receipt": "r"},
            b"n\x00l")
    assert c.recv().command == "RECEIPT"


def lengths(frames: list[RawFrame]) -> list[tuple[bytes, str | None, str | None]]:
    return [(f.body, f.headers.get("content-length"), f.headers.get("amq-msg-type")) for f in frames]


EXPECTED = [
    (b"text", None, "text"),  # no content-length in, none out: a TextMessage to an ActiveMQ client
    (b"bytes", "5", None),  # a BytesMessage stays one
    (b"said", None, "text"),  # ActiveMQ's own header says text: so it goes
    (b"n\x00l", "3", "text"),  # a NUL in the body: the length must stay, whatever the type says
]


@pytest.mark.parametrize("store_kind", ["sqlite"])
def test_whether_a_send_had_content_length_survives_a_restart(store_kind, tmp_path):
    with restarting(store_kind, tmp_path) as start:
        with RawClient(start().port) as c:
            c.connect()
            send_both(c, "/queue/kinds")
        port = start().port
        assert lengths(received(port, "/queue/kinds", 4)) == EXPECTED


def test_a_topic_message_keeps_it_too(memory_broker):
    with RawClient(memory_broker.port) as sub, RawClient(memory_broker.port) as pub:
        sub.connect()
        sub.frame("SUBSCRIBE", {"id": "t", "destination": "/topic/kinds", "receipt": "sub"})
        assert sub.recv().command == "RECEIPT"
        pub.connect()
        send_both(pub, "/topic/kinds")
        assert lengths([sub.recv() for _ in range(4)]) == EXPECTED
