"""One client's byte stream: reads, parking, the outbox and its writer, the closing linger.

Theory of operation
-------------------
A ``Transport`` knows bytes, not frames: the connection's reader (``server/connection.py``)
asks it for reads and hands what it parses to the STOMP session (``server/session.py``).

* Reads: on plain TCP the reader waits for the socket and then reads (``read``); after a read
  of heart-beats only it parks (``server/parking.py``): one task reads every idle socket's
  beats (``heard``) and hands it the first other bytes as its read.  Through TLS or WebSocket
  it reads the stream.
* Writes: on plain TCP what the outbox holds goes out with one ``write(2)`` when a batch
  flushes it (outbox.py: ``WriteBatch``, ``flush``): at the end of a reader's engine call for
  what that call delivered, at the batch task's next turn for anything else; a writer task
  runs only while the socket does not take everything (or for large bodies: one ``sendmsg``,
  each body by reference, not copied into a frame) and ends once the outbox is empty, so an
  idle connection is one task.  Through TLS or WebSocket a writer runs for the connection's
  life and sends everything with one ``send_all``.
* Each send settles the engine's auto-ack deliveries that reached the socket (``sent``:
  ``Broker.written``), so the transport holds the engine session it writes for (``session``,
  set at CONNECT).
* Closing: after an ERROR the transport half-closes and lingers briefly (``linger``) so the
  peer reads the ERROR before the close; while the reader is held it still looks whether the
  peer went away (``watching_peer``): on plain TCP by polling the socket; under TLS or
  WebSocket by polling the TCP socket beneath and, once its peer closed, reading the rest of
  the stream (``_read_rest``) to see whether any of it could still be a frame.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import termios
import time
from collections.abc import Awaitable, Callable

import trio

from ..broker import Broker, Session
from ..protocol import Frame, encode_frame
from .outbox import SOFT_LIMIT, ConnectionOutbox
from .parking import Parking
from .runtime import Runtime

log = logging.getLogger(__name__)

#: Bytes asked of the socket per receive: large enough to parse hundreds of frames per call.
RECEIVE_BYTES = 256 * 1024
#: Seconds an ERROR'd connection waits for the peer to close before closing itself.
LINGER_SECONDS = 1.0
#: Seconds between two looks, while the reader is held (pacing, the store, an alarm), at
#: whether the peer went away: it is not reading its socket, so it would not see the EOF.
PEER_CHECK_SECONDS = 1.0
#: The writer hands at most this many bytes to one ``send_all``.
SEND_PIECE = 256 * 1024
#: Batches larger than this go to ``send_all`` in SEND_PIECE pieces (twice the soft limit).
PIECES_ABOVE = 2 * SOFT_LIMIT
#: Buffers in one ``sendmsg`` (the kernel takes at most IOV_MAX, 1024 on Linux).
MAX_BUFFERS = 512
#: A socket the peer reset or errored (whatever is unread is lost anyway) ...
_BROKEN_EVENTS = select.POLLHUP | select.POLLERR
#: ... or closed for writing (Linux's POLLRDHUP), which counts only when nothing is left unread:
#: a producer that sent its frames and closed still has them stored once the hold ends.
_CLOSED_EVENTS = getattr(select, "POLLRDHUP", 0)


async def linger(stream: trio.abc.Stream) -> None:
    """Half-close and read until the peer closes (at most ``LINGER_SECONDS``): closing with
    unread input would reset the connection and could discard the ERROR just sent."""
    with trio.move_on_after(LINGER_SECONDS):
        try:
            if isinstance(stream, trio.abc.HalfCloseableStream):  # TLS 1.2 cannot half-close
                await stream.send_eof()
            while await stream.receive_some(RECEIVE_BYTES):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def refuse(stream: trio.abc.Stream, message: str) -> None:
    """Answer a connection the server will not serve with an ERROR frame, then close it."""
    try:
        with trio.move_on_after(LINGER_SECONDS):
            error = Frame("ERROR", {"message": message, "content-type": "text/plain"}, message.encode())
            await stream.send_all(encode_frame(error, "1.0"))
        await linger(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


class Transport:
    """The socket side of one connection: its reads' bookkeeping, its outbox and writer."""

    # Slots: an idle connection is mostly its objects' attributes (``Connection``'s comment).
    __slots__ = (
        "broken", "broker", "bytes_in", "bytes_out", "fd", "id", "last_recv", "last_send",
        "listening", "nursery", "outbox", "parking", "peer", "read_scope", "runtime", "session", "since",
        "socket_fd", "stream", "unread", "writing",
    )

    def __init__(self, stream: trio.abc.Stream, runtime: Runtime, connection_id: str,
                 parking: Parking | None) -> None:
        self.stream = stream
        self.runtime = runtime
        self.id = connection_id
        #: Plain TCP: reads wait for the socket and then read (``read``); bytes the socket takes
        #: at once go out with one write(2) from the batch that flushes the outbox (outbox.py:
        #: ``WriteBatch``), and a writer task runs only while the socket does not take them all;
        #: -1: TLS or WebSocket, always through the stream, by a writer task for the connection's life.
        self.fd = stream.socket.fileno() if type(stream) is trio.SocketStream else -1
        #: The TCP socket beneath any TLS or WebSocket layers (-1: a stream without one, as in
        #: tests): a held reader polls it for its peer's close (``watching_peer``).
        sock = stream_socket(stream)
        self.socket_fd = sock.fileno() if sock is not None else -1
        #: What ``_read_rest`` read from a TLS or WebSocket stream whose peer closed while the
        #: reader was held: the reader's next read (``take_unread``).
        self.unread = b""
        self.outbox = ConnectionOutbox(batch=runtime.writes if self.fd >= 0 else None)
        if self.fd >= 0:
            self.outbox.flush = self.flush
        #: Where the reader parks between heart-beats (plain TCP only; server/parking.py).
        self.parking = parking if self.fd >= 0 else None
        self.nursery: trio.Nursery | None = None  # where a writer starts, while the connection runs
        self.writing = False  # a writer task runs
        self.broken = False  # the socket failed: nothing more can be sent
        #: The reader's scope: cancelled when the socket breaks under the writer, or the session fails.
        self.read_scope = trio.CancelScope()
        #: The engine session whose auto-ack deliveries a send settles, and its engine (CONNECT sets
        #: them); its ``fail`` ends the connection with an ERROR (``ClientSession.fail``).
        self.session: Session | None = None
        self.broker: Broker = runtime.broker
        self.last_recv = trio.current_time()
        self.last_send = self.last_recv
        #: The reader waits on the socket: only then can the peer's silence be measured.  Anywhere
        #: else (at its read gate: held by the store, an alarm, pacing, its outbox, the engine) its
        #: heart-beats wait unread, and that time is not silence.
        self.listening = False
        # What an operator sees (the management API, the connect/disconnect log lines).
        self.peer = peer_name(stream)
        self.since = time.time()
        self.bytes_in = self.bytes_out = 0

    def heard(self, nbytes: int, now: float) -> None:
        """Parked: heart-beats arrived (``Parking.run`` read them)."""
        self.bytes_in += nbytes
        self.last_recv = now

    def drain_parked(self, now: float) -> None:
        """Read a lone heart-beat waiting in a parked socket (the heart-beat timer's visit)."""
        if self.parking is not None:
            self.parking.drain(self.fd, now)

    async def watching_peer(self, wait: Callable[[], Awaitable[bool]]) -> bool | None:
        """What ``wait()`` (the read gate's wait) says when it ends, looking every
        ``PEER_CHECK_SECONDS`` whether the peer went away meanwhile: then None, at once, instead
        of waiting for a hold that may never end.  On plain TCP the socket says so itself
        (``_peer_gone``).  Under TLS or WebSocket what waits unread may be in the layers' buffers
        or be their own close (a close_notify, a Close frame), so once the TCP socket beneath
        says its peer closed (``_peer_closed``), the rest of the stream is read (``_read_rest``):
        the peer went away if none of it can be a frame; else it is kept for the reader, as on
        TCP, and stored once the hold ends."""
        fd, wrapped = self.socket_fd, self.fd < 0
        gone = False
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                nonlocal gone
                while not gone:
                    await trio.sleep(PEER_CHECK_SECONDS)
                    if not wrapped:
                        gone = _peer_gone(fd)
                    elif _peer_closed(fd):
                        gone = await self._read_rest()
                        if not gone:  # frames wait: nothing more to watch for
                            return
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            waited = await wait()
            nursery.cancel_scope.cancel()
        return None if gone else waited

    async def _read_rest(self) -> bool:
        """The peer of this TLS or WebSocket stream closed: read what it sent before into
        ``unread``; True if none of it can complete a frame (no NUL: heart-beats at most) or the
        stream broke (what was unread is lost anyway).  Shielded, so the hold ending meanwhile
        does not cut a TLS record in half, and bounded: it stops at the first NUL or past
        ``RECEIVE_BYTES`` (frames wait: that is all it needs to know), and after
        ``LINGER_SECONDS`` (a peer that neither sends nor reads its Close's answer is gone)."""
        with trio.CancelScope(shield=True), trio.move_on_after(LINGER_SECONDS) as late:
            try:
                while b"\0" not in self.unread and len(self.unread) <= RECEIVE_BYTES:
                    data = await self.stream.receive_some(RECEIVE_BYTES)
                    if not data:
                        return True
                    self.unread += data
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return True
        return late.cancelled_caught

    def take_unread(self) -> bytes:
        """What ``_read_rest`` read for the reader (once), or b"": then it reads the stream."""
        data, self.unread = self.unread, b""
        return data

    # -- writing ------------------------------------------------------------------
    def flush(self) -> None:
        """Plain TCP: the outbox has output, flushed by a batch (outbox.py: ``WriteBatch``).  Send
        what the socket takes now; a writer sends the rest (or all, while one runs)."""
        outbox = self.outbox
        if self.writing or self.broken or outbox.closed:  # (closed: so is the fd)
            outbox.wake()
            return
        if outbox.holds_bodies:  # large bodies go by the writer's sendmsg
            self.start_writer()
            return
        data = outbox.take_now()
        outbox.sending_since = now = trio.current_time()
        try:
            done = _write_now(self.fd, data)
        except OSError:  # the writer's send meets it too, and ends the connection
            done = 0
        if done < len(data):
            outbox.put_back(data[done:])
            self.start_writer()
        if not done:
            outbox.sending_since = None
            return
        try:
            self.sent(done, now)
        except Exception:  # in another connection's reader: this connection's failure only
            log.exception("connection %s: settling what it sent failed", self.id)
            if self.session is not None:
                self.session.fail("internal error", None)
            else:  # nothing to settle before CONNECT: its own bookkeeping failed; close
                self._broke()

    def beat(self, now: float) -> None:
        """Send a heart-beat: on plain TCP with one write(2) here (the outbox is empty and no
        writer runs: nothing can go before it), else through the outbox."""
        if self.fd >= 0 and not self.writing and not self.broken and not self.outbox.closed:
            try:
                done = _write_now(self.fd, b"\n")
            except OSError:  # the reader meets it too, and ends the connection
                done = 0
            if done:
                self.outbox.beat_sent()
                self.last_send = now
                self.bytes_out += 1
                return
        self.outbox.write(b"\n")

    def sent(self, nbytes: int, now: float) -> None:
        """``nbytes`` reached the socket: the outbox's, the API's and the engine's bookkeeping."""
        self.last_send = now
        self.outbox.sent(nbytes, now)
        self.bytes_out += nbytes
        session = self.session
        if session is not None and session.unsent:  # auto-ack deliveries reached the socket
            self.runtime.tick()
            self.broker.written(session, self.outbox.sent_total)

    def start_writer(self) -> None:
        """Start a writer task: for the connection's life (TLS, WebSocket), or on plain TCP until
        the outbox is empty (the socket did not take everything at once).  Not per message: at
        normal rates the socket takes every flush whole."""
        assert self.nursery is not None
        self.writing = True
        self.nursery.start_soon(self._writer)

    async def _writer(self) -> None:
        try:
            await self._write()
        finally:
            self.writing = False

    def _broke(self) -> None:
        """The socket failed under the writer: nothing more goes out (the outbox closes, so a
        closing connection does not wait for it to drain, nor a topic publisher for its room),
        and the reader stops."""
        self.broken = True
        self.outbox.close()
        self.read_scope.cancel()

    async def _write(self) -> None:
        outbox, stream, fd = self.outbox, self.stream, self.fd
        # Large bodies go by reference with sendmsg (scatter/gather), which needs the socket
        # itself: TLS and WebSocket streams get everything joined into one buffer.
        sock = stream.socket if fd >= 0 and isinstance(stream, trio.SocketStream) else None
        # After large bodies it waits for the next batch (they come in runs: a task per batch cost
        # 64 KiB messages about a tenth of their rate); after anything else it ends once nothing is left.
        bodies = False
        while fd < 0 or bodies or outbox.has_output:
            if sock is None:
                data = await outbox.take()
            else:
                buffers = await outbox.take_buffers()
                bodies = len(buffers) > 1
                if bodies:
                    if not await self._send_buffers(sock, buffers):
                        return
                    continue
                data = buffers[0]
            size = len(data)
            # a batch far above the soft limit (topic traffic backing up) goes in pieces: the
            # outbox learns of progress (room for waiting publishers, its drain rate) every
            # SEND_PIECE bytes, not only at the end.  Queue deliveries stop at the soft limit and
            # go whole: telling the engine of progress mid-batch (on_drain) doubled their cost.
            view = memoryview(data) if size > PIECES_ABOVE else None
            start = 0
            waited = False  # send_all checkpointed
            while start < size:
                piece = data if view is None else view[start : start + SEND_PIECE]
                outbox.sending_since = trio.current_time()
                try:
                    done = _write_now(fd, piece) if fd >= 0 else 0
                    if done < len(piece):
                        waited = True
                        await stream.send_all(memoryview(piece)[done:] if done else piece)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._broke()
                    return
                self.sent(len(piece), trio.current_time())
                start += len(piece)
            if outbox.size and not waited:  # more was written meanwhile: let the others run first
                await trio.lowlevel.checkpoint()

    async def _send_buffers(self, sock: trio.socket.SocketType, buffers: list[bytes]) -> bool:
        """Send ``buffers`` with ``sendmsg``, telling the outbox of progress as for one buffer
        (at the end, or every SEND_PIECE bytes of a batch above PIECES_ABOVE); False: the socket
        broke."""
        outbox = self.outbox
        size = sum(map(len, buffers))
        report_every = SEND_PIECE if size > PIECES_ABOVE else size
        pending: list[bytes | memoryview] = list(buffers)
        first = unreported = 0  # pending[first] goes next
        outbox.sending_since = trio.current_time()
        while first < len(pending):
            try:
                sent = await sock.sendmsg(pending[first : first + MAX_BUFFERS])
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                self._broke()
                return False
            unreported += sent
            while sent:  # drop what went, cut the buffer it went into
                length = len(pending[first])
                if sent < length:
                    pending[first] = memoryview(pending[first])[sent:]
                    break
                sent -= length
                first += 1
            if unreported >= report_every or first == len(pending):
                now = trio.current_time()
                self.sent(unreported, now)
                unreported = 0
                if first < len(pending):
                    outbox.sending_since = now
        return True

    async def aclose(self) -> None:
        """Close the stream, even while being cancelled (the connection ends either way)."""
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


