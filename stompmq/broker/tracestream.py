"""A vhost's durable message trace: what happens to its queue messages, as entries of a stream.

Theory of operation
-------------------
``trace on`` watches the vhost's engine (events.py) with a ``TraceStream``, which appends one
entry to ``/stream/stompmq.trace`` per step of every queue message: ``publish``, ``deliver``,
``ack``, ``nack``, ``dead-letter``, ``expire`` (the entry's ``x-trace-event``).  An entry
carries the message's own headers (``traceparent`` included), what the step adds
(``x-trace-queue``, ``x-trace-message-id``, the subscription and connection, a reason), and no
body unless ``body-bytes`` asks for the first N bytes of each (``x-trace-body-size`` then gives
the whole size).  Being a stream, the trace is stored, kept across restarts within the
stream's retention (declare ``max-age``/``max-bytes`` on it as on any stream), and read by any
stream consumer: a STOMP subscriber, a consumer group, the Spark source,
``stompmq admin trace tail``.

Nothing is lost for a receipted message: the observer runs inside the engine step that
publishes, so the publish entry is buffered in the same step as the message's insert (just
before it), and the RECEIPT waits for the commit that holds everything buffered before it, both
rows included
(the same holds for an ACK's receipt and its ``ack`` entry).  Whether the vhost traces, and
how much body, is kept in the stream's stored options (``x-trace``,
``x-trace-body-bytes``), so a restart resumes tracing (``resume``).

The idempotent-producer headers of a traced message (``x-producer-id``/``x-producer-seq``) are
renamed in its entries (``x-trace-producer-id``/``-seq``): the trace's appends are the
broker's own, and a stream would take them for a producer's repeats.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..storage.base import PRODUCER_HEADER, PRODUCER_SEQ_HEADER, Store, StoredMessage, StreamMessage
from .control import Deferred
from .errors import ClientError
from .events import Observers
from .session import Subscription
from .stream_log import BODY_BYTES, TRACING
from .streams import Streams

#: The stream a vhost's trace goes to.
TRACE_STREAM = "stompmq.trace"
TRACE_OPTIONS = (TRACING, BODY_BYTES)
#: The most body bytes an entry keeps (a trace is for following messages, not copying them).
MAX_BODY_BYTES = 1 << 20
_RENAMED = {PRODUCER_HEADER: "x-trace-producer-id", PRODUCER_SEQ_HEADER: "x-trace-producer-seq"}


class Traced(Protocol):
    """What a vhost's trace needs of its engine (a ``Broker``, which imports this module)."""

    @property
    def store(self) -> Store: ...

    @property
    def streams(self) -> Streams: ...

    @property
    def observers(self) -> Observers: ...


@dataclass(frozen=True, slots=True)
class TraceState:
    on: bool
    body_bytes: int
    next_offset: int  # the trace stream's next offset (0: none yet)


class TraceStream:
    """Entries of the trace stream, one per step of a queue message (a ``MessageEvents``)."""

    def __init__(self, streams: Streams, body_bytes: int) -> None:
        self.streams = streams
        self.body_bytes = body_bytes

    def _append(self, event: str, msg: StoredMessage, extra: dict[str, str] | None = None) -> None:
        headers = dict(msg.headers)
        for name, renamed in _RENAMED.items():
            if name in headers:
                headers[renamed] = headers.pop(name)
        headers["x-trace-event"] = event
        headers["x-trace-queue"] = msg.queue
        headers["x-trace-message-id"] = str(msg.seq)
        headers["x-trace-published"] = str(msg.timestamp)
        if extra:
            headers.update(extra)
        body = b""
        if self.body_bytes:
            body = msg.body[:self.body_bytes]
            headers["x-trace-body-size"] = str(len(msg.body))
        self.streams.append(TRACE_STREAM, headers, body, msg.priority)

    def follows(self, msg: StoredMessage) -> bool:
        return True  # every queue message

    def published(self, msg: StoredMessage) -> None:
        self._append("publish", msg, None if msg.deliver_at is None else {"x-trace-deliver-at": str(msg.deliver_at)})

    def delivered(self, msg: StoredMessage, sub: Subscription) -> None:
        self._append("deliver", msg, {**_consumer(sub), "x-trace-redeliveries": str(msg.redeliveries)})

    def acked(self, msg: StoredMessage, sub: Subscription) -> None:
        self._append("ack", msg, _consumer(sub))

    def nacked(self, msg: StoredMessage, sub: Subscription, requeue: bool) -> None:
        self._append("nack", msg, {**_consumer(sub), "x-trace-requeue": str(requeue).lower()})

    def dead_lettered(self, msg: StoredMessage, reason: str) -> None:
        self._append("dead-letter", msg, {"x-trace-reason": reason})

    def expired(self, msg: StoredMessage) -> None:
        self._append("expire", msg)


