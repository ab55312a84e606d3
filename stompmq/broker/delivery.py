"""Encoding of MESSAGE frames, split so fan-out encodes a message's shared part once.

A MESSAGE is ``prefix + tail``: the prefix holds what differs per delivery
(subscription, ack id, redelivery state), the tail holds what every delivery of
the same message shares (user headers, priority, timestamp, content-length,
body).  Topic fan-out builds the tail once per protocol version and reuses it
for every subscriber; a queue delivery builds it once.  A stream delivery is one
format of a head built per subscription (``stream_head``) and the entry's tail,
kept on the entry (``stream_tail``): a stream's entries never change.
"""

from __future__ import annotations

from ..protocol import LocalProtocolError, encode_header_block, escape
from ..storage.base import StoredMessage, StreamMessage

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


def _user_header_block(headers: dict[str, str], version: str) -> bytes:
    """Encode a message's user headers for ``version``.

    STOMP 1.0 has no escaping, so a header that a 1.1/1.2 sender wrote with an
    escaped newline (or a colon in its name) cannot be expressed to a 1.0
    subscriber: such headers are left out of that subscriber's MESSAGE rather
    than failing the delivery (and with it the SEND of an unrelated producer).
    """
    if not headers:
        return b""
    try:
        return encode_header_block(headers.items(), version)
    except LocalProtocolError:
        expressible = [(k, v) for k, v in headers.items() if not ("\n" in k or ":" in k or "\n" in v)]
        return encode_header_block(expressible, version)


def message_tail(msg: StoredMessage, version: str) -> bytes:
    """The part of a MESSAGE frame shared by all its deliveries for ``version`` (``expires``, the
    effective expiry in epoch ms as JMS has it, only on a message that can expire)."""
    if msg.expires is not None:
        return b"priority:%d\ntimestamp:%d\nexpires:%d\ncontent-length:%d\n%s\n%s\x00" % (
            msg.priority,
            msg.timestamp,
            msg.expires,
            len(msg.body),
            _user_header_block(msg.headers, version),
            msg.body,
        )
    return b"priority:%d\ntimestamp:%d\ncontent-length:%d\n%s\n%s\x00" % (
        msg.priority,
        msg.timestamp,
        len(msg.body),
        _user_header_block(msg.headers, version),
        msg.body,
    )


def stream_tail(msg: StreamMessage, version: str, keep: bool) -> bytes:
    """The part of a stream entry's MESSAGE from ``x-stream-offset`` on, in one pass; with
    ``keep`` it is kept on the entry for the next subscriber of the same version (an entry
    never changes, and the tail of a stream is read by every subscriber that keeps up)."""
    cached = msg.encoded
    if cached is not None and cached[0] == version:
        return cached[1]
    tail = b"x-stream-offset:%d\npriority:%d\ntimestamp:%d\ncontent-length:%d\n%s\n%s\x00" % (
        msg.offset, msg.priority, msg.timestamp, len(msg.body), _user_header_block(msg.headers, version), msg.body,
    )
    if keep:
        msg.encoded = (version, tail)
    return tail


def stream_head(subscription_id: str, destination: str, version: str) -> bytes:
    """A stream subscription's MESSAGE up to the tail, as a format of (message-id, ack line,
    ``stream_tail``): built once per subscription, so a delivery is one ``%``."""

    def field(value: str) -> bytes:
        return escape(value, version).encode().replace(b"%", b"%%")

    return (
        b"MESSAGE\nsubscription:" + field(subscription_id) + b"\nmessage-id:%d\ndestination:" + field(destination)
        + b"\n%sredelivered:false\nredelivery-count:0\n%s"
    )


def message_frame(
    msg: StoredMessage,
    destination: str,
    subscription_id: str,
    ack_id: str | None,
    version: str,
    tail: bytes,
) -> bytes:
    """A complete MESSAGE frame for one delivery."""
    if msg.redeliveries:
        redelivery = b"redelivered:true\nredelivery-count:%d\n" % msg.redeliveries
    else:
        redelivery = b"redelivered:false\nredelivery-count:0\n"
    ack = b"ack:%s\n" % ack_id.encode() if ack_id is not None else b""
    return b"MESSAGE\nsubscription:%s\nmessage-id:%d\ndestination:%s\n%s%s%s" % (
        escape(subscription_id, version).encode(),
        msg.seq,
        escape(destination, version).encode(),
        ack,
        redelivery,
        tail,
    )
