"""A blocking STOMP 1.2 client over one socket, for code that runs outside trio.

Spark tasks (``stompmq/spark/``) and task-queue integrations run in threads and processes that
own no event loop, so they cannot use the trio client (``stompmq/client.py``).  This one speaks
plain STOMP on a blocking socket and parses with stompmq's own sans-IO parser, so it needs
nothing beyond this package::

    with Connection("stomp://127.0.0.1:61613", login, passcode) as conn:
        conn.send("/queue/jobs", b"payload")           # returns once the broker stored it
        conn.subscribe("/queue/jobs", ack="client-individual")
        message = conn.receive(timeout=5.0)            # a MESSAGE frame, or None
        conn.ack(message)

Errors are ``StompmqError`` with a message that names the setting to fix (``url``, ``login``,
``destination``...), as the constructor's parameters and the Spark source's options call them:
a task shows the message, and a stack trace helps nobody there.
"""

from __future__ import annotations

import itertools
import socket
from collections import deque
from collections.abc import Iterator
from typing import Self
from urllib.parse import urlsplit

from .protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame

__all__ = ["Connection", "NoAnswer", "StompmqError", "parse_url"]

#: Seconds a connect or a reply may take before the call fails (the broker answers in ms).
TIMEOUT = 30.0
#: Bytes of SEND frames gathered into one sendall by ``send_all`` (fewer syscalls per message).
SEND_CHUNK = 256 * 1024
STREAM_PREFIX = "/stream/"


class StompmqError(ValueError):
    """A problem the user can fix; the message names the setting."""


class NoAnswer(StompmqError):
    """The broker sent nothing within the socket's timeout."""


def parse_url(url: str | None) -> tuple[str, int]:
    """(host, port) of ``stomp://host[:port]``."""
    if not url:
        raise StompmqError("option 'url' is required (stomp://host:port)")
    parts = urlsplit(url)
    if parts.scheme != "stomp" or not parts.hostname:
        raise StompmqError(f"option 'url' must look like stomp://host:port, not {url!r}")
    try:
        port = parts.port or 61613
    except ValueError:
        raise StompmqError(f"option 'url' has a bad port: {url!r}") from None
    return parts.hostname, port


class Connection:
    """One CONNECTed STOMP 1.2 session; use as a context manager.

    Not thread-safe: one thread sends and reads.  Frames that arrive while a call waits for its
    RECEIPT (MESSAGEs of a subscription) are kept, in order, for ``receive``.
    """

    def __init__(self, url: str | None, login: str | None = None, passcode: str | None = None) -> None:
        host, port = parse_url(url)
        self.url = url
        try:
            self.sock = socket.create_connection((host, port), timeout=TIMEOUT)
        except OSError as e:
            raise StompmqError(f"cannot reach the broker at {url} (option 'url'): {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = FrameParser(Limits(max_body=1 << 30))
        self.frames: deque[Frame] = deque()
        self._ids = itertools.count()
        headers = {"accept-version": "1.2", "host": host, "heart-beat": "0,0"}
        if login is not None:
            headers["login"] = login
        if passcode is not None:
            headers["passcode"] = passcode
        self.sock.sendall(encode_frame(Frame("CONNECT", headers), "1.2"))
        reply = self.next()
        if reply.command == "ERROR":
            self.close()
            raise StompmqError(
                f"the broker at {url} refused the connection (options 'login'/'passcode'): "
                f"{reply.headers.get('message', '')}"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket (what the broker has acknowledged with a RECEIPT is stored)."""
        try:
            self.sock.close()
        except OSError:
            pass

    # -- frames -------------------------------------------------------------------------------
    def next(self) -> Frame:
        """The next frame from the broker (blocking, up to ``TIMEOUT`` per read)."""
        while not self.frames:
            self._fill()
        return self.frames.popleft()

    def receive(self, timeout: float | None = None) -> Frame | None:
        """The next frame, or None when none completes within ``timeout`` seconds (None: wait
        up to ``TIMEOUT``).  An ERROR frame raises."""
        if not self.frames:
            self.sock.settimeout(TIMEOUT if timeout is None else timeout)
            try:
                while not self.frames:
                    self._fill()
            except NoAnswer:
                return None
            finally:
                self.sock.settimeout(TIMEOUT)
        frame = self.frames.popleft()
        if frame.command == "ERROR":
            raise StompmqError(f"the broker at {self.url} sent an ERROR: {frame.headers.get('message')}")
        return frame

    def _recv(self, block: bool = True) -> bytes:
        try:
            data = self.sock.recv(1 << 20) if block else self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b""
        except TimeoutError:
            raise NoAnswer(f"no answer from the broker at {self.url} within {self.sock.gettimeout()} s") from None
        except OSError as e:
            raise StompmqError(f"lost the broker at {self.url} (option 'url'): {e}") from None
        if not data:
            raise StompmqError(f"the broker at {self.url} closed the connection")
        return data

    def _fill(self, block: bool = True) -> None:
        data = self._recv(block)
        try:
            self.frames.extend(self.parser.feed(data))
        except ProtocolError as e:
            raise StompmqError(f"the broker at {self.url} sent a bad frame: {e}") from None

    def send_frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        """Write one frame, without waiting for anything."""
        self.sock.sendall(encode_frame(Frame(command, headers, body), "1.2"))

    def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """Send a frame with a receipt and return the RECEIPT's headers (ERROR raises); other
        frames that arrive meanwhile are kept for ``receive``."""
        receipt = f"q{next(self._ids)}"
        self.send_frame(command, {**headers, "receipt": receipt}, body)
        held: list[Frame] = []
        try:
            while True:
                frame = self.next()
                if frame.command == "ERROR":
                    raise StompmqError(
                        f"the broker refused {headers.get('destination')}: {frame.headers.get('message')}")
                if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                    return frame.headers
                held.append(frame)
        finally:
            self.frames.extendleft(reversed(held))

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
                self.sock.sendall(b"".join(chunk))
                chunk, size = [], 0
                received += self._take_receipts(block=False)
        if chunk:
            self.sock.sendall(b"".join(chunk))
        while received < sent:
            received += self._take_receipts(block=True)
        return sent

    def _take_receipts(self, block: bool) -> int:
        self._fill(block)
        n = 0
        while self.frames:
            frame = self.frames.popleft()
            if frame.command == "ERROR":
                raise StompmqError(f"the broker refused a SEND: {frame.headers.get('message')}")
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
