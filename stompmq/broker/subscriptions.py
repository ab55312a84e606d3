"""SUBSCRIBE and UNSUBSCRIBE: a subscription joins a queue's round-robin or a topic's set.

``SUBSCRIBE /exchange/NAME/WEIGHT`` is RabbitMQ's consumer-side form of the
consistent-hash exchange: a private queue (``amq.gen.`` prefix) is bound with
that weight for the subscription's lifetime and purged when it ends.
Ending a subscription requeues what it held unacked.
"""

from __future__ import annotations

from .acks import Acks
from .config import BrokerConfig
from .destinations import Destination, Kind
from .dispatch import Dispatcher
from .errors import ClientError
from .exchanges import parse_weight
from .routing import Router, private_queue_name
from .send_headers import seconds
from .session import AckMode, Session, Subscription

#: Header names that set a subscription's prefetch, first one present wins.
PREFETCH_HEADERS = ("prefetch", "activemq.prefetchSize", "prefetch-count")

_ACK_MODES = {mode.value: mode for mode in AckMode}


class Subscriptions:
    def __init__(self, dispatcher: Dispatcher, acks: Acks, router: Router, config: BrokerConfig) -> None:
        self.dispatcher = dispatcher
        self.acks = acks
        self.router = router
        self.config = config

    def subscribe(self, session: Session, dest: Destination, headers: dict[str, str]) -> None:
        sub_id = headers.get("id")
        if sub_id is None:
            if session.version != "1.0":
                raise ClientError("SUBSCRIBE without id header")
            sub_id = dest.raw  # STOMP 1.0 made the id optional
        if sub_id in session.subscriptions:
            raise ClientError(f"duplicate subscription id {sub_id!r}")
        if len(session.subscriptions) >= self.config.max_subscriptions:
            raise ClientError(f"too many subscriptions on this connection (at most {self.config.max_subscriptions})")
        mode = _ACK_MODES.get(headers.get("ack", "auto"))
        if mode is None:
            raise ClientError(f"ack header must be auto, client or client-individual, not {headers['ack']!r}")
        prefetch = self._prefetch(headers)
        ack_timeout = seconds(headers, "ack-timeout")
        if dest.kind is Kind.QUEUE:
            queue_name = dest.name
        elif dest.kind is Kind.EXCHANGE:
            queue_name = private_queue_name(dest.name, self.dispatcher.store.node_id, session.id, sub_id)
            self.router.bind_private(dest.name, queue_name, parse_weight(dest.key or None))
        elif dest.kind is Kind.TOPIC:
            sub = Subscription(sub_id, session, dest.raw, mode, prefetch, ack_timeout)
            session.subscriptions[sub_id] = sub
            self.router.topics.add(dest.name, sub)
            return
        else:
            raise ClientError(f"cannot SUBSCRIBE to {dest.raw!r}")
        queue = self.dispatcher.activate(queue_name)
        sub = Subscription(sub_id, session, queue.destination, mode, prefetch, ack_timeout, queue)
        session.subscriptions[sub_id] = sub
        queue.add_subscriber(sub)
        self.dispatcher.pump(queue)

    def _prefetch(self, headers: dict[str, str]) -> int:
        limit = self.config.max_prefetch
        for name in PREFETCH_HEADERS:
            value = headers.get(name)
            if value is not None:
                try:
                    prefetch = int(value)
                except ValueError:
                    raise ClientError(f"{name} must be a positive integer, not {value!r}") from None
                if prefetch < 1:
                    raise ClientError(f"{name} must be a positive integer, not {value!r}")
                return min(prefetch, limit)
        return min(self.config.default_prefetch, limit)

    def unsubscribe(self, session: Session, headers: dict[str, str]) -> None:
        sub_id = headers.get("id")
        if sub_id is None and session.version == "1.0":
            sub_id = headers.get("destination")
        if sub_id is None:
            raise ClientError("UNSUBSCRIBE without id header")
        sub = session.subscriptions.pop(sub_id, None)
        if sub is None:
            raise ClientError(f"no subscription with id {sub_id!r}")
        self.drop(sub)

    def drop(self, sub: Subscription) -> None:
        """End one subscription: requeue what it held, leave its queue or topic."""
        sub.active = False
        self.acks.release(sub)
        queue = sub.queue
        if queue is None:
            self.router.topics.remove(sub.destination[len("/topic/") :], sub)
            return
        queue.nsubs -= 1
        if not queue.nsubs and self.router.drop_private(queue.name):
            self.dispatcher.purge(queue.name)  # an exchange subscription's queue dies with it
        self.dispatcher.pump(queue)
        self.dispatcher.deactivate_if_idle(queue)
