"""The engine: every frame after CONNECT goes through ``Broker.handle``.

Theory of operation
-------------------
One ``Broker`` owns all state and runs on one thread; nothing in it is shared
with other threads, so it needs no locks.  It is pure: it imports no trio,
owns no task, opens no socket and reads no clock.  The runtime in server/
drives it:

* ``advance(now, wall)`` gives it the time (trio's clock for deadlines, the
  wall clock for message timestamps) before handing it work;
* ``handle(session, frame)`` applies one client frame synchronously (the frames
  of one socket read: ``handle_frames``, in one step): MESSAGE
  and RECEIPT bytes go into the sessions' outboxes, store writes into the
  store's buffer (the store commits them in groups and its commit callback
  releases RECEIPTs through ``Receipts``);
* ``next_deadline()`` says when to call ``run_due()`` (ack timeouts, page-read
  retries); ``reads`` holds the store reads it wants (page loads, ``/control``
  counts), which the runtime performs and hands back;
* the waker set with ``set_waker`` is called when a deadline comes earlier or a
  read is queued, so the runtime never polls.

Who owns what (imports point down this list, never up):

    engine        the runtime's API; sessions; time; deadlines -> handlers
    frames        a session's frames -> their handlers, a read's frames in one step, RECEIPTs
    transactions  BEGIN/COMMIT/ABORT, over the kinds and acks
    kinds/        a destination kind each: its SEND, SUBSCRIBE, transaction plan and permissions
    control       /control verbs, over the dispatcher and the router
    take          an administrator's get and move: a consumer of its own, over subscriptions and acks
    subscriptions SUBSCRIBE/UNSUBSCRIBE, over the dispatcher, acks and router; browse: browser:true
    routing       what SENDs go through: exchanges and topics; temp_queues
    acks          ACK/NACK/ack timeouts: settle, requeue
    expiry        expired messages deep in the store, removed in batches
    dispatch      queues in memory, publish, deliver, paging requests, dead letters, policies
    queue         one queue's round-robin over subscribers; window: its ready window
    delays        delayed messages until due; policies, bounds: queue TTLs and bounds; clock
    session, timers, reads, receipts, delivery, destinations, exchanges, topics, ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from ..protocol import Frame
from ..storage.base import Recovery, Store, StoredMessage, StoreError, StreamMessage, StreamState
from ..storage.records import BindingRecord, ExchangeRecord
from ..storage.rows import DropBinding, SaveExchange
from .acks import Acks
from .aside_sweep import ASIDE_SWEEP
from .browse import BrowseSubscription
from .config import BrokerConfig
from .control import Control, Deferred
from .delays import DELAY_DUE, DELAY_PAGE_RETRY
from .dispatch import ACK_TIMEOUT, Dispatcher, SharedDispatcher
from .events import Observers
from .exchanges import Exchange
from .expiry import EXPIRY_SWEEP
from .frames import Frames
from .key_exchanges import BUILT_IN, KeyExchange
from .kinds.registry import bind_target
from .paging import PAGE_RETRY
from .policy_apply import QUEUE_EXPIRY, AppliedPolicies
from .policy_match import Policy
from .queries import Queries
from .queue import Queue
from .queue_settings import QueueSettings
from .reads import Reads, StoreRead
from .receipts import Headers, Receipts
from .routing import Router
from .schedule_listing import Schedules
from .send_headers import send_options, sender_headers, user_headers, without_facts
from .session import Outbox, Session, Subscription
from .stream_log import STREAM_FOLLOW_RETRY, STREAM_READ_RETRY, STREAM_RETENTION, Stream, StreamSubscription
from .streams import Streams
from .subscriptions import Subscriptions, split_legacy_bindings
from .take import Take
from .timers import Deadlines
from .topics import TopicRouter
from .tracestream import resume as resume_trace
from .transactions import Transactions
from .window import OrderKey


class Broker(Queries):
    """One vhost's engine: frames in, deliveries out (the queries the server reads: queries.py)."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config = config or BrokerConfig()
        self.sessions: dict[str, Session] = {}
        self.deadlines = Deadlines()
        self.reads = Reads()
        self.dispatcher = (SharedDispatcher if store.shared else Dispatcher)(store, config, self.deadlines, self.reads)
        self.receipts = Receipts(store, self.deadlines, self.dispatcher.withdraw, config.store_timeout)
        self.streams = Streams(self.dispatcher, config)
        self.acks = Acks(self.dispatcher, self.streams)
        self.router = Router(self.dispatcher, self.streams)
        self.policies = AppliedPolicies(self.dispatcher, lambda name: self.administer("delete/queue/" + name))
        self.subscriptions = Subscriptions(self.dispatcher, self.acks, self.router, self.streams, config, self.policies)
        self.transactions = Transactions(self.acks, config)
        self.control = Control(self.dispatcher, self.router, self.streams, self.policies, bind_target)
        self.schedules = Schedules(self.dispatcher.delayed, store)  # listed and cancelled by the API
        self.expiry = self.dispatcher.expiry
        self.clock = self.dispatcher.clock  # (read for every SEND's options)
        #: Who is told what happens to queue messages (``observers.watch``; events.py)
        self.observers = Observers((self.dispatcher, self.acks))
        self._takes = 0  # takes made (take.py), numbering their sessions
        self.frames = Frames(store, config, self.reads, self.dispatcher, self.receipts, self.router, self.streams,
                             self.acks, self.subscriptions, self.transactions, self.control)
        #: Apply one client frame; raise ClientError to fail the connection (``Frames.handle``).
        self.handle = self.frames.handle
        #: Apply the frames of one socket read, in order, in one call (``Frames.handle_frames``).
        self.handle_frames = self.frames.handle_frames
        self._timer_handlers: dict[str, Callable[..., None]] = {
            ACK_TIMEOUT: self.acks.expire,
            PAGE_RETRY: self.dispatcher.paging.retry,
            STREAM_RETENTION: self.streams.expire,
            STREAM_READ_RETRY: self.streams.retry_read,
            STREAM_FOLLOW_RETRY: self.streams.retry_follow,
            DELAY_DUE: self.dispatcher.promote_due,
            DELAY_PAGE_RETRY: self.dispatcher.delayed.retry_page,
            EXPIRY_SWEEP: self.expiry.run,
            ASIDE_SWEEP: self.dispatcher.aside.sweep,
            QUEUE_EXPIRY: self.policies.expire,
        }

    # -- what the runtime and the tests look at -------------------------------------------------
    @property
    def queues(self) -> dict[str, Queue[Subscription]]:
        return self.dispatcher.queues

    @property
    def exchanges(self) -> dict[str, Exchange]:
        return self.router.exchanges

    @property
    def key_exchanges(self) -> dict[str, KeyExchange]:
        """The direct, fanout and topic exchanges (the built-in ``amq.*`` ones too)."""
        return self.router.key_exchanges

    @property
    def topics(self) -> TopicRouter:
        return self.router.topics

    @property
    def streams_by_name(self) -> Mapping[str, Stream]:
        """Every stream this broker knows (read-only: offsets, subscribers, consumer groups)."""
        return MappingProxyType(self.streams.streams)

    # -- what the management API does (its queries: queries.py) -------------------------------
    def take(self, queue: str, count: int) -> Take:
        """Start taking up to ``count`` ready messages of ``queue`` for an administrator (take.py):
        once ``complete``, ``ack`` or ``move`` them; ``close`` puts back what is left."""
        self._takes += 1
        return Take(self.subscriptions, self.acks, self.dispatcher, f"take-{self._takes}", queue, count)

    def publish(self, queue: str, headers: dict[str, str], body: bytes, login: str | None = None) -> None:
        """Put a message in ``queue`` as a SEND with these headers from ``login`` would (priority,
        expiry, delay, the broker's own headers), outside any session; ClientError for a bad header
        or a full ``reject-publish`` queue."""
        headers = sender_headers(headers, login, False, self.config.stamp_user_id)
        priority, ack_timeout, expires, deliver_at = send_options(headers, self.clock.wall_ms)
        self.dispatcher.publish(queue, user_headers(headers), body, priority, ack_timeout, expires, deliver_at)

    def administer(self, path: str, headers: dict[str, str] | None = None) -> Headers | Deferred[Headers]:
        """Run the ``/control/PATH`` verb for an administrator, outside any session (ClientError
        if it is refused), exactly as a control SEND would."""
        frame = Frame("SEND", {**(headers or {}), "destination": "/control/" + path})
        return self.control.run(path, frame)

    # -- driving --------------------------------------------------------------------------------
    def recover(self, recovery: Recovery, stale_queues: list[str]) -> None:
        """Take over what the store recovered; purge ``stale_queues`` (private queues of
        subscriptions that a crash ended)."""
        self.clock.recovered(recovery.last_seq)
        for name in stale_queues:
            self.dispatcher.purge(name)
        recovered = {record.name for record in recovery.exchanges}
        for name, kind in BUILT_IN.items():
            if name not in recovered:  # stored so that bindings to it have their parent row
                self.store.write(SaveExchange(ExchangeRecord(name, kind, {})))
        bindings, legacy = split_legacy_bindings(recovery.bindings)
        for binding in legacy:
            self.store.write(DropBinding(binding.exchange, binding.queue, binding.routing_key))
        self.router.load_definitions(recovery.exchanges, bindings)
        self.streams.recover(recovery.streams)
        resume_trace(self)
        for record in recovery.queues:
            self.policies.declare(record.name, QueueSettings.parse(record.options), save=False)
        if self.store.durable:
            self.dispatcher.delayed.start()  # the delayed messages due first
            self.expiry.soon()  # what expired while the broker was stopped

    # -- what other brokers sharing the store did -------------------------------------------------
    def topic_subscriber_lagging(
        self, subscriber: Session, seconds: float, drain_rate: Callable[[Outbox], float], stalled: bool
    ) -> bool:
        """The server waited ``seconds`` for ``subscriber``'s outbox on behalf of a publisher
        (--topic-overflow block, --topic-block-timeout); ``stalled``: one wait lasted that long,
        its output never falling below the limit.  If so, or if a subscriber of the same topic
        drains its output ``LAG_RATIO`` times as fast (``drain_rate``, bytes/s, 0.0 unknown),
        ``subscriber`` is what holds the topic back: the publisher goes on without it (True).
        Otherwise the publisher is simply faster than every subscriber and flow control goes on."""
        return self.router.overflow.lag_if_slowest(
            subscriber, seconds, drain_rate, self.router.topic_peers(subscriber), stalled
        )

    def committed(self, ticket: int) -> None:
        """The store committed every group up to ``ticket`` (``StoreEvents.committed``): release
        the RECEIPTs it covers and the stream entries tail readers wait for."""
        self.receipts.committed(ticket)
        self.streams.committed(ticket)

    def commit_failed(self, ticket: int, error: StoreError) -> None:
        """``StoreEvents.commit_failed``: a commit attempt failed (its writes wait for the next)."""
        self.receipts.failed(ticket, error)

    def store_rejected(self, messages: list[StoredMessage], error: StoreError) -> None:
        """``StoreEvents.rejected`` for this engine's messages: none is delivered from now on,
        and the SEND that stored one is answered ERROR (before its group's receipts go out)."""
        for msg in messages:
            self.dispatcher.unstored(msg)
        self.receipts.rejected(messages, error)

    def store_changed(self, queue: str, first: OrderKey | None = None, passed: Sequence[int] | None = None) -> None:
        """Ready messages of ``queue`` ("*": of any queue) appeared in the store, ``first`` the
        lowest key among them (None: unknown), ``passed`` their seqs if another broker's selectors
        passed over them (dispatch.py)."""
        self.dispatcher.store_changed(queue, first, passed)
        if queue == "*":
            self.dispatcher.delayed.store_changed()

    def stream_changed(self, name: str, state: StreamState | None) -> None:
        """A stream as committed, by this broker or another (None: deleted; streams.py)."""
        self.streams.changed(name, state)

    def stream_marks_wanted(self) -> list[tuple[str, list[int]]]:
        """After ``recover``: per stream, the offsets whose entries rebuild its marks (streams.py)."""
        return self.streams.marks_wanted()

    def load_stream_marks(self, name: str, entries: Sequence[StreamMessage]) -> None:
        """The entries ``stream_marks_wanted`` asked for, read from the store, in order."""
        self.streams.load_marks(name, entries)

    def queue_wanted(self, queue: str) -> None:
        """Subscribers on another broker sharing the store want ``queue`` (claim on demand)."""
        self.dispatcher.queue_wanted(queue)

    def claims_renewed(self, lost: bool) -> None:
        """The store renewed this broker's lease after it was not trusted (``lost``: it had lapsed)."""
        self.dispatcher.claims_renewed(lost)

    def remote_topic(self, topic: str, headers: dict[str, str], body: bytes) -> None:
        """A topic message published through another broker: to this broker's subscribers."""
        headers, priority, expires = without_facts(headers)
        self.router.deliver_topic(topic, "/topic/" + topic, headers, body, None, priority, expires)

    def definitions_changed(self, exchanges: list[ExchangeRecord], bindings: list[BindingRecord]) -> None:
        self.router.load_definitions(exchanges, bindings)

    def set_policies(self, policies: Iterable[Policy]) -> None:
        """The vhost's policies and operator policies now (policy_apply.py: applied at once, to
        queues and streams)."""
        self.policies.replace(policies)
        self.streams.policies_changed()

    def set_waker(self, wake: Callable[[], None]) -> None:
        """``wake`` is called when a deadline comes earlier or a store read is queued."""
        self.deadlines.on_earlier = wake
        self.reads.on_pending = wake

    def advance(self, now: float, wall: float) -> None:
        """The time: ``now`` on the runtime's monotonic clock, ``wall`` in epoch seconds."""
        self.deadlines.now = now
        self.clock.advance(wall)

    def next_deadline(self) -> float:
        """When ``run_due`` has work next (infinity: nothing is armed)."""
        return self.deadlines.next_deadline()

    def run_due(self) -> None:
        """Run every deadline due at the time given last."""
        deadlines, handlers = self.deadlines, self._timer_handlers
        while (due := deadlines.pop_due()) is not None:
            kind, args = due
            handlers[kind](*args)

    def take_read(self) -> StoreRead | None:
        """The next store read the engine wants, if any."""
        pending = self.reads.pending
        return pending.popleft() if pending else None

    # -- sessions -------------------------------------------------------------------------------
    def open_session(
        self, session_id: str, version: str, outbox: Outbox, login: str | None = None, client_id: str | None = None,
        relay: bool = False,
    ) -> Session:
        session = Session(session_id, version, outbox, login, client_id, relay)
        self.sessions[session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        """The connection is gone: abort its transactions, requeue what it held."""
        if session.closed:
            return
        session.closed = True
        self.transactions.release(session)
        for sub in list(session.subscriptions.values()):
            self.subscriptions.drop(sub)
        session.subscriptions.clear()
        self.acks.release_unsent(session)
        if session.temp_queues:
            self.router.temps.close(session)
        self.receipts.forget(session)
        self.sessions.pop(session.id, None)

    def written(self, session: Session, sent: int) -> None:
        """The first ``sent`` bytes ever written to the session's outbox reached the socket:
        settle the auto-ack deliveries among them.  Call once per socket write, not per frame."""
        if session.unsent:
            self.dispatcher.written(session, sent)

    def resume(self, session: Session) -> None:
        """The session's outbox drained below its limit: give its subscriptions room again."""
        for sub in session.subscriptions.values():
            queue = sub.queue
            if isinstance(sub, StreamSubscription):
                self.streams.pump(sub)
            elif isinstance(sub, BrowseSubscription):
                self.subscriptions.browsers.pump(sub)
            elif queue is not None and sub.active:
                queue.make_ready(sub)
                self.dispatcher.pump(queue)

    def receipt(self, session: Session, receipt_id: str) -> None:
        """A RECEIPT that only waits for what is buffered now (a vhost declaration's, a token refresh's)."""
        self.receipts.send(session, receipt_id)

    def disconnect(self, session: Session, receipt_id: str | None) -> None:
        """DISCONNECT: its subscriptions end here, then its RECEIPT (if asked for) is queued.

        A client closes once that RECEIPT comes (STOMP 1.2's graceful disconnect) and reads
        nothing after it, while the connection still flushes its outbox before it closes and
        ``close_session`` runs: a delivery made meanwhile would follow the RECEIPT unread, and an
        auto-ack one, settled as its socket takes it, would be lost.  So the subscriptions are
        dropped now (what they hold unacked goes back, another consumer gets what comes next);
        auto-ack deliveries already in the outbox go out before the RECEIPT and settle as usual.
        """
        for sub in list(session.subscriptions.values()):
            self.subscriptions.drop(sub)
        session.subscriptions.clear()
        if receipt_id is not None:
            self.receipts.send(session, receipt_id)

    # -- frames (frames.py) ---------------------------------------------------------------------
    def pace(self, queue: Queue[Subscription], wake: Callable[[], None]) -> float | None:
        """Should a producer that published into backed-up ``queue`` (``Session.paced``) wait?
        None: go on.  Else ``wake`` is called when the queue drains, and the server's time
        returned is when to ask again at the latest (--queue-pace-timeout)."""
        return self.dispatcher.pace(queue, wake, self.deadlines.now)
