"""Queue settings: a queue's default TTL, its bounds, what happens past them, its idle expiry.

A queue is implicit in STOMP; ``/control/declare/queue/NAME`` (or a ``[[queues]]`` entry of
the definitions file) gives it settings, stored with the queue so a restart keeps it, and
policies (policy_match.py) give them by pattern to every queue they match:

* ``message-ttl``: milliseconds a message may wait before it expires (a SEND's own ``ttl`` or
  ``expires`` wins when it comes sooner);
* ``max-length`` / ``max-length-bytes``: messages (ready and unacked) and their body bytes;
* ``overflow``: ``drop-head`` (the oldest ready message goes) or ``reject-publish`` (the SEND
  is refused with an ERROR and nothing is stored);
* ``dead-letter``: expired and dropped messages go to the dead-letter queue
  (``dead-letter-reason`` ``expired`` or ``maxlen``) instead of being discarded;
* ``expires``: milliseconds a queue may go unused (no consumer) before it is deleted, its
  messages with it; with ``expires-when-empty`` only a queue without messages is;
* ``delivery-limit``: redeliveries before a message is dead-lettered (``--max-redeliveries``
  for this queue);
* ``ack-timeout``: seconds before an unacked delivery is redelivered (``--ack-timeout`` for this
  queue; a SEND's or SUBSCRIBE's own header wins);
* ``max-priority``: a message's priority is at most this (0-9);
* ``x-single-active-consumer`` (RabbitMQ's queue argument): every subscription of the queue is
  a single active consumer, as if its SUBSCRIBE said so.

``--max-queue-bytes`` gives every queue that declares no byte bound ``max-length-bytes`` with
``reject-publish``: a runaway producer is refused before it fills the disk.

``QueueSize`` is a bounded queue's length and bytes as this broker counts them: every message
stored (+1) and deleted (-1), corrected once by the store's count (``Store.queue_size``, whose
snapshot says which writes the count saw).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import ClientError
from .send_headers import MAX_MS, flag, non_negative, seconds

#: Overflow behaviours (RabbitMQ's names).
DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
OVERFLOWS = (DROP_HEAD, REJECT_PUBLISH)
#: The declaration headers (and the keys of a definitions file's queue entry).
MESSAGE_TTL, MAX_LENGTH, MAX_LENGTH_BYTES, OVERFLOW, DEAD_LETTER, SINGLE_ACTIVE = (
    "message-ttl", "max-length", "max-length-bytes", "overflow", "dead-letter", "x-single-active-consumer",
)
EXPIRES, EXPIRES_WHEN_EMPTY, DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY = (
    "expires", "expires-when-empty", "delivery-limit", "ack-timeout", "max-priority",
)
SETTING_KEYS = (MESSAGE_TTL, MAX_LENGTH, MAX_LENGTH_BYTES, OVERFLOW, DEAD_LETTER, SINGLE_ACTIVE, EXPIRES,
                EXPIRES_WHEN_EMPTY, DELIVERY_LIMIT, ACK_TIMEOUT, MAX_PRIORITY)
#: The highest message priority.
TOP_PRIORITY = 9


@dataclass(frozen=True, slots=True)
class QueueSettings:
    message_ttl: int | None = None  # milliseconds
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = DROP_HEAD
    dead_letter: bool = False
    single_active: bool = False
    expires: int | None = None  # milliseconds unused before the queue is deleted
    expires_when_empty: bool = False
    delivery_limit: int | None = None
    ack_timeout: float | None = None  # seconds
    max_priority: int | None = None

    @classmethod
    def parse(cls, headers: dict[str, str]) -> QueueSettings:
        """The settings the declaration headers describe; ClientError naming a bad one."""
        overflow = headers.get(OVERFLOW, DROP_HEAD)
        if overflow not in OVERFLOWS:
            raise ClientError(f"{OVERFLOW} must be {' or '.join(OVERFLOWS)}, not {overflow!r}")
        return cls(
            non_negative(headers, MESSAGE_TTL, " number of milliseconds", MAX_MS),
            non_negative(headers, MAX_LENGTH),
            non_negative(headers, MAX_LENGTH_BYTES),
            overflow,
            flag(headers, DEAD_LETTER, False),
            flag(headers, SINGLE_ACTIVE, False),
            non_negative(headers, EXPIRES, " number of milliseconds", MAX_MS),
            flag(headers, EXPIRES_WHEN_EMPTY, False),
            non_negative(headers, DELIVERY_LIMIT),
            seconds(headers, ACK_TIMEOUT),
            non_negative(headers, MAX_PRIORITY, "", TOP_PRIORITY),
        )

    def options(self) -> dict[str, str]:
        """The settings as stored (and as a declaration would give them again): those that differ
        from the defaults, so a policy may still give the others."""
        options = {OVERFLOW: self.overflow} if self.overflow != DROP_HEAD else {}
        for name, on in ((DEAD_LETTER, self.dead_letter), (SINGLE_ACTIVE, self.single_active),
                         (EXPIRES_WHEN_EMPTY, self.expires_when_empty)):
            if on:
                options[name] = "true"
        for name, value in ((MESSAGE_TTL, self.message_ttl), (MAX_LENGTH, self.max_length),
                            (MAX_LENGTH_BYTES, self.max_length_bytes), (EXPIRES, self.expires),
                            (DELIVERY_LIMIT, self.delivery_limit), (ACK_TIMEOUT, self.ack_timeout),
                            (MAX_PRIORITY, self.max_priority)):
            if value is not None:
                options[name] = str(int(value) if isinstance(value, float) and value.is_integer() else value)
        return options

    @property
    def bounded(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None

    def over(self, length: int, size: int) -> bool:
        """Would a queue of ``length`` messages and ``size`` body bytes break a bound?"""
        return (self.max_length is not None and length > self.max_length) or (
            self.max_length_bytes is not None and size > self.max_length_bytes
        )

    def with_default_bytes(self, max_bytes: int | None) -> QueueSettings:
        """These settings under ``--max-queue-bytes``: a queue with no byte bound gets that one."""
        if max_bytes is None or self.max_length_bytes is not None:
            return self
        overflow = self.overflow if self.max_length is not None else REJECT_PUBLISH
        return replace(self, max_length_bytes=max_bytes, overflow=overflow)


class QueueSize:
    """A bounded queue's messages and body bytes, as this broker counts them."""

    __slots__ = ("length", "bytes", "dropping")

    def __init__(self) -> None:
        self.length = 0
        self.bytes = 0
        self.dropping = False  # a drop-head episode is under way (logged at its start)


class QueueFull(ClientError):
    """A SEND to a full ``reject-publish`` queue: an ERROR, and nothing was stored."""
