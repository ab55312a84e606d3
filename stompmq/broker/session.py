"""Per-connection broker state: subscriptions, deliveries awaiting ACK, transactions.

The server creates one ``Session`` per connection and gives it an ``Outbox``
(the connection's bounded send buffer).  The broker writes encoded frames into
the outbox synchronously and asks it whether there is room before each queue
delivery; that is the whole of back-pressure from the broker's point of view.

RECEIPTs may have to wait for a store commit.  To keep a connection's receipts
in the order of its frames, a receipt is queued behind any receipt still
waiting, together with the store ticket it needs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..protocol import Frame

if TYPE_CHECKING:
    from .subscription import Subscription


class Outbox(Protocol):
    """What the broker needs from a connection's send side."""

    def write(self, data: bytes) -> None:
        """Queue bytes for the socket; never blocks."""

    def has_room(self) -> bool:
        """True while queue deliveries may be added (below the soft limit)."""

    def can_take_transient(self) -> bool:
        """True while a topic message may be added (below the hard limit)."""


class Session:
    """One connected client as the broker sees it."""

    __slots__ = (
        "id",
        "version",
        "outbox",
        "subscriptions",
        "deliveries",
        "transactions",
        "pending_receipts",
        "next_ack",
        "closed",
        "login",
        "fail",
    )

    def __init__(self, session_id: str, version: str, outbox: Outbox, login: str | None = None) -> None:
        self.id = session_id
        self.version = version
        self.outbox = outbox
        self.login = login
        self.subscriptions: dict[str, Subscription] = {}
        # ack id -> subscription holding that unacked delivery
        self.deliveries: dict[str, Subscription] = {}
        self.transactions: dict[str, list[Frame]] = {}
        # [ticket, receipt id, encoded RECEIPT] waiting for the store to commit `ticket`
        self.pending_receipts: deque[list] = deque()
        self.next_ack = 0
        self.closed = False
        #: Set by the server: send ERROR(message, receipt id) and close the connection.
        self.fail: Callable[[str, str | None], None] = lambda message, receipt_id: None

    def new_ack_id(self) -> str:
        self.next_ack += 1
        return str(self.next_ack)

    def __repr__(self) -> str:
        return f"Session({self.id})"
