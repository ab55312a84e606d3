"""A blocking STOMP 1.2 connection for threaded frameworks (Dramatiq): one socket, stompmq's
own sans-IO parser and encoder, no thread of its own.

Threads: any thread may ``send`` (a lock keeps frames whole), but only one reads (``receive``,
``request``, ``check``).  That is how a Dramatiq consumer uses it: its consumer thread reads
MESSAGEs while the worker threads send their ACKs.  Waiting for a frame uses ``select`` with the
caller's timeout, so the socket's own timeout (``TIMEOUT``) only bounds a stuck ``sendall``.

Closing sends DISCONNECT with a receipt and reads up to it, so every frame sent before reached
the broker: closing a socket with unread MESSAGEs in its receive buffer makes the kernel answer
with a reset, and the broker could lose the last ACKs.
"""

from __future__ import annotations

import itertools
import select
import socket
import threading
import time
from collections import deque

from ..protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame
from .url import ConnectionLost, StompmqError, StompURL

#: Seconds a connect, a receipt or a stuck write may take before the connection counts as lost.
TIMEOUT = 30.0
#: Seconds ``close`` waits for the DISCONNECT's receipt.
CLOSE_TIMEOUT = 5.0


class BrokerRefused(StompmqError):
    """The broker answered ERROR (and closed the connection): ``message`` says why."""


class BlockingConnection:
    """One STOMP connection, CONNECTED on construction (``StompmqError`` if refused)."""

    def __init__(self, url: StompURL, timeout: float = TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        try:
            self.sock = socket.create_connection((url.host, url.port), timeout=timeout)
        except OSError as e:
            raise ConnectionLost(f"cannot reach the broker at {url}: {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = FrameParser(Limits(max_body=1 << 30))
        self.frames: deque[Frame] = deque()
        self.closed = False
        self._lock = threading.Lock()
        self._receipts = itertools.count()
        self.send("CONNECT", url.connect_headers())
        reply = self.receive(timeout)
        if reply is None or reply.command != "CONNECTED":
            self.abort()
            why = "no answer" if reply is None else reply.headers.get("message", reply.command)
            raise StompmqError(f"the broker at {url} refused the connection: {why}")

    # -- writing (any thread) -------------------------------------------------------------------
    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_many([Frame(command, headers, body)])

    def send_many(self, frames: list[Frame]) -> None:
        """Frames in one write, in order, none interleaved with another thread's."""
        data = b"".join(encode_frame(frame, "1.2") for frame in frames)
        with self._lock:
            if self.closed:
                raise ConnectionLost(f"the connection to {self.url} is closed")
            try:
                self.sock.sendall(data)
            except OSError as e:
                self.abort()
                raise ConnectionLost(f"lost the broker at {self.url}: {e}") from None

    # -- reading (one thread) -------------------------------------------------------------------
    def receive(self, timeout: float | None) -> Frame | None:
        """The next frame, waiting at most ``timeout`` seconds (None: ``self.timeout``)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0 or not self._wait_readable(left):
                return None
            self._read()
        return self.frames.popleft()

    def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """Send a frame asking for a receipt; return the RECEIPT's headers once it came.  Other
        frames that arrive meanwhile are kept for ``receive``; an ERROR raises ``BrokerRefused``."""
        receipt = f"r{next(self._receipts)}"
        self.send(command, {**headers, "receipt": receipt}, body)
        deadline = time.monotonic() + self.timeout
        kept: list[Frame] = []
        try:
            while True:
                frame = self.receive(deadline - time.monotonic())
                if frame is None:
                    self.abort()
                    raise ConnectionLost(f"no receipt from {self.url} within {self.timeout} s")
                if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                    return frame.headers
                self._raise_error(frame)
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
            detail = frame.headers.get("message", "")
            body = frame.body.decode(errors="replace").strip()
            raise BrokerRefused(f"{detail}: {body}" if body and body != detail else detail)

    def _wait_readable(self, timeout: float) -> bool:
        if self.closed:
            raise ConnectionLost(f"the connection to {self.url} is closed")
        try:
            readable, _, _ = select.select([self.sock], [], [], timeout)
        except (OSError, ValueError) as e:  # ValueError: closed by another thread meanwhile
            raise ConnectionLost(f"lost the broker at {self.url}: {e}") from None
        return bool(readable)

    def _read(self) -> None:
        try:
            data = self.sock.recv(1 << 20)
        except OSError as e:
            self.abort()
            raise ConnectionLost(f"lost the broker at {self.url}: {e}") from None
        if not data:
            self.abort()
            raise ConnectionLost(f"the broker at {self.url} closed the connection")
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
            self.send("DISCONNECT", {"receipt": receipt})
            deadline = time.monotonic() + CLOSE_TIMEOUT
            while (frame := self.receive(deadline - time.monotonic())) is not None:
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
