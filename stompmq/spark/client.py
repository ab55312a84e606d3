"""A small blocking STOMP 1.2 client for Spark tasks: connect, control requests, read a stream
range, send with receipts.  It speaks plain STOMP over one socket and parses with stompmq's own
sans-IO parser, so a Spark executor needs nothing but this package.

Errors are ``StompmqError`` with a message that names the option to fix (``url``, ``login``,
``destination``...): Spark shows the Python message, and a stack trace helps nobody there.
"""

from __future__ import annotations

import itertools
import logging
import re
import socket
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..protocol import Frame, FrameParser, Limits, ProtocolError, encode_frame

#: Seconds a connect or a reply may take before the task fails (the broker answers in ms).
TIMEOUT = 30.0
#: Bytes of SEND frames gathered into one sendall (fewer syscalls per row).
SEND_CHUNK = 256 * 1024
#: MESSAGE headers the broker sets; every other header of a MESSAGE is a user header.
BROKER_HEADERS = frozenset(
    {"destination", "message-id", "subscription", "ack", "content-length", "priority", "redelivered",
     "redelivery-count", "timestamp", "x-stream-offset", "content-type"}
)
STREAM_PREFIX = "/stream/"

log = logging.getLogger(__name__)


#: A stream MESSAGE as the broker writes it (``Streams._deliver`` in broker/streams.py, then
#: broker/delivery.py): message-id, x-stream-offset, priority, timestamp, content-length and the
#: user header lines (none escaped: a backslash sends the frame to the general parser).
_MESSAGE = re.compile(
    rb"\n*MESSAGE\nsubscription:[^\n\\]*\nmessage-id:(\d+)\ndestination:[^\n\\]*\n(?:ack:[^\n\\]*\n)?"
    rb"redelivered:\w+\nredelivery-count:\d+\nx-stream-offset:(\d+)\npriority:(\d+)\ntimestamp:(\d+)\n"
    rb"(?:expires:\d+\n)?content-length:(\d+)\n((?:[^\n\\]+\n)*)\n"
)


@dataclass(slots=True)
class Chunk:
    """Consecutive entries of one stream from offset ``start``, column by column, the numbers
    as the broker wrote them (decimal bytes): what an Arrow record batch is built from."""

    start: int
    ids: list[bytes]  # message-id
    timestamps: list[bytes]  # epoch milliseconds
    priorities: list[bytes]
    #: each entry's user headers: the raw "name:value\n" lines (b"" for none), or a dict for a
    #: frame that went through the general parser (every MESSAGE header, to be filtered)
    headers: list[bytes | dict[str, str]]
    bodies: list[bytes]


def lost(stream: str, expected: int, offset: int, fail: bool) -> None:
    """Offsets ``expected``..``offset - 1`` were removed by retention before they were read: an
    error (``failOnDataLoss``, the default), else a warning and the read goes on at ``offset``."""
    gap = f"offsets {expected}..{offset - 1} of stream {stream!r} are gone (retention)"
    if fail:
        raise StompmqError(f"{gap}: the query fell behind the stream's max-age/max-bytes "
                           "(option failOnDataLoss=false skips them)")
    log.warning("%s: skipped (failOnDataLoss=false)", gap)


class StompmqError(ValueError):
    """A problem the user can fix; the message names the option."""


