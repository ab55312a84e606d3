"""``/topic/NAME``: this broker's subscribers of the topic, the other brokers' through the store,
and the queues bound to ``amq.topic`` (durable subscriptions, virtual topics).

A plain topic subscription is a ``Subscription`` without a queue (``TopicRouter``; topic
messages are never stored); one with a durable header is a stored queue bound to
``amq.topic`` with the topic as its pattern (subscriptions.py, ``durable_queue``), so it
needs ``read`` on that queue as well as on the topic.
"""

from __future__ import annotations

from ...protocol import Frame
from ..destinations import Destination, Kind
from ..errors import ClientError
from ..session import Session, Subscription
from ..subscriptions import SubscribeRequest, durable_pattern, durable_queue
from ..topics import WILDCARD
from .base import DestinationKind, Needs, Parts


class TopicKind(DestinationKind):
    namespace = Kind.TOPIC

    def subscribe_needs(
        self, dest: Destination, headers: dict[str, str], login: str | None, client_id: str | None
    ) -> Needs:
        needs = super().subscribe_needs(dest, headers, login, client_id)
        try:
            durable = durable_queue(login, client_id, headers)
        except ClientError:
            durable = None  # the engine reports the bad durable header
        if durable is not None:
            needs.append(("read", "/queue/" + durable))
        return needs

    def admit_send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        if dest.name.endswith(WILDCARD):
            raise ClientError(f"cannot SEND to a wildcard topic {dest.raw!r}")
        return True

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        router = parts.router
        router.publish_topic(dest, frame, publisher, priority, expires)
        if router.amq_topic.bindings:
            router.publish_bound(router.amq_topic, dest.name, frame, priority, ack_timeout, expires, deliver_at)
        return None

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        request.refuse_browser()
        session, dest = request.session, request.dest
        durable = durable_queue(session.login, session.client_id, request.headers)
        if durable is not None:
            parts.router.bind_durable(durable, durable_pattern(dest))
            parts.subscriptions.consume(request, durable)
            return
        sub = Subscription(request.sub_id, session, dest.raw, request.mode, request.prefetch, request.ack_timeout,
                           selector=request.selector)
        session.subscriptions[request.sub_id] = sub
        parts.router.topics.add(dest.name, sub)
