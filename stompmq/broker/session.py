"""Per-connection broker state: the session, its subscriptions and their unacked deliveries.

The server creates one ``Session`` per connection and gives it an ``Outbox``
(the connection's bounded send buffer).  The engine writes encoded frames into
the outbox synchronously and asks it whether there is room before each queue
delivery; that is the whole of back-pressure from the engine's point of view.

An auto-ack delivery is not settled when it enters the outbox but when its
bytes reach the socket: ``Session.unsent`` lists those deliveries in outbox
order with the outbox's byte count (``Outbox.queued``) at each one's end, the
server reports how many bytes it has sent (``Broker.written``), and whatever is
still unsent when the session closes goes back to its queue.

Sessions and subscriptions point at each other (a subscription is delivered
through its session's outbox, a session owns its subscriptions), so they live
in one module.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

from ..protocol import Frame
from ..storage.base import StoredMessage
from .consumer import AckMode
from .queue import Queue
from .selectors import Selector


class Outbox(Protocol):
    """What the engine needs from a connection's send side."""

    def write(self, data: bytes) -> None:
        """Queue bytes for the socket; never blocks."""

    def write_body(self, head: bytes, body: bytes) -> None:
        """Queue a frame's bytes up to its large body, the body by reference and the NUL (the
        body is not copied into the frame: delivery.write_frame); never blocks."""

    def has_room(self) -> bool:
        """True while queue deliveries may be added (below the soft limit)."""

    def spare(self) -> int:
        """Bytes queue deliveries may still add before ``has_room`` says no (0 when it does)."""

    def can_take_transient(self) -> bool:
        """True while below the hard limit (above it the topic overflow policy applies)."""

    @property
    def queued(self) -> int:
        """Bytes ever written to this outbox (the sent count is compared with it)."""


#: How many expired ack ids a session remembers (``Session.expired``): a worker is late with the
#: ACKs of what it was working on, never with thousands of them.
EXPIRED_KEPT = 1024


def _nothing() -> None:
    """The default of callbacks the server sets (one shared function, not one per session)."""


class PendingReceipt:
    """A RECEIPT waiting for the store to commit ``ticket`` (or, unanswered, for a read), since
    ``since`` (the engine's time); ``message`` is the queue message its SEND stored, if any."""

    __slots__ = ("ticket", "receipt_id", "data", "since", "message")

    def __init__(
        self, ticket: int, receipt_id: str | None, data: bytes, since: float, message: StoredMessage | None = None
    ) -> None:
        self.ticket = ticket
        self.receipt_id = receipt_id
        self.data = data
        self.since = since
        self.message = message


