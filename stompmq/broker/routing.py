"""Where a SEND goes: a queue, a topic's subscribers, or a queue an exchange picks.

The router also owns the exchanges (declare, bind, unbind, delete, persisted
through the store) and the topic subscriptions.  Topic messages are never
stored: a subscriber whose connection cannot take one more transient message
misses it, and a client-ack topic subscriber at its prefetch limit too.
"""

from __future__ import annotations

from ..protocol import Frame
from ..storage.base import BindingRecord, ExchangeRecord
from .delivery import message_frame, message_tail
from .destinations import Destination, Kind
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import PRIVATE_QUEUE_PREFIX, Exchange
from .send_headers import user_headers
from .session import AckMode
from .topics import TopicRouter


class Router:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.store = dispatcher.store
        self.topics = TopicRouter()
        self.exchanges: dict[str, Exchange] = {}
        self.private: dict[str, str] = {}  # private queue of an exchange subscription -> exchange
        self.topic_drops = 0  # topic deliveries missed by subscribers that could not take them

    # -- SEND ---------------------------------------------------------------------------------
    def route(self, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None) -> None:
        kind = dest.kind
        if kind is Kind.QUEUE:
            self.dispatcher.publish(dest.name, user_headers(frame.headers), frame.body, priority, ack_timeout)
        elif kind is Kind.EXCHANGE:
            queue = self.exchange_queue(dest, frame)
            if queue is not None:
                self.dispatcher.publish(queue, user_headers(frame.headers), frame.body, priority, ack_timeout)
        elif kind is Kind.TOPIC:
            self.publish_topic(dest, frame)
        else:
            raise ClientError(f"SEND to {dest.raw!r} is not supported")

    def exchange_queue(self, dest: Destination, frame: Frame) -> str | None:
        """The queue an exchange SEND goes to (None: dropped); ClientError if it cannot be routed."""
        return self.exchange(dest.name).route(dest.key, frame.headers)

    def publish_topic(self, dest: Destination, frame: Frame) -> None:
        headers = user_headers(frame.headers)
        self.store.publish_topic(dest.name, headers, frame.body)  # the other brokers' subscribers
        self.deliver_topic(dest.name, dest.raw, headers, frame.body)

    def deliver_topic(self, topic: str, destination: str, headers: dict[str, str], body: bytes) -> None:
        """Hand a topic message to this broker's subscribers of ``topic``."""
        subs = list(self.topics.matching(topic))
        if not subs:
            return
        dispatcher = self.dispatcher
        msg = dispatcher.new_message(topic, headers, body)
        tails: dict[str, bytes] = {}
        for sub in subs:
            session = sub.session
            if not session.outbox.can_take_transient():
                self.topic_drops += 1
                continue  # transient: a subscriber that cannot keep up misses it
            ack_id = None
            if sub.ack_mode is not AckMode.AUTO:
                if len(sub.unacked) >= sub.prefetch:
                    self.topic_drops += 1
                    continue
                ack_id = dispatcher.track(session, sub, msg)
            version = session.version
            tail = tails.get(version)
            if tail is None:
                tail = tails[version] = message_tail(msg, version)
            session.outbox.write(
                message_frame(msg, destination, sub.id, ack_id if version == "1.2" else None, version, tail)
            )

    # -- exchanges ----------------------------------------------------------------------------
    def load_definitions(self, exchanges: list[ExchangeRecord], bindings: list[BindingRecord]) -> None:
        """Take the stored exchanges and bindings as they are now (at start, or after another
        broker sharing the store changed them).  An unchanged exchange keeps its object (and its
        counters); this broker's private bindings stay."""
        wanted: dict[str, dict[str, int]] = {record.name: {} for record in exchanges}
        for binding in bindings:
            if binding.exchange in wanted:
                wanted[binding.exchange][binding.queue] = binding.weight
        for name in [name for name in self.exchanges if name not in wanted]:
            for queue in self.exchanges.pop(name).private:
                self.private.pop(queue, None)  # its exchange was deleted elsewhere
        for record in exchanges:
            exchange = self.exchanges.get(record.name)
            private = {} if exchange is None else {queue: exchange.bindings[queue] for queue in exchange.private}
            if exchange is None or exchange.options != record.options:
                replaced = Exchange(record.name, dict(record.options))
                if exchange is not None:
                    replaced.private = exchange.private
                exchange = self.exchanges[record.name] = replaced
            new = {**wanted[record.name], **private}
            if new != exchange.bindings:
                exchange.bindings = new
                exchange.rebuild()

    def exchange(self, name: str) -> Exchange:
        exchange = self.exchanges.get(name)
        if exchange is None:
            raise ClientError(f"no exchange named {name!r}")
        return exchange

    def declare_exchange(self, name: str, options: dict[str, str]) -> None:
        """Declare (idempotently) an exchange; redeclaring with other options is an error."""
        exchange = self.exchanges.get(name)
        if exchange is not None:
            if exchange.options != options:
                raise ClientError(f"exchange {name!r} exists with other options: {exchange.options}")
            return
        exchange = self.exchanges[name] = Exchange(name, options)
        self.store.save_exchange(exchange.record)

    def delete_exchange(self, name: str) -> None:
        self.exchange(name)
        del self.exchanges[name]
        self.store.delete_exchange(name)

    def bind(self, exchange_name: str, queue: str, weight: int) -> None:
        """Bind a queue (or update its weight) and persist the binding."""
        exchange = self.exchange(exchange_name)
        if queue in exchange.private:
            raise ClientError(f"queue {queue!r} is a subscription's private queue")
        exchange.bind(queue, weight)
        self.store.save_binding(BindingRecord(exchange_name, queue, weight))

    def unbind(self, exchange_name: str, queue: str) -> None:
        exchange = self.exchange(exchange_name)
        if queue not in exchange.bindings or queue in exchange.private:
            raise ClientError(f"queue {queue!r} is not bound to exchange {exchange_name!r}")
        exchange.unbind(queue)
        self.store.delete_binding(exchange_name, queue)

    def unbind_everywhere(self, queue: str) -> None:
        """A deleted queue leaves every exchange it was bound to."""
        for exchange in self.exchanges.values():
            if queue in exchange.bindings:
                exchange.unbind(queue)
                self.store.delete_binding(exchange.name, queue)

    def bind_private(self, exchange_name: str, queue: str, weight: int) -> None:
        """Bind the private queue of a SUBSCRIBE /exchange/NAME/WEIGHT (never stored)."""
        exchange = self.exchange(exchange_name)
        exchange.bind(queue, weight)
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
        return True


def private_queue_name(exchange: str, node: str, session_id: str, sub_id: str) -> str:
    """The private queue of a subscription; ``node`` tells brokers sharing a store apart."""
    owner = f"{node}.{session_id}" if node else session_id
    return f"{PRIVATE_QUEUE_PREFIX}{exchange}.{owner}.{sub_id}"