def _consumer(sub: Subscription) -> dict[str, str]:
    return {"x-trace-subscription": sub.id, "x-trace-connection": sub.session.id}


def _tracer(engine: Traced) -> TraceStream | None:
    return next((o for o in engine.observers.watching if isinstance(o, TraceStream)), None)


def set_trace(engine: Traced, on: bool, body_bytes: int = 0) -> TraceState:
    """Trace ``engine``'s queue messages into the trace stream (``on``) or stop; stored in the
    stream's options, so a restart resumes it."""
    if not 0 <= body_bytes <= MAX_BODY_BYTES:
        raise ClientError(f"body-bytes must be from 0 to {MAX_BODY_BYTES}, not {body_bytes}")
    current = _tracer(engine)
    if current is not None:
        engine.observers.unwatch(current)
    streams = engine.streams
    stream = streams.stream(TRACE_STREAM)
    options = {k: v for k, v in stream.options.items() if k not in TRACE_OPTIONS}
    if on:
        options.update({TRACING: "on", BODY_BYTES: str(body_bytes)})
        engine.observers.watch(TraceStream(streams, body_bytes))
    streams.set_options(stream, options)
    return trace_state(engine)


def resume(engine: Traced) -> None:
    """After recovery: trace again if the stored trace stream says so."""
    stream = engine.streams.streams.get(TRACE_STREAM)
    if stream is not None and stream.options.get(TRACING) == "on" and _tracer(engine) is None:
        engine.observers.watch(TraceStream(engine.streams, int(stream.options.get(BODY_BYTES, "0"))))


def trace_state(engine: Traced) -> TraceState:
    tracer = _tracer(engine)
    stream = engine.streams.streams.get(TRACE_STREAM)
    return TraceState(tracer is not None, tracer.body_bytes if tracer is not None else 0,
                      stream.next if stream is not None else 0)


def trace_entries(engine: Traced, start: int, limit: int) -> Deferred[Sequence[StreamMessage]]:
    """Up to ``limit`` trace entries from offset ``start`` on: from memory while the stream's
    tail holds them, else a store read (always on a shared store, which numbers the entries in
    its commits)."""
    stream = engine.streams.streams.get(TRACE_STREAM)
    if not engine.store.shared:
        entries: Sequence[StreamMessage] | None = None
        if stream is None or start >= stream.tail_end:
            entries = []
        elif start >= stream.tail_first or not engine.store.durable:
            first = stream.tail_first
            entries = [stream.tail[i - first] for i in range(max(start, first), min(stream.tail_end, start + limit))]
        if entries is not None:
            known = entries
            return Deferred(lambda store: _known(known), lambda read: read)

    def fetch(store: Store) -> Awaitable[Sequence[StreamMessage]]:
        return store.read_stream(TRACE_STREAM, start, limit)

    return Deferred(fetch, lambda read: read)


async def _known(entries: Sequence[StreamMessage]) -> Sequence[StreamMessage]:
    return entries
