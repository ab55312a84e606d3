"""Fakes for engine tests that need no event loop: an outbox that keeps frames, a durable store
in a dict, and a way to run the engine's store reads to completion synchronously."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from stompmq.broker import Broker
from stompmq.protocol import Frame, FrameParser
from stompmq.storage.base import (
    QueueCount,
    Recovery,
    Store,
    StoredMessage,
    StreamMessage,
)
from stompmq.storage.header_filter import HeaderFilter
from stompmq.storage.rows import CapExpiry, DropStream, Purge, Row, SaveStream, TrimStream

#: What a ``FakeOutbox`` with room says its socket's buffer can still take: a connection's soft limit.
SOCKET_SPARE = 512 * 1024


class FakeOutbox:
    """Keeps what the engine writes; ``room`` turns queue deliveries off like a full socket."""

    def __init__(self) -> None:
        self.parser = FrameParser()
        self.frames: list[Frame] = []
        self.room = True
        self.queued = 0  # bytes ever written; the test says how many reached the "socket"

    def write(self, data: bytes) -> None:
        self.queued += len(data)
        self.frames.extend(self.parser.feed(data))

    def write_body(self, head: bytes, body: bytes) -> None:
        self.write(b"%s%s\0" % (head, body))

    def has_room(self) -> bool:
        return self.room

    def spare(self) -> int:
        return SOCKET_SPARE if self.room else 0

    def can_take_transient(self) -> bool:
        return True

    def take(self, command: str | None = None) -> list[Frame]:
        frames, self.frames = self.frames, []
        return [f for f in frames if command is None or f.command == command]


def passes(matching: HeaderFilter, headers: dict[str, str]) -> bool:
    """Does a message of ``headers`` match a term of ``matching`` (as SQLite's scan tests it)?"""
    return any(all(headers.get(m.name) is not None and (m.values is None or headers[m.name] in m.values)
                   for m in term) for term in matching)


class DictStore(Store):
    """A durable store in a dict: commits at once (tickets count calls of ``sync_ticket``)."""

    durable = True

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, tuple[StoredMessage, bool, int]] = {}  # seq -> (msg, delivered, redeliveries)
        self.purged: list[str] = []
        self.streams: dict[str, dict[int, StreamMessage]] = {}  # name -> offset -> entry
        self._ticket = 0

    async def open(self) -> Recovery:
        return Recovery(max(self.rows, default=0), [], [])

    async def run(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass

    def insert(self, msg: StoredMessage) -> None:
        self.rows[msg.seq] = (msg, msg.delivered, msg.redeliveries)

    def update(self, msg: StoredMessage) -> None:
        self.rows[msg.seq] = (msg, msg.delivered, msg.redeliveries)

    def delete(self, msg: StoredMessage) -> None:
        self.rows.pop(msg.seq, None)

    def write(self, row: Row) -> None:
        """The rows about messages and stream entries change the dicts; declarations are kept
        nowhere (the engine tests read them from the engine)."""
        match row:
            case Purge(queue=queue):
                self.purged.append(queue)
                # (ready messages only, as the SQL stores' ``DELETE FROM messages``: delayed ones stay)
                self.rows = {seq: r for seq, r in self.rows.items()
                             if r[0].queue != queue or r[0].deliver_at is not None}
            case SaveStream(name=name):
                self.streams.setdefault(name, {})
            case DropStream(name=name):
                self.streams.pop(name, None)
            case TrimStream(name=name, before=before):
                entries = self.streams.get(name, {})
                for offset in [o for o in entries if o < before]:
                    del entries[offset]
            case CapExpiry(queue=queue, ttl=ttl):
                self._cap_expiry(queue, ttl)

    def append_stream(self, msg: StreamMessage) -> None:
        self.streams.setdefault(msg.queue, {})[msg.offset] = msg

    def save_stream_group(self, name: str, group: str, committed: int | None) -> None:
        pass

    async def read_stream(self, name: str, start: int, limit: int) -> Sequence[StreamMessage]:
        entries = self.streams.get(name, {})
        return [entries[o] for o in sorted(o for o in entries if o >= start)[:limit]]

    @property
    def committed(self) -> int:
        return self._ticket

    def sync_ticket(self) -> int:
        self._ticket += 1
        self.events.committed(self._ticket)
        return self._ticket

    async def wait_for_room(self) -> None:
        pass

    def full(self) -> bool:
        return False

    def withdraw(self, msg: StoredMessage) -> bool:
        return False  # every write commits at once: nothing is left to give up

    async def queue_exists(self, name: str) -> bool:
        return any(m.queue == name for m, _, _ in self.rows.values())

    async def count_unacked(self, queue: str) -> int:
        return sum(1 for m, delivered, _ in self.rows.values() if m.queue == queue and delivered)

    async def load_ready(self, queue: str, after: tuple[int, int] | None, limit: int,
                         matching: HeaderFilter | None = None) -> Sequence[StoredMessage]:
        ready = sorted(
            (m for m, delivered, _ in self.rows.values()
             if m.queue == queue and not delivered and m.deliver_at is None),
            key=lambda m: m.order_key,
        )
        ready = [m for m in ready if (after is None or m.order_key > after)
                 and (matching is None or m.expires is not None or passes(matching, m.headers))]
        return [
            StoredMessage(m.seq, m.queue, m.priority, m.headers, m.body, m.timestamp, m.ack_timeout,
                          self.rows[m.seq][2], expires=m.expires)
            for m in ready[:limit]
        ]

    async def load_due(self, after: tuple[int, int] | None, limit: int, vhost: str = "/") -> Sequence[StoredMessage]:
        due = sorted((m.deliver_at, m.seq) for m, _, _ in self.rows.values() if m.deliver_at is not None)
        keys = [key for key in due if after is None or key > after][:limit]
        return [self._copy(self.rows[seq][0]) for _, seq in keys]

    async def load_expired(
        self, now_ms: int, after: tuple[int, int] | None, limit: int
    ) -> tuple[Sequence[StoredMessage], int | None]:
        keys = sorted((m.expires, m.seq) for m, delivered, _ in self.rows.values()
                      if m.expires is not None and m.deliver_at is None and not delivered)
        expired = [key for key in keys if key[0] < now_ms and (after is None or key > after)][:limit]
        later = [key[0] for key in keys if key[0] >= now_ms]
        return [self._copy(self.rows[seq][0]) for _, seq in expired], min(later, default=None)

    async def queue_size(self, queue: str, snapshot: Callable[[], T]) -> tuple[int, int, T]:
        stored = [m for m, _, _ in self.rows.values() if m.queue == queue and m.deliver_at is None]
        return len(stored), sum(len(m.body) for m in stored), snapshot()

    def _copy(self, m: StoredMessage) -> StoredMessage:
        """A message as a read returns it: a fresh object, as a database would give."""
        return StoredMessage(m.seq, m.queue, m.priority, m.headers, m.body, m.timestamp, m.ack_timeout,
                             self.rows[m.seq][2], expires=m.expires, deliver_at=m.deliver_at)

    def _cap_expiry(self, queue: str, ttl: int) -> None:
        for seq, (m, delivered, redeliveries) in list(self.rows.items()):
            if m.queue == queue and (m.expires is None or m.expires > m.timestamp + ttl):
                capped = StoredMessage(m.seq, m.queue, m.priority, m.headers, m.body, m.timestamp, m.ack_timeout,
                                       redeliveries, expires=m.timestamp + ttl, deliver_at=m.deliver_at)
                self.rows[seq] = (capped, delivered, redeliveries)

    async def queue_names(self, prefix: str) -> list[str]:
        return sorted({m.queue for m, _, _ in self.rows.values() if m.queue.startswith(prefix)})

    async def count(self, queue: str) -> int:
        return sum(1 for m, _, _ in self.rows.values() if m.queue == queue)

    async def queue_page(self, after: str, limit: int, snapshot: Callable[[], T]) -> tuple[list[QueueCount], T]:
        by_queue: dict[str, list[tuple[StoredMessage, bool]]] = {}
        for m, delivered, _ in self.rows.values():
            by_queue.setdefault(m.queue, []).append((m, delivered))
        names = sorted(name for name in by_queue if name > after)[:limit]
        rows = [QueueCount(name, len(by_queue[name]), sum(d for _, d in by_queue[name]),
                           min((m.timestamp for m, d in by_queue[name] if not d), default=None),
                           min((m.timestamp for m, d in by_queue[name] if d), default=None)) for name in names]
        return rows, snapshot()


T = TypeVar("T")


def complete(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends (a DictStore read) to its result."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the read suspended")


def run_reads(broker: Broker) -> int:
    """Perform every store read the engine queued, as the runtime would; return how many."""
    n = 0
    while (read := broker.take_read()) is not None:
        read.done(complete(read.fetch(broker.store)))  # type: ignore[arg-type]
        n += 1
    return n
