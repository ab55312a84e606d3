"""``/exchange/NAME[/REST]``: what the exchange named picks, by its type.

A consistent-hash exchange (exchanges.py) routes each message to exactly one bound queue or
stream, so in a transaction it picks at the check, before anything is applied (``plan``): a
message it cannot route fails the COMMIT.  A direct, fanout or topic exchange
(key_exchanges.py) copies to every queue bound with a matching key, REST or the
``routing-key`` header; ``amq.topic`` with a key is also ``/topic/KEY`` (the topic's
subscribers, the same resource).  SUBSCRIBE binds a private queue for the subscription's
lifetime, named by ``x-queue-name`` (which then needs ``configure`` on that queue) or made up
(``private_queue_name``).
"""

from __future__ import annotations

from ...protocol import Frame
from ..destinations import Destination, Kind
from ..exchanges import ROUTING_KEY_HEADER
from ..routing import STREAM_TARGET, private_queue_name
from ..send_headers import user_headers
from ..session import Session
from ..subscriptions import QUEUE_NAME_HEADER, SubscribeRequest
from .base import DestinationKind, Needs, Parts, Planned
from .stream import append

#: The exchange whose routing keys are topic names (``/topic/X`` is ``/exchange/amq.topic/X``).
TOPIC_EXCHANGE = "amq.topic"


class ExchangeKind(DestinationKind):
    namespace = Kind.EXCHANGE

    def resource(self, dest: Destination, send_headers: dict[str, str] | None = None) -> str:
        key = dest.key
        if not key and send_headers is not None:
            key = send_headers.get(ROUTING_KEY_HEADER, "")
        if dest.name == TOPIC_EXCHANGE and key:
            return "/topic/" + key
        return "/exchange/" + dest.name

    def subscribe_needs(
        self, dest: Destination, headers: dict[str, str], login: str | None, client_id: str | None
    ) -> Needs:
        needs = super().subscribe_needs(dest, headers, login, client_id)
        named = headers.get(QUEUE_NAME_HEADER)
        if named:
            needs.append(("configure", "/queue/" + named))
        return needs

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        router = parts.router
        keyed = router.key_exchanges.get(dest.name)
        if keyed is None:
            target = router.exchange_queue(dest, frame)
            return _deliver(parts, target, frame, priority, ack_timeout, expires, deliver_at)
        key = dest.key or frame.headers.get(ROUTING_KEY_HEADER, "")
        if keyed is router.amq_topic and key:  # /exchange/amq.topic/X is /topic/X
            router.publish_topic(Destination(Kind.TOPIC, key, "/topic/" + key), frame, publisher, priority, expires)
        router.publish_bound(keyed, key, frame, priority, ack_timeout, expires, deliver_at)
        return None

    def plan(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> Planned:
        if dest.name in parts.router.key_exchanges:
            return super().plan(parts, session, dest, frame)
        target = parts.router.exchange_queue(dest, frame)  # ClientError now: the COMMIT fails whole

        def planned(priority: int, ack_timeout: float | None, expires: int | None, deliver_at: int | None) -> object:
            return _deliver(parts, target, frame, priority, ack_timeout, expires, deliver_at)

        return planned

    def admit_subscribe(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        named = frame.headers.get(QUEUE_NAME_HEADER)
        return not named or parts.unused_queue(session, frame, named)

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        request.refuse_browser()
        dest, session = request.dest, request.session
        queue_name = request.headers.get(QUEUE_NAME_HEADER) or private_queue_name(
            dest.name, parts.dispatcher.store.node_id, session.id, request.sub_id
        )
        parts.router.bind_private(dest.name, queue_name, dest.key)
        parts.subscriptions.consume(request, queue_name)


def _deliver(
    parts: Parts, target: str | None, frame: Frame, priority: int, ack_timeout: float | None, expires: int | None,
    deliver_at: int | None,
) -> dict[str, str] | None:
    """A consistent-hash exchange's pick: a bound queue, a bound stream, or nothing (dropped)."""
    if target is None:
        return None
    if target[0] == "/":  # only a stream target starts with a slash: see STREAM_TARGET
        return append(parts, target[len(STREAM_TARGET) :], frame, priority)
    parts.dispatcher.publish(target, user_headers(frame.headers), frame.body, priority, ack_timeout, expires,
                             deliver_at)
    return None
