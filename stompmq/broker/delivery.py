"""Encoding of MESSAGE frames, split so fan-out encodes a message's shared part once.

A MESSAGE is ``prefix + tail``: the prefix holds what differs per delivery
(subscription, ack id, redelivery state), the tail holds what every delivery of
the same message shares (user headers, priority, timestamp, content-length,
body).  Topic fan-out builds the tail once per protocol version and reuses it
for every subscriber; a queue delivery builds it once.  A stream delivery is one
format of a head built per subscription (``stream_head``) and the entry's tail,
kept on the entry (``stream_tail``): a stream's entries never change.

A large body (``LARGE_BODY``) is not copied into its frame: the tail ends at the
blank line, and ``write_frame`` queues the body by reference and its NUL after
the frame (the server sends them with one ``sendmsg``).
"""

from __future__ import annotations

from ..protocol.encoder import (
    LARGE_BODY,
    encode_message,
    encode_message_tail,
    encode_message_tail_headers,
    encode_text_tail_headers,
    escape,
)
from ..storage.base import StoredMessage, StreamMessage
from .session import Outbox

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
        "JMSXDeliveryCount",
        "timestamp",
        "receipt",
        "transaction",
        "x-stream-offset",
        "expires",
    }
)


#: ActiveMQ's header naming a message's JMS type, ``text`` or ``bytes``: a text message's MESSAGE
#: carries no ``content-length`` (ActiveMQ's and Artemis' convention), so a consumer can tell.
MESSAGE_TYPE, TEXT = "amq-msg-type", "text"


def message_tail(msg: StoredMessage, version: str) -> bytes:
    """The part of a MESSAGE frame shared by all its deliveries for ``version`` (a large body's
    without the body: ``write_frame``)."""
    return _tail(msg.priority, msg.timestamp, msg.expires, msg.headers, msg.body, version)


def _tail(priority: int, timestamp: int, expires: int | None, headers: dict[str, str], body: bytes,
          version: str) -> bytes:
    if headers.get(MESSAGE_TYPE) == TEXT and b"\0" not in body:  # (a NUL in its body needs content-length)
        head = encode_text_tail_headers(priority, timestamp, expires, headers, version)
        return head if len(body) >= LARGE_BODY else b"%s%s\x00" % (head, body)
    if len(body) >= LARGE_BODY:
        return encode_message_tail_headers(priority, timestamp, expires, headers, len(body), version)
    return encode_message_tail(priority, timestamp, expires, headers, body, version)


def write_frame(outbox: Outbox, frame: bytes, body: bytes) -> None:
    """Queue a MESSAGE built on ``message_tail`` or ``stream_tail`` and its ``body``: a large
    one goes after the frame by reference."""
    if len(body) >= LARGE_BODY:
        outbox.write_body(frame, body)
    else:
        outbox.write(frame)


def stream_tail(msg: StreamMessage, version: str, keep: bool) -> bytes:
    """The part of a stream entry's MESSAGE from ``x-stream-offset`` on; with ``keep`` it is
    kept on the entry for the next subscriber of the same version (an entry never changes, and
    the tail of a stream is read by every subscriber that keeps up)."""
    cached = msg.encoded
    if cached is not None and cached[0] == version:
        return cached[1]
    tail = b"x-stream-offset:%d\n%s" % (msg.offset, _tail(msg.priority, msg.timestamp, None, msg.headers, msg.body,
                                                            version))
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
    return encode_message(subscription_id, msg.seq, destination, ack_id, msg.redeliveries, version, tail)
