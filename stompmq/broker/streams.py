"""Streams (``/stream/NAME``): append-only logs read from an offset, with retention by segment.

Theory of operation
-------------------
A SEND appends an entry at the stream's next offset (0, 1, 2, ...); consuming
never removes it.  Every stream is in memory as a ``Stream``: its offsets
(``first`` retained, ``next`` to assign), its size in body bytes, its segment
marks, the newest entries (``tail``) and its subscribers.  With a durable store
the tail holds at most ``window`` entries and older ones are read from the store
(``Store.read_stream``, queued in ``Reads`` like a queue's page); with the memory
store the tail is the whole retained stream.

A subscriber is a cursor: ``position`` is the next offset it is given.  It is
fed from its read buffer, else from the tail, else it asks for a read of up to
``READ_BATCH`` entries (one read in flight per subscriber; the next one is asked for when half
the buffer is delivered).  A subscriber that
has caught up is fed by ``append`` directly.  Client-ack subscribers are held
by their prefetch (the position advances as ACKs make room); auto-ack ones by
their connection's outbox, as on queues.  ACK settles, NACK too: a stream never
redelivers (re-read by subscribing again at an offset).

Retention drops whole segments from the front.  A segment starts at every
offset that is a multiple of ``stream_segment``; its mark records (first
offset, first timestamp, bytes before it), so deciding what to drop looks at
marks only and the store deletes an offset range (a ``TrimStream`` row): no
scan of the stream, ever.  The newest segment is never dropped.  Timestamps are
kept non-decreasing within a stream, so ``timestamp=`` subscriptions find their
start from the marks too.  After a restart the marks are re-read from the store
by point reads (``marks_wanted`` / ``load_marks``, before the broker serves).

Several brokers on one database (``Store.shared``: PostgreSQL)
---------------------------------------------------------------
No engine can number a stream that others append to, so ``append`` buffers the entry
unnumbered (``UNNUMBERED``) and the commit numbers it (storage/pg_streams.py).  What the
engine knows of a stream then comes from the store as ``StreamState``s (``changed``): after
this broker's own commits (before their RECEIPTs) and when another broker's commit is
notified.  ``next`` is the committed end; every offset below it is final.  The tail is no
longer fed by ``append``: it is a window of committed entries ``[tail_first, tail_end)``
read from the store (``_follow``: one read per stream, for the subscribers that wait past
``tail_end``), so subscribers on every broker, this one included, get entries in one order
once they are committed.  Marks of the segments other brokers fill are point reads
(``_read_marks``).  ``/control/stream-offsets`` reads the counter row, and a SUBSCRIBE at
an offset past the known end asks the store before clamping it, so an offset a client was
told anywhere is never clamped to a stale end.

Idempotent producers
--------------------
A SEND carrying ``x-producer-id`` and ``x-producer-seq`` is appended only if its number is
above the producer's highest on the stream (``Stream.producers``); otherwise it is dropped,
counted (``duplicates``) and its RECEIPT says ``duplicate:true``.  The two headers come off the
entry (``StreamMessage.producer``) and the store writes the producer's position in the commit
of the entry, so after a restart ``recover`` brings back exactly the positions of the entries
that are stored, and an entry's stored headers are the sender's others (which the header-text
cache recognises: numbered headers never repeat).  A
stream keeps the producers it has seen (one int each), at most ``--max-stream-producers``:
past that a new one forgets those not seen for ``--stream-producer-expiry`` (7 days; a
producer that retries after hours must still be recognised), and is refused if none has
expired (``limits.admit_producer``).  On a shared store the engine knows only
the positions it recovered or appended itself; the commit checks the stored ones under the
stream's row lock and drops what another broker already appended (that RECEIPT cannot say so).
Plain appends pay two dict lookups.

Consumer groups
---------------
See stream_control.py: a group's offset is committed by its ACKs, read and set by
``/control/stream-group``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from ..storage.base import (
    PRODUCER_HEADER,
    PRODUCER_ID_LENGTH,
    PRODUCER_SEQ_HEADER,
    TRIM_ALL,
    UNNUMBERED,
    Store,
    StoredMessage,
    StoreError,
    StreamMessage,
    StreamRecord,
    StreamState,
)
from ..storage.rows import DropStream, SaveStream, TrimStream
from .config import BrokerConfig
from .consumer import AckMode
from .delivery import stream_tail, write_frame
from .dispatch import Dispatcher
from .errors import ClientError
from .limits import admit_producer
from .policy_match import MAX_AGE as POLICY_MAX_AGE
from .policy_match import STREAMS, Effective, header_text, resolve
from .queue_settings import MAX_LENGTH_BYTES
from .reads import StoreRead
from .selectors import Selector
from .send_headers import MAX_COUNT, MAX_SECONDS, non_negative
from .session import Session
from .stream_log import (
    END_HEADER,
    FLOOR,
    GROUP_HEADER,
    KEPT_OPTIONS,
    MAX_AGE,
    MAX_BYTES,
    OFFSET_HEADER,
    READ_AHEAD,
    READ_BATCH,
    READ_RETRY_SECONDS,
    STREAM_FOLLOW_RETRY,
    STREAM_READ_RETRY,
    STREAM_RETENTION,
    WAITING,
    Stream,
    StreamSubscription,
    check_group,
)
from .stream_settling import Settling

log = logging.getLogger(__name__)


class Streams:
    def __init__(self, dispatcher: Dispatcher, config: BrokerConfig) -> None:
        self.dispatcher = dispatcher
        self.store = dispatcher.store
        self.config = config
        self.deadlines = dispatcher.deadlines
        self.reads = dispatcher.reads
        self.shared = self.store.shared
        self.streams: dict[str, Stream] = {}
        #: Tail readers wait for the commit of what they get (a durable store of one broker).
        self.settling = Settling(self.store) if self.store.durable and not self.shared else None

    # -- streams ------------------------------------------------------------------------------
    def stream(self, name: str) -> Stream:
        """The stream named ``name``, created (implicitly, like a queue) on first use."""
        stream = self.streams.get(name)
        if stream is None:
            stream = self.streams[name] = self._new(name)
            if not self.shared:  # (shared: the first append makes the row; {} here would undo a declaration)
                self.store.write(SaveStream(name, {}))
        return stream

    def _new(self, name: str, first: int = 0, next_offset: int = 0) -> Stream:
        stream = Stream(name, self.config.window if self.store.durable else None, first, next_offset)
        self._configure(stream, {})
        return stream

    def declare(self, name: str, headers: dict[str, str]) -> None:
        """Create the stream or change its retention (``max-age`` seconds, ``max-bytes``)."""
        options = {}
        for option, unit, maximum in ((MAX_AGE, " number of seconds", int(MAX_SECONDS)), (MAX_BYTES, "", MAX_COUNT)):
            value = non_negative(headers, option, unit, maximum)
            if value is not None:
                options[option] = str(value)
        stream = self.stream(name)
        options.update({key: stream.options[key] for key in KEPT_OPTIONS if key in stream.options})
        self.set_options(stream, options)

    def set_options(self, stream: Stream, options: dict[str, str]) -> None:
        """Give ``stream`` these stored options (retention, and what KEPT_OPTIONS name)."""
        self._configure(stream, options)
        self.store.write(SaveStream(stream.name, options))
        self.enforce(stream)

    def _configure(self, stream: Stream, options: dict[str, str]) -> None:
        stream.options = options
        settings = self.settings(stream).options
        age, size = float(settings.get(POLICY_MAX_AGE, 0)), int(settings.get(MAX_LENGTH_BYTES, 0))
        stream.max_age_ms = int(age * 1000) if age else None
        stream.max_bytes = size or None

    def settings(self, stream: Stream) -> Effective:
        """The stream's retention (``max-age`` seconds, ``max-length-bytes``; 0 keeps everything)
        and where each came from: its declaration (``max-age`` / ``max-bytes``), the vhost's
        stream policies (policy_match.py), else ``--stream-max-age`` / ``--stream-max-bytes``."""
        options, config, bounds = stream.options, self.config, self.dispatcher.bounds
        declared = {key: options[option] for key, option in ((POLICY_MAX_AGE, MAX_AGE), (MAX_LENGTH_BYTES, MAX_BYTES))
                    if option in options}
        defaults = {key: header_text(value) for key, value in ((POLICY_MAX_AGE, config.stream_max_age),
                                                             (MAX_LENGTH_BYTES, config.stream_max_bytes)) if value}
        return resolve(stream.name, declared, bounds.policies, bounds.operator_policies, STREAMS, defaults)

    def policies_changed(self) -> None:
        """The vhost's policies changed (policy_apply.py): every stream's retention now, at once."""
        for stream in self.streams.values():
            self._configure(stream, stream.options)
            self.enforce(stream)

    def recover(self, records: Sequence[StreamRecord]) -> None:
        for record in records:
            floor = int(record.options.get(FLOOR, 0))
            first, next_offset = max(record.first, floor), max(record.next, floor)
            stream = self.streams[record.name] = self._new(record.name, first, next_offset)
            stream.row = record.row
            stream.producers = dict(record.producers)
            stream.groups = dict(record.groups)
            self._configure(stream, record.options)

    def marks_wanted(self) -> list[tuple[str, list[int]]]:
        """Per recovered stream, the offsets whose entries rebuild its marks and its size:
        each segment's start and the last entry (point reads, a few per million entries)."""
        step = self.config.stream_segment
        wanted = []
        for stream in self.streams.values():
            if stream.next > stream.first and not stream.marks:
                starts = [stream.first, *range((stream.first // step + 1) * step, stream.next, step)]
                wanted.append((stream.name, [*starts, stream.next - 1]))
        return wanted

    def load_marks(self, name: str, entries: Sequence[StreamMessage]) -> None:
        """The entries ``marks_wanted`` asked for, read from the store, in order."""
        stream = self.streams[name]
        if not entries:
            return
        *starts, last = entries
        stream.marks.extend((m.offset, m.timestamp, m.bytes_before) for m in starts)
        stream.end_bytes = last.bytes_before + len(last.body)
        stream.last_ts = last.timestamp
        self.enforce(stream)

    def purge(self, name: str) -> None:
        """``/control/purge/stream/NAME``: drop every entry; offsets go on from where they were."""
        stream = self.streams.get(name)
        if stream is None or (stream.first == stream.next and not self.shared):
            return
        stream.first = stream.next
        stream.marks.clear()
        stream.tail.clear()
        if self.shared:  # to the committed end, whatever it is then; the counter row keeps it
            self.store.write(TrimStream(name, TRIM_ALL))
        else:
            stream.options = {**stream.options, FLOOR: str(stream.next)}
            self.store.write(TrimStream(name, stream.next))
            self.store.write(SaveStream(name, stream.options))
        self._arm_age(stream)

    def delete(self, name: str) -> None:
        """``/control/delete/stream/NAME``: forget the stream (a later SEND makes a new one at
        offset 0).  Refused while it has subscribers: their positions would name offsets of a
        stream that no longer exists."""
        stream = self.streams.get(name)
        if stream is None:
            return
        if stream.subscribers:
            raise ClientError(f"stream {name!r} has {len(stream.subscribers)} subscriber(s); unsubscribe them first")
        del self.streams[name]
        if stream.timer is not None:
            self.deadlines.cancel(stream.timer)
        self.store.write(DropStream(name))

    # -- appending ----------------------------------------------------------------------------
    def append(self, name: str, headers: dict[str, str], body: bytes, priority: int) -> bool:
        """Store one entry at the stream's next offset and feed the subscribers waiting for it;
        False if it is an idempotent producer's repeat (dropped).  ``headers`` are the append's own
        copy: an idempotent producer's two are taken off (``StreamMessage.producer``)."""
        stream = self.streams.get(name) or self.stream(name)
        producer = None
        if PRODUCER_HEADER in headers or PRODUCER_SEQ_HEADER in headers:
            producer = _producer(headers)
            if producer[1] <= stream.producers.get(producer[0], -1):
                stream.duplicates += 1
                return False
            config = self.config
            admit_producer(stream.producers, stream.producers_seen, producer[0], self.dispatcher.clock.wall_ms,
                           config.max_stream_producers, int(config.stream_producer_expiry * 1000))
            stream.producers[producer[0]] = producer[1]
        clock = self.dispatcher.clock
        seq = clock.next_entry_seq()
        if self.shared:  # numbered in the commit; subscribers get it from the store once committed
            self.store.append_stream(
                StreamMessage(seq, name, priority, headers, body, clock.wall_ms, UNNUMBERED, 0, producer)
            )
            return True
        offset = stream.next
        timestamp = stream.last_ts = max(clock.wall_ms, stream.last_ts)
        msg = StreamMessage(seq, name, priority, headers, body, timestamp, offset, stream.end_bytes, producer)
        stream.next = stream.tail_end = offset + 1
        stream.end_bytes += len(body)
        self.store.append_stream(msg)
        tail = stream.tail
        tail.append(msg)
        if stream.capacity is not None and len(tail) > stream.capacity:
            tail.popleft()
        if offset % self.config.stream_segment == 0 or not stream.marks:
            stream.marks.append((offset, timestamp, msg.bytes_before))
            self.enforce(stream)
        for sub in stream.subscribers:
            if sub.position == offset:
                self.pump(sub)
        return True

    def committed(self, ticket: int) -> None:
        """The store committed every group up to ``ticket``: feed the tail readers it settles."""
        if self.settling is not None:
            for stream in self.settling.committed(ticket):
                for sub in list(stream.subscribers):
                    self.pump(sub)

    # -- a shared store's news ------------------------------------------------------------------
    def changed(self, name: str, state: StreamState | None) -> None:
        """A stream as committed (by this broker or another; None: deleted).  States may come
        late or twice (a notification and a poll): offsets only ever move forward."""
        stream = self.streams.get(name)
        if state is None:
            if stream is not None and stream.row is not None:  # (not one made here since)
                self._forget(stream)
            return
        if stream is not None and stream.row is not None and stream.row != state.id:
            self._forget(stream)  # deleted and made again: its offsets start anew
            stream = None
        if stream is None:
            stream = self.streams[name] = self._new(name, state.first, state.first)
        stream.row = state.id
        if state.options != stream.options:
            self._configure(stream, state.options)
        if state.next > stream.next:
            known = stream.next
            stream.next, stream.end_bytes, stream.last_ts = state.next, state.end_bytes, state.last_ts
            self._read_marks(stream, known)
        if state.first > stream.first:
            stream.first = state.first
            marks = stream.marks
            while marks and (marks[0][0] < state.first and (len(marks) == 1 or marks[1][0] <= state.first)):
                marks.popleft()
            tail = stream.tail
            while tail and tail[0].offset < state.first:
                tail.popleft()
        self._arm_age(stream)
        for sub in list(stream.subscribers):
            self.pump(sub)

    def _forget(self, stream: Stream) -> None:
        """Another broker deleted ``stream``: its subscribers here stay where they are and get
        nothing more (their offsets name entries of a stream that is gone)."""
        del self.streams[stream.name]
        if stream.timer is not None:
            self.deadlines.cancel(stream.timer)
        stream.first = stream.next = stream.tail_end = max(
            [stream.next, *(sub.position for sub in stream.subscribers)]
        )
        stream.tail.clear()
        for sub in stream.subscribers:
            sub.position = stream.next
            sub.buffer.clear()

    def _read_marks(self, stream: Stream, known: int) -> None:
        """Read the marks of the segments that start in ``[known, next)`` (point reads)."""
        step = self.config.stream_segment
        wanted = list(range(-(-known // step) * step, stream.next, step))
        if not stream.marks and stream.first < stream.next and stream.first not in wanted:
            wanted.insert(0, max(stream.first, known))
        if not wanted:
            return
        name = stream.name

        async def fetch(store: Store) -> list[StreamMessage]:
            return [e for offset in wanted for e in await store.read_stream(name, offset, 1) if e.offset == offset]

        def done(entries: list[StreamMessage]) -> None:
            if self.streams.get(name) is not stream:
                return
            marks = stream.marks
            for e in entries:
                if e.offset >= stream.first and (not marks or e.offset > marks[-1][0]):
                    marks.append((e.offset, e.timestamp, e.bytes_before))
            self.enforce(stream)

        def failed(error: StoreError) -> None:  # retention waits for the next segment's marks
            log.warning("reading the marks of stream %s failed: %s", name, error)

        self.reads.submit(StoreRead(fetch, done, failed))

    def _follow(self, stream: Stream, position: int) -> None:
        """Read committed entries from ``position`` (a subscriber waits there, past the tail) into
        the tail: one read per stream, however many subscribers wait."""
        if stream.following:
            return
        if position > stream.tail_end:  # nothing between is wanted: the tail starts again there
            stream.tail.clear()
            stream.tail_end = position
        stream.following = True
        name, start, end = stream.name, stream.tail_end, stream.next

        def fetch(store: Store) -> Awaitable[Sequence[StreamMessage]]:
            return store.read_stream(name, start, min(READ_BATCH, end - start))

        def done(entries: Sequence[StreamMessage]) -> None:
            stream.following = False
            tail = stream.tail
            if not entries or entries[0].offset != stream.tail_end:
                tail.clear()  # entries trimmed by retention or a purge: what is there comes next
                stream.tail_end = entries[0].offset if entries else max(stream.tail_end, end)
            for e in entries:
                tail.append(e)
                if stream.capacity is not None and len(tail) > stream.capacity:
                    tail.popleft()
            if entries:
                stream.tail_end = entries[-1].offset + 1
            for sub in list(stream.subscribers):
                self.pump(sub)

        def failed(error: StoreError) -> None:
            log.debug("reading stream %s failed, retrying: %s", name, error)  # the store logs its outage
            self.deadlines.arm(READ_RETRY_SECONDS, STREAM_FOLLOW_RETRY, stream)

        self.reads.submit(StoreRead(fetch, done, failed))

    def retry_follow(self, stream: Stream) -> None:
        """The STREAM_FOLLOW_RETRY deadline."""
        stream.following = False
        for sub in list(stream.subscribers):
            self.pump(sub)

    def _clamp_after_check(self, sub: StreamSubscription) -> None:
        """A SUBSCRIBE on a shared store at an offset past the end this broker knows: ask the
        store for the end before clamping, since another broker may have appended that far."""
        name = sub.stream.name

        def fetch(store: Store) -> Awaitable[StreamState | None]:
            return store.stream_state(name)

        def done(state: StreamState | None) -> None:
            self.changed(name, state)
            stream = sub.stream
            if sub.position > stream.next:
                sub.position = stream.next
            self.pump(sub)

        self.reads.submit(StoreRead(fetch, done, lambda error: done(None)))

    def offsets_read(self, name: str) -> tuple[Callable[[Store], Awaitable[StreamState | None]],
                                               Callable[[StreamState | None], dict[str, str]]]:
        """``/control/stream-offsets`` on a shared store: the counter row, read behind every
        buffered append (the engine learns the state too, so it never clamps below it)."""

        def fetch(store: Store) -> Awaitable[StreamState | None]:
            return store.stream_state(name)

        def answer(state: StreamState | None) -> dict[str, str]:
            self.changed(name, state)
            return self.offsets(name)

        return fetch, answer

    # -- retention ----------------------------------------------------------------------------
    def enforce(self, stream: Stream) -> None:
        """Drop the oldest segments beyond the stream's retention (never the newest one)."""
        marks = stream.marks
        max_age, max_bytes = stream.max_age_ms, stream.max_bytes
        oldest_kept = self.dispatcher.clock.wall_ms - max_age if max_age is not None else None
        cut = None
        while len(marks) > 1:
            too_big = max_bytes is not None and stream.end_bytes - marks[0][2] > max_bytes
            # The next segment's first entry is no older than every entry of this one.
            too_old = oldest_kept is not None and marks[1][1] < oldest_kept
            if not (too_big or too_old):
                break
            marks.popleft()
            cut = marks[0][0]
        if cut is not None:
            stream.first = cut
            self.store.write(TrimStream(stream.name, cut))
            tail = stream.tail
            while tail and tail[0].offset < cut:
                tail.popleft()
        self._arm_age(stream)

    def _arm_age(self, stream: Stream) -> None:
        """Wake up when the oldest segment ages out (nothing else would look at an idle stream)."""
        if stream.timer is not None:
            self.deadlines.cancel(stream.timer)
            stream.timer = None
        if stream.max_age_ms is not None and len(stream.marks) > 1:
            due_ms = stream.marks[1][1] + stream.max_age_ms - self.dispatcher.clock.wall_ms + 1
            stream.timer = self.deadlines.arm(max(due_ms, 1) / 1000, STREAM_RETENTION, stream)

    def expire(self, stream: Stream) -> None:
        """The STREAM_RETENTION deadline."""
        stream.timer = None
        if self.streams.get(stream.name) is stream:
            self.enforce(stream)

    # -- subscribers --------------------------------------------------------------------------
    def subscribe(self, session: Session, name: str, sub_id: str, mode: AckMode, prefetch: int,
                  start: str | None, end: str | None = None, group: str | None = None,
                  selector: Selector | None = None) -> StreamSubscription:
        stream = self.stream(name)
        sub = StreamSubscription(sub_id, session, stream, mode, prefetch)
        sub.selector = selector
        sub.position, sub.min_ts = _start(stream, start)
        if end is not None:
            if not (end.isascii() and end.isdigit()) or len(end) > 18:
                raise ClientError(f"{END_HEADER} must be an offset (a whole number >= 0), not {end!r}")
            sub.end = int(end)
        if group is not None:
            if mode is AckMode.AUTO:
                raise ClientError(f"{GROUP_HEADER} needs the client or client-individual ack mode (an ACK"
                                  " commits the group's offset)")
            check_group(stream, group)
            sub.group = group
        stream.subscribers.append(sub)
        session.subscriptions[sub_id] = sub
        if group is not None and start is None:
            if self.shared:  # other brokers commit this group too: read it first
                self._resume_after_read(sub, group)
                return sub
            sub.position = stream.groups.get(group, sub.position)
        if sub.position <= stream.next:
            self.pump(sub)
        elif self.shared:
            self._clamp_after_check(sub)
        else:
            sub.position = stream.next
        return sub

    def _resume_after_read(self, sub: StreamSubscription, group: str) -> None:
        """A group SUBSCRIBE on a shared store: start at the stored offset, once read (behind this
        broker's buffered commits); nothing is delivered meanwhile."""
        name, default = sub.stream.name, sub.position
        sub.position = WAITING

        def done(groups: dict[str, int] | None) -> None:
            stream = sub.stream
            if groups is not None and self.streams.get(name) is stream:
                stream.groups = groups
            if sub.active and sub.position == WAITING:
                sub.position = max(stream.groups.get(group, default), stream.first)
                if sub.position <= stream.next:
                    self.pump(sub)
                else:
                    self._clamp_after_check(sub)

        def fetch(store: Store) -> Awaitable[dict[str, int] | None]:
            return store.stream_groups(name)

        self.reads.submit(StoreRead(fetch, done, lambda error: done(None)))

    def commit(self, sub: StreamSubscription, msg: StoredMessage) -> None:
        """An ACK of ``sub``'s (a group's reader) up to ``msg``: the group resumes after it."""
        stream, group = sub.stream, sub.group
        if group is not None and isinstance(msg, StreamMessage) and self.streams.get(stream.name) is stream:
            stream.groups[group] = msg.offset + 1
            self.store.save_stream_group(stream.name, group, msg.offset + 1)

    def remove(self, sub: StreamSubscription) -> None:
        sub.stream.subscribers.remove(sub)
        sub.buffer.clear()

    def pump(self, sub: StreamSubscription) -> None:
        """Deliver from ``sub``'s position while it has room; ask for a read when memory lacks it."""
        stream, buffer = sub.stream, sub.buffer
        while sub.active and sub.has_room():
            position = sub.position
            if position >= stream.next or position >= sub.end:
                return
            if position < stream.first:  # retention overtook the subscriber: skip what is gone
                sub.position = stream.first
                continue
            while buffer and buffer[0].offset < position:
                buffer.popleft()
            if buffer:
                msg = buffer.popleft()
                if len(buffer) == READ_AHEAD and buffer[-1].offset + 1 < stream.tail_first:
                    self._read(sub)  # the next batch, while this one is delivered
            elif position >= stream.tail_end:  # (shared store) committed, not read yet
                self._follow(stream, position)
                return
            elif position >= stream.tail_first:
                if position >= stream.visible and self.settling is not None and not self.settling.wait(stream):
                    return  # fed again once it is committed (``committed``)
                msg = stream.tail[position - stream.tail_first]
            else:
                self._read(sub)
                return
            sub.position = msg.offset + 1
            if sub.min_ts is not None:
                if msg.timestamp < sub.min_ts:
                    continue
                sub.min_ts = None
            if sub.selector is not None and not sub.selector.matches(msg):
                continue  # passed over: a group's next ACK commits past it
            self._deliver(sub, msg)

    def _deliver(self, sub: StreamSubscription, msg: StreamMessage) -> None:
        session = sub.session
        version = session.version
        ack = b""
        if sub.ack_mode is not AckMode.AUTO:
            ack_id = self.dispatcher.track(session, sub, msg)
            if version == "1.2":
                ack = b"ack:%s\n" % ack_id.encode()
        tail = stream_tail(msg, version, sub.stream.capacity is not None)
        write_frame(session.outbox, sub.head % (msg.seq, ack, tail), msg.body)

    def _read(self, sub: StreamSubscription) -> None:
        if sub.reading:
            return
        sub.reading = True
        name, start = sub.stream.name, sub.buffer[-1].offset + 1 if sub.buffer else sub.position

        def fetch(store: Store) -> Awaitable[Sequence[StreamMessage]]:
            return store.read_stream(name, start, READ_BATCH)

        self.reads.submit(StoreRead(fetch, partial(self._read_done, sub), partial(self._read_failed, sub)))

    def _read_done(self, sub: StreamSubscription, entries: Sequence[StreamMessage]) -> None:
        sub.reading = False
        if sub.active:
            sub.buffer.extend(entries)
            if not entries and sub.position < sub.stream.tail_first:
                # Trimmed while the read was queued: nothing is left below what is in memory.
                sub.position = max(sub.position, sub.stream.first, sub.stream.tail_first)
            self.pump(sub)

    def _read_failed(self, sub: StreamSubscription, error: StoreError) -> None:
        log.debug("reading stream %s failed, retrying: %s", sub.stream.name, error)  # the store logs its outage
        self.deadlines.arm(READ_RETRY_SECONDS, STREAM_READ_RETRY, sub)

    def retry_read(self, sub: StreamSubscription) -> None:
        """The STREAM_READ_RETRY deadline."""
        sub.reading = False
        self.pump(sub)

    def offsets(self, name: str) -> dict[str, str]:
        """``/control/stream-offsets``: the retained range (last-offset -1: never written)."""
        stream = self.streams.get(name)
        first, nxt = (stream.first, stream.next) if stream is not None else (0, 0)
        size = stream.size if stream is not None else 0
        return {
            "first-offset": str(first),
            "last-offset": str(nxt - 1),
            "next-offset": str(nxt),
            "count": str(nxt - first),
            "bytes": str(size),
            "duplicates": str(stream.duplicates if stream is not None else 0),
        }

def _producer(headers: dict[str, str]) -> tuple[str, int]:
    """An idempotent append's (producer id, seq), validated and taken off ``headers``: the
    position is stored in the entry's commit, so the entry need not carry them."""
    producer, value = headers.pop(PRODUCER_HEADER, None), headers.pop(PRODUCER_SEQ_HEADER, None)
    if producer is None or value is None:
        raise ClientError(f"{PRODUCER_HEADER} and {PRODUCER_SEQ_HEADER} go together")
    if not producer or len(producer) > PRODUCER_ID_LENGTH:
        raise ClientError(f"{PRODUCER_HEADER} must be 1 to {PRODUCER_ID_LENGTH} characters, not {len(producer)}")
    if not (value.isascii() and value.isdigit()) or len(value) > 18:
        raise ClientError(f"{PRODUCER_SEQ_HEADER} must be a whole number >= 0 (at most 18 digits), not {value!r}")
    return producer, int(value)

def _start(stream: Stream, value: str | None) -> tuple[int, int | None]:
    """The first offset a SUBSCRIBE's ``x-stream-offset`` names, and a minimum timestamp."""
    if value is None or value == "next":
        return stream.next, None
    if value == "first":
        return stream.first, None
    if value == "last":
        return max(stream.first, stream.next - 1), None
    if value.startswith("timestamp="):
        try:
            seconds = float(value[len("timestamp="):])
        except ValueError:
            seconds = float("nan")
        if not 0 <= seconds <= MAX_SECONDS:  # NaN fails both
            raise ClientError(f"{OFFSET_HEADER}: timestamp= needs epoch seconds from 0 to {MAX_SECONDS:.0f},"
                              f" not {value[:60]!r}")
        at_ms = int(seconds * 1000)
        start = stream.first
        for offset, timestamp, _ in stream.marks:  # the last segment starting at or before it
            if timestamp >= at_ms:
                break
            start = offset
        return start, at_ms
    if value.isascii() and value.isdigit() and len(value) <= 18:
        # Past the end: clamped to it by the caller (a shared store's end is checked first).
        return max(int(value), stream.first), None
    raise ClientError(f"{OFFSET_HEADER} must be first, last, next, an offset or timestamp=SECONDS, not {value!r}")
