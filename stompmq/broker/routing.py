"""What SENDs are routed through: the exchanges, the topics' subscribers, the temporary queues.

Each destination kind routes its own SENDs (kinds/); the router owns the exchanges (declare, bind, unbind, delete, persisted
through the store) and the topic subscriptions.  Topic messages are never
stored: what happens when a subscriber cannot keep up is the topic overflow
policy (overflow.py).
"""

from __future__ import annotations

from ..protocol import Frame
from ..storage.records import BindingRecord, ExchangeRecord
from ..storage.rows import DropBinding, DropExchange, SaveBinding, SaveExchange
from .consumer import AckMode
from .delivery import message_frame, message_tail, write_frame
from .destinations import Destination
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import PRIVATE_QUEUE_PREFIX, Exchange, parse_weight
from .key_exchanges import BUILT_IN, KeyExchange, new_key_exchange
from .key_exchanges import TYPES as KEY_TYPES
from .overflow import BLOCK, DISCONNECT, TopicOverflow
from .queue_settings import QueueFull
from .send_headers import user_headers, with_facts
from .session import Session, Subscription
from .streams import Streams
from .temp_queues import TempQueues
from .topics import TopicRouter

#: The ERROR a slow topic subscriber gets under --topic-overflow disconnect.
SLOW_SUBSCRIBER = "slow topic subscriber: its unsent output exceeded the limit (--topic-overflow disconnect)"
#: An exchange binding whose target starts with this is a stream (``/stream/NAME``), stored under
#: that destination; queue bindings are stored under the bare queue name.
STREAM_TARGET = "/stream/"


