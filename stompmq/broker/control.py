"""``/control/...`` destinations: introspection and administration answered in the RECEIPT.

A control SEND names ``/control/VERB/KIND/NAME``.  The verb table below is the
whole surface; an unknown verb or kind is an ERROR.  A handler returns either
the RECEIPT headers at once or, when it must read the store (counting messages
of a durable queue), an async function the broker awaits before answering, in
order with the session's other receipts.  A control SEND without ``receipt``
still runs.

Counts follow ocamlmq: ``num-messages`` counts ready and unacked messages;
``num-ready`` and ``num-unacked`` split it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..protocol import Frame
from ..storage.base import BindingRecord
from .destinations import Kind, parse_destination
from .errors import ClientError
from .exchanges import Exchange, declaration_options, parse_weight

if TYPE_CHECKING:
    from .core import Broker
    from .session import Session

Headers = dict[str, str]
Answer = Headers | Callable[[], Awaitable[Headers]]


class Control:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._verbs: dict[tuple[str, str], Callable[[str, Frame, Session], Answer]] = {
            ("count-msgs", "queue"): self._count_msgs,
            ("count-subscribers", "queue"): self._count_queue_subscribers,
            ("count-subscribers", "topic"): self._count_topic_subscribers,
            ("purge", "queue"): self._purge,
            ("delete", "queue"): self._delete_queue,
            ("declare", "exchange"): self._declare_exchange,
            ("delete", "exchange"): self._delete_exchange,
            ("bind", "exchange"): self._bind,
            ("unbind", "exchange"): self._unbind,
            ("list-bindings", "exchange"): self._list_bindings,
            ("stats", "exchange"): self._exchange_stats,
        }

    def run(self, path: str, frame: Frame, session: Session) -> Answer:
        verb, _, rest = path.partition("/")
        kind, _, name = rest.partition("/")
        handler = self._verbs.get((verb, kind))
        if handler is None:
            raise ClientError(f"unknown control destination /control/{path}")
        if not name:
            raise ClientError(f"/control/{verb}/{kind}/ needs a name")
        return handler(name, frame, session)

    # -- queues -------------------------------------------------------------------
    def _count_msgs(self, name: str, frame: Frame, session: Session) -> Answer:
        broker = self.broker
        queue = broker.queues.get(name)
        unacked = len(queue.inflight) if queue is not None else 0
        if not broker.store.durable:
            ready = queue.size if queue is not None else 0
            return _counts(ready + unacked, unacked)

        async def count() -> Headers:
            return _counts(await broker.store.count(name), unacked)

        return count

    def _count_queue_subscribers(self, name: str, frame: Frame, session: Session) -> Answer:
        queue = self.broker.queues.get(name)
        return {"num-subscribers": str(queue.nsubs if queue is not None else 0)}

    def _count_topic_subscribers(self, name: str, frame: Frame, session: Session) -> Answer:
        return {"num-subscribers": str(self.broker.topics.count(name))}

    def _purge(self, name: str, frame: Frame, session: Session) -> Answer:
        self.broker.purge_queue(name)
        return {}

    def _delete_queue(self, name: str, frame: Frame, session: Session) -> Answer:
        broker = self.broker
        broker.purge_queue(name)
        for exchange in list(broker.exchanges.values()):
            if name in exchange.bindings:
                exchange.unbind(name)
                broker.store.delete_binding(exchange.name, name)
        return {}

    # -- exchanges ----------------------------------------------------------------
    def _exchange(self, name: str) -> Exchange:
        exchange = self.broker.exchanges.get(name)
        if exchange is None:
            raise ClientError(f"no exchange named {name!r}")
        return exchange

    def _declare_exchange(self, name: str, frame: Frame, session: Session) -> Answer:
        if "/" in name:
            raise ClientError(f"exchange name {name!r} must not contain '/'")
        self.broker.declare_exchange(name, declaration_options(frame.headers))
        return {}

    def _delete_exchange(self, name: str, frame: Frame, session: Session) -> Answer:
        self._exchange(name)
        del self.broker.exchanges[name]
        self.broker.store.delete_exchange(name)
        return {}

    def _bind_target(self, frame: Frame) -> str:
        if "queue" not in frame.headers:
            raise ClientError(f"{frame.headers['destination']} needs a queue header naming /queue/NAME")
        dest = parse_destination(frame.headers["queue"])
        if dest.kind is not Kind.QUEUE:
            raise ClientError(f"only queues can be bound to an exchange, not {dest.raw!r}")
        return dest.name

    def _bind(self, name: str, frame: Frame, session: Session) -> Answer:
        """Bind a queue; binding an already bound queue again updates its weight."""
        exchange = self._exchange(name)
        queue = self._bind_target(frame)
        weight = parse_weight(frame.headers.get("weight"))
        if queue in exchange.private:
            raise ClientError(f"queue {queue!r} is a subscription's private queue")
        exchange.bind(queue, weight)
        self.broker.store.save_binding(BindingRecord(name, queue, weight))
        return {}

    def _unbind(self, name: str, frame: Frame, session: Session) -> Answer:
        exchange = self._exchange(name)
        queue = self._bind_target(frame)
        if queue not in exchange.bindings or queue in exchange.private:
            raise ClientError(f"queue {queue!r} is not bound to exchange {name!r}")
        exchange.unbind(queue)
        self.broker.store.delete_binding(name, queue)
        return {}

    def _list_bindings(self, name: str, frame: Frame, session: Session) -> Answer:
        exchange = self._exchange(name)
        headers = {"num-bindings": str(len(exchange.bindings))}
        for i, queue in enumerate(sorted(exchange.bindings)):
            headers[f"binding-{i}-queue"] = "/queue/" + queue
            headers[f"binding-{i}-weight"] = str(exchange.bindings[queue])
        return headers

    def _exchange_stats(self, name: str, frame: Frame, session: Session) -> Answer:
        exchange = self._exchange(name)
        return {
            "num-bindings": str(len(exchange.bindings)),
            "num-routed": str(exchange.routed),
            "num-unhashed": str(exchange.unhashed),
        }


def _counts(total: int, unacked: int) -> Headers:
    return {"num-messages": str(total), "num-ready": str(total - unacked), "num-unacked": str(unacked)}
