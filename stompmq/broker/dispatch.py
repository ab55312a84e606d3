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
window runs low, ``pump`` asks the runtime for a page (paging.py).  Deadlines are armed with a kind (``ACK_TIMEOUT``,
``paging.PAGE_RETRY``) that the engine maps to its handlers, so nothing here calls
back into the modules above it.

On a store several brokers share, a message row belongs to the broker holding
it in memory (``StoredMessage.held``): a SEND to a queue this broker has no
subscriber for, or one beyond its window's boundary, is stored free for any
broker to claim; a queue leaving memory releases its rows; and another broker's
new messages (``store_changed``) make the window look in the store again.
Sequence numbers come from the store in blocks (``Clock``, ``Store.seq_block``).

Claim on demand (docs/decisions/claim-on-demand.md): while subscribers on another broker want a
queue (``queue_wanted``: their broker read it lately, or a broker holding it stopped), the queue
claims only what its own subscribers have room for plus ``READ_AHEAD``, gives the rest back to
the store at the end of every pump (``_release_excess``), and reads the store again from the
first row another broker freed at every such change (rows freed below its boundary are found at once).
A queue nobody else wants keeps its full window.  A broker whose lease may have lapsed delivers
nothing it claimed (``Store.claims_valid``, checked by ``_pump_shared``, the pump of a shared
store) until the store renewed it; if it had lapsed, every claim held in memory is dropped
(``claims_renewed``).

The message lifecycle (see queue_settings.py and delays.py) passes through here too: ``publish``
gives a message its queue's TTL, hands a delayed one to ``Delayed`` and keeps a bounded queue
within its policy (refusing the SEND, or dropping the oldest ready messages); ``pump`` drops
the expired messages it reaches at a queue's head (``Queue.dispatch`` sets them aside), and
``dead_letter`` moves what a queue cannot keep to its dead-letter queue.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence

from ..protocol.encoder import LARGE_BODY, encode_message, encode_message_tail
from ..storage.base import Store, StoredMessage
from ..storage.rows import Purge, Release
from .aside_sweep import AsideSweeps
from .bounds import QueueBounds
from .clock import Clock
from .config import BrokerConfig
from .consumer import AckMode
from .delays import Delayed
from .delivery import MESSAGE_TYPE, message_frame, message_tail, write_frame
from .events import Watch
from .expiry import SWEEP_MS, ExpirySweep
from .limits import LimitError
from .pacing import PACE_AT, SOCKET_PACE_AT, Pace
from .paging import READ_AHEAD, Paging
from .queue import Queue
from .queue_settings import DROP_HEAD, QueueFull, QueueSettings
from .reads import Reads
from .schedules import fire, started
from .send_headers import DEFAULT_PRIORITY, RECURRING, SCHEDULE_LEFT
from .session import NO_DELIVERIES, Session, Subscription
from .sift import sift
from .stats import QueueStats
from .timers import Deadlines, Timer
from .window import OrderKey

log = logging.getLogger(__name__)

#: Why a message left its queue unconsumed (its ``dead-letter-reason`` if dead-lettered).
EXPIRED, MAXLEN = "expired", "maxlen"
#: The headers a dead letter gets: why it died, and where.
DEAD_LETTER_REASON, ORIGINAL_DESTINATION = "dead-letter-reason", "original-destination"
#: ``StoredMessage.expires`` of a message withdrawn because its SEND was answered "not stored"
#: (``Dispatcher.withdraw``): it sorts as long expired, so dispatch sets it aside at the head.
WITHDRAWN = -1

#: The deadline kind of an unacked delivery's ack timeout (a failed page read's: paging.py).
ACK_TIMEOUT = "ack-timeout"
#: Milliseconds a queue claims on demand after another broker last said it wants it (a broker
#: says so with its reads of the queue, at most every second).
CONTENDED_MS = 10_000
#: Rows a queue on a shared store remembers having given back because no selector here matched
#: them (``_give_back``), about 70 bytes each.
PASSED_MAX = 100_000
#: Queues remembered as wanted before they are active here (beyond it the memory is forgotten).
WANTED_MAX = 10_000


