"""Broker tuning that the command line and config file can change."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from .limits import HeldBytes, LimitHits

#: Random bytes in a reply queue's name: 128 bits, as in RabbitMQ's ``amq.gen-`` names.
REPLY_TOKEN_BYTES = 16


def random_token() -> str:
    """An unguessable name part: ``REPLY_TOKEN_BYTES`` from ``secrets`` in URL-safe base64
    (22 characters of ``A-Za-z0-9-_``: no ``.`` or ``/``, which the names around it use)."""
    return secrets.token_urlsafe(REPLY_TOKEN_BYTES)


@dataclass(slots=True)
class BrokerConfig:
    #: Prefetch of a client-ack subscription that names none.
    default_prefetch: int = 100
    #: Upper bound on any prefetch a client asks for.
    max_prefetch: int = 10_000
    #: Ready messages a durable queue with subscribers keeps in memory; the rest is paged in.
    #: 10,000 rides out a producer that briefly outruns its consumer without touching the disk
    #: (2,000 spilled and re-read under the bench.py queue run: 39k vs 93k msg/s, and a larger
    #: RSS from the SQLite cache); it costs up to ~4.5 MB per backlogged active queue at 100 B.
    window: int = 10_000
    #: ...and at most this many bytes of them (bodies plus a per-message overhead): 10,000
    #: messages of 64 KiB would be 640 MB for one queue.  Whichever bound is reached first wins.
    window_bytes: int = 16 * 1024 * 1024
    #: Seconds a queue whose consumers fall behind may hold its producers back in one stretch
    #: before its backlog may spill to the store (pacing.py); 0 = never hold them back.
    queue_pace_timeout: float = 1.0
    #: Seconds a receipted SEND waits for an unavailable store before it may be answered ERROR
    #: (its message withdrawn); 0 = at the first failed commit (receipts.py).
    store_timeout: float = 30.0
    #: Seconds before an unacked delivery returns to its queue; 0 = never.
    ack_timeout: float = 0.0
    #: Redeliveries before a message goes to the dead-letter queue; None = unlimited.
    max_redeliveries: int | None = None
    #: Dead-letter queue name prefix: a message of /queue/X dies into /queue/<prefix>X.
    dlq_prefix: str = "DLQ."
    #: NACK with requeue:false dead-letters the message instead of discarding it.
    dead_letter_rejected: bool = False
    #: What a topic subscriber whose connection is over its output limit costs: block (the
    #: publisher waits), drop (it misses the message) or disconnect (see broker/overflow.py).
    topic_overflow: str = "block"
    #: Default stream retention: seconds an entry is kept (0 = no limit), bytes a stream keeps
    #: (0 = no limit); /control/declare/stream/NAME overrides them per stream.
    stream_max_age: float = 0.0
    stream_max_bytes: int = 0
    #: Entries per stream segment, the unit retention drops: small enough that a stream overshoots
    #: its limits by little, large enough that marks (one per segment) cost nothing.
    stream_segment: int = 10_000
    #: Body bytes any queue may hold when its declaration sets no max-length-bytes; past it a
    #: SEND is refused (reject-publish).  None: no default bound.
    max_queue_bytes: int | None = None
    #: Subscriptions one connection may hold at once (a limit against abuse).
    max_subscriptions: int = 1000
    #: Limits against one client holding the broker's memory (limits.py, docs/security.md):
    #: frames one transaction may hold; bytes one login may hold in open transactions (over all
    #: its connections and vhosts); temporary queues per connection; queues in use per vhost.
    max_transaction_frames: int = 10_000
    max_transaction_bytes: int = 32 * 1024 * 1024
    max_temp_queues: int = 100
    max_queues: int = 20_000
    #: Idempotent producers (x-producer-id) one stream remembers, and the seconds after which
    #: one not seen may be forgotten to make room for a new one.
    max_stream_producers: int = 10_000
    stream_producer_expiry: float = 7 * 24 * 3600.0
    #: Shared by every engine built with this config: the transactions' ledger and the hits.
    held_bytes: HeldBytes = field(default_factory=HeldBytes)
    limit_hits: LimitHits = field(default_factory=LimitHits)
    #: The broker sets ``user-id`` and ``JMSXUserID`` of every SEND to the sender's login
    #: (send_headers.py); off, a SEND may carry only its own login there.
    stamp_user_id: bool = False
    #: ActiveMQ's virtual topics: a consumer of ``/queue/Consumer.G.<prefix>X`` binds its queue to
    #: the topic ``<prefix>X`` (virtual_topics.py).  Empty: off.
    virtual_topic_prefix: str = "VirtualTopic."
    #: TOML or JSON file of exchanges, queues and bindings applied at start.
    definitions: str | None = None
    #: Where the unguessable part of reply queue names comes from (temp_queues.py); the
    #: engine reads no randomness of its own, so a test can pass a deterministic source.
    reply_token: Callable[[], str] = random_token
