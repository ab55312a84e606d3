"""Queues in memory and delivery: publishing into a queue, dispatching it, paging it in.

Theory of operation
-------------------
A queue exists in memory only while it has subscribers, deliveries in flight or
a page read pending (or, with a non-durable store, messages); otherwise its
messages are only in the store and the queue costs nothing.

``publish`` buffers the store insert and hands the message to a subscriber if
one has room; ``pump`` pairs ready messages with subscribers (``Queue.dispatch``)
and delivers them.  Every delivery is in flight (``Queue.inflight``) until it
settles: a client-ack one is tracked as unacked with its ack timeout armed; an
auto-ack one waits in ``Session.unsent`` until its bytes reach the socket
(``written`` deletes it), or goes back to its queue if the connection closes
first (``take_unsent``), so no message is lost in a connection's outbox.  When a queue's ready
window runs low, ``pump`` asks the runtime for a page (``Reads``) and
``page_loaded`` merges it.  Deadlines are armed with a kind (``ACK_TIMEOUT``,
``PAGE_RETRY``) that the engine maps to its handlers, so nothing here calls
back into the modules above it.

On a store several brokers share, a message row belongs to the broker holding
it in memory (``StoredMessage.held``): a SEND to a queue this broker has no
subscriber for, or one beyond its window's boundary, is stored free for any
broker to claim; a queue leaving memory releases its rows; and another broker's
new messages (``store_changed``) make the window look in the store again.
Sequence numbers come from the store in blocks (``Store.seq_block``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from functools import partial

from ..storage.base import Store, StoredMessage, StoreError
from .config import BrokerConfig
from .delivery import message_frame, message_tail
from .queue import Queue
from .reads import Reads, StoreRead
from .send_headers import DEFAULT_PRIORITY
from .session import NO_DELIVERIES, AckMode, Session, Subscription
from .stats import QueueStats
from .timers import Deadlines
from .window import PageRequest

log = logging.getLogger(__name__)

#: Deadline kinds: an unacked delivery's ack timeout; a failed page read's retry.
ACK_TIMEOUT = "ack-timeout"
PAGE_RETRY = "page-retry"
#: Seconds before a failed page read is retried (a full disk refuses reads until writes commit).
PAGE_RETRY_SECONDS = 0.1


class Dispatcher:
    def __init__(self, store: Store, config: BrokerConfig, deadlines: Deadlines, reads: Reads) -> None:
        self.store = store
        self.config = config
        self.deadlines = deadlines
        self.reads = reads
        self.queues: dict[str, Queue] = {}
        self.stats: dict[str, QueueStats] = {}  # every queue name in use (stats.py)
        self.page_reads = 0  # pages asked of the store
        self.seq = 0  # the last sequence number handed out
        self.seq_end = 0  # the end of the block ``seq`` is from (Store.seq_block)
        self.wall_ms = 0  # wall-clock time for message timestamps, set by the engine

    # -- queues in memory ---------------------------------------------------------------------
    def activate(self, name: str) -> Queue:
        """The queue's in-memory state, created on first use."""
        queue = self.queues.get(name)
        if queue is None:
            durable = self.store.durable
            config = self.config
            queue = self.queues[name] = Queue(
                name, config.window if durable else None, spilled=durable, max_bytes=config.window_bytes,
                stats=self.queue_stats(name),
            )
        return queue

    def queue_stats(self, name: str) -> QueueStats:
        """The counters of queue ``name``, created on first use."""
        stats = self.stats.get(name)
        if stats is None:
            stats = self.stats[name] = QueueStats()
        return stats

    def forget_stats(self, name: str) -> None:
        """The queue was deleted: its counters go too (unless it is still active)."""
        if name not in self.queues:
            self.stats.pop(name, None)

    def deactivate_if_idle(self, queue: Queue) -> None:
        if queue.idle and (self.store.durable or not queue.size) and self.queues.get(queue.name) is queue:
            del self.queues[queue.name]
            if self.store.shared:
                for msg in queue.window.messages():
                    msg.held = False  # a pending insert of it goes in free
                self.store.release(queue.name)

    def store_changed(self, name: str) -> None:
        """Another broker sharing the store made ready messages of queue ``name`` ("*": of any
        queue): look in the store again if anyone here wants them."""
        queues = self.queues.values() if name == "*" else filter(None, [self.queues.get(name)])
        for queue in list(queues):
            if queue.nsubs:
                queue.window.store_changed()
                self.pump(queue)

    def next_seq(self) -> int:
        seq = self.seq + 1
        if seq >= self.seq_end:
            seq, self.seq_end = self.store.seq_block(self.seq)
        self.seq = seq
        return seq

    # -- publishing and delivering ------------------------------------------------------------
    def publish(
        self,
        queue_name: str,
        headers: dict[str, str],
        body: bytes,
        priority: int = DEFAULT_PRIORITY,
        ack_timeout: float | None = None,
        redeliveries: int = 0,
    ) -> StoredMessage:
        """Store a message in a queue and hand it to a subscriber if one has room."""
        msg = StoredMessage(self.next_seq(), queue_name, priority, headers, body, self.wall_ms, ack_timeout,
                            redeliveries)
        queue = self.queues.get(queue_name)
        if queue is None:
            if self.store.durable:
                self.queue_stats(queue_name).published += 1
                self.store.insert(msg)
                return msg  # nobody listens here: the message waits in the store only
            queue = self.activate(queue_name)
        queue.stats.published += 1
        msg.held = queue.window.push(msg)
        self.store.insert(msg)
        self.pump(queue)
        return msg

    def new_message(self, destination: str, headers: dict[str, str], body: bytes) -> StoredMessage:
        """A message that is never stored (a topic publish), numbered like the others."""
        return StoredMessage(self.next_seq(), destination, DEFAULT_PRIORITY, headers, body, self.wall_ms)

    def pump(self, queue: Queue) -> None:
        """Deliver what the queue can deliver now; ask for a page when its window runs low."""
        for sub, msg in queue.dispatch():
            self.deliver(queue, sub, msg)
        if queue.window.spilled and queue.wants_page():
            self._request_page(queue)

    def track(self, session: Session, sub: Subscription, msg: StoredMessage) -> str:
        """Record an unacked delivery and return its ack id."""
        ack_id = session.new_ack_id() if session.version == "1.2" else str(msg.seq)
        if sub.unacked is NO_DELIVERIES:
            sub.unacked = {}
        sub.unacked[ack_id] = msg
        session.deliveries[ack_id] = sub
        return ack_id

    def deliver(self, queue: Queue, sub: Subscription, msg: StoredMessage) -> None:
        """Hand one queue message to one subscription."""
        session = sub.session
        version = session.version
        queue.stats.delivered += 1
        auto = sub.ack_mode is AckMode.AUTO
        queue.inflight[msg.seq] = msg
        msg.delivered = True  # in flight: the store holds its buffered insert back a flush
        if auto:
            ack_id = None
        else:
            ack_id = self.track(session, sub, msg)
            self.store.update(msg)
            timeout = msg.ack_timeout if msg.ack_timeout is not None else sub.ack_timeout
            if timeout is None:
                timeout = self.config.ack_timeout
            if timeout > 0:
                msg.timer = self.deadlines.arm(timeout, ACK_TIMEOUT, session, ack_id, msg)
        outbox = session.outbox
        outbox.write(
            message_frame(
                msg,
                queue.destination,
                sub.id,
                ack_id if version == "1.2" else None,
                version,
                message_tail(msg, version),
            )
        )
        if auto:  # settled by written(), once the socket took these bytes
            session.unsent.append((outbox.queued, queue, msg))

    def written(self, session: Session, sent: int) -> None:
        """The first ``sent`` bytes of the session's outbox reached the socket: the auto-ack
        deliveries among them are done (deleted from the store)."""
        unsent, store = session.unsent, self.store
        while unsent and unsent[0][0] <= sent:
            _, queue, msg = unsent.popleft()
            store.delete(msg)
            inflight = queue.inflight
            inflight.pop(msg.seq, None)
            if not inflight and not queue.nsubs:
                self.deactivate_if_idle(queue)

    def take_unsent(self, session: Session) -> list[tuple[Queue, StoredMessage]]:
        """Remove the auto-ack deliveries that never reached the socket, oldest first."""
        taken = [(queue, msg) for _, queue, msg in session.unsent if queue.inflight.pop(msg.seq, None) is msg]
        session.unsent.clear()
        return taken

    def discard_unsent(self, session: Session, queue: Queue) -> None:
        """``queue`` dies (an exchange subscription's private queue): forget its unsent deliveries."""
        unsent = session.unsent
        if any(entry[1] is queue for entry in unsent):
            kept = []
            for entry in unsent:
                if entry[1] is queue:
                    queue.inflight.pop(entry[2].seq, None)
                else:
                    kept.append(entry)
            unsent.clear()
            unsent.extend(kept)

    def purge(self, name: str) -> None:
        """Drop every ready message of a queue; deliveries in flight stay with their consumers."""
        self.store.purge(name)
        queue = self.queues.get(name)
        if queue is not None:
            queue.window.clear()
            # Store.purge deletes the rows of deliveries in flight too: write them back. The
            # store's contract orders a batch's purges before its inserts (storage/backend.py).
            for msg in queue.inflight.values():
                self.store.insert(msg)

    # -- paging -------------------------------------------------------------------------------
    def _request_page(self, queue: Queue) -> None:
        request = queue.window.start_page()
        name = queue.name
        self.page_reads += 1

        def fetch(store: Store) -> Awaitable[Sequence[StoredMessage]]:
            return store.load_ready(name, request.after, request.limit)

        self.reads.submit(StoreRead(fetch, partial(self._page_loaded, queue, request), partial(self._page_failed, queue)))

    def _page_loaded(self, queue: Queue, request: PageRequest, rows: Sequence[StoredMessage]) -> None:
        queue.window.page_loaded(request, rows, queue.inflight)
        if self.queues.get(queue.name) is queue:
            self.pump(queue)
            self.deactivate_if_idle(queue)

    def _page_failed(self, queue: Queue, error: StoreError) -> None:
        # The window stays "loading" until the retry, so no pump asks again meanwhile: a store
        # that refuses reads (a full disk, until the buffered writes commit) is not hammered.
        log.warning("paging queue %s failed, retrying: %s", queue.name, error)
        self.deadlines.arm(PAGE_RETRY_SECONDS, PAGE_RETRY, queue)

    def retry_page(self, queue: Queue) -> None:
        queue.window.page_failed()
        if self.queues.get(queue.name) is queue:
            self.pump(queue)  # asks again while the page is still wanted
            self.deactivate_if_idle(queue)