class Dispatcher:
    def __init__(self, store: Store, config: BrokerConfig, deadlines: Deadlines, reads: Reads) -> None:
        self.store = store
        self.config = config
        self.deadlines = deadlines
        self.reads = reads
        self.queues: dict[str, Queue[Subscription]] = {}
        self.stats: dict[str, QueueStats] = {}  # every queue name in use (stats.py)
        self.clock = Clock(store)  # wall time and sequence numbers (the engine advances it)
        self.delayed = Delayed(store, self.clock, deadlines, reads, config.window if store.durable else None)
        self.bounds = QueueBounds(store, reads, config.max_queue_bytes, self._counted)  # policies, sizes
        self.expiry = ExpirySweep(self.clock, deadlines, reads, store.durable, self._expire_stored, self.holds)
        self._expired: list[StoredMessage] = []  # what Queue.dispatch set aside in this pump
        #: the expiry of the memory store's messages no selector matched (``Queue.aside``)
        self.aside = AsideSweeps(self.clock, deadlines, self.queues,
                                 lambda queue, msg: self.discard(msg, EXPIRED, queue.stats))
        #: the message publish made last: a frame that changed it published it (its RECEIPT waits
        #: for it, receipts.py)
        self.published: StoredMessage | None = None
        self.pacing: set[Queue[Subscription]] = set()  # queues the frame being handled left backed up (pacing.py)
        self.pace_timeouts = 0  # pacing episodes that ended in a spill
        #: queue -> wall ms until which another broker wants it, for queues not active here yet
        self.wanted: dict[str, int] = {}
        #: page reads of the queues' ready messages (paging.py)
        self.paging = Paging(reads, deadlines, self.queues, lambda queue: self.pump(queue), self.deactivate_if_idle)
        #: seqs in flight when this broker's lease lapsed: another broker has them now, so they
        #: never come back into a window here (``Acks.requeue``)
        self.forfeited: set[int] = set()
        #: seq -> the ack-timeout deadline of its client-ack delivery in flight, so settling it
        #: cancels the deadline (a message is in flight to one subscription at a time); empty
        #: unless ack timeouts are on, so a settle pays one test
        self.ack_timers: dict[int, Timer] = {}
        #: the observers of the engine's queue messages that ``publish``, ``deliver``,
        #: ``dead_letter`` and ``discard`` tell (events.py); None, the usual case: nobody watches
        self.watch: Watch | None = None

    # -- queues in memory ---------------------------------------------------------------------
    def activate(self, name: str) -> Queue[Subscription]:
        """The queue's in-memory state, created on first use."""
        queue = self.queues.get(name)
        if queue is None:
            durable = self.store.durable
            config = self.config
            queue = self.queues[name] = Queue(
                name, config.window if durable else None, spilled=durable, max_bytes=config.window_bytes,
                stats=self.queue_stats(name), shared=self.store.shared,
            )
            if self.store.shared:
                queue.give_back = []  # the rows its selectors sift out are freed (sift.py)
            policy = self.bounds.policy(name)
            if policy is not None and policy.bounded and policy.overflow == DROP_HEAD:
                queue.pinned = True  # its head must be in memory to be dropped
            if self.wanted:
                until = self.wanted.pop(name, 0)
                if until > self.clock.wall_ms:
                    queue.claim_until = until
        return queue

    # -- queue settings ---------------------------------------------------------------------------
    def settings_changed(self, name: str, effective: QueueSettings | None) -> None:
        """Queue ``name``'s settings are ``effective`` now: pinned if it drops its head, pumped."""
        pinned = effective is not None and effective.bounded and effective.overflow == DROP_HEAD
        queue = self.activate(name) if pinned else self.queues.get(name)
        if queue is not None:
            queue.pinned = pinned
            self.pump(queue)
            self.deactivate_if_idle(queue)

    def _counted(self, name: str) -> None:
        """The store counted bounded queue ``name``: its bounds may bite now."""
        queue = self.queues.get(name)
        if queue is not None:
            self.pump(queue)

    def _admit(self, queue_name: str, body: bytes, expires: int | None, deliver_at: int | None) -> int | None:
        """A message for a queue with a policy: its expiry under the queue's TTL, and its place
        within the queue's bounds (QueueFull, counted, if a ``reject-publish`` one is full)."""
        try:
            return self.bounds.admit(queue_name, len(body), expires, deliver_at, self.clock.wall_ms)
        except QueueFull:
            self.queue_stats(queue_name).rejected += 1
            raise

    def remove(self, msg: StoredMessage) -> None:
        """A queue message is gone for good (acked, discarded, expired, dropped): delete it."""
        self.remove_all((msg,))

    def remove_all(self, messages: Sequence[StoredMessage]) -> None:
        """``remove`` for many messages (a socket read's ACKs, a socket write's auto-ack
        deliveries) in one store call."""
        self.store.delete_all(messages)
        if self.bounds.sizes:
            self.bounds.removed(messages)

    def withdraw(self, msg: StoredMessage) -> bool:
        """Take back ``msg``, whose SEND is about to be answered "not stored": True if nobody got
        it (never delivered, not delayed) and the store dropped its insert (certainly not on
        disk); then it never reaches a subscriber either (dispatch drops it at the queue's head)."""
        if msg.delivered or msg.redeliveries or msg.deliver_at is not None or not self.store.withdraw(msg):
            return False
        msg.expires = WITHDRAWN
        return True

    def unstored(self, msg: StoredMessage) -> None:
        """The store refused ``msg``'s row (``StoreEvents.rejected``): it is not on disk and will
        not be, so nobody who has not got it yet gets it (dispatch, or its promotion when due,
        drops it).  One already delivered stays with its consumer: its ACK deletes nothing."""
        if not (msg.delivered or msg.redeliveries):
            msg.expires = WITHDRAWN

    def dead_letter(self, msg: StoredMessage, reason: str) -> None:
        """Move ``msg`` (already settled) to its queue's dead-letter queue, or drop it.

        ``/queue/X`` dies into ``/queue/DLQ.X`` (``--dlq-prefix``) with ``dead-letter-reason``
        and ``original-destination``; a message of a dead-letter queue itself, or any message
        when the prefix is empty, is dropped and logged, so dead letters never chain.
        """
        if self.watch is not None:  # before the dead letter's publish, whose events follow
            self.watch.dead_lettered(msg, reason)
        self.queue_stats(msg.queue).dead_lettered += 1
        prefix = self.config.dlq_prefix
        if not prefix or msg.queue.startswith(prefix):
            self.remove(msg)
            log.warning("dropping message %d of queue %s: %s", msg.seq, msg.queue, reason)
            return
        headers = dict(msg.headers)
        headers[DEAD_LETTER_REASON] = reason
        headers[ORIGINAL_DESTINATION] = "/queue/" + msg.queue
        try:
            self.transfer(msg, prefix + msg.queue, headers)
        except QueueFull as e:
            self.remove(msg)
            log.warning("dropping message %d of queue %s (%s): %s", msg.seq, msg.queue, reason, e.message)

    def transfer(self, msg: StoredMessage, queue_name: str, headers: dict[str, str]) -> None:
        """Move ``msg`` (already settled) into ``queue_name`` as a new message with ``headers``,
        its body and priority: the insert and its own delete are buffered in this one step, so
        they commit together.  QueueFull (a full ``reject-publish`` target): nothing changed."""
        self.publish(queue_name, headers, msg.body, msg.priority)
        self.remove(msg)

    def discard(self, msg: StoredMessage, reason: str, stats: QueueStats) -> None:
        """An expired (``reason`` "expired") or dropped ("maxlen") message leaves its queue:
        dead-lettered if the queue's policy says so, deleted otherwise."""
        if reason == EXPIRED:
            stats.expired += 1
            if self.watch is not None:
                self.watch.expired(msg)
        else:
            stats.dropped += 1
        policy = self.bounds.policy(msg.queue)
        if policy is not None and policy.dead_letter:
            self.dead_letter(msg, reason)
        else:
            self.remove(msg)

    def _expire_stored(self, msg: StoredMessage) -> None:
        """The expiry sweep found ``msg`` expired in the store: it leaves its queue."""
        queue = self.queues.get(msg.queue)
        if queue is not None and queue.sifted:
            queue.sifted.discard(msg.seq)
        self.discard(msg, EXPIRED, self.queue_stats(msg.queue))

    def holds(self, msg: StoredMessage) -> bool:
        """Does this broker hold the message in memory (so dispatch, not the sweep, drops it)?"""
        queue = self.queues.get(msg.queue)
        if queue is None:
            return False
        if queue.sifted and msg.seq in queue.sifted:
            return False  # no selector here matched it: it waits in the store only (sift.py)
        return msg.seq in queue.inflight or queue.window.holds(msg)

    def _expired_at_head(self, queue: Queue[Subscription]) -> None:
        expired = self._expired[:]  # discarding may dead-letter: a pump of the DLQ reuses the list
        self._expired.clear()
        for msg in expired:
            if msg.expires == WITHDRAWN:
                self.remove(msg)  # never stored, never delivered, not dead-lettered: gone
            else:
                self.discard(msg, EXPIRED, queue.stats)

    def _drop_head(self, queue: Queue[Subscription], policy: QueueSettings) -> None:
        """Drop the oldest ready messages of a ``drop-head`` queue until it is within bounds."""
        size = self.bounds.sizes.get(queue.name)
        if size is None:
            return
        window = queue.window
        dropped = 0
        while window.size and policy.over(size.length, size.bytes):
            self.discard(window.pop(), MAXLEN, queue.stats)
            dropped += 1
        if dropped and not size.dropping:
            size.dropping = True
            log.warning("queue %s is over its bounds (max-length %s, max-length-bytes %s): dropping its oldest"
                        " messages", queue.name, policy.max_length, policy.max_length_bytes)
        elif not dropped and size.dropping and not policy.over(size.length + 1, size.bytes):
            size.dropping = False
            log.info("queue %s is within its bounds again", queue.name)

    def queue_stats(self, name: str) -> QueueStats:
        """The counters of queue ``name``, created on first use."""
        stats = self.stats.get(name)
        if stats is None:
            stats = self.stats[name] = QueueStats()
        return stats

    def admit_queue(self, name: str) -> None:
        """A client's frame is about to use queue ``name``: LimitError if it is a new one and the
        vhost has ``max_queues`` in use (checked where clients name queues, never on the broker's
        own publishes, such as dead letters and due delayed messages)."""
        if name not in self.stats and len(self.stats) >= self.config.max_queues:
            raise LimitError("max-queues", f"this vhost has {self.config.max_queues} queues in use already")

    def forget_stats(self, name: str) -> None:
        """The queue was deleted: its counters go too (unless it is still active)."""
        if name not in self.queues:
            self.stats.pop(name, None)

    def deactivate_if_idle(self, queue: Queue[Subscription]) -> None:
        if queue.idle and (self.store.durable or not queue.size) and self.queues.get(queue.name) is queue:
            if queue.pace is not None:
                queue.pace.wake()
            del self.queues[queue.name]
            if self.store.shared:
                for msg in queue.window.messages():
                    msg.held = False  # a pending insert of it goes in free
                self.store.write(Release(queue.name))

    def store_changed(self, name: str, first: OrderKey | None = None, passed: Sequence[int] | None = None) -> None:
        """Another broker sharing the store made ready messages of queue ``name`` ("*": of any
        queue), ``first`` the lowest key among them (None: unknown): look in the store again if
        anyone here wants them.  ``passed``: their seqs, rows the other broker's selectors passed
        over; none is news to a queue that gave each of them back itself (``_give_back``)."""
        queues = self.queues.values() if name == "*" else filter(None, [self.queues.get(name)])
        for queue in list(queues):
            if passed is not None and queue.passed.issuperset(passed):
                continue  # (else they would pass between the brokers for ever)
            if queue.nsubs:
                if queue.claim_until:  # a small window: read from ``first``, below its boundary too
                    queue.window.look_back(first)
                else:
                    queue.window.store_changed()
                self.pump(queue)

    def queue_wanted(self, name: str) -> None:
        """Subscribers on another broker want queue ``name``: for ``CONTENDED_MS`` keep no more of
        it claimed than this broker's subscribers can take, plus ``READ_AHEAD``."""
        until = self.clock.wall_ms + CONTENDED_MS
        queue = self.queues.get(name)
        if queue is None:
            if len(self.wanted) >= WANTED_MAX:
                self.wanted.clear()
            self.wanted[name] = until
            return
        queue.claim_until = until
        self.pump(queue)

    def _release_excess(self, queue: Queue[Subscription]) -> None:
        """Give the ready messages of a wanted queue beyond its subscribers' room back to the store
        (their rows are freed with the next commit, which tells the other brokers)."""
        if queue.claim_until < self.clock.wall_ms:
            queue.claim_until = 0  # nobody else asked lately: a full window again
            return
        window = queue.window
        keep = READ_AHEAD + queue.room()
        if window.size + len(window.tail) > keep:
            for msg in window.release(keep):
                self.store.update(msg)

    def claims_renewed(self, lost: bool) -> None:
        """The store renewed a lease that was not trusted: deliver again; if it had lapsed, first
        drop every claim held in memory (the store freed their rows; another broker may have
        taken them), reading the store afresh."""
        for queue in list(self.queues.values()):
            if lost:
                # Whatever of them is still to be inserted goes in free, not claimed under the
                # new epoch by a broker that no longer has it in memory; one out for delivery
                # as ready again, with its redelivery.
                for msg in (*queue.window.messages(), *queue.take_parked()):
                    msg.held = False
                queue.window.clear()
                for msg in queue.inflight.values():
                    msg.held = msg.delivered = False
                    msg.redeliveries += 1
                self.forfeited.update(queue.inflight)
            self.pump(queue)
            self.deactivate_if_idle(queue)
        if lost:
            self.delayed.drop()  # the store freed their rows too
        else:
            self.delayed.rearm()

    # -- publishing and delivering ------------------------------------------------------------
    def publish(
        self,
        queue_name: str,
        headers: dict[str, str],
        body: bytes,
        priority: int = DEFAULT_PRIORITY,
        ack_timeout: float | None = None,
        expires: int | None = None,
        deliver_at: int | None = None,
    ) -> StoredMessage:
        """Store a message in a queue and hand it to a subscriber if one has room (a delayed
        one waits in ``delayed``); QueueFull if a ``reject-publish`` queue is full.

        The steps: a queue with a policy gives the message its TTL and a place within its bounds
        (``_admit``); the message is numbered and stamped; the expiry sweep is armed for it; a
        delayed one waits apart; one for a queue not in memory is only stored (``_store_only``);
        else it goes straight to a subscriber (``Queue.taker``) or into the window.  Every queue
        message comes through here: the steps a plain one takes are spelled out, not called."""
        bounds = self.bounds
        if bounds.default is not None or bounds.ruled or bounds.declared and queue_name in bounds.declared:
            expires = self._admit(queue_name, body, expires, deliver_at)
            priority = bounds.capped_priority(queue_name, priority)
        clock = self.clock
        msg = self.published = StoredMessage(clock.next_seq(), queue_name, priority, headers, body, clock.wall_ms,
                                             ack_timeout, 0, False, expires, deliver_at)
        if expires is not None and expires + SWEEP_MS < self.expiry.at:
            self.expiry.arm(max(expires, clock.wall_ms) + SWEEP_MS)
        if deliver_at is not None:
            if not RECURRING.isdisjoint(headers) and SCHEDULE_LEFT not in headers:  # a new schedule
                msg.headers = started(headers, msg.seq)
            self.delayed.add(msg)
            if self.watch is not None:
                self.watch.published(msg)
            return msg
        if self.watch is not None:  # before any delivery of it: its observers hear the publish first
            self.watch.published(msg)
        queue = self.queues.get(queue_name)
        if queue is None:
            if self.store.durable:
                self._store_only(msg)
                return msg
            queue = self.activate(queue_name)
        queue.stats.published += 1
        taker = queue.taker(msg)
        if taker is not None:  # the window is empty and a subscriber has room: straight to it
            msg.held = True
            self.store.insert(msg)
            self.deliver(queue, taker, msg)
            if queue.pace is not None:
                queue.check_pace()
            return msg
        # Into the window (or beyond its boundary, to the store only), and a pump if one could
        # deliver; a queue it backs up paces its producer.  (Not a method: every message that
        # does not go straight to a subscriber comes here, so a call costs 0.65 % of bench_engine
        # standing and about 1 % of icount_send ttl, whose messages all take this path.)
        window = queue.window
        msg.held = window.push(msg)
        self.store.insert(msg)
        # With no subscriber in the round-robin (all without room) and none of the cases where
        # pump does more than dispatch to one, pump would deliver nothing: skip it (the usual
        # state of a queue whose consumers' sockets are behind; 3.6 % of bench_engine standing).
        if (queue.ready_subs or queue.exclusive or queue.parked or queue.pinned or window.spilled
                or queue.pace is not None or queue.claim_until):
            self.pump(queue)
        if queue.nsubs and self.config.queue_pace_timeout and (queue.pace is None or not queue.pace.off):
            # (a queue whose pacing gave up paces nobody now)
            if window.fills(PACE_AT if queue.nacking else SOCKET_PACE_AT):
                self.pacing.add(queue)
        return msg

    def _store_only(self, msg: StoredMessage) -> None:
        """Nobody listens to the message's queue here: it waits in the store only (free for any
        broker sharing the store to claim)."""
        self.queue_stats(msg.queue).published += 1
        self.store.insert(msg)

    def new_message(
        self, destination: str, headers: dict[str, str], body: bytes, priority: int, expires: int | None
    ) -> StoredMessage:
        """A message that is never stored (a topic publish), numbered like the others."""
        clock = self.clock
        return StoredMessage(clock.next_seq(), destination, priority, headers, body, clock.wall_ms, expires=expires)

    def pump(self, queue: Queue[Subscription]) -> None:
        """Deliver what the queue can deliver now; when its window runs low, refill it from its
        tail or ask for a page."""
        expired = self._expired
        while True:
            now_ms = self.clock.wall_ms
            pairs = sift(queue, now_ms, expired) if queue.picky else queue.dispatch(now_ms, expired)
            for sub, msg in pairs:
                self.deliver(queue, sub, msg)
            if expired:
                self._expired_at_head(queue)
            if queue.aside_expires is not None:
                self.aside.arm(queue, queue.aside_expires)
            if queue.pinned:
                policy = self.bounds.policy(queue.name)
                if policy is not None:
                    self._drop_head(queue, policy)
            window = queue.window
            if not (window.spilled and queue.wants_page()):
                break
            if not window.gapless:
                self.paging.request(queue)
                break
            if not window.refill():
                break
        if queue.pace is not None:
            queue.check_pace()

    def _pump_shared(self, queue: Queue[Subscription]) -> None:
        """``pump`` on a store several brokers share: nothing claimed goes out while this broker's
        lease may have lapsed (``claims_renewed`` pumps again), and a wanted queue gives back
        what its subscribers cannot take."""
        if not self.store.claims_valid():
            return
        Dispatcher.pump(self, queue)
        if queue.give_back:
            self._give_back(queue)
        if queue.claim_until:
            self._release_excess(queue)

    def _give_back(self, queue: Queue[Subscription]) -> None:
        """Free the rows of a shared store's queue that no selector here matched (sift.py), for
        the other brokers' subscribers; each is remembered, so news naming only such rows is
        none here (``store_changed``)."""
        passed = queue.passed
        for msg in queue.give_back:  # type: ignore[union-attr]
            if len(passed) >= PASSED_MAX:
                passed.clear()  # (forgotten: at worst a row is read once more)
            passed.add(msg.seq)
            self.store.pass_over(msg)
        queue.give_back.clear()  # type: ignore[union-attr]

    def promote_due(self) -> None:
        """Delayed messages are due: each becomes a new message of its queue (or expires).  Not
        while this broker's lease may have lapsed (a shared store): another broker may promote
        them; ``claims_renewed`` arms the deadline again."""
        if not self.store.claims_valid():
            self.delayed.deferred()
            return
        for msg in self.delayed.take_due():
            if msg.expires == WITHDRAWN:
                continue  # its row was refused (``unstored``): there is nothing to promote
            if msg.expires is not None and msg.expires < self.clock.wall_ms:
                self.discard(msg, EXPIRED, self.queue_stats(msg.queue))  # deletes the delayed row
                continue
            if SCHEDULE_LEFT in msg.headers:
                fire(self, msg)  # a copy and the schedule's next row
                continue
            self.store.delete(msg)  # the delayed row
            try:
                copy = self.publish(msg.queue, msg.headers, msg.body, msg.priority, msg.ack_timeout, msg.expires)
                self.store.promoted(msg.seq, copy.seq)  # stored only if that delete takes effect
            except QueueFull:  # nobody to refuse now: the message goes as a dropped head would
                self.discard(msg, MAXLEN, self.queue_stats(msg.queue))

    def track(self, session: Session, sub: Subscription, msg: StoredMessage) -> str:
        """Record an unacked delivery and return its ack id."""
        ack_id = session.new_ack_id() if session.version == "1.2" else str(msg.seq)
        if sub.unacked is NO_DELIVERIES:
            sub.unacked = {}
        sub.unacked[ack_id] = msg
        session.deliveries[ack_id] = sub
        return ack_id

    def deliver(self, queue: Queue[Subscription], sub: Subscription, msg: StoredMessage) -> None:
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
                timeout = self.bounds.ack_timeout(queue.name, self.config.ack_timeout)
            if timeout > 0:
                self.ack_timers[msg.seq] = self.deadlines.arm(timeout, ACK_TIMEOUT, session, ack_id, msg)
        outbox = session.outbox
        # delivery.write_frame(..., message_frame(..., message_tail(...))) spelled out: every queue
        # delivery comes through here, and the Python frames around the C encoders cost 0.1 us of ~7.
        # (A text message's tail, without content-length, is delivery.message_tail's.)
        body = msg.body
        if len(body) < LARGE_BODY:
            headers = msg.headers
            outbox.write(
                encode_message(
                    sub.id,
                    msg.seq,
                    queue.destination,
                    ack_id if version == "1.2" else None,
                    msg.redeliveries,
                    version,
                    encode_message_tail(msg.priority, msg.timestamp, msg.expires, headers, body, version)
                    if MESSAGE_TYPE not in headers else message_tail(msg, version),
                )
            )
        else:
            write_frame(outbox, message_frame(msg, queue.destination, sub.id, ack_id if version == "1.2" else None,
                                              version, message_tail(msg, version)), body)
        if auto:  # settled by written(), once the socket took these bytes
            try:  # a session's first auto-ack delivery makes its deque: free of cost on every other
                session.unsent.append((outbox.queued, queue, msg))  # type: ignore[union-attr]
            except AttributeError:
                session.unsent = deque(((outbox.queued, queue, msg),))
        if self.watch is not None and msg.watchers is not self.watch.nobody:  # (a call less when watched)
            self.watch.delivered(msg, sub)

    def written(self, session: Session, sent: int) -> None:
        """The first ``sent`` bytes of the session's outbox reached the socket: the auto-ack
        deliveries among them are done (deleted from the store)."""
        unsent = session.unsent
        done: list[StoredMessage] = []
        while unsent and unsent[0][0] <= sent:
            _, queue, msg = unsent.popleft()
            done.append(msg)
            inflight = queue.inflight
            inflight.pop(msg.seq, None)
            if queue.groups:
                queue.settled(msg)
            if not inflight and not queue.nsubs:
                self.deactivate_if_idle(queue)
        if done:
            self.remove_all(done)

    def take_unsent(self, session: Session) -> list[tuple[Queue[Subscription], StoredMessage]]:
        """Remove the auto-ack deliveries that never reached the socket, oldest first."""
        taken = [(queue, msg) for _, queue, msg in session.unsent or () if queue.inflight.pop(msg.seq, None) is msg]
        session.unsent = None
        for queue, msg in taken:
            if queue.groups:
                queue.settled(msg)
        return taken

    def discard_unsent(self, session: Session, queue: Queue[Subscription]) -> None:
        """``queue`` dies (an exchange subscription's private queue): forget its unsent deliveries."""
        unsent = session.unsent
        if unsent and any(entry[1] is queue for entry in unsent):
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
        self.store.write(Purge(name))
        queue = self.queues.get(name)
        kept: list[StoredMessage] = []
        if queue is not None:
            queue.window.clear()
            queue.take_parked()
            queue.aside = queue.aside_expires = queue.sifted = None
            # A Purge row deletes the rows of deliveries in flight too: write them back. The
            # store's contract orders a batch's purges before its inserts (storage/backend.py).
            kept = list(queue.inflight.values())
            for msg in kept:
                self.store.insert(msg)
        self.bounds.purged(name, kept)

    def restore(self, queue: Queue[Subscription], messages: list[StoredMessage]) -> None:
        """Parked messages (never delivered) go back into the window, each to its place; one
        beyond the window's boundary stays in the store only (freed for other brokers)."""
        for msg in messages:
            msg.held = queue.window.requeue(msg)
            if not msg.held:
                self.store.update(msg)

    # -- pacing (pacing.py) -------------------------------------------------------------------
    def pace(self, queue: Queue[Subscription], wake: Callable[[], None], now: float) -> float | None:
        """A producer that published into backed-up ``queue`` asks whether to wait: None, go on
        (it drained, or it held producers back for --queue-pace-timeout in this episode and its
        backlog may spill now); else ``wake`` is called when it drains, and the time returned
        (``now``'s clock) is when to ask again at the latest."""
        if self.queues.get(queue.name) is not queue or not queue.backed_up():
            return None
        pace = queue.pace
        if pace is None:
            pace = queue.pace = Pace()
        if pace.off:
            return None
        if pace.since is None:
            pace.since = now
        deadline = pace.since + self.config.queue_pace_timeout
        if now < deadline:
            pace.waiters.append(wake)
            return deadline
        pace.off = True
        self.pace_timeouts += 1
        log.debug("queue %s held its producers back for %g s (--queue-pace-timeout): its consumers are slower,"
                  " its backlog may go to the store", queue.name, self.config.queue_pace_timeout)
        pace.wake()
        return None



def settling_soon(msg: StoredMessage) -> bool:
    """The write-behind's rule, engine policy (``StoreEvents.hold_back`` hands it to each timed
    commit group): a buffered insert of a message this broker holds, delivered or waiting in a
    ready window, waits a flush.  Most settle within a flush interval, and their delete then
    cancels the insert; one nobody here holds has no consumer coming and goes to disk at once."""
    return msg.delivered or msg.held


class SharedDispatcher(Dispatcher):
    """The dispatcher on a store several brokers share (``Store.shared``): its pump is
    ``_pump_shared``, and a store of one broker keeps the plain pump, nothing added to its path.
    A subclass rather than ``self.pump = self._pump_shared`` per instance: the classes of the
    compiled engine (setup.py, mypyc) have fixed methods."""

    def pump(self, queue: Queue[Subscription]) -> None:
        self._pump_shared(queue)
