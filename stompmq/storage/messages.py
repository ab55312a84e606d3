"""The message values the engine and every store share: ``StoredMessage`` (one message of a
queue) and ``StreamMessage`` (one entry of a stream), re-exported by ``storage.base``.

A module of their own, importing nothing, so the compiled build (setup.py, mypyc) can compile
them with the engine: the engine makes one per SEND and reads its fields on every step, and a
native class makes those plain struct reads instead of the interpreter's attribute protocol
(docs/decisions/compiled-engine.md).  The stores, interpreted, use them as before.
"""

from __future__ import annotations

from typing import Any


class StoredMessage:
    """One message of one queue, as the broker and the store both see it.

    ``headers`` holds the user headers of the SEND (never the broker's own
    MESSAGE headers) and is never mutated after creation; ``body`` is bytes.
    Order inside a queue is ``(priority desc, seq asc)``; ``seq`` is unique over
    the whole store and strictly increasing.
    """

    __slots__ = (
        "seq",
        "queue",
        "priority",
        "headers",
        "body",
        "timestamp",
        "ack_timeout",
        "redeliveries",
        "delivered",
        "held",
        "space",
        "expires",
        "deliver_at",
        "watchers",
    )

    def __init__(
        self,
        seq: int,
        queue: str,
        priority: int,
        headers: dict[str, str],
        body: bytes,
        timestamp: int,
        ack_timeout: float | None = None,
        redeliveries: int = 0,
        delivered: bool = False,
        expires: int | None = None,
        deliver_at: int | None = None,
        space: str = "",
    ) -> None:
        self.seq = seq
        self.queue = queue
        self.priority = priority
        self.headers = headers
        self.body = body
        self.timestamp = timestamp  # milliseconds since the epoch, set by the broker
        self.ack_timeout = ack_timeout  # seconds; None = use the subscription's default
        self.redeliveries = redeliveries
        #: Handed to a subscriber and not yet acked: stored (``messages.delivered``), so a
        #: restart or another broker makes the message ready again, counting a redelivery.
        self.delivered = delivered
        #: In this broker's memory (its ready window or in flight): on a store several brokers
        #: share, the row's claim (``messages.owner`` is this broker while this holds, NULL
        #: after); a store of one broker stores nothing of it.  A page read of a shared store
        #: sets it on the rows it claimed.
        self.held = False
        # The store-key prefix of the message's vhost (``vhost_space``): "" in the default vhost.
        self.space = space
        #: Epoch milliseconds after which the message is never delivered (None: never expires).
        self.expires = expires
        #: Epoch milliseconds before which it is not ready (None: ready at once).  A delayed
        #: message is stored apart (``delayed_messages``) and published anew when due.
        self.deliver_at = deliver_at
        #: Which observers of a watched engine follow the message's steps, decided at its first
        #: step (broker/events.py); None: not decided, as for every message of an engine nobody
        #: watches.  Memory only, like ``held``: a message read back from the store is decided anew.
        self.watchers: Any = None

    @property
    def order_key(self) -> tuple[int, int]:
        """Sort key within a queue: higher priority first, then older first."""
        return (-self.priority, self.seq)

    def __repr__(self) -> str:
        return f"StoredMessage(seq={self.seq}, queue={self.queue!r}, priority={self.priority})"


def by_order(msg: StoredMessage) -> tuple[int, int]:
    """``msg.order_key`` as a sort key (``sorted(..., key=by_order)``): a queue's order."""
    return msg.order_key


class StreamMessage(StoredMessage):
    """One entry of a stream (``/stream/NAME``): a message at a fixed offset, never updated.

    ``queue`` holds the stream's name and ``seq`` the broker-wide sequence number (its
    ``message-id``).  ``bytes_before`` is the stream's size in body bytes before this
    entry, so the size of any offset range is a difference of two point lookups.
    """

    __slots__ = ("offset", "bytes_before", "encoded", "producer")

    def __init__(
        self,
        seq: int,
        stream: str,
        priority: int,
        headers: dict[str, str],
        body: bytes,
        timestamp: int,
        offset: int,
        bytes_before: int,
        producer: tuple[str, int] | None = None,
    ) -> None:
        super().__init__(seq, stream, priority, headers, body, timestamp)
        self.offset = offset
        self.bytes_before = bytes_before
        #: An idempotent producer's append: (producer id, seq), written to ``stream_producers`` in
        #: the entry's commit, not with the entry; None for a plain append or an entry read back.
        self.producer = producer
        #: Broker-private, never stored: (protocol version, the MESSAGE's encoded tail).
        self.encoded: tuple[str, bytes] | None = None