class Session:
    """One connected client as the engine sees it."""

    __slots__ = (
        "id",
        "version",
        "outbox",
        "subscriptions",
        "deliveries",
        "transactions",
        "held_bytes",
        "pending_receipts",
        "next_ack",
        "expired",
        "closed",
        "login",
        "relay",
        "fail",
        "throttled_by",
        "paced",
        "topic_lagging",
        "client_id",
        "unsent",
        "temp_queues",
        "waiting",
        "ungated",
    )

    def __init__(
        self, session_id: str, version: str, outbox: Outbox, login: str | None = None, client_id: str | None = None,
        relay: bool = False,
    ) -> None:
        self.id = session_id
        #: May SEND others' identity headers and the broker's facts (a shovel's: send_headers.py)
        self.relay = relay
        self.client_id = client_id  # CONNECT's client-id: scopes ActiveMQ durable subscriptions
        self.version = version
        self.outbox = outbox
        self.login = login
        self.subscriptions: dict[str, Subscription] = {}
        # ack id -> subscription holding that unacked delivery
        self.deliveries: dict[str, Subscription] = {}
        self.transactions: dict[str, list[Frame]] = {}
        self.held_bytes = 0  # what the frames of its open transactions cost (limits.frame_cost)
        # receipts waiting for a commit, in the order of the frames that asked for them
        # Both deques are made when first needed: an empty deque is ~0.75 KiB, and an idle
        # connection's session would hold two of them.
        self.pending_receipts: deque[PendingReceipt] | None = None
        self.next_ack = 0
        #: Ack ids whose ack timeout requeued their message, the newest ``EXPIRED_KEPT``: a late
        #: ACK or NACK of one is answered, not failed (acks.py).  Made at the first expiry.
        self.expired: dict[str, None] | None = None
        # auto-ack deliveries still in the outbox: (outbox.queued at their end, queue, message)
        self.unsent: deque[tuple[int, Queue[Subscription], StoredMessage]] | None = None
        self.closed = False
        #: /temp-queue/NAME -> the stored name of this connection's temporary queue (temp_queues.py)
        self.temp_queues: dict[str, str] | None = None
        #: Frames that wait while the engine reads the store before it can handle the first of
        #: them (whether an /amq/queue/ exists); None when frames are handled as they come.
        self.waiting: deque[Frame] | None = None
        #: Set by the server: called when ``waiting`` was handled, to read the connection again.
        self.ungated: Callable[[], None] = _nothing
        #: Set by the server: send ERROR(message, receipt id) and close the connection.
        self.fail: Callable[[str, str | None], None] = lambda message, receipt_id: None
        #: --topic-overflow block: subscribers' outboxes this session's topic messages pushed over
        #: their hard limit (with the subscriber's session); the server reads nothing more from it
        #: until they are below it, or until --topic-block-timeout makes the subscriber lag.
        self.throttled_by: dict[Outbox, Session] | None = None
        #: Backed-up queues this client's frames published into: the server reads nothing more
        #: from it until they drain (broker/pacing.py).
        self.paced: set[Queue[Subscription]] | None = None
        #: This session, as a topic subscriber, held a publisher back for --topic-block-timeout:
        #: it never holds one back again, it misses messages instead (broker/overflow.py).
        self.topic_lagging = False

    def new_ack_id(self) -> str:
        self.next_ack += 1
        return str(self.next_ack)

    def __repr__(self) -> str:
        return f"Session({self.id})"


#: Shared stand-in for a subscription that has no unacked delivery yet: a million auto-ack
#: subscriptions should not each carry an empty dict.  Never written: ``Dispatcher.track``
#: gives a subscription a dict of its own before its first entry.  A dict, not a read-only
#: MappingProxyType: mypyc (the compiled engine, setup.py) checks ``unacked``'s declared type.
NO_DELIVERIES: dict[str, StoredMessage] = {}


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
        "selector",
        "priority",
    )

    def __init__(
        self,
        sub_id: str,
        session: Session,
        destination: str,
        ack_mode: AckMode,
        prefetch: int,
        ack_timeout: float | None,
        queue: Queue[Subscription] | None = None,
        selector: Selector | None = None,
        priority: int = 0,
    ) -> None:
        self.id = sub_id
        self.session = session
        self.destination = destination  # as the SUBSCRIBE named it (1.0 UNSUBSCRIBEs by it)
        self.queue = queue
        self.ack_mode = ack_mode
        self.prefetch = prefetch
        self.ack_timeout = ack_timeout
        self.unacked: dict[str, StoredMessage] = NO_DELIVERIES
        self.in_ready = False
        self.active = True
        self.selector = selector  # its JMS selector (selectors.py, sift.py); None: every message
        self.priority = priority  # its consumer priority on a queue (sift.py); 0: the default

    def has_room(self) -> bool:
        """May a queue message be delivered now?  Auto-ack is bounded by the socket only."""
        if not self.session.outbox.has_room():
            return False
        return self.ack_mode is AckMode.AUTO or len(self.unacked) < self.prefetch

    def spare(self) -> int:
        """Bytes its connection's outbox may still take in queue deliveries."""
        return self.session.outbox.spare()

    def __repr__(self) -> str:
        return f"Subscription({self.session.id}/{self.id} -> {self.destination})"
