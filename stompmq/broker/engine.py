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

    engine        frames -> the modules below; sessions; time; deadlines -> handlers
    control       /control verbs, over the dispatcher and the router
    transactions  BEGIN/COMMIT/ABORT, over the router and acks
    take          an administrator's get and move: a consumer of its own, over subscriptions and acks
    subscriptions SUBSCRIBE/UNSUBSCRIBE, over the dispatcher, acks and router; browse: browser:true
    routing       SEND -> queue / topic / exchange; exchanges and topics; temp_queues
    acks          ACK/NACK/ack timeouts: settle, requeue
    expiry        expired messages deep in the store, removed in batches
    dispatch      queues in memory, publish, deliver, paging requests, dead letters, policies
    queue         one queue's round-robin over subscribers; window: its ready window
    delays        delayed messages until due; policies, bounds: queue TTLs and bounds; clock
    session, timers, reads, receipts, delivery, destinations, exchanges, topics, ...
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, TypeVar

from ..protocol import Frame
from ..protocol.headers import headers_without
from ..storage.ages import QueueAges
from ..storage.base import BindingRecord, ExchangeRecord, Recovery, Store, StoredMessage, StoreError
from .acks import EXTEND_ACK, LATE, Acks, AckRun
from .browse import BrowseSubscription
from .config import BrokerConfig
from .control import Control, Deferred, QueuePage
from .delivery import BROKER_HEADERS
from .destinations import Kind, parse_destination
from .delays import DELAY_DUE, DELAY_PAGE_RETRY
from .dispatch import ACK_TIMEOUT, PAGE_RETRY, Dispatcher, SharedDispatcher
from .errors import ClientError
from .events import MessageEvents
from .tracestream import resume as resume_trace
from .exchanges import Exchange
from .expiry import EXPIRY_SWEEP
from .key_exchanges import BUILT_IN, KeyExchange
from .queue_settings import QueueSettings
from .queue import Queue
from .reads import Reads, StoreRead
from .receipts import Headers, Receipts
from .routing import Router
from .schedule_listing import Schedules
from .send_headers import SPECIAL_HEADERS, send_options, sender_headers, user_headers, without_facts
from .session import Outbox, Session, Subscription
from .streams import (
    STREAM_FOLLOW_RETRY,
    STREAM_READ_RETRY,
    STREAM_RETENTION,
    Stream,
    Streams,
    StreamSubscription,
)
from .stats import QueueStats
from .policy_apply import QUEUE_EXPIRY, AppliedPolicies
from .policy_match import Policy, typed
from .subscriptions import QUEUE_NAME_HEADER, Subscriptions, split_legacy_bindings
from .take import Take
from .temp_queues import TEMP_DESTINATION
from .timers import Deadlines
from .window import OrderKey
from .topics import WILDCARD, TopicRouter
from .transactions import HELD, Held, Transactions, requeue_wanted

log = logging.getLogger(__name__)

Handler = Callable[[Session, Frame], "Headers | Deferred[Headers] | Held | None"]
T = TypeVar("T")


