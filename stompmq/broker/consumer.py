"""What a queue needs of a subscriber: its ack mode, whether it has room, what it holds unacked.

``Queue`` (queue.py) is generic over its subscribers and asks of them only this ``Consumer``
protocol, so it knows nothing of sessions: session.py's ``Subscription`` is the one kind of
consumer there is, and session.py may refer to ``Queue`` without the two importing each other.
"""

from __future__ import annotations

from collections.abc import Sized
from enum import Enum
from typing import Protocol

from .selectors import Selector


class AckMode(Enum):
    AUTO = "auto"
    CLIENT = "client"  # cumulative
    CLIENT_INDIVIDUAL = "client-individual"


class Consumer(Protocol):
    """A subscriber as its queue's round-robin sees it."""

    #: Set by the queue: the subscriber sits in its round-robin of subscribers with room.
    in_ready: bool

    @property
    def ack_mode(self) -> AckMode: ...

    @property
    def active(self) -> bool:
        """False once it unsubscribed (the queue drops it lazily)."""

    @property
    def prefetch(self) -> int:
        """Deliveries it may hold unacknowledged (a client-ack one)."""

    @property
    def unacked(self) -> Sized:
        """Its deliveries not yet acknowledged (a queue compares how many)."""

    @property
    def selector(self) -> Selector | None:
        """Its JMS message selector (None: every message); a queue sifts while any has one."""

    @property
    def priority(self) -> int:
        """Its consumer priority (0 unless set): higher ones get messages first while they have room."""

    def has_room(self) -> bool:
        """May a queue message be delivered to it now?"""

    def spare(self) -> int:
        """Bytes its socket's buffer may still take in queue deliveries (what bounds an auto-ack one)."""
