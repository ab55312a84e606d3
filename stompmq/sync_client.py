"""A blocking STOMP 1.2 client over one socket, for code that runs outside trio.

Spark tasks (``stompmq/spark/``), the task-queue integrations (``stompmq/integrations/``) and
scripts run in threads and processes that own no event loop, so they cannot use the trio client
(``stompmq/client.py``).  This one speaks plain STOMP on a blocking socket and parses with
stompmq's own sans-IO parser, so it needs nothing beyond this package::

    with Connection("stomp://127.0.0.1:61613", login, passcode) as conn:
        conn.send("/queue/jobs", b"payload")           # returns once the broker stored it
        conn.subscribe("/queue/jobs", ack="client-individual")
        message = conn.receive(timeout=5.0)            # a MESSAGE frame, or None
        conn.ack(message)

The URL is ``stomp://USER:PASS@HOST:PORT[/VHOST]`` (``stomp_url.StompURL``: the path names the
virtual host); ``login``/``passcode`` given to the constructor win over the URL's.

Threads: any thread may write (``send_frame``, ``send_frames``: a lock keeps frames whole), but
only one reads (``receive``, ``request``, ``check`` and the calls built on them).  That is how a
Dramatiq consumer uses it: its consumer thread reads MESSAGEs while the worker threads send their
ACKs.  Waiting for a frame uses ``select`` with the caller's timeout, so the socket's own timeout
only bounds a stuck ``sendall``.

Errors are ``StompmqError`` (a ``ValueError``) with a message that names the setting to fix
(``url``, ``login``, ``destination``...), as the Spark source's options call them: a task shows
the message, and a stack trace helps nobody there.  ``BrokerRefused`` is an ERROR frame (the
broker closes the connection after it), ``ConnectionLost`` a socket that failed, ``NoAnswer``
silence past the timeout.

Heart-beats: a connection offers ``heart_beat`` seconds each way (10 s) and keeps what the broker
agrees to, so an idle connection is not dropped by a NAT or a firewall, nor by a broker that
requires beats, and a broker that vanished without closing the socket is noticed.  One daemon
thread per process (``_Beats``) writes the beats of every connection that wrote nothing for its
interval, so they go on while the caller is busy (a worker running a long task, a publisher
between sends); it never blocks on a socket (a write under way is traffic already, a full send
buffer means the broker reads nothing).  The reading calls count the broker's silence: past
``BEAT_GRACE`` of its intervals they raise ``ConnectionLost``.

Closing sends DISCONNECT with a receipt and reads up to it, so every frame sent before reached
the broker: closing a socket with unread MESSAGEs in its receive buffer makes the kernel answer
with a reset, and the broker could lose the last ACKs.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Self

from .protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame
from .protocol.negotiation import heart_beat_intervals, parse_heart_beat
from .stomp_url import BadURL, StompmqError, StompURL

__all__ = ["BadURL", "BrokerRefused", "Connection", "ConnectionLost", "NoAnswer", "StompURL", "StompmqError"]

#: Seconds a connect, a reply or a stuck write may take before the call fails (the broker
#: answers in milliseconds).
TIMEOUT = 30.0
#: Seconds ``close`` waits for the DISCONNECT's receipt.
CLOSE_TIMEOUT = 5.0
#: Bytes of SEND frames gathered into one sendall by ``send_all`` (fewer syscalls per message).
SEND_CHUNK = 256 * 1024
STREAM_PREFIX = "/stream/"
#: Seconds between heart-beats a connection offers each way (the broker may ask for longer).
HEART_BEAT = 10.0
#: Intervals the broker may be late with its heart-beats before the connection counts as lost
#: (the broker's own ``--heart-beat-grace`` for its clients).
BEAT_GRACE = 2.0
#: Seconds the heart-beat thread sleeps at least (a connection whose beat could not go out now).
MIN_BEAT_WAIT = 0.05


class ConnectionLost(StompmqError):
    """The connection failed or broke; what was sent on it may or may not have arrived."""


class NoAnswer(ConnectionLost):
    """The broker sent nothing within the timeout."""


class BrokerRefused(StompmqError):
    """The broker answered ERROR (and closed the connection): the message says why."""


def _refusal(frame: Frame) -> str:
    """An ERROR frame's ``message`` header, with its body when that says more."""
    detail = frame.headers.get("message", "")
    body = frame.body.decode(errors="replace").strip()
    return f"{detail}: {body}" if body and body != detail else detail


