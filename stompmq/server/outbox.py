"""A connection's bounded send buffer.

The broker writes encoded frames here synchronously; the connection's writer
task takes everything queued at once and sends it with one ``send_all``, so a
burst of deliveries costs one system call.  Two limits bound memory:

* below ``soft_limit`` queue deliveries may be added (``has_room``); above it
  the broker stops dispatching to this connection and the messages stay in
  their queues until the writer drains the buffer to half the soft limit and
  calls ``on_drain``;
* ``hard_limit`` bounds topic messages: above it the topic overflow policy
  decides (``--topic-overflow``: the publishers whose messages pushed it over
  stop being read until it is below again, or the subscriber misses messages,
  or it is disconnected), and the connection stops reading its own peer's
  frames (whose RECEIPTs and ERRORs would land here).

A MESSAGE with a large body is written as its bytes up to the body, the body
object itself and the NUL (``write_body``): ``take_buffers`` hands the writer
runs of small frames joined and each large body by reference, for one
``sendmsg`` (scatter/gather); ``take`` joins everything (streams without a
socket of their own: TLS, WebSocket).  The body counts once either way.

Waiting for room (``wait_below_hard_limit``) is woken by the writer as soon as
the buffer is below the hard limit, or by ``close`` when the connection ends,
so a publisher never waits for a subscriber that is gone.

``queued`` and ``sent_total`` count bytes ever written and ever sent: the
engine remembers ``queued`` after each auto-ack delivery and settles it once
``sent_total`` has passed it (``Broker.written``), so the soft limit is also
the bound on how much auto-ack traffic waits between the engine and the socket.

``drain_rate`` estimates how fast the peer takes bytes while there is output
for it: bytes sent over the time spent in ``send_all`` (a send still under way
counts with the time it has taken so far), halved together every
``RATE_WINDOW`` seconds of sending so the estimate follows the recent past.
Time waiting for output is not counted, so a subscriber that is idle because
its publisher is held back keeps the rate it showed when it was busy.
--topic-block-timeout compares subscribers of one topic by it.

On plain TCP a write to an empty outbox does not wake a writer: the outbox joins the
runtime's ``WriteBatch``, and the batch hands it to its ``flush`` (the connection sends what
the socket takes at once, ``Transport.flush``, and starts a writer only for what is left),
at the end of the reader's engine call that wrote it (the batch is open meanwhile) or at the
batch task's next turn.  At a few thousand msg/s each message is a read of its own, and
waking the consumer's writer for it cost a turn of trio's loop and a task switch per message;
and without a standing writer an idle connection is one task, not two.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ..protocol.encoder import LARGE_BODY

#: Bytes of queue deliveries allowed to wait for the socket per connection.
SOFT_LIMIT = 512 * 1024
#: Absolute bound on a connection's pending output.
HARD_LIMIT = 8 * 1024 * 1024
#: Seconds of sending after which ``drain_rate``'s counts are halved (its memory).
RATE_WINDOW = 2.0


class WriteBatch:
    """Outboxes written to and not yet flushed (one per runtime: every plain TCP connection's
    writes go through it).  Open: a reader's engine call, whose end flushes them; closed: a
    write from anywhere else (a receipt the commit loop released, a heart-beat, a timer's
    delivery) waits for ``run``, one task for every connection, to flush it."""

    __slots__ = ("open", "outboxes", "_due")

    def __init__(self) -> None:
        self.open = False
        self.outboxes: list[ConnectionOutbox] = []
        self._due = trio.Event()

    def add(self, outbox: ConnectionOutbox) -> None:
        """``outbox`` has output now: flush it at the batch's close, or at ``run``'s next turn."""
        self.outboxes.append(outbox)
        if not self.open:
            self._due.set()

    def close(self) -> None:
        """Flush each outbox written to since the batch opened (writes meanwhile wait for ``run``)."""
        self.open = False
        outboxes = self.outboxes
        if outboxes:
            self.outboxes = []
            for outbox in outboxes:
                outbox.flush()

    async def run(self) -> None:
        """Flush what was written outside a reader's call, once per turn for every connection."""
        while True:
            await self._due.wait()
            self._due = trio.Event()
            self.close()


