"""A client's subscription: its ack mode, its prefetch window and its unacked deliveries."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING

from ..storage.base import StoredMessage

if TYPE_CHECKING:
    from .queue import Queue
    from .session import Session


#: Shared read-only stand-in for a subscription that has no unacked delivery yet: a million
#: auto-ack subscriptions should not each carry an empty dict.
NO_DELIVERIES: Mapping[str, StoredMessage] = MappingProxyType({})


class AckMode(Enum):
    AUTO = "auto"
    CLIENT = "client"  # cumulative
    CLIENT_INDIVIDUAL = "client-individual"


class Subscription:
    """One SUBSCRIBE of one session.

    ``unacked`` maps ack id -> message in delivery order, which is what a
    cumulative (``client``) ACK walks.  ``in_ready`` says whether the
    subscription currently sits in its queue's round-robin of subscriptions
    with room; ``active`` turns False at UNSUBSCRIBE so the queue can drop it
    lazily instead of searching for it.
    """

    __slots__ = (
        "id",
        "session",
        "destination",
        "queue",
        "ack_mode",
        "prefetch",
        "ack_timeout",
        "unacked",
        "in_ready",
        "active",
    )

    def __init__(
        self,
        sub_id: str,
        session: Session,
        destination: str,
        ack_mode: AckMode,
        prefetch: int,
        ack_timeout: float | None,
        queue: Queue | None = None,
    ) -> None:
        self.id = sub_id
        self.session = session
        self.destination = destination
        self.queue = queue
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self.ack_timeout = ack_timeout
        self.unacked: dict[str, StoredMessage] = NO_DELIVERIES  # type: ignore[assignment]
        self.in_ready = False
        self.active = True

    def has_room(self) -> bool:
        """May a queue message be delivered now?  Auto-ack is bounded by the socket only."""
        if not self.session.outbox.has_room():
            return False
        return self.ack_mode is AckMode.AUTO or len(self.unacked) < self.prefetch

    def __repr__(self) -> str:
        return f"Subscription({self.session.id}/{self.id} -> {self.destination})"