def parse_url(url: str | None) -> tuple[str, int]:
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
    """One STOMP connection; use as a context manager."""

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

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    # -- frames -------------------------------------------------------------------------------
    def next(self) -> Frame:
        """The next frame from the broker (blocking)."""
        while not self.frames:
            self._fill()
        return self.frames.popleft()

    def _recv(self, block: bool = True) -> bytes:
        try:
            data = self.sock.recv(1 << 20) if block else self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b""
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
        self.sock.sendall(encode_frame(Frame(command, headers, body), "1.2"))

    def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> dict[str, str]:
        """Send a frame with a receipt and return the RECEIPT's headers (ERROR raises)."""
        receipt = f"q{next(self._ids)}"
        self.send_frame(command, {**headers, "receipt": receipt}, body)
        while True:
            frame = self.next()
            if frame.command == "ERROR":
                raise StompmqError(f"the broker refused {headers.get('destination')}: {frame.headers.get('message')}")
            if frame.command == "RECEIPT" and frame.headers.get("receipt-id") == receipt:
                return frame.headers

    # -- streams ------------------------------------------------------------------------------
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

    def read_chunks(self, stream: str, start: int, end: int, rows: int, fail_on_loss: bool = True) -> Iterator[Chunk]:
        """The entries of offsets [start, end) of ``stream``, in order, up to ``rows`` to a
        ``Chunk``; offsets that are gone (retention) raise rather than leave a silent gap, or,
        with ``fail_on_loss`` off, end the chunk so the next starts after the gap (a chunk's
        offsets stay consecutive).

        MESSAGE frames are cut out of the byte stream here rather than by ``FrameParser``: the
        broker writes a stream's MESSAGEs in one shape (``_MESSAGE``), so one compiled match per
        frame finds every field, the body is sliced by content-length, and the numbers stay bytes
        for Arrow to convert in bulk (docs/benchmarks.md, "Streams and Spark").  A frame of another shape
        (an escaped header, another command) goes through ``FrameParser``."""
        if start >= end:
            return
        self.send_frame("SUBSCRIBE", {"destination": STREAM_PREFIX + stream, "id": "0", "ack": "auto",
                                      "x-stream-offset": str(start), "x-stream-end": str(end)})
        buf, pos, expected = bytearray(), 0, start
        match = _MESSAGE.match
        while expected < end:
            want = min(rows, end - expected)
            chunk = Chunk(expected, [], [], [], [], [])
            ids, stamps, priorities, headers, bodies = (
                chunk.ids, chunk.timestamps, chunk.priorities, chunk.headers, chunk.bodies)
            after_gap = None
            while len(bodies) < want:
                m = match(buf, pos)
                if m is not None:
                    message_id, offset, priority, timestamp, length, block = m.groups()
                    body_start = m.end()
                    body_end = body_start + int(length)
                    if body_end < len(buf):
                        if int(offset) != expected + len(bodies):
                            after_gap = int(offset)
                            break
                        ids.append(message_id)
                        stamps.append(timestamp)
                        priorities.append(priority)
                        headers.append(block)
                        bodies.append(bytes(buf[body_start:body_end]))
                        pos = body_end + 1
                        continue
                elif buf.find(b"\n\n", pos) >= 0:  # complete, but not in the usual shape
                    frame = self._slow_frame(buf, pos, stream)
                    if frame is not None:
                        fields, body, next_pos = frame
                        if fields is not None:
                            offset_value = int(fields["x-stream-offset"])
                            if offset_value != expected + len(bodies):
                                after_gap = offset_value
                                break
                            ids.append(fields["message-id"].encode())
                            stamps.append(fields["timestamp"].encode())
                            priorities.append(fields.get("priority", "4").encode())
                            headers.append(fields)
                            bodies.append(body)
                        pos = next_pos
                        continue
                del buf[:pos]  # incomplete: read more
                pos = 0
                buf += self._recv()
            if after_gap is None:
                expected += want
            else:  # the frame at ``pos`` is left for the next chunk
                lost(stream, expected + len(bodies), after_gap, fail_on_loss)
                expected = after_gap
            if bodies:
                yield chunk

    def _slow_frame(self, buf: bytearray, pos: int, stream: str) -> tuple[dict[str, str] | None, bytes, int] | None:
        """The frame at ``pos`` through the general parser: (its headers if a MESSAGE, its body,
        where the next starts), or None if it has not fully arrived (an ERROR raises)."""
        while pos < len(buf) and buf[pos] == 10:  # EOLs between frames
            pos += 1
        header_end = buf.find(b"\n\n", pos)
        if header_end < 0:
            return None
        length = re.search(rb"\ncontent-length:(\d+)", bytes(buf[pos:header_end]))
        end = header_end + 2 + int(length[1]) if length else buf.find(b"\x00", header_end)
        if end < 0 or end >= len(buf):
            return None
        frames = FrameParser(Limits(max_body=1 << 30)).feed(bytes(buf[pos:end + 1]))
        frame = frames[0]
        if frame.command == "ERROR":
            raise StompmqError(f"reading stream {stream!r}: {frame.headers.get('message')}")
        return (frame.headers if frame.command == "MESSAGE" else None), frame.body, end + 1

    # -- sending ------------------------------------------------------------------------------
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
