"""Encoding of MESSAGE frames, split so fan-out encodes a message's shared part once.

A MESSAGE is ``prefix + tail``: the prefix holds what differs per delivery
(subscription, ack id, redelivery state), the tail holds what every delivery of
the same message shares (user headers, priority, timestamp, content-length,
body).  Topic fan-out builds the tail once per protocol version and reuses it
for every subscriber; a queue delivery builds it once.
"""

from __future__ import annotations

from ..protocol.encoder import encode_message, encode_message_tail
from ..storage.base import StoredMessage

#: Headers the broker sets itself on MESSAGE frames; a SEND cannot override them.
BROKER_HEADERS = frozenset(
    {
        "destination",
        "message-id",
        "subscription",
        "ack",
        "content-length",
        "priority",
        "redelivered",
        "redelivery-count",
        "timestamp",
        "receipt",
        "transaction",
        "x-stream-offset",
        "expires",
    }
)


def message_tail(msg: StoredMessage, version: str) -> bytes:
    """The part of a MESSAGE frame shared by all its deliveries for ``version``."""
    return encode_message_tail(msg.priority, msg.timestamp, msg.expires, msg.headers, msg.body, version)


def message_frame(
    msg: StoredMessage,
    destination: str,
    subscription_id: str,
    ack_id: str | None,
    version: str,
    tail: bytes,
) -> bytes:
    """A complete MESSAGE frame for one delivery."""
    return encode_message(subscription_id, msg.seq, destination, ack_id, msg.redeliveries, version, tail)