async def read(fd: int, size: int) -> bytes:
    """Receive from the plain TCP socket ``fd`` as ``SocketStream.receive_some`` would, waiting
    for it first: that tries a read and, when there is nothing (between messages at low rates,
    every time), pays for a failed recv and its exception before it waits anyway."""
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, size)
        except BlockingIOError:
            continue
        except OSError as e:
            raise trio.BrokenResourceError from e


def _write_now(fd: int, data: bytes | memoryview) -> int:
    """Write what the socket ``fd`` takes now without blocking; how many bytes that was."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


def _peer_events(fd: int) -> int:
    """What the TCP socket ``fd`` says now of its peer: a mask of ``_BROKEN_EVENTS``,
    ``_CLOSED_EVENTS`` and POLLNVAL (0: nothing happened; -1, no socket: nothing can)."""
    if fd < 0:
        return 0
    poller = select.poll()
    poller.register(fd, _BROKEN_EVENTS | _CLOSED_EVENTS)
    events = poller.poll(0)
    return events[0][1] if events else 0


def _peer_gone(fd: int) -> bool:
    """Has the peer of the TCP socket ``fd`` reset it, or closed it with nothing left unread?"""
    mask = _peer_events(fd)
    if not mask:
        return False
    if mask & (_BROKEN_EVENTS | select.POLLNVAL):
        return True
    unread = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, unread)
    return int.from_bytes(unread, "little") == 0


def _peer_closed(fd: int) -> bool:
    """Has the peer of the TCP socket ``fd`` closed it (for writing, at least) or reset it?
    Under TLS or WebSocket what it left unread is for ``Transport._read_rest`` to judge."""
    return _peer_events(fd) != 0


def stream_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The TCP socket under ``stream``, through TLS and WebSocket wrappers (None for a stream
    without one, as in tests)."""
    layer: trio.abc.Stream | None = stream
    while layer is not None and getattr(layer, "socket", None) is None:
        layer = getattr(layer, "transport_stream", None)
    return getattr(layer, "socket", None)


def peer_name(stream: trio.abc.Stream) -> str:
    """``host:port`` of the client, through TLS and WebSocket wrappers ("" for a stream
    without a socket, as in tests)."""
    sock = stream_socket(stream)
    try:
        host, port = sock.getpeername()[:2] if sock is not None else ("", "")
    except OSError:
        return ""
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}" if host else ""