class Connection:
    """One CONNECTed STOMP 1.2 session; use as a context manager.

    Frames that arrive while a call waits for its RECEIPT (MESSAGEs of a subscription) are kept,
    in order, for ``receive``.
    """

    def __init__(self, url: str | StompURL | None, login: str | None = None, passcode: str | None = None,
                 *, timeout: float = TIMEOUT, heart_beat: float = HEART_BEAT) -> None:
        if not url:
            raise BadURL(f"option 'url' is required ({StompURL.FORM})")
        if isinstance(url, str):
            try:
                url = StompURL.parse(url)
            except BadURL as e:
                raise BadURL(f"option 'url': {e}") from None
        if login is not None:
            url = replace(url, login=login)
        if passcode is not None:
            url = replace(url, passcode=passcode)
        self.url = url
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((url.host, url.port), timeout=timeout)
        except OSError as e:
            raise ConnectionLost(f"cannot reach the broker at {url} (option 'url'): {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = FrameParser(Limits(max_body=1 << 30))
        self.frames: deque[Frame] = deque()
        self.closed = False
        self._lock = threading.Lock()
        self._ids = itertools.count()
        #: seconds between the heart-beats this end sends and those it expects (0: none)
        self.send_every = self.expect_every = 0.0
        self.last_send = self.last_recv = time.monotonic()
        beat_ms = round(heart_beat * 1000)
        self.send_frame("CONNECT", url.connect_headers(beat_ms))
        reply = self._wait_frame(timeout)
        if reply is None or reply.command != "CONNECTED":
            self.abort()
            why = "no answer" if reply is None else _refusal(reply) or reply.command
            raise BrokerRefused(
                f"the broker at {url} refused the connection (options 'login'/'passcode'): {why}")
        try:
            server = parse_heart_beat(reply.headers.get("heart-beat"))
        except ProtocolError as e:
            self.abort()
            raise ConnectionLost(f"the broker at {url} answered a bad CONNECTED: {e}") from None
        broker_sends, broker_expects = heart_beat_intervals((beat_ms, beat_ms), server)
        self.send_every, self.expect_every = broker_expects / 1000, broker_sends / 1000
        if self.send_every:
            _beats.watch(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing (any thread) -------------------------------------------------------------------
    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        """Write one frame, without waiting for anything."""
        self._write(encode_frame(Frame(command, headers, body), "1.2"))

    def send_frames(self, frames: Iterable[Frame]) -> None:
        """Frames in one write, in order, none interleaved with another thread's."""
        self._write(b"".join(encode_frame(frame, "1.2") for frame in frames))

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self.closed:
                raise ConnectionLost(f"the connection to {self.url} is closed")
            try:
                self.sock.sendall(data)
            except OSError as e:
                self.abort()
                raise ConnectionLost(f"lost the broker at {self.url} (option 'url'): {e}") from None
            self.last_send = time.monotonic()

    def beat(self) -> None:
        """Send a heart-beat if nothing was written for ``send_every`` (``_Beats``' call): never
        waiting, for the lock (a write under way is traffic) or for room in the socket."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self.closed or time.monotonic() - self.last_send < self.send_every:
                return
            try:
                self.sock.send(b"\n", socket.MSG_DONTWAIT)
            except BlockingIOError:
                return  # the broker reads nothing: a beat would not reach it either
            except OSError:
                self.abort()  # (the reading thread hears of it)
                return
            self.last_send = time.monotonic()
        finally:
            self._lock.release()

    # -- reading (one thread) -------------------------------------------------------------------
    def receive(self, timeout: float | None = None) -> Frame | None:
        """The next frame, or None when none completes within ``timeout`` seconds (None: the
        connection's timeout).  An ERROR frame raises ``BrokerRefused``."""
        frame = self._wait_frame(self.timeout if timeout is None else timeout)
        if frame is not None:
            self._raise_error(frame)
        return frame

    def next(self) -> Frame:
        """The next frame; ``NoAnswer`` if none came within the connection's timeout."""
        frame = self.receive()
        if frame is None:
            raise NoAnswer(f"no answer from the broker at {self.url} within {self.timeout} s")
        return frame

    def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """Send a frame asking for a receipt; return the RECEIPT's headers once it came.  Other
        frames that arrive meanwhile are kept for ``receive``; an ERROR raises ``BrokerRefused``."""
        receipt = f"q{next(self._ids)}"
        self.send_frame(command, {**headers, "receipt": receipt}, body)
        deadline = time.monotonic() + self.timeout
        kept: list[Frame] = []
        try:
            while True:
                frame = self._wait_frame(deadline - time.monotonic())
                if frame is None:
                    self.abort()
                    raise NoAnswer(f"no receipt from {self.url} within {self.timeout} s")
                if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                    return frame.headers
                if frame.command == "ERROR":
                    self.abort()
                    raise BrokerRefused(
                        f"the broker refused {headers.get('destination', command)}: {_refusal(frame)}")
                kept.append(frame)
        finally:
            self.frames.extendleft(reversed(kept))

    def check(self) -> None:
        """Read what has already arrived without waiting: raise if the broker sent an ERROR or
        closed the connection (a publisher that asks for no receipts learns of it here, before
        its next SEND, not never)."""
        if not self.closed and self._wait_readable(0):
            self._read()
        for frame in self.frames:
            self._raise_error(frame)

    def _raise_error(self, frame: Frame) -> None:
        if frame.command == "ERROR":
            self.abort()
            raise BrokerRefused(f"the broker at {self.url} sent an ERROR: {_refusal(frame)}")

    def _wait_frame(self, timeout: float) -> Frame | None:
        """The next frame of any command (ERROR too), or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0 or not self._wait_readable(left):
                return None
            self._read()
        return self.frames.popleft()

    def _wait_readable(self, timeout: float) -> bool:
        """Is there something to read within ``timeout`` seconds?  ``ConnectionLost`` once the
        broker, which agreed to heart-beats, has been silent for ``BEAT_GRACE`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            if self.closed:
                raise ConnectionLost(f"the connection to {self.url} is closed")
            now = time.monotonic()
            wait = deadline - now
            if self.expect_every:
                wait = min(wait, self.last_recv + self.expect_every * BEAT_GRACE - now)
            try:
                readable, _, _ = select.select([self.sock], [], [], max(0.0, wait))
            except (OSError, ValueError) as e:  # ValueError: closed by another thread meanwhile
                raise ConnectionLost(f"lost the broker at {self.url}: {e}") from None
            if readable:
                return True
            now = time.monotonic()
            if self.expect_every and now - self.last_recv >= self.expect_every * BEAT_GRACE:
                self.abort()
                raise ConnectionLost(f"no heart-beat from the broker at {self.url} for {now - self.last_recv:.1f} s")
            if now >= deadline:
                return False

    def _recv(self) -> bytes:
        """The next bytes from the socket, waiting up to the connection's timeout."""
        if not self._wait_readable(self.timeout):
            raise NoAnswer(f"no answer from the broker at {self.url} within {self.timeout} s")
        try:
            data = self.sock.recv(1 << 20)
        except OSError as e:
            self.abort()
            raise ConnectionLost(f"lost the broker at {self.url} (option 'url'): {e}") from None
        if not data:
            self.abort()
            raise ConnectionLost(f"the broker at {self.url} closed the connection")
        self.last_recv = time.monotonic()
        return data

    def _read(self) -> None:
        data = self._recv()
        try:
            self.frames.extend(self.parser.feed(data))
        except ProtocolError as e:
            self.abort()
            raise ConnectionLost(f"the broker at {self.url} sent a bad frame: {e}") from None

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """DISCONNECT, wait for its receipt (so everything sent before was read), close."""
        if self.closed:
            return
        try:
            receipt = "bye"
            self.send_frame("DISCONNECT", {"receipt": receipt})
            deadline = time.monotonic() + CLOSE_TIMEOUT
            while (frame := self._wait_frame(deadline - time.monotonic())) is not None:
                if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                    break
        except StompmqError:
            pass
        self.abort()

    def abort(self) -> None:
        """Close the socket now (the broker requeues what this connection had unacked)."""
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    # -- messages -----------------------------------------------------------------------------
    def send(self, destination: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        """SEND ``body`` to ``destination``; returns once the broker has stored it (its RECEIPT)."""
        self.request("SEND", {**(headers or {}), "destination": destination}, body)

    def subscribe(self, destination: str, ack: str = "auto", id: str | None = None,
                  headers: dict[str, str] | None = None) -> str:
        """SUBSCRIBE to ``destination`` (``ack``: auto, client or client-individual); the
        subscription's id, for ``unsubscribe``.  Returns once the broker confirmed it."""
        subscription = id if id is not None else f"s{next(self._ids)}"
        self.request("SUBSCRIBE", {**(headers or {}), "destination": destination, "id": subscription, "ack": ack})
        return subscription

    def unsubscribe(self, subscription: str) -> None:
        """End a subscription; its unacknowledged messages go back to the queue."""
        self.request("UNSUBSCRIBE", {"id": subscription})

    def ack(self, message: Frame) -> None:
        """Acknowledge a MESSAGE of a client or client-individual subscription (a RECEIPT waits
        until the broker has removed it)."""
        self.request("ACK", {"id": self._ack_id(message)})

    def nack(self, message: Frame) -> None:
        """Refuse a MESSAGE: the broker redelivers it, or dead-letters it after its limit."""
        self.request("NACK", {"id": self._ack_id(message)})

    @staticmethod
    def _ack_id(message: Frame) -> str:
        ack_id = message.headers.get("ack")
        if ack_id is None:
            raise StompmqError("only a MESSAGE of a client or client-individual subscription is acknowledged")
        return ack_id

    def send_all(self, frames: Iterator[bytes]) -> int:
        """Send encoded SEND frames that each ask for a receipt; return once every RECEIPT came."""
        sent = received = 0
        chunk: list[bytes] = []
        size = 0
        for data in frames:
            chunk.append(data)
            size += len(data)
            sent += 1
            if size >= SEND_CHUNK:
                self._write(b"".join(chunk))
                chunk, size = [], 0
                received += self._take_receipts(block=False)
        if chunk:
            self._write(b"".join(chunk))
        while received < sent:
            received += self._take_receipts(block=True)
        return sent

    def _take_receipts(self, block: bool) -> int:
        if block or self._wait_readable(0):
            self._read()
        n = 0
        while self.frames:
            frame = self.frames.popleft()
            if frame.command == "ERROR":
                self.abort()
                raise BrokerRefused(f"the broker refused a SEND: {_refusal(frame)}")
            if frame.command == "RECEIPT":
                n += 1
        return n

    # -- stompmq's control destinations ---------------------------------------------------------
    def stream_bounds(self, stream: str) -> tuple[int, int]:
        """(first retained offset, next offset) of a stream, both committed to the store."""
        answer = self.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}"})
        return int(answer["first-offset"]), int(answer["next-offset"])

    def offset_at(self, stream: str, ms: int) -> tuple[int, int]:
        """(the first offset whose entry's timestamp is >= ``ms`` epoch milliseconds, the
        stream's next offset): equal when no entry is that late."""
        answer = self.request("SEND", {"destination": f"/control/stream-offsets/stream/{stream}",
                                       "timestamp": str(ms)})
        return int(answer["timestamp-offset"]), int(answer["next-offset"])

    def commit_group(self, stream: str, group: str, offset: int) -> None:
        """Set consumer group ``group``'s committed offset on ``stream`` (``/control/stream-group``)."""
        self.request("SEND", {"destination": f"/control/stream-group/stream/{stream}", "group": group,
                              "offset": str(offset)})

    def bound_streams(self, exchange: str) -> list[str]:
        """Names of the streams bound to ``exchange`` (option 'exchange')."""
        try:
            answer = self.request("SEND", {"destination": f"/control/list-bindings/exchange/{exchange}"})
        except StompmqError as e:
            raise StompmqError(f"option 'exchange': {e}") from None
        targets = [answer[f"binding-{i}-queue"] for i in range(int(answer["num-bindings"]))]
        streams = [t[len(STREAM_PREFIX):] for t in targets if t.startswith(STREAM_PREFIX)]
        if not streams:
            raise StompmqError(f"option 'exchange': no stream is bound to exchange {exchange!r}")
        return streams


class _Beats:
    """The thread that writes every connection's heart-beats (see the module's docstring): it
    sleeps until the next connection is due, beats those that are, and forgets closed ones."""

    def __init__(self) -> None:
        self.wake = threading.Condition()
        self.connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        self.changed = False  # a connection came since the thread last looked
        self.thread: threading.Thread | None = None

    def watch(self, conn: Connection) -> None:
        with self.wake:
            self.connections.add(conn)
            self.changed = True
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="stompmq heart-beats", daemon=True)
                self.thread.start()
            self.wake.notify()

    def _run(self) -> None:
        due: float | None = None
        while True:
            with self.wake:
                if not self.changed:
                    self.wake.wait(None if due is None else max(MIN_BEAT_WAIT, due - time.monotonic()))
                self.changed = False
                for conn in [c for c in self.connections if c.closed]:
                    self.connections.discard(conn)
                watched = list(self.connections)
            for conn in watched:
                conn.beat()
            due = min((conn.last_send + conn.send_every for conn in watched if not conn.closed), default=None)


_beats = _Beats()


def _forget_beats() -> None:
    """In a forked child: the parent's thread and lock are not this process's (a fork copies no
    threads), and its connections are the parent's to beat."""
    global _beats
    _beats = _Beats()


os.register_at_fork(after_in_child=_forget_beats)