class ConnectionOutbox:
    __slots__ = (
        "_chunks",
        "batch",
        "flush",
        "size",
        "_ready",
        "_drained",
        "_written",
        "blocked",
        "on_drain",
        "soft_limit",
        "hard_limit",
        "_room",
        "closed",
        "queued",
        "sent_total",
        "holding_since",
        "_busy_bytes",
        "_busy_seconds",
        "sending_since",
        "_bodies",
    )

    def __init__(
        self, soft_limit: int = SOFT_LIMIT, hard_limit: int = HARD_LIMIT, batch: WriteBatch | None = None
    ) -> None:
        self._chunks: list[bytes] = []
        self.batch = batch
        #: What the batch calls when it closes (the connection's direct send); default: wake the writer.
        self.flush: Callable[[], None] = self.wake
        self.size = 0  # bytes queued or being sent
        # Made when first waited on: an idle connection's outbox holds no event (trio's are ~0.4 KiB).
        self._ready: trio.Event | None = None  # the writer waits for output
        self._drained: trio.Event | None = None  # someone waits for the outbox to empty
        self._written: trio.Event | None = None  # set by the next write, while someone waits
        self.blocked = False  # has_room() said no since the last drain
        self.on_drain: Callable[[], None] = lambda: None
        self.soft_limit = soft_limit
        self.hard_limit = hard_limit
        self._room: trio.Event | None = None  # set when size falls below hard_limit, while waited on
        self.closed = False
        self.queued = 0  # bytes ever written
        self.sent_total = 0  # bytes ever handed to the socket
        #: When this subscriber's output first held a topic publisher back since it last
        #: drained (trio time; None: it holds nobody back), for --topic-block-timeout.
        self.holding_since: float | None = None
        self._busy_bytes = 0
        self._busy_seconds = 0.0
        #: When the send under way began (trio time; None: the writer is not sending).
        self.sending_since: float | None = None
        self._bodies = False  # a large body waits among the chunks (write_body)

    def write(self, data: bytes) -> None:
        chunks = self._chunks
        if not chunks:  # the writer only ever waits for an empty outbox: wake it once per batch
            batch = self.batch
            if batch is not None:
                batch.add(self)  # flushed by the batch (its flush wakes a writer if one runs)
            elif self._ready is not None:
                self._ready.set()
        chunks.append(data)
        self.size += len(data)
        self.queued += len(data)
        if self._written is not None:
            self._written.set()
            self._written = None

    def beat_sent(self) -> None:
        """A heart-beat went straight to the empty outbox's socket: count it written and sent."""
        self.queued += 1
        self.sent_total += 1

    def write_body(self, head: bytes, body: bytes) -> None:
        """Queue a frame's bytes up to its body, the body by reference (not copied: see
        ``take_buffers``) and the NUL."""
        self.write(head)
        self._chunks += (body, b"\0")
        self.size += len(body) + 1
        self.queued += len(body) + 1
        self._bodies = True

    def has_room(self) -> bool:
        if self.size < self.soft_limit:
            return True
        self.blocked = True
        return False

    def spare(self) -> int:
        return max(0, self.soft_limit - self.size)

    def can_take_transient(self) -> bool:
        return self.size < self.hard_limit

    @property
    def empty(self) -> bool:
        return self.size == 0

    async def _output(self) -> None:
        while not self._chunks:
            self._ready = ready = trio.Event()
            await ready.wait()

    async def take(self) -> bytes:
        """Wait for output and return all of it as one buffer."""
        await self._output()
        return self.take_now()

    def wake(self) -> None:
        """Wake the writer for what is queued."""
        if self._ready is not None:
            self._ready.set()

    @property
    def has_output(self) -> bool:
        """Something waits to be taken (``take``, ``take_buffers``)."""
        return bool(self._chunks)

    @property
    def holds_bodies(self) -> bool:
        """A large body waits among the chunks by reference (``write_body``, ``take_buffers``)."""
        return self._bodies

    def take_now(self) -> bytes:
        """Everything queued as one buffer, without waiting (b"" if nothing is)."""
        chunks = self._chunks
        self._chunks = []
        self._bodies = False
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def put_back(self, data: bytes) -> None:
        """``data`` from ``take_now`` was not sent: it goes first, and the writer sends it."""
        self._chunks.insert(0, data)
        self.wake()

    async def take_buffers(self) -> list[bytes]:
        """Wait for output and return all of it for one scatter/gather send: large bodies as
        they are, the chunks between them joined (one buffer when there is no large body)."""
        await self._output()
        if not self._bodies:
            return [self.take_now()]
        chunks = self._chunks
        self._chunks = []
        self._bodies = False
        buffers: list[bytes] = []
        run: list[bytes] = []
        for chunk in chunks:
            if len(chunk) < LARGE_BODY:
                run.append(chunk)
                continue
            if run:
                buffers.append(b"".join(run))
                run = []
            buffers.append(chunk)
        if run:
            buffers.append(b"".join(run))
        return buffers

    def sent(self, nbytes: int, now: float | None = None) -> None:
        """``nbytes`` taken earlier reached the socket, at ``now`` if the writer timed the send
        (it began at ``sending_since``) for ``drain_rate``."""
        self.size -= nbytes
        self.sent_total += nbytes
        if self.sending_since is not None and now is not None:
            self._busy_bytes += nbytes
            self._busy_seconds += now - self.sending_since
            self.sending_since = None
            if self._busy_seconds > RATE_WINDOW:
                self._busy_bytes //= 2
                self._busy_seconds /= 2
        if self._room is not None and self.size < self.hard_limit:
            self._room.set()
            self._room = None
        if self.size <= self.soft_limit // 2:
            self.holding_since = None  # caught up: a new stretch of holding back starts afresh
            if self.size == 0 and self._drained is not None:
                self._drained.set()
            if self.blocked:
                self.blocked = False
                self.on_drain()

    def drain_rate(self, now: float) -> float:
        """Bytes per second the peer took while there was output for it (0.0: not known yet)."""
        seconds = self._busy_seconds
        if self.sending_since is not None:
            seconds += now - self.sending_since
        return self._busy_bytes / seconds if seconds > 0 else 0.0

    async def wait_written(self) -> None:
        """Wait for the next ``write`` (a RECEIPT being released, say)."""
        if self._written is None:
            self._written = trio.Event()
        await self._written.wait()

    async def wait_drained(self) -> None:
        """Wait until everything queued was sent, or nothing can be any more (``close``)."""
        while self.size and not self.closed:
            self._drained = trio.Event()
            await self._drained.wait()

    async def wait_below_hard_limit(self) -> None:
        """Wait until the buffer is below the hard limit or the connection is closed (its own
        reader waits here, and so do the publishers it made wait: several tasks at once)."""
        while self.size >= self.hard_limit and not self.closed:
            if self._room is None:
                self._room = trio.Event()
            await self._room.wait()

    def close(self) -> None:
        """The connection ended, or its socket broke: nothing will drain this buffer, release
        whoever waits on it (for room, for it to drain, for a write)."""
        self.closed = True
        for event in (self._room, self._drained, self._written):
            if event is not None:
                event.set()
        self._room = self._drained = self._written = None
