"""The broker: every frame after CONNECT goes through ``Broker.handle``.

Theory of operation
-------------------
One ``Broker`` owns all state and runs on the trio thread; nothing in it is
shared with other threads, so it needs no locks.  The server calls ``handle``
synchronously for each frame; the broker routes, writes MESSAGE/RECEIPT bytes
into the sessions' outboxes and buffers store writes, all without awaiting.
What must wait runs in ``run``'s background tasks: the store's commit loop
(whose commits release RECEIPTs through ``Receipts``), the pager that loads
ready messages of spilled queues, and the ack-timeout heap (``AckTimers``).

A queue exists in memory only while it has subscribers or deliveries in
flight (or, with a non-durable store, messages); otherwise its messages are
only in the store and the queue costs nothing.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import trio

from ..protocol import Frame
from ..storage.base import BindingRecord, Recovery, Store, StoredMessage, StoreError
from .config import BrokerConfig
from .control import Answer, Control
from .definitions import apply_definitions, load_definitions
from .delivery import message_frame, message_tail
from .destinations import Destination, Kind, parse_destination
from .errors import ClientError
from .exchanges import PRIVATE_QUEUE_PREFIX, Exchange, parse_weight
from .queue import Queue
from .receipts import Receipts
from .send_headers import DEFAULT_PRIORITY, seconds, send_options, user_headers
from .session import Outbox, Session
from .subscription import NO_DELIVERIES, AckMode, Subscription
from .timers import AckTimers
from .topics import WILDCARD, TopicRouter

log = logging.getLogger(__name__)

#: Header names that set a subscription's prefetch, first one present wins.
PREFETCH_HEADERS = ("prefetch", "activemq.prefetchSize", "prefetch-count")

_ACK_MODES = {mode.value: mode for mode in AckMode}


class Broker:
    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.queues: dict[str, Queue] = {}
        self.topics = TopicRouter()
        self.sessions: dict[str, Session] = {}
        self.exchanges: dict[str, Exchange] = {}
        self._private: dict[str, str] = {}  # private queue of an exchange subscription -> exchange
        self.control = Control(self)
        self._seq = 0
        self.receipts = Receipts(store)
        self._pages: deque[Queue] = deque()
        self._page_wanted = trio.Event()
        self.timers = AckTimers()
        self._handlers: dict[str, Callable[[Session, Frame], Answer | None]] = {
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit_tx,
            "ABORT": self._on_abort,
        }

    # -- lifecycle ------------------------------------------------------------
    async def open(self) -> Recovery:
        recovery = await self.store.open()
        self._seq = recovery.last_seq
        for name in await self.store.queue_names(PRIVATE_QUEUE_PREFIX):
            self.store.purge(name)  # private queues of subscriptions that a crash ended
        for record in recovery.exchanges:
            self.exchanges[record.name] = Exchange(record.name, dict(record.options))
        for binding in recovery.bindings:
            exchange = self.exchanges.get(binding.exchange)
            if exchange is not None:
                exchange.bindings[binding.queue] = binding.weight
        for exchange in self.exchanges.values():
            exchange.rebuild()
        if self.config.definitions:
            try:
                apply_definitions(self, load_definitions(self.config.definitions), self.config.definitions)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await self.store.close()  # release the database (and its lock): the start failed
                raise
        return recovery

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Background work for the broker's lifetime: store commits, paging, ack timeouts."""
        async with trio.open_nursery() as nursery:
            self.receipts.nursery = nursery
            nursery.start_soon(self.store.run)
            nursery.start_soon(self._pager)
            nursery.start_soon(self.timers.run, self._expire)
            task_status.started()

    async def close(self) -> None:
        await self.store.close()

    # -- sessions ---------------------------------------------------------------
    def open_session(self, session_id: str, version: str, outbox: Outbox, login: str | None = None) -> Session:
        session = Session(session_id, version, outbox, login)
        self.sessions[session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        """The connection is gone: abort its transactions, requeue what it held."""
        if session.closed:
            return
        session.closed = True
        session.transactions.clear()
        for sub in list(session.subscriptions.values()):
            self._drop_subscription(sub)
        session.subscriptions.clear()
        self.receipts.forget(session)
        self.sessions.pop(session.id, None)

    def resume(self, session: Session) -> None:
        """The session's outbox drained below its limit: give its subscriptions room again."""
        for sub in session.subscriptions.values():
            queue = sub.queue
            if queue is not None and sub.active:
                queue.make_ready(sub)
                queue.pump()

    # -- frames -----------------------------------------------------------------
    def handle(self, session: Session, frame: Frame) -> None:
        """Apply one client frame; raise ClientError to fail the connection."""
        handler = self._handlers.get(frame.command)
        if handler is None:
            raise ClientError(f"unknown command {frame.command!r}")
        answer = handler(session, frame)
        receipt = frame.headers.get("receipt")
        if callable(answer):
            self.receipts.send_later(session, receipt, answer)
        elif receipt is not None:
            self.receipts.send(session, receipt, answer)

    # -- SEND -------------------------------------------------------------------
    def _on_send(self, session: Session, frame: Frame) -> None:
        headers = frame.headers
        dest = parse_destination(headers.get("destination"))
        kind = dest.kind
        if kind is Kind.CONTROL:
            return self.control.run(dest.name, frame, session)
        if kind is Kind.TOPIC and dest.name.endswith(WILDCARD):
            raise ClientError(f"cannot SEND to a wildcard topic {dest.raw!r}")
        priority, ack_timeout = send_options(headers)
        if "transaction" in headers:
            self._transaction(session, headers["transaction"]).append(frame)
            return None
        self._route(dest, frame, priority, ack_timeout)
        return None

    def _route(self, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None) -> None:
        kind = dest.kind
        if kind is Kind.QUEUE:
            self.publish(dest.name, user_headers(frame.headers), frame.body, priority, ack_timeout)
        elif kind is Kind.EXCHANGE:
            queue = self._exchange_queue(dest, frame)
            if queue is not None:
                self.publish(queue, user_headers(frame.headers), frame.body, priority, ack_timeout)
        elif kind is Kind.TOPIC:
            self._publish_topic(dest, frame)
        else:
            raise ClientError(f"SEND to {dest.raw!r} is not supported")

    def _exchange_queue(self, dest: Destination, frame: Frame) -> str | None:
        """The queue an exchange SEND goes to (None: dropped); ClientError if it cannot be routed."""
        exchange = self.exchanges.get(dest.name)
        if exchange is None:
            raise ClientError(f"no exchange named {dest.name!r}")
        return exchange.route(dest.key, frame.headers)

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
        self._seq += 1
        msg = StoredMessage(
            self._seq, queue_name, priority, headers, body, int(time.time() * 1000), ack_timeout, redeliveries
        )
        self.store.insert(msg)
        queue = self.queues.get(queue_name)
        if queue is None:
            if self.store.durable:
                return msg  # nobody listens: the message waits in the store only
            queue = self._activate(queue_name)
        queue.push(msg)
        queue.pump()
        return msg

    def _publish_topic(self, dest: Destination, frame: Frame) -> None:
        subs = list(self.topics.matching(dest.name))
        if not subs:
            return
        self._seq += 1
        msg = StoredMessage(
            self._seq, dest.name, DEFAULT_PRIORITY, user_headers(frame.headers), frame.body, int(time.time() * 1000)
        )
        tails: dict[str, bytes] = {}
        for sub in subs:
            session = sub.session
            if not session.outbox.can_take_transient():
                continue  # transient: a subscriber that cannot keep up misses it
            ack_id = None
            if sub.ack_mode is not AckMode.AUTO:
                if len(sub.unacked) >= sub.prefetch:
                    continue
                ack_id = self._track(session, sub, msg)
            version = session.version
            tail = tails.get(version)
            if tail is None:
                tail = tails[version] = message_tail(msg, version)
            session.outbox.write(
                message_frame(msg, dest.raw, sub.id, ack_id if version == "1.2" else None, version, tail)
            )

    # -- delivery ---------------------------------------------------------------
    def _activate(self, name: str) -> Queue:
        durable = self.store.durable
        queue = Queue(name, self, self.config.window if durable else None, spilled=durable)
        self.queues[name] = queue
        return queue

    def _track(self, session: Session, sub: Subscription, msg: StoredMessage) -> str:
        """Record an unacked delivery and return its ack id."""
        ack_id = session.new_ack_id() if session.version == "1.2" else str(msg.seq)
        if sub.unacked is NO_DELIVERIES:
            sub.unacked = {}
        sub.unacked[ack_id] = msg
        session.deliveries[ack_id] = sub
        return ack_id

    def deliver(self, queue: Queue, sub: Subscription, msg: StoredMessage) -> None:
        """Hand one queue message to one subscription (called by Queue.pump)."""
        session = sub.session
        version = session.version
        if sub.ack_mode is AckMode.AUTO:
            ack_id = None
            self.store.delete(msg)
        else:
            ack_id = self._track(session, sub, msg)
            queue.inflight[msg.seq] = sub
            msg.delivered = True
            self.store.update(msg)
            timeout = msg.ack_timeout if msg.ack_timeout is not None else sub.ack_timeout
            if timeout is None:
                timeout = self.config.ack_timeout
            if timeout > 0:
                self.timers.arm(timeout, (session, ack_id, msg.seq, msg.redeliveries))
        session.outbox.write(
            message_frame(
                msg,
                queue.destination,
                sub.id,
                ack_id if version == "1.2" else None,
                version,
                message_tail(msg, version),
            )
        )

    def _settle(self, sub: Subscription, ack_id: str) -> StoredMessage:
        """Remove one unacked delivery from every index and return its message."""
        msg = sub.unacked.pop(ack_id)
        deliveries = sub.session.deliveries
        if deliveries.get(ack_id) is sub:  # 1.0/1.1 keys may be shared: see _ack_target
            del deliveries[ack_id]
        if sub.queue is not None:
            sub.queue.inflight.pop(msg.seq, None)
        return msg

    def _requeue(self, queue: Queue | None, msg: StoredMessage) -> None:
        """Put an unacked queue message back, counting a redelivery; dead-letter it past the limit."""
        if queue is None:
            return  # topic message: transient
        msg.delivered = False
        msg.redeliveries += 1
        limit = self.config.max_redeliveries
        if limit is not None and msg.redeliveries > limit:
            self._dead_letter(msg, f"redelivered more than {limit} times")
            return
        self.store.update(msg)
        queue.requeue(msg)

    def _dead_letter(self, msg: StoredMessage, reason: str) -> None:
        """Move a message to its queue's dead-letter queue (or drop it if it already is one)."""
        self.store.delete(msg)
        prefix = self.config.dlq_prefix
        if not prefix or msg.queue.startswith(prefix):
            log.warning("dropping message %d of queue %s: %s", msg.seq, msg.queue, reason)
            return
        headers = dict(msg.headers)
        headers["dead-letter-reason"] = reason
        headers["original-destination"] = "/queue/" + msg.queue
        self.publish(prefix + msg.queue, headers, msg.body, msg.priority)

    def _after_settle(self, sub: Subscription) -> None:
        queue = sub.queue
        if queue is None:
            return
        if sub.active:
            queue.make_ready(sub)
        queue.pump()
        if queue.idle:
            self._deactivate(queue)

    def _drop_private_queue(self, name: str) -> None:
        """An exchange subscription's private queue dies with its subscription (auto-delete)."""
        exchange_name = self._private.pop(name, None)
        if exchange_name is None:
            return
        exchange = self.exchanges.get(exchange_name)
        if exchange is not None and name in exchange.private:
            exchange.unbind(name)
        self.purge_queue(name)

    def _deactivate(self, queue: Queue) -> None:
        if self.store.durable or not queue.size:
            if self.queues.get(queue.name) is queue:
                del self.queues[queue.name]

    # -- SUBSCRIBE / UNSUBSCRIBE ------------------------------------------------
    def _on_subscribe(self, session: Session, frame: Frame) -> None:
        headers = frame.headers
        dest = parse_destination(headers.get("destination"))
        sub_id = headers.get("id")
        if sub_id is None:
            if session.version != "1.0":
                raise ClientError("SUBSCRIBE without id header")
            sub_id = dest.raw  # STOMP 1.0 made the id optional
        if sub_id in session.subscriptions:
            raise ClientError(f"duplicate subscription id {sub_id!r}")
        mode = _ACK_MODES.get(headers.get("ack", "auto"))
        if mode is None:
            raise ClientError(f"ack header must be auto, client or client-individual, not {headers['ack']!r}")
        prefetch = self._prefetch(headers)
        ack_timeout = seconds(headers, "ack-timeout")
        if dest.kind is Kind.QUEUE:
            queue = self.queues.get(dest.name) or self._activate(dest.name)
            sub = Subscription(sub_id, session, queue.destination, mode, prefetch, ack_timeout, queue)
            session.subscriptions[sub_id] = sub
            queue.add_subscriber(sub)
            queue.pump()
        elif dest.kind is Kind.TOPIC:
            sub = Subscription(sub_id, session, dest.raw, mode, prefetch, ack_timeout)
            session.subscriptions[sub_id] = sub
            self.topics.add(dest.name, sub)
        elif dest.kind is Kind.EXCHANGE:
            self._subscribe_exchange(session, sub_id, dest, mode, prefetch, ack_timeout)
        else:
            raise ClientError(f"cannot SUBSCRIBE to {dest.raw!r}")

    def _subscribe_exchange(
        self, session: Session, sub_id: str, dest: Destination, mode: AckMode, prefetch: int, ack_timeout: float | None
    ) -> None:
        """RabbitMQ's consumer-side form: bind a private queue with the given weight and consume it."""
        name = dest.name
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise ClientError(f"no exchange named {name!r}")
        queue_name = f"{PRIVATE_QUEUE_PREFIX}{name}.{session.id}.{sub_id}"
        exchange.bind(queue_name, parse_weight(dest.key or None))
        exchange.private.add(queue_name)
        self._private[queue_name] = name
        queue = self.queues.get(queue_name) or self._activate(queue_name)
        sub = Subscription(sub_id, session, queue.destination, mode, prefetch, ack_timeout, queue)
        session.subscriptions[sub_id] = sub
        queue.add_subscriber(sub)
        queue.pump()

    def declare_exchange(self, name: str, options: dict[str, str]) -> None:
        """Declare (idempotently) an exchange; redeclaring with other options is an error."""
        exchange = self.exchanges.get(name)
        if exchange is not None:
            if exchange.options != options:
                raise ClientError(f"exchange {name!r} exists with other options: {exchange.options}")
            return
        exchange = self.exchanges[name] = Exchange(name, options)
        self.store.save_exchange(exchange.record)

    def bind(self, exchange_name: str, queue: str, weight: int) -> None:
        exchange = self.exchanges[exchange_name]
        exchange.bind(queue, weight)
        self.store.save_binding(BindingRecord(exchange_name, queue, weight))

    def purge_queue(self, name: str) -> None:
        """Drop every ready message of a queue; deliveries in flight stay with their consumers."""
        self.store.purge(name)
        queue = self.queues.get(name)
        if queue is not None:
            queue.clear()
            # Store.purge deletes the rows of deliveries in flight too: write them back (a group
            # runs its purges before its inserts), or their requeue or a restart would lose them.
            for sub in set(queue.inflight.values()):
                for msg in sub.unacked.values():
                    if queue.inflight.get(msg.seq) is sub:
                        self.store.insert(msg)

    def _prefetch(self, headers: dict[str, str]) -> int:
        for name in PREFETCH_HEADERS:
            value = headers.get(name)
            if value is not None:
                try:
                    prefetch = int(value)
                except ValueError:
                    raise ClientError(f"{name} must be a positive integer, not {value!r}") from None
                if prefetch < 1:
                    raise ClientError(f"{name} must be a positive integer, not {value!r}")
                return min(prefetch, self.config.max_prefetch)
        return min(self.config.default_prefetch, self.config.max_prefetch)

    def _on_unsubscribe(self, session: Session, frame: Frame) -> None:
        sub_id = frame.headers.get("id")
        if sub_id is None and session.version == "1.0":
            sub_id = frame.headers.get("destination")
        if sub_id is None:
            raise ClientError("UNSUBSCRIBE without id header")
        sub = session.subscriptions.pop(sub_id, None)
        if sub is None:
            raise ClientError(f"no subscription with id {sub_id!r}")
        self._drop_subscription(sub)

    def _drop_subscription(self, sub: Subscription) -> None:
        sub.active = False
        queue = sub.queue
        for ack_id in list(sub.unacked):
            self._requeue(queue, self._settle(sub, ack_id))
        if queue is None:
            self.topics.remove(sub.destination[len("/topic/") :], sub)
            return
        queue.nsubs -= 1
        if not queue.nsubs:
            self._drop_private_queue(queue.name)
        queue.pump()
        if queue.idle:
            self._deactivate(queue)

    # -- ACK / NACK -------------------------------------------------------------
    def _ack_target(self, session: Session, headers: dict[str, str]) -> tuple[Subscription, str]:
        ack_id = headers.get("id")
        if ack_id is None:
            if session.version == "1.2":
                raise ClientError("ACK/NACK without id header")
            ack_id = headers.get("message-id")
            if ack_id is None:
                raise ClientError("ACK/NACK without message-id header")
        sub = session.deliveries.get(ack_id)
        named = headers.get("subscription")
        if named is not None and session.version != "1.2" and (sub is None or named != sub.id):
            # 1.0/1.1 name a delivery by message-id, which two subscriptions of one session
            # share when overlapping topic subscriptions both received the message.
            other = session.subscriptions.get(named)
            if other is None or ack_id not in other.unacked:
                raise ClientError(f"message {ack_id!r} was not delivered to subscription {named!r}")
            sub = other
        if sub is None and session.version != "1.2":  # the shared key's entry was settled already
            sub = next((s for s in session.subscriptions.values() if ack_id in s.unacked), None)
        if sub is None:
            raise ClientError(f"no unacked message with ack id {ack_id!r}")
        return sub, ack_id

    def _acked_ids(self, sub: Subscription, ack_id: str) -> list[str]:
        """The deliveries one ACK/NACK settles: cumulative for `client`, one otherwise."""
        if sub.ack_mode is not AckMode.CLIENT:
            return [ack_id]
        ids = []
        for candidate in sub.unacked:
            ids.append(candidate)
            if candidate == ack_id:
                break
        return ids

    def _on_ack(self, session: Session, frame: Frame) -> None:
        sub, ack_id = self._ack_target(session, frame.headers)
        tx = frame.headers.get("transaction")
        if tx is not None:
            self._transaction(session, tx).append(frame)
            return
        self._apply_ack(sub, ack_id)

    def _apply_ack(self, sub: Subscription, ack_id: str) -> None:
        for one in self._acked_ids(sub, ack_id):
            self.store.delete(self._settle(sub, one))
        self._after_settle(sub)

    def _on_nack(self, session: Session, frame: Frame) -> None:
        if session.version == "1.0":
            raise ClientError("NACK does not exist in STOMP 1.0")
        sub, ack_id = self._ack_target(session, frame.headers)
        tx = frame.headers.get("transaction")
        if tx is not None:
            self._transaction(session, tx).append(frame)
            return
        self._apply_nack(sub, ack_id, frame.headers.get("requeue", "true") != "false")

    def _apply_nack(self, sub: Subscription, ack_id: str, requeue: bool) -> None:
        for one in self._acked_ids(sub, ack_id):
            msg = self._settle(sub, one)
            if requeue:
                self._requeue(sub.queue, msg)
            elif self.config.dead_letter_rejected and sub.queue is not None:
                self._dead_letter(msg, "rejected with NACK requeue:false")
            else:
                self.store.delete(msg)
        self._after_settle(sub)

    # -- transactions -------------------------------------------------------------
    def _transaction(self, session: Session, tx: str) -> list[Frame]:
        frames = session.transactions.get(tx)
        if frames is None:
            raise ClientError(f"no transaction {tx!r} in progress")
        return frames

    def _tx_id(self, frame: Frame) -> str:
        tx = frame.headers.get("transaction")
        if tx is None:
            raise ClientError(f"{frame.command} without transaction header")
        return tx

    def _on_begin(self, session: Session, frame: Frame) -> None:
        tx = self._tx_id(frame)
        if tx in session.transactions:
            raise ClientError(f"transaction {tx!r} already in progress")
        session.transactions[tx] = []

    def _on_abort(self, session: Session, frame: Frame) -> None:
        tx = self._tx_id(frame)
        if session.transactions.pop(tx, None) is None:
            raise ClientError(f"no transaction {tx!r} in progress")

    def _on_commit_tx(self, session: Session, frame: Frame) -> None:
        """Apply a transaction's frames in one synchronous step, hence in one store group."""
        tx = self._tx_id(frame)
        frames = session.transactions.pop(tx, None)
        if frames is None:
            raise ClientError(f"no transaction {tx!r} in progress")
        # Validate everything before applying anything; exchange SENDs are routed here, so one
        # that cannot be routed fails the COMMIT before any frame of it is applied.
        routed: dict[int, str | None] = {}
        for i, f in enumerate(frames):
            if f.command != "SEND":
                self._ack_target(session, f.headers)
            else:
                dest = parse_destination(f.headers["destination"])
                if dest.kind is Kind.EXCHANGE:
                    routed[i] = self._exchange_queue(dest, f)
        for i, f in enumerate(frames):
            headers = f.headers
            if f.command == "SEND":
                if i not in routed:
                    self._route(parse_destination(headers["destination"]), f, *send_options(headers))
                elif (target := routed[i]) is not None:
                    self.publish(target, user_headers(headers), f.body, *send_options(headers))
                continue
            try:
                sub, ack_id = self._ack_target(session, headers)
            except ClientError:
                continue  # settled by an earlier cumulative ACK of this transaction
            if f.command == "ACK":
                self._apply_ack(sub, ack_id)
            else:
                self._apply_nack(sub, ack_id, headers.get("requeue", "true") != "false")

    # -- paging -------------------------------------------------------------------
    def request_page(self, queue: Queue) -> None:
        queue.loading = True
        self._pages.append(queue)
        self._page_wanted.set()

    async def _pager(self) -> None:
        while True:
            await self._page_wanted.wait()
            self._page_wanted = trio.Event()
            while self._pages:
                queue = self._pages.popleft()
                epoch, skipped = queue.epoch, queue.skipped
                limit = max(1, self.config.window - queue.size)
                try:
                    rows = await self.store.load_ready(queue.name, queue.boundary, limit)
                except StoreError as e:
                    # Ask again after a pause (a full disk refuses reads until the buffered
                    # writes commit): nothing else would, and the subscribers would starve.
                    log.warning("paging queue %s failed, retrying: %s", queue.name, e)
                    queue.loading = False
                    await trio.sleep(0.1)
                    if self.queues.get(queue.name) is queue:
                        queue.pump()  # requests the page again while it is still wanted
                        if queue.idle:
                            self._deactivate(queue)
                    continue
                queue.page_loaded(rows, epoch, skipped, limit)
                if self.queues.get(queue.name) is not queue:
                    continue
                queue.pump()
                if queue.idle:
                    self._deactivate(queue)

    # -- ack timeouts -----------------------------------------------------------------
    def _expire(self, session: Session, ack_id: str, seq: int, redeliveries: int) -> None:
        """An ack timeout fired: if that delivery is still unacked, requeue it.

        1.0/1.1 ack ids are message ids, so a later delivery of the same message to the same
        session has the same key: every requeue counts a redelivery, which tells them apart.
        """
        sub = session.deliveries.get(ack_id)
        if sub is None:
            return
        msg = sub.unacked.get(ack_id)
        if msg is None or msg.seq != seq or msg.redeliveries != redeliveries:
            return
        self._settle(sub, ack_id)
        if sub.queue is not None:
            sub.queue.expired(msg, sub)
        self._requeue(sub.queue, msg)
        self._after_settle(sub)
