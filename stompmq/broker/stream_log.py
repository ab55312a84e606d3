"""A stream in memory (``Stream``), a cursor over it (``StreamSubscription``), and the names
both are known by: the SUBSCRIBE headers, the declaration options, the deadline kinds.

Kept apart from the engine's streams (streams.py) so what reads a stream's state (the API,
ages, the trace stream) needs none of the appending, reading and retention machinery.
"""

from __future__ import annotations

from collections import deque

from ..storage.base import GROUP_NAME_LENGTH, StreamMessage
from .consumer import AckMode
from .delivery import stream_head
from .errors import ClientError
from .session import Session, Subscription
from .timers import Timer

#: Deadline kinds: a stream's oldest segment ages out; a failed stream read (a subscriber's, or a
#: stream's follow read on a shared store) is retried.
STREAM_RETENTION = "stream-retention"
STREAM_READ_RETRY = "stream-read-retry"
STREAM_FOLLOW_RETRY = "stream-follow-retry"
#: The SUBSCRIBE header choosing where to start, and the MESSAGE header carrying the offset.
OFFSET_HEADER = "x-stream-offset"
#: The SUBSCRIBE header naming the offset where the subscription stops (exclusive): a reader of
#: a range (a Spark task) is not sent the entries after it, which it would only throw away.
END_HEADER = "x-stream-end"
#: A subscription without ``x-stream-end`` (past every offset).
NO_END = 2**63
#: The SUBSCRIBE header naming the consumer group a subscription reads (and commits) for.
GROUP_HEADER = "x-stream-group"
#: Most consumer groups a stream keeps: bounds memory and the per-group series of /metrics.
MAX_GROUPS = 100
#: Characters of a group name besides ASCII letters and digits (it is a /metrics label value).
GROUP_PUNCTUATION = frozenset("._-:")
#: A subscription waiting for its group's stored offset (shared store): nothing is delivered.
WAITING = NO_END
#: Entries one store read asks for: enough to amortise the thread round trip, few enough to bound
#: a subscriber's buffer.
READ_BATCH = 1000
#: Entries left in a subscriber's buffer when the next read is asked for: the store reads the
#: next batch while these are delivered (a read after the buffer ran dry left the socket idle
#: for a store round trip every READ_BATCH entries).
READ_AHEAD = READ_BATCH // 2
#: Seconds before a failed stream read is retried (as a queue's page read).
READ_RETRY_SECONDS = 0.1
#: Declaration headers of /control/declare/stream/NAME (also the stored option names).
MAX_AGE, MAX_BYTES = "max-age", "max-bytes"
#: The stored option keeping a purged stream's next offset: a purge empties the stream, and
#: offsets must not start again at 0 after a restart (a reader's checkpoint would re-read them).
FLOOR = "first-offset"
#: The stored options of a vhost's trace stream (tracestream.py): tracing on, body bytes kept.
TRACING, BODY_BYTES = "x-trace", "x-trace-body-bytes"
#: Stored options a declaration keeps (it sets retention only).
KEPT_OPTIONS = (FLOOR, TRACING, BODY_BYTES)

#: A segment mark: [first offset, first timestamp (ms), stream bytes before it].
Mark = tuple[int, int, int]


class Stream:
    __slots__ = (
        "name", "destination", "options", "max_age_ms", "max_bytes", "first", "next",
        "end_bytes", "last_ts", "marks", "tail", "tail_end", "capacity", "subscribers", "timer",
        "row", "following", "producers", "producers_seen", "duplicates", "groups", "visible",
    )

    def __init__(self, name: str, capacity: int | None, first: int = 0, next_offset: int = 0) -> None:
        self.name = name
        self.destination = "/stream/" + name
        self.options: dict[str, str] = {}
        self.max_age_ms: int | None = None
        self.max_bytes: int | None = None
        self.first = first
        self.next = next_offset
        self.end_bytes = 0  # body bytes appended since offset 0
        self.last_ts = 0
        self.marks: deque[Mark] = deque()
        self.tail: deque[StreamMessage] = deque()  # the newest entries in memory, up to ``tail_end``
        self.tail_end = next_offset  # == next, except on a shared store (entries not read yet)
        self.capacity = capacity  # None: the tail holds every retained entry (memory store)
        self.subscribers: list[StreamSubscription] = []
        self.timer: Timer | None = None
        self.row: int | None = None  # a shared store's row (StreamState.id), once known
        self.following = False  # a shared store's follow read is queued
        self.producers: dict[str, int] = {}  # idempotent producer -> highest seq appended
        self.producers_seen: dict[str, int] = {}  # producer -> wall ms of its last append (limits.py)
        self.duplicates = 0  # appends dropped as a producer's repeat, since the broker started
        self.groups: dict[str, int] = {}  # consumer group -> committed offset (the next to read)
        self.visible = next_offset  # entries below it are committed (stream_settling.py)

    @property
    def tail_first(self) -> int:
        """The offset of the oldest entry in memory."""
        return self.tail_end - len(self.tail)

    @property
    def size(self) -> int:
        """Body bytes retained."""
        return self.end_bytes - (self.marks[0][2] if self.marks else self.end_bytes)


class StreamSubscription(Subscription):
    """A subscription to a stream: a cursor over its offsets."""

    __slots__ = ("stream", "position", "buffer", "reading", "min_ts", "head", "end", "group")

    def __init__(self, sub_id: str, session: Session, stream: Stream, ack_mode: AckMode, prefetch: int) -> None:
        super().__init__(sub_id, session, stream.destination, ack_mode, prefetch, None)
        self.stream = stream
        self.position = stream.next  # the next offset to deliver
        self.buffer: deque[StreamMessage] = deque()  # entries read from the store, from position on
        self.reading = False
        self.min_ts: int | None = None  # a timestamp= start: skip older entries until one is newer
        self.head = stream_head(sub_id, stream.destination, session.version)
        self.end = NO_END  # x-stream-end: nothing at or after it is delivered
        self.group: str | None = None  # x-stream-group: ACKs commit its offset


def check_group(stream: Stream, group: str) -> None:
    """ClientError unless ``group`` is a valid name that ``stream`` has or has room for."""
    if not 0 < len(group) <= GROUP_NAME_LENGTH or not all(
        (c.isascii() and c.isalnum()) or c in GROUP_PUNCTUATION for c in group
    ):
        raise ClientError(f"{GROUP_HEADER} must be 1 to {GROUP_NAME_LENGTH} ASCII letters, digits and . _ - :,"
                          f" not {group!r}")
    if group not in stream.groups and len(stream.groups) >= MAX_GROUPS:
        raise ClientError(f"stream {stream.name!r} has {MAX_GROUPS} consumer groups already (the most it keeps);"
                          " forget one with /control/stream-group first")
