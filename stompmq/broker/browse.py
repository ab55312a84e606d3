"""Browsing a queue: ``SUBSCRIBE`` with ``browser:true`` shows its ready messages, consuming none.

Theory of operation
-------------------
A browsing subscription (ActiveMQ's queue browser) is a cursor over the
queue's ready messages in delivery order, ``(priority desc, seq asc)``.  It
never joins the queue's round-robin and takes no ACKs: each message is written
as a MESSAGE without an ``ack`` header and stays in the queue.  When the cursor
has passed the last one it writes the end marker, a MESSAGE with the header
``browser:end`` and an empty body (ActiveMQ's frame), and then stays silent
until UNSUBSCRIBE.

With a durable store the cursor reads the store page by page (``Store.browse``,
which claims nothing), after the order key of the last message shown, so
messages paged out of memory are shown too; memory is one page, sized from the
mean body of the previous page to about ``PAGE_BYTES``, and the next page is
read only once the connection's outbox has room for it (``pump``, called again
when the outbox drains).  Messages out for delivery here are skipped
(``Queue.inflight``).  With the memory store every message is in the queue's
window, which is copied once (references only).

It is a snapshot of the messages that were ready at the SUBSCRIBE: a message
sent later has a higher sequence number and is skipped.  On a store several
brokers share, sequence numbers are handed out in per-broker blocks, so no
such cut exists: messages sent while a browse runs may be shown there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Sequence
from functools import partial

from ..protocol import escape
from ..storage.base import MESSAGE_OVERHEAD, Store, StoredMessage, StoreError, by_order
from .consumer import AckMode
from .delivery import message_frame, message_tail, write_frame
from .dispatch import Dispatcher
from .reads import StoreRead
from .session import Session, Subscription

#: What one page read aims to hold (messages are counted with their overhead).
PAGE_BYTES = 4 << 20
#: Messages in the first page (sizes unknown yet) and in any page at most.
FIRST_PAGE = 16
MAX_PAGE = 1000
#: The header marking the end of a browse, and its value (ActiveMQ's).
BROWSER_HEADER = "browser"
END = "end"


class BrowseSubscription(Subscription):
    """A cursor over a queue's ready messages, in delivery order."""

    __slots__ = ("queue_name", "last_seq", "after", "rows", "limit", "reading", "exhausted", "ended")

    def __init__(self, sub_id: str, session: Session, destination: str, queue_name: str, last_seq: int | None) -> None:
        super().__init__(sub_id, session, destination, AckMode.AUTO, 1, None)
        self.queue_name = queue_name
        self.last_seq = last_seq  # messages after it were sent after the SUBSCRIBE (None: no cut)
        self.after: tuple[int, int] | None = None  # order key of the last message read
        self.rows: deque[StoredMessage] = deque()  # read, not yet written
        self.limit = FIRST_PAGE
        self.reading = False
        self.exhausted = False  # nothing left to read
        self.ended = False  # the end marker is written


class Browsers:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def subscribe(self, session: Session, sub_id: str, destination: str, queue_name: str) -> BrowseSubscription:
        dispatcher = self.dispatcher
        store = dispatcher.store
        sub = BrowseSubscription(sub_id, session, destination, queue_name, None if store.shared else dispatcher.clock.seq)
        if not store.durable:  # every message is in memory: copy the window (and parked ones)
            queue = dispatcher.queues.get(queue_name)
            if queue is not None:
                parked = [msg for waiting in (queue.parked or {}).values() for msg in waiting]
                sub.rows.extend(sorted(queue.window.messages() + parked, key=by_order))
            sub.exhausted = True
        session.subscriptions[sub_id] = sub
        self.pump(sub)
        return sub

    def pump(self, sub: BrowseSubscription) -> None:
        """Write what the outbox has room for; read the next page or end when all is written."""
        if not sub.active or sub.ended:
            return
        session = sub.session
        outbox, version, rows = session.outbox, session.version, sub.rows
        queue = self.dispatcher.queues.get(sub.queue_name)
        inflight = queue.inflight if queue is not None else {}
        while rows and outbox.has_room():
            msg = rows.popleft()
            if msg.seq in inflight or (sub.last_seq is not None and msg.seq > sub.last_seq):
                continue
            write_frame(outbox, message_frame(msg, sub.destination, sub.id, None, version, message_tail(msg, version)),
                        msg.body)
        if rows or sub.reading:
            return
        if sub.exhausted:
            sub.ended = True
            outbox.write(end_frame(sub, version))
        elif outbox.has_room():
            self._read(sub)

    def _read(self, sub: BrowseSubscription) -> None:
        sub.reading = True
        name, after, limit = sub.queue_name, sub.after, sub.limit

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.browse(name, after, limit)

        self.dispatcher.reads.submit(StoreRead(fetch, partial(self._loaded, sub, limit), partial(self._failed, sub)))

    def _loaded(self, sub: BrowseSubscription, limit: int, rows: Sequence[StoredMessage]) -> None:
        sub.reading = False
        if rows:
            sub.after = rows[-1].order_key
            mean = sum(len(msg.body) for msg in rows) // len(rows) + MESSAGE_OVERHEAD
            sub.limit = max(1, min(MAX_PAGE, PAGE_BYTES // mean))
        sub.exhausted = len(rows) < limit
        sub.rows.extend(rows)
        self.pump(sub)

    def _failed(self, sub: BrowseSubscription, error: StoreError) -> None:
        sub.reading = False
        if sub.active and not sub.session.closed:
            sub.session.fail(f"store error while browsing {sub.destination}: {error}", None)

    def remove(self, sub: BrowseSubscription) -> None:
        """UNSUBSCRIBE or close: forget what was read and not written."""
        sub.rows.clear()


def end_frame(sub: Subscription, version: str) -> bytes:
    """The MESSAGE that ends a browse: ``browser:end``, no body (ActiveMQ's marker)."""
    return b"MESSAGE\nsubscription:%s\ndestination:%s\nmessage-id:browse-end\n%s:%s\ncontent-length:0\n\n\x00" % (
        escape(sub.id, version).encode(),
        escape(sub.destination, version).encode(),
        BROWSER_HEADER.encode(),
        END.encode(),
    )
