"""``/queue/NAME`` and ``/amq/queue/NAME``: a stored queue, made on first use or named as existing.

``/queue/NAME`` makes the queue when first used (``Dispatcher.admit_queue`` counts it
against ``max-queues``); ``/amq/queue/NAME`` is RabbitMQ's name for a queue that must exist
already: the engine asks the store when this broker does not know it, and the frame waits
(``Parts.existing_queue``).  Both name the same queue and the same resource, except that
``/queue/amq.gen.reply/TOKEN`` is someone's temporary queue, the resource ``/reply-queue/TOKEN``.
"""

from __future__ import annotations

from ...protocol import Frame
from ..destinations import Destination, Kind
from ..send_headers import user_headers
from ..session import Session
from ..subscriptions import SubscribeRequest
from ..temp_queues import REPLY_DESTINATION, TEMP_QUEUE_PREFIX
from .base import DestinationKind, Parts


class QueueKind(DestinationKind):
    namespace = Kind.QUEUE

    def resource(self, dest: Destination, send_headers: dict[str, str] | None = None) -> str:
        name = dest.name
        if name.startswith(TEMP_QUEUE_PREFIX):
            return REPLY_DESTINATION + name[len(TEMP_QUEUE_PREFIX):]
        return "/queue/" + name

    def admit_send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        dispatcher = parts.dispatcher
        if dest.name not in dispatcher.stats:  # (the method only for a new one)
            dispatcher.admit_queue(dest.name)
        return True

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        parts.dispatcher.publish(
            dest.name, user_headers(frame.headers), frame.body, priority, ack_timeout, expires, deliver_at
        )
        return None

    def admit_subscribe(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        parts.dispatcher.admit_queue(dest.name)
        return True

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        parts.subscriptions.subscribe_queue(request)

    def bind_target(self, dest: Destination) -> str:
        if dest.name.startswith("/"):
            return super().bind_target(dest)  # only a stream's target starts with a slash
        return dest.name


class AmqQueueKind(QueueKind):
    """``/amq/queue/NAME``: ``/queue/NAME`` for a queue that exists; never bound by that name."""

    namespace = Kind.AMQ_QUEUE

    def admit_send(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        return parts.existing_queue(session, frame, dest.name)

    def admit_subscribe(self, parts: Parts, session: Session, dest: Destination, frame: Frame) -> bool:
        return parts.existing_queue(session, frame, dest.name)

    def bind_target(self, dest: Destination) -> str:
        return DestinationKind.bind_target(self, dest)