class Router:
    def __init__(self, dispatcher: Dispatcher, streams: Streams) -> None:
        self.dispatcher = dispatcher
        self.streams = streams
        self.store = dispatcher.store
        self.topics = TopicRouter()
        self.overflow = TopicOverflow(dispatcher.config.topic_overflow)
        self.exchanges: dict[str, Exchange] = {}
        #: direct, fanout and topic exchanges (the amq.* ones always exist); ``/topic/X`` SENDs
        #: also go through amq.topic with key X, which is how durable topic subscriptions get them
        self.key_exchanges = {name: new_key_exchange(name, kind) for name, kind in BUILT_IN.items()}
        self.amq_topic = self.key_exchanges["amq.topic"]
        self.private: dict[str, str] = {}  # private queue of an exchange subscription -> exchange
        self.temps = TempQueues(dispatcher)

    @property
    def topic_drops(self) -> int:
        """Topic deliveries missed by subscribers that could not take them (any policy)."""
        return self.overflow.total_dropped

    # -- SEND (the kinds route: kinds/) -----------------------------------------------------
    def publish_bound(
        self, exchange: KeyExchange, key: str, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None,
    ) -> None:
        """A copy of the message in every queue bound to ``exchange`` with a key matching ``key``
        (a full ``reject-publish`` queue refuses its copy; the others keep theirs)."""
        headers = user_headers(frame.headers)
        refused: QueueFull | None = None
        for queue in exchange.route(key):
            try:
                self.dispatcher.publish(queue, headers, frame.body, priority, ack_timeout, expires, deliver_at)
            except QueueFull as e:
                refused = e
        if refused is not None:
            raise refused

    def exchange_queue(self, dest: Destination, frame: Frame) -> str | None:
        """The queue an exchange SEND goes to (None: dropped); ClientError if it cannot be routed."""
        return self.exchange(dest.name).route(dest.key, frame.headers)

    def publish_topic(
        self, dest: Destination, frame: Frame, publisher: Session, priority: int, expires: int | None
    ) -> None:
        """To this broker's subscribers and, through the store, the other brokers' (the SEND's
        priority and expiry travel as the headers a remote ``deliver_topic`` reads them from)."""
        headers = user_headers(frame.headers)
        self.store.publish_topic(dest.name, with_facts(headers, priority, expires), frame.body)
        self.deliver_topic(dest.name, dest.raw, headers, frame.body, publisher, priority, expires)

    def topic_peers(self, session: Session) -> set[Session]:
        """The other live, non-lagging sessions subscribed to what ``session``'s topic
        subscriptions receive (the subscribers it is compared with under --topic-block-timeout)."""
        peers: set[Session] = set()
        for sub in session.subscriptions.values():
            if sub.queue is None and sub.destination.startswith("/topic/"):
                peers.update(p.session for p in self.topics.sharing(sub.destination[len("/topic/") :]))
        peers.discard(session)
        return {p for p in peers if not p.closed and not p.topic_lagging}

    def deliver_topic(
        self, topic: str, destination: str, headers: dict[str, str], body: bytes, publisher: Session | None,
        priority: int, expires: int | None,
    ) -> None:
        """Hand a topic message to this broker's subscribers of ``topic``.  ``publisher`` None:
        it came from another broker sharing the store, whose publisher cannot be slowed from
        here, so under ``block`` a slow subscriber's outbox takes it anyway (bounded by the
        hard limit plus what the other brokers publish meanwhile)."""
        subs = list(self.topics.matching(topic))
        if not subs:
            return
        dispatcher, overflow = self.dispatcher, self.overflow
        block = overflow.policy is BLOCK
        msg = dispatcher.new_message(topic, headers, body, priority, expires)
        tails: dict[str, bytes] = {}
        slow: list[Subscription] = []
        for sub in subs:
            session = sub.session
            if session.closed or (sub.selector is not None and not sub.selector.matches(msg)):
                continue
            outbox = session.outbox
            holds = block and not session.topic_lagging  # may hold the publisher back
            if not holds and (
                not outbox.can_take_transient()
                # an episode of misses lasts until its output is below the soft limit again:
                # the subscriber gets runs of messages, not every n-th, and the log two lines
                or (sub in overflow.missing and not outbox.has_room())
            ):
                slow.append(sub)
                continue
            ack_id = None
            if sub.ack_mode is not AckMode.AUTO:
                if len(sub.unacked) >= sub.prefetch:
                    overflow.drop(sub, "at its prefetch limit")
                    continue
                ack_id = dispatcher.track(session, sub, msg)
            if overflow.missing:
                overflow.delivered(sub)
            version = session.version
            tail = tails.get(version)
            if tail is None:
                tail = tails[version] = message_tail(msg, version)
            write_frame(outbox, message_frame(msg, destination, sub.id, ack_id if version == "1.2" else None, version,
                                              tail), msg.body)
            if holds and publisher is not None and not outbox.can_take_transient():
                if publisher.throttled_by is None:
                    publisher.throttled_by = {}
                publisher.throttled_by[outbox] = session
        for sub in slow:
            if overflow.policy is DISCONNECT:
                if not sub.session.closed:
                    overflow.disconnect(sub)
                    sub.session.fail(SLOW_SUBSCRIBER, None)
            else:
                overflow.drop(sub, "too slow")

    # -- exchanges ----------------------------------------------------------------------------
    def load_definitions(self, exchanges: list[ExchangeRecord], bindings: list[BindingRecord]) -> None:
        """Take the stored exchanges and bindings as they are now (at start, or after another
        broker sharing the store changed them).  An unchanged exchange keeps its object (and its
        counters); this broker's private bindings stay; the built-in amq.* exchanges always exist."""
        hashed = {r.name: r for r in exchanges if r.type not in KEY_TYPES}
        keyed = {r.name: r.type for r in exchanges if r.type in KEY_TYPES} | BUILT_IN
        weights: dict[str, dict[str, int]] = {name: {} for name in hashed}
        keys: dict[str, set[tuple[str, str]]] = {name: set() for name in keyed}
        for b in bindings:
            if b.exchange in weights:
                weights[b.exchange][b.queue] = b.weight
            elif b.exchange in keys:
                keys[b.exchange].add((b.queue, b.routing_key))
        for table, wanted in ((self.exchanges, hashed), (self.key_exchanges, keyed)):
            for name in [name for name in table if name not in wanted]:
                for queue in table.pop(name).private:
                    self.private.pop(queue, None)  # its exchange was deleted elsewhere
        for name, record in hashed.items():
            exchange = self.exchanges.get(name)
            private = {} if exchange is None else {q: exchange.bindings[q] for q in exchange.private}
            if exchange is None or exchange.options != record.options:
                replaced = Exchange(name, dict(record.options))
                if exchange is not None:
                    replaced.private = exchange.private
                exchange = self.exchanges[name] = replaced
            new = {**weights[name], **private}
            if new != exchange.bindings:
                exchange.bindings = new
                exchange.rebuild()
        for name, kind in keyed.items():
            key_exchange = self.key_exchanges.get(name)
            if key_exchange is None or key_exchange.type != kind:
                replaced_keyed = new_key_exchange(name, kind)
                if key_exchange is not None:
                    replaced_keyed.private = key_exchange.private
                    for queue, key in key_exchange.bindings:
                        if queue in key_exchange.private:
                            replaced_keyed.bind(queue, key)
                key_exchange = self.key_exchanges[name] = replaced_keyed
            wanted_keys = keys[name] | {(q, k) for q, k in key_exchange.bindings if q in key_exchange.private}
            for queue, key in [pair for pair in key_exchange.bindings if pair not in wanted_keys]:
                key_exchange.unbind(queue, key)
            for queue, key in wanted_keys:
                key_exchange.bind(queue, key)
        self.amq_topic = self.key_exchanges["amq.topic"]

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise ClientError(f"no exchange named {name!r}")
        return exchange

    def key_exchange(self, name: str) -> KeyExchange:
        exchange = self.key_exchanges.get(name)
        if exchange is None:
            raise ClientError(f"no direct, fanout or topic exchange named {name!r}")
        return exchange

    def declare_key_exchange(self, name: str, kind: str) -> None:
        """Declare (idempotently) a direct, fanout or topic exchange."""
        if name in self.exchanges:
            raise ClientError(f"exchange {name!r} exists with type consistent-hash")
        exchange = self.key_exchanges.get(name)
        if exchange is not None:
            if exchange.type != kind:
                raise ClientError(f"exchange {name!r} exists with type {exchange.type}")
            return
        self.key_exchanges[name] = new_key_exchange(name, kind)
        self.store.write(SaveExchange(ExchangeRecord(name, kind, {})))

    def bind_key(self, exchange_name: str, queue: str, key: str) -> None:
        exchange = self.key_exchange(exchange_name)
        if queue in exchange.private:
            raise ClientError(f"queue {queue!r} is a subscription's private queue")
        exchange.bind(queue, key)
        self.store.write(SaveBinding(BindingRecord(exchange_name, queue, 1, key)))

    def unbind_key(self, exchange_name: str, queue: str, key: str) -> None:
        exchange = self.key_exchange(exchange_name)
        if (queue, key) not in exchange.bindings or queue in exchange.private:
            raise ClientError(f"queue {queue!r} is not bound to exchange {exchange_name!r} with key {key!r}")
        exchange.unbind(queue, key)
        self.store.write(DropBinding(exchange_name, queue, key))

    def declare_exchange(self, name: str, options: dict[str, str]) -> None:
        """Declare (idempotently) an exchange; redeclaring with other options is an error."""
        if name in self.key_exchanges:
            raise ClientError(f"exchange {name!r} exists with type {self.key_exchanges[name].type}")
        exchange = self.exchanges.get(name)
        if exchange is not None:
            if exchange.options != options:
                raise ClientError(f"exchange {name!r} exists with other options: {exchange.options}")
            return
        exchange = self.exchanges[name] = Exchange(name, options)
        self.store.write(SaveExchange(exchange.record))

    def delete_exchange(self, name: str) -> None:
        if name in BUILT_IN:
            raise ClientError(f"exchange {name!r} is built in")
        if self.key_exchanges.pop(name, None) is None:
            self.exchange(name)
            del self.exchanges[name]
        self.store.write(DropExchange(name))

    def bind(self, exchange_name: str, queue: str, weight: int) -> None:
        """Bind a queue (or update its weight) and persist the binding."""
        exchange = self.exchange(exchange_name)
        if queue in exchange.private:
            raise ClientError(f"queue {queue!r} is a subscription's private queue")
        exchange.bind(queue, weight)
        self.store.write(SaveBinding(BindingRecord(exchange_name, queue, weight)))

    def unbind(self, exchange_name: str, queue: str) -> None:
        exchange = self.exchange(exchange_name)
        if queue not in exchange.bindings or queue in exchange.private:
            raise ClientError(f"queue {queue!r} is not bound to exchange {exchange_name!r}")
        exchange.unbind(queue)
        self.store.write(DropBinding(exchange_name, queue))

    def unbind_everywhere(self, queue: str) -> None:
        """A deleted queue leaves every exchange it was bound to."""
        for exchange in self.exchanges.values():
            if queue in exchange.bindings:
                exchange.unbind(queue)
                self.store.write(DropBinding(exchange.name, queue))
        for keyed in self.key_exchanges.values():
            for key in keyed.keys_of(queue):
                keyed.unbind(queue, key)
                self.store.write(DropBinding(keyed.name, queue, key))

    def is_bound(self, queue: str) -> bool:
        """Is ``queue`` bound to any exchange (declared or private bindings alike)?"""
        return any(queue in exchange.bindings for exchange in self.exchanges.values()) or any(
            keyed.keys_of(queue) for keyed in self.key_exchanges.values()
        )

    def bind_private(self, exchange_name: str, queue: str, weight_or_key: str) -> None:
        """Bind the private queue of a SUBSCRIBE /exchange/NAME/REST (never stored): REST is the
        weight for a consistent-hash exchange, the binding key for the others."""
        keyed = self.key_exchanges.get(exchange_name)
        if keyed is not None:
            keyed.bind(queue, weight_or_key)
            keyed.private.add(queue)
        else:
            exchange = self.exchange(exchange_name)
            exchange.bind(queue, parse_weight(weight_or_key or None))
            exchange.private.add(queue)
        self.private[queue] = exchange_name

    def drop_private(self, queue: str) -> bool:
        """Unbind a subscription's private queue; False if ``queue`` is not one."""
        exchange_name = self.private.pop(queue, None)
        if exchange_name is None:
            return False
        exchange = self.exchanges.get(exchange_name)
        if exchange is not None and queue in exchange.private:
            exchange.unbind(queue)
        keyed = self.key_exchanges.get(exchange_name)
        if keyed is not None and queue in keyed.private:
            keyed.private.discard(queue)
            for key in keyed.keys_of(queue):
                keyed.unbind(queue, key)
        return True

    def bind_durable(self, queue: str, pattern: str) -> None:
        """A queue that collects one topic (a durable topic subscription's, a virtual topic's
        consumer queue) gets exactly this amq.topic binding (stored)."""
        exchange = self.amq_topic
        for key in exchange.keys_of(queue):
            if key != pattern:
                exchange.unbind(queue, key)
                self.store.write(DropBinding(exchange.name, queue, key))
        if (queue, pattern) not in exchange.bindings:
            exchange.bind(queue, pattern)
            self.store.write(SaveBinding(BindingRecord(exchange.name, queue, 1, pattern)))


def private_queue_name(exchange: str, node: str, session_id: str, sub_id: str) -> str:
    """The private queue of a subscription; ``node`` tells brokers sharing a store apart."""
    owner = f"{node}.{session_id}" if node else session_id
    return f"{PRIVATE_QUEUE_PREFIX}{exchange}.{owner}.{sub_id}"
