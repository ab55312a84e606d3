"""The Spark tasks' side of the blocking STOMP client (``stompmq/sync_client.py``): reading a
stream range into columns (``read_chunks``), with the frame cutter that makes it fast.

Errors are ``StompmqError`` with a message that names the option to fix (``url``, ``login``,
``destination``...): Spark shows the Python message, and a stack trace helps nobody there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

from .. import sync_client
from ..protocol import FrameParser, Limits
from ..sync_client import STREAM_PREFIX, StompmqError

__all__ = ["BROKER_HEADERS", "STREAM_PREFIX", "Chunk", "Connection", "StompmqError", "lost"]

#: MESSAGE headers the broker sets; every other header of a MESSAGE is a user header.
BROKER_HEADERS = frozenset(
    {"destination", "message-id", "subscription", "ack", "content-length", "priority", "redelivered",
     "redelivery-count", "timestamp", "x-stream-offset", "content-type"}
)

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


class Connection(sync_client.Connection):
    """A blocking STOMP connection that also reads stream ranges column by column."""

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