class Broker:
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
        self.transactions = Transactions(self.router, self.acks, config)
        self.control = Control(self.dispatcher, self.router, self.streams, self.policies)
        self.schedules = Schedules(self.dispatcher.delayed, store)  # listed and cancelled by the API
        self.expiry = self.dispatcher.expiry
        self.clock = self.dispatcher.clock  # (read for every SEND's options)
        #: Who is told what happens to queue messages (events.watch swaps the hooks in)
        self.observers: list[MessageEvents] = []
        #: x-queue-name names the store found unused, for the SUBSCRIBE handled again at once
        self._vetted: set[str] = set()
        self._takes = 0  # takes made (take.py), numbering their sessions
        self._handlers: dict[str, Handler] = {
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit,
            "ABORT": self._on_abort,
        }
        self._timer_handlers: dict[str, Callable[..., None]] = {
            ACK_TIMEOUT: self.acks.expire,
            PAGE_RETRY: self.dispatcher.retry_page,
            STREAM_RETENTION: self.streams.expire,
            STREAM_READ_RETRY: self.streams.retry_read,
            STREAM_FOLLOW_RETRY: self.streams.retry_follow,
            DELAY_DUE: self.dispatcher.promote_due,
            DELAY_PAGE_RETRY: self.dispatcher.delayed.retry_page,
            EXPIRY_SWEEP: self.expiry.run,
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

    # -- what the management API reads and does (server/http.py) -------------------------------
    @property
    def queue_stats(self) -> Mapping[str, QueueStats]:
        """Counters of every queue in use since start (read-only; see stats.py)."""
        return MappingProxyType(self.dispatcher.stats)

    @property
    def page_reads(self) -> int:
        """Pages of ready messages asked of the store since start."""
        return self.dispatcher.page_reads

    @property
    def topic_drops(self) -> int:
        """Topic deliveries missed by slow or full subscribers since start (never stored)."""
        return self.router.topic_drops

    @property
    def topic_lagging(self) -> int:
        """Topic subscribers singled out as slow by --topic-block-timeout since start."""
        return self.router.overflow.total_lagging

    @property
    def reply_drops(self) -> int:
        """SENDs to reply queues of this broker that were gone (dropped, as RabbitMQ does)."""
        return self.router.temps.dropped

    def knows_queue(self, name: str) -> bool:
        """Is queue ``name`` in use here (active, used since start) or declared?  Any other queue
        exists only while the store holds messages of it (``/control/count-msgs``)."""
        dispatcher = self.dispatcher
        return name in dispatcher.stats or name in dispatcher.queues or name in dispatcher.bounds.declared

    def list_queues(self, after: str, limit: int) -> Deferred[QueuePage]:
        """A page of queues named after ``after``: ``answer(await fetch(store))``."""
        return self.control.list_queues(after, limit)

    def queue_ages(self, queue: str) -> Deferred[QueueAges]:
        """The timestamps of ``queue``'s oldest ready and oldest unacked message: ``answer(await fetch(store))``."""
        return self.control.queue_ages(queue)

    def peek(self, queue: str, count: int) -> Deferred[list[StoredMessage]]:
        """Up to ``count`` ready messages of ``queue``, consuming none: ``answer(await fetch(store))``."""
        return self.control.peek(queue, count)

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
                self.store.save_exchange(ExchangeRecord(name, kind, {}))
        bindings, legacy = split_legacy_bindings(recovery.bindings)
        for binding in legacy:
            self.store.delete_binding(binding.exchange, binding.queue, binding.routing_key)
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

    def declared_queues(self) -> dict[str, dict[str, Any]]:
        """Every declared queue with its declaration's settings (typed: ``policy_match.typed``)."""
        return {name: typed(settings.options()) for name, settings in sorted(self.dispatcher.bounds.declared.items())}

    def queue_settings(self, name: str) -> dict[str, dict[str, Any]]:
        """Queue ``name``'s effective settings: ``{key: {"value", "source", "policy"?}}``."""
        return self.dispatcher.bounds.effective(name).describe()

    def set_policies(self, policies: Iterable[Policy]) -> None:
        """The vhost's policies and operator policies now (policy_apply.py: applied at once)."""
        self.policies.replace(policies)

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
        """A RECEIPT that only waits for what is buffered now (DISCONNECT's)."""
        self.receipts.send(session, receipt_id)

    # -- frames ---------------------------------------------------------------------------------
    def handle(self, session: Session, frame: Frame) -> None:
        """Apply one client frame; raise ClientError to fail the connection."""
        if session.waiting is not None:  # an earlier frame waits for a store read: keep the order
            session.waiting.append(frame)
            return
        handler = self._handlers.get(frame.command)
        if handler is None:
            raise ClientError(f"unknown command {frame.command!r}")
        pacing = self.dispatcher.pacing
        if pacing:  # left by a publish outside any client's frame (a timer's): nobody to pace
            pacing.clear()
        before = self.dispatcher.published
        answer = handler(session, frame)
        if pacing:
            self._paced(session)
        self._answer(session, frame, answer, before)

    def _answer(self, session: Session, frame: Frame, answer: Headers | Deferred[Headers] | Held | None,
                before: StoredMessage | None) -> None:
        """Send the RECEIPT ``frame`` asked for with what its handler answered: now, once a
        store read answers (``Deferred``), or not yet (``Held`` by a transaction or a wait).
        ``before``: ``Dispatcher.published`` before the frame (a SEND that published changed it)."""
        if isinstance(answer, Held):
            return
        receipt = frame.headers.get("receipt")
        if isinstance(answer, Deferred):
            self._answer_later(session, receipt, answer)
        elif receipt is not None:
            message = self.dispatcher.published if frame.command == "SEND" else None
            if message is before:
                message = None
            self.receipts.send(session, receipt, answer, message)

    def handle_frames(self, session: Session, frames: list[Frame]) -> None:
        """Apply the frames of one socket read, in order, as ``handle`` would one by one, but in
        one call: a producer sends hundreds of SENDs per read, a client-ack consumer
        as many ACKs.  A SEND goes straight to ``_on_send`` (a plain one to a queue, without
        option headers, straight to ``Dispatcher.publish``), with the per-frame dispatch,
        pacing and receipt bookkeeping paid once per read.  A plain ACK is settled at once, so a
        later frame sees it settled, while the store deletes of a run of them wait for one call
        and each subscription is pumped once, after the run (``AckRun``); any other frame goes
        through ``handle`` once what came before it is finished.  RECEIPTs go out in order,
        each once what its frame buffered is.  A frame that makes the session wait for a store
        read (``Session.waiting``) queues the rest behind it.  A bad frame raises ClientError
        carrying its ``receipt_id``, after the frames before it took effect (an unexpected
        error, logged, becomes one too)."""
        waiting = session.waiting
        if waiting is not None:
            waiting.extend(frames)
            return
        acks, on_send, send_receipt = self.acks, self._on_send, self.receipts.send
        dispatcher = self.dispatcher
        # With stamp_user_id every SEND gets the sender's login: none takes the plain path below.
        publish, special, in_use = dispatcher.publish, SPECIAL_HEADERS, dispatcher.stats
        queue_kind = None if self.config.stamp_user_id else Kind.QUEUE
        pacing = self.dispatcher.pacing
        if pacing:  # left by a publish outside any client's frame (a timer's): nobody to pace
            pacing.clear()
        run = AckRun()
        receipts: list[str] = []  # of the ACKs in the run
        frame = frames[0]
        try:
            for index, frame in enumerate(frames):
                if session.closed:  # failed by a frame before (its ERROR is the last word)
                    return
                headers = frame.headers
                command = frame.command
                if command == "ACK" and "transaction" not in headers:
                    target = acks.target(session, headers)
                    receipt = headers.get("receipt")
                    if target is not None:
                        acks.settle_ack(run, *target)
                        if receipt is not None:
                            receipts.append(receipt)
                        continue
                    if run.subs:  # the late ACK's RECEIPT comes after those before it
                        self._finish_acks(session, run, receipts)
                    if receipt is not None:
                        send_receipt(session, receipt, LATE)
                    continue
                if run.subs:
                    self._finish_acks(session, run, receipts)
                if command == "SEND":
                    dest = parse_destination(headers.get("destination"))
                    if dest.kind is queue_kind and special.isdisjoint(headers):
                        # A plain message to a queue (no options, reply-to or transaction): what
                        # _on_send and Router.route would do, without either.
                        if dest.name not in in_use:
                            dispatcher.admit_queue(dest.name)
                        msg: StoredMessage | None = publish(
                            dest.name, headers_without(headers, BROKER_HEADERS), frame.body  # user_headers
                        )
                        answer = None
                    else:
                        before = dispatcher.published  # (a publish replaces it with what it made)
                        answer = on_send(session, frame)
                        msg = dispatcher.published
                        if msg is before:
                            msg = None
                    if answer is None:  # _answer's plain case, spelled out: once per SEND
                        receipt = headers.get("receipt")
                        if receipt is not None:
                            send_receipt(session, receipt, None, msg)
                        continue
                    self._answer(session, frame, answer, before)
                else:
                    if pacing:  # handle() starts its own pacing record
                        self._paced(session)
                    self.handle(session, frame)
                waiting = session.waiting
                if waiting is not None:  # an /amq/queue/ frame asked the store: the rest wait
                    waiting.extend(frames[index + 1 :])
                    return
        except ClientError as e:
            e.receipt_id = frame.headers.get("receipt")
            raise
        except Exception as e:
            log.exception("session %s: internal error handling %s", session.id, frame.command)
            raise ClientError("internal error", frame.headers.get("receipt")) from e
        finally:
            self._finish_acks(session, run, receipts)
            if pacing:
                self._paced(session)

    def _finish_acks(self, session: Session, run: AckRun, receipts: list[str]) -> None:
        self.acks.finish(run)
        for receipt in receipts:
            self.receipts.send(session, receipt)
        receipts.clear()

    def _paced(self, session: Session) -> None:
        """The frame just handled left queues backed up: its sender waits for them (pacing.py),
        except for queues it consumes itself (its own ACKs may be what drains them)."""
        backed_up = self.dispatcher.pacing
        paced = session.paced
        if paced is None:
            paced = session.paced = set()
        if not backed_up <= paced:  # else every SEND of a read into a backed-up queue paid for this
            own = {sub.queue for sub in session.subscriptions.values()}
            paced.update(queue for queue in backed_up if queue not in own)
        backed_up.clear()

    def pace(self, queue: Queue[Subscription], wake: Callable[[], None]) -> float | None:
        """Should a producer that published into backed-up ``queue`` (``Session.paced``) wait?
        None: go on.  Else ``wake`` is called when the queue drains, and the server's time
        returned is when to ask again at the latest (--queue-pace-timeout)."""
        return self.dispatcher.pace(queue, wake, self.deadlines.now)

    @property
    def pace_timeouts(self) -> int:
        """Queues that held their producers back for --queue-pace-timeout, since start."""
        return self.dispatcher.pace_timeouts

    def _answer_later(self, session: Session, receipt: str | None, deferred: Deferred[Headers]) -> None:
        entry = self.receipts.reserve(session, receipt) if receipt is not None else None

        def done(result: object) -> None:
            if entry is not None:
                self.receipts.answer(session, entry, deferred.answer(result))

        def failed(error: StoreError) -> None:
            if not session.closed:
                session.fail(f"store error: {error}", receipt)

        self.reads.submit(StoreRead(deferred.fetch, done, failed))

    def _release_receipts(self, session: Session, frames: list[Frame]) -> None:
        """A transaction ended: answer the receipts its frames asked for, in order."""
        for held in frames:
            receipt = held.headers.get("receipt")
            if receipt is not None:
                self.receipts.send(session, receipt)

    def _on_send(self, session: Session, frame: Frame) -> Headers | Deferred[Headers] | Held | None:
        headers = frame.headers
        dest = parse_destination(headers.get("destination"))
        kind = dest.kind
        if kind is Kind.CONTROL:
            if dest.name == EXTEND_ACK:  # the connection's own deliveries, not a resource's
                return self.acks.extend(session, headers)
            return self.control.run(dest.name, frame)
        if kind is Kind.QUEUE and dest.name not in self.dispatcher.stats:  # (the method only for a new one)
            self.dispatcher.admit_queue(dest.name)
        forwarded = sender_headers(headers, session.login, session.relay, self.config.stamp_user_id)
        if forwarded is not headers:
            frame = Frame(frame.command, forwarded, frame.body)
            headers = forwarded
        if kind is Kind.AMQ_QUEUE and not self._existing_queue(session, frame, dest.name):
            return HELD
        if kind is Kind.TOPIC and dest.name.endswith(WILDCARD):
            raise ClientError(f"cannot SEND to a wildcard topic {dest.raw!r}")
        options = send_options(headers, self.clock.wall_ms)
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith(TEMP_DESTINATION):
            frame = self.router.temps.rewrite_reply_to(session, frame)
        if "transaction" in headers:
            return self.transactions.hold(session, frame)
        return self.router.route(dest, frame, *options, session)

    def _on_subscribe(self, session: Session, frame: Frame) -> Held | None:
        headers = frame.headers
        dest = parse_destination(headers.get("destination"))
        if dest.kind is Kind.QUEUE:
            self.dispatcher.admit_queue(dest.name)
        elif dest.kind is Kind.AMQ_QUEUE and not self._existing_queue(session, frame, dest.name):
            return HELD
        named = headers.get(QUEUE_NAME_HEADER)
        if dest.kind is Kind.EXCHANGE and named and not self._unused_queue(session, frame, named):
            return HELD
        self.subscriptions.subscribe(session, dest, headers)
        return None

    def _existing_queue(self, session: Session, frame: Frame, name: str) -> bool:
        """``/amq/queue/NAME`` names an existing queue (RabbitMQ): True when this broker knows
        it (used since start).  Otherwise the store is asked (``_ask_store``)."""
        dispatcher = self.dispatcher
        if name in dispatcher.stats or name in dispatcher.queues:
            return True
        if not self.store.durable:
            raise ClientError(_no_queue(name))

        def fetch(store: Store) -> Awaitable[bool]:
            return store.queue_exists(name)

        def answer(exists: bool) -> str | None:
            if not exists:
                return _no_queue(name)
            dispatcher.queue_stats(name)  # known from now on
            return None

        self._ask_store(session, frame, fetch, answer)
        return False

    def _unused_queue(self, session: Session, frame: Frame, name: str) -> bool:
        """``x-queue-name`` names the private queue of an exchange subscription (RabbitMQ): a
        queue nobody uses, since the subscription's end deletes it.  ClientError if this broker
        knows it in use; True once the store has said it holds no messages (``_ask_store``)."""
        self.subscriptions.check_queue_name(name)
        if not self.store.durable or name in self._vetted:
            self._vetted.discard(name)
            return True

        def fetch(store: Store) -> Awaitable[int]:
            return store.count(name)

        def answer(count: int) -> str | None:
            if count:
                return f"{QUEUE_NAME_HEADER} {name!r} names a queue that holds messages"
            self._vetted.add(name)
            return None

        self._ask_store(session, frame, fetch, answer)
        return False

    def _ask_store(
        self, session: Session, frame: Frame, fetch: Callable[[Store], Awaitable[T]],
        answer: Callable[[T], str | None],
    ) -> None:
        """What ``frame`` names must be looked up in the store: it and every later frame of the
        session wait for the answer (``Session.waiting``), so their order holds; ``answer``
        says what is wrong with the result (the session fails) or None (the frames go on)."""
        session.waiting = deque([frame])

        def failed(error: StoreError) -> None:
            if not session.closed:
                session.fail(f"store error: {error}", frame.headers.get("receipt"))

        self.reads.submit(StoreRead(fetch, partial(self._checked, session, answer), failed))

    def _checked(self, session: Session, answer: Callable[[T], str | None], result: T) -> None:
        """The store answered for the first waiting frame: handle the frames that waited."""
        frames, session.waiting = session.waiting, None
        if session.closed or frames is None:
            return
        error = answer(result)
        if error is not None:
            session.fail(error, frames[0].headers.get("receipt"))
            return
        for frame in frames:
            try:
                self.handle(session, frame)  # a later frame may wait again: the rest queue behind it
            except ClientError as e:
                session.fail(e.message, frame.headers.get("receipt"))
                return
            except Exception:
                log.exception("session %s: internal error handling %s", session.id, frame.command)
                session.fail("internal error", frame.headers.get("receipt"))
                return
        if session.waiting is None:
            session.ungated()

    def _on_unsubscribe(self, session: Session, frame: Frame) -> None:
        self.subscriptions.unsubscribe(session, frame.headers)

    def _on_ack(self, session: Session, frame: Frame) -> Headers | Held | None:
        target = self.acks.target(session, frame.headers)
        if target is None:
            return LATE  # too late: nothing to settle, in a transaction or not
        if "transaction" in frame.headers:
            return self.transactions.hold(session, frame)
        self.acks.ack(*target)
        return None

    def _on_nack(self, session: Session, frame: Frame) -> Headers | Held | None:
        # NACK is not in STOMP 1.0, but RabbitMQ takes it there, naming the message by message-id
        # as a 1.0 ACK does, and clients written against RabbitMQ send it.
        target = self.acks.target(session, frame.headers)
        if target is None:
            return LATE
        requeue = requeue_wanted(frame.headers)
        if "transaction" in frame.headers:
            return self.transactions.hold(session, frame)
        self.acks.nack(*target, requeue)
        return None

    def _on_begin(self, session: Session, frame: Frame) -> None:
        self.transactions.begin(session, frame)

    def _on_commit(self, session: Session, frame: Frame) -> None:
        self._release_receipts(session, self.transactions.commit(session, frame))

    def _on_abort(self, session: Session, frame: Frame) -> None:
        self._release_receipts(session, self.transactions.abort(session, frame))


def _no_queue(name: str) -> str:
    return f"no queue named {name!r} (/amq/queue/NAME names an existing queue; use /queue/NAME to create one)"
