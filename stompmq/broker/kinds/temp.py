"""``/temp-queue/NAME``, a connection's own reply queue, and ``/reply-queue/TOKEN``, someone's.

Both are stored queues under ``temp_queues.TEMP_QUEUE_PREFIX`` (temp_queues.py): the owner
SENDs to and SUBSCRIBEs to its ``/temp-queue/NAME``, made on first use; anyone told the
``/reply-queue/TOKEN`` may SEND to it, nobody SUBSCRIBEs to it.  Each is its own resource,
named as written.
"""

from __future__ import annotations

from ...protocol import Frame
from ..destinations import Destination, Kind
from ..send_headers import user_headers
from ..session import Session
from ..subscriptions import SubscribeRequest
from .base import DestinationKind, Parts


class TempQueueKind(DestinationKind):
    namespace = Kind.TEMP_QUEUE

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        queue = parts.router.temps.resolve(publisher, dest.name)
        parts.dispatcher.publish(queue, user_headers(frame.headers), frame.body, priority, ack_timeout, expires,
                                 deliver_at)
        return None

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        parts.subscriptions.consume(request, parts.router.temps.resolve(request.session, request.dest.name))


class ReplyQueueKind(DestinationKind):
    """SEND only; a reply queue that is gone drops the message (counted, ``TempQueues.dropped``)."""

    namespace = Kind.REPLY_QUEUE

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        queue = parts.router.temps.reply_target(dest.name)
        if queue is not None:
            parts.dispatcher.publish(queue, user_headers(frame.headers), frame.body, priority, ack_timeout, expires,
                                     deliver_at)
        return None
