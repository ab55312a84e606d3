"""``/stream/NAME``: an append-only log read from an offset (streams.py).

A SEND appends (an idempotent producer's repeat is dropped, its RECEIPT saying
``duplicate:true``); a SUBSCRIBE is a cursor from ``x-stream-offset``, alone or in a consumer
group; an exchange binds a stream under ``routing.STREAM_TARGET`` + NAME.
"""

from __future__ import annotations

from ...protocol import Frame
from ..destinations import Destination, Kind
from ..routing import STREAM_TARGET
from ..send_headers import user_headers
from ..session import Session
from ..stream_log import END_HEADER, GROUP_HEADER, OFFSET_HEADER
from ..subscriptions import SubscribeRequest
from .base import DestinationKind, Parts

#: The RECEIPT headers of a SEND that an idempotent stream producer repeated (nothing appended).
DUPLICATE: dict[str, str] = {"duplicate": "true"}


def append(parts: Parts, name: str, frame: Frame, priority: int) -> dict[str, str] | None:
    """Append a SEND to stream ``name``; the RECEIPT's headers: none, or ``duplicate:true``."""
    return None if parts.streams.append(name, user_headers(frame.headers), frame.body, priority) else DUPLICATE


class StreamKind(DestinationKind):
    namespace = Kind.STREAM

    def route(
        self, parts: Parts, dest: Destination, frame: Frame, priority: int, ack_timeout: float | None,
        expires: int | None, deliver_at: int | None, publisher: Session,
    ) -> dict[str, str] | None:
        return append(parts, dest.name, frame, priority)

    def subscribe(self, parts: Parts, request: SubscribeRequest) -> None:
        request.refuse_browser()
        headers = request.headers
        parts.streams.subscribe(request.session, request.dest.name, request.sub_id, request.mode, request.prefetch,
                                headers.get(OFFSET_HEADER), headers.get(END_HEADER), headers.get(GROUP_HEADER),
                                request.selector)

    def bind_target(self, dest: Destination) -> str:
        return STREAM_TARGET + dest.name
