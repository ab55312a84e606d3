"""Incremental STOMP frame parser: bytes in, ``Frame`` objects out, no I/O.

Theory of operation
-------------------
The broker runs on one thread and aims at tens of thousands of frames per
second, so the parser is shaped around what CPython does fast: C-level
``bytearray.find``, slicing, one ``decode`` and ``split`` per header block,
and as few Python-level steps per frame as possible.  The server passes each
receive buffer to ``FrameParser.feed`` whole; a 64 KiB read holding hundreds
of frames is parsed in one call, in one loop that keeps its state in locals.

Received bytes are appended to one ``bytearray``.  ``_pos`` marks the start
of the first unconsumed frame; consumed bytes are not deleted per frame but
only once the dead prefix is large (``_COMPACT_AT``), or all at once when
everything was consumed, so compaction costs O(1) amortised per byte.

A frame is parsed in two phases and a feed may stop in either:

1. Header phase: find the blank line ending the header block, decode the
   command line and headers in one go, and split them.  ``_scan`` remembers
   how far the terminator search got, so bytes arriving one at a time are
   searched once (linear, not quadratic).  The search is bounded by
   ``max_header_bytes`` so an endless header block fails as soon as the
   limit is passed instead of being buffered.
2. Body phase: with ``content-length`` the body end is known, so waiting for
   it costs one comparison per feed; without it the NUL search resumes from
   ``_scan`` too.  ``max_body`` is checked as soon as it is known to be
   exceeded, so an oversized body is refused without buffering it all.

The blank line ending the header block is ``\\n\\n`` with LF line ends and
``\\n\\r\\n`` with CRLF ones.  Searching for one pattern while the peer uses
the other would scan far ahead on every frame, so the parser searches first
for the style the previous frame used and checks for the other one only
inside the found block.

ACK and NACK frames, one per message a client-ack consumer takes, have a short
path (``_short_ack``): a frame in the form clients send (LF line ends, no
backslash, no ``content-length``, no body) is cut at its NUL and split in one
go.  Anything else it declines, and the general path parses it (or refuses
it) as it would any frame, so both give the same frames and the same errors.

Header unescaping depends on the session's STOMP version.  It is skipped
entirely for header blocks without a backslash (nearly all of them), and
never applied to CONNECT/STOMP/CONNECTED.  So that frames pipelined behind
CONNECT in the same read are unescaped correctly, the parser adopts the
version that ``negotiate_version`` picks for the first CONNECT/STOMP; the
server may still set ``version`` afterwards.

Native fast path
----------------
When the optional extension ``_frames.c`` is built (see ``native.py``), each
header phase first hands the buffer to ``_frames.scan``, which parses every
complete, valid frame it can in C and stops at the first one it does not
handle (incomplete, invalid, near a limit, or a CONNECT/STOMP).  The loop
below then goes on from there exactly as it would have on its own, so this
file stays the reference: every error and every partial-feed state comes from
it, and tests/protocol runs and fuzzes both.

A SEND whose header lines hold a raw carriage return (one not part of a CRLF line
end) is refused: STOMP 1.2 allows a CR in a header only escaped (``\\r``), and in 1.0
and 1.1 it is ambiguous (a receiver takes a CR at a value's end for part of the line
end, and some split lines at a lone CR).  An escaped ``\\r`` is legal 1.2 and accepted;
what a 1.0 or 1.1 subscriber cannot receive is left out at its delivery (encoder.py).
Frames of other commands keep a raw CR: what they carry goes back to the same client
only.  The native path leaves every header block with a raw CR to the code below.

Any violation raises ``ProtocolError``; the parser then stays broken (every
later ``feed`` raises the same error) because the connection is about to be
closed and the stream position is no longer trustworthy.  Frames completed
earlier in the failing ``feed`` call are not returned.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .errors import ProtocolError
from .frame import Frame
from .native import NATIVE
from .native import frames as _native
from .negotiation import negotiate_version

_COMPACT_AT = 256 * 1024
"""Drop the consumed prefix only once it is this large: amortises the memmove of the live tail."""

ASSEMBLE_BODIES = 16 * 1024
"""A body with a content-length at least this large that is not complete in the buffer is kept
as its reads' pieces and joined once when its NUL arrives, not copied into the buffer first."""

_CONNECT_COMMANDS = frozenset(("CONNECT", "STOMP"))
"""Frames that open a session; the first one decides the version (see the module docstring)."""

_UNESCAPED_COMMANDS = frozenset(("CONNECT", "STOMP", "CONNECTED"))
"""Frames whose headers are never unescaped (STOMP 1.2, "Value Encoding"); CONNECTED for test clients."""

_COMMON_COMMANDS = frozenset(
    ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT", "DISCONNECT", "CONNECT", "STOMP")
)
"""Commands accepted by one set lookup before the slower general ASCII-letters check."""

_UNESCAPE_TABLES: dict[str, dict[str, str] | None] = {
    "1.0": None,
    "1.1": {"\\n": "\n", "\\c": ":", "\\\\": "\\"},
    "1.2": {"\\n": "\n", "\\c": ":", "\\\\": "\\", "\\r": "\r"},
}
"""Escape sequence -> character, per version; None means headers are taken literally."""

_ESCAPE = re.compile(r"\\.?", re.DOTALL)
"""A backslash and the character after it (nothing after it = a trailing lone backslash)."""

_EOLS = re.compile(rb"(?:\r?\n)+")
"""Heart-beats and other EOLs between frames."""

_QUOTE_AT_MOST = 60
"""Characters of offending input quoted in an error: it ends up in the ERROR frame's header."""

_SHORT_ACK_BYTES = 512
"""Longest ACK/NACK frame the short path looks at (ids, subscription, receipt); longer ones
take the general path, so a peer feeding a long header block a byte at a time costs at most
this much more per feed."""

_new_frame = tuple.__new__
"""Builds a Frame without NamedTuple's Python-level __new__ (it is one call per frame)."""


class Limits(NamedTuple):
    """Per-connection size limits; exceeding one is a ProtocolError (ERROR + close)."""

    max_body: int = 16 * 1024 * 1024
    """Largest body in bytes (the "frame size" users configure)."""
    max_header_bytes: int = 64 * 1024
    """Largest command line plus header lines in bytes, their line ends included, the blank line not."""
    max_headers: int = 1000
    """Most header lines in one frame (repeated names count)."""


def _quote(text: str) -> str:
    """Return ``repr(text)``, cut short: enough to find the mistake, not a 64 KiB header."""
    return repr(text) if len(text) <= _QUOTE_AT_MOST else repr(text[:_QUOTE_AT_MOST]) + "..."


def _unescape(text: str, table: dict[str, str], receipt: str | None) -> str:
    def replace(match: re.Match[str]) -> str:
        try:
            return table[match.group()]
        except KeyError:
            raise ProtocolError(
                f"undefined escape sequence {match.group()!r} in header {_quote(text)}", receipt
            ) from None

    return _ESCAPE.sub(replace, text)


def _unescaped_headers(lines: list[str], table: dict[str, str]) -> dict[str, str]:
    """Split and unescape header lines; the slow path, taken only when a backslash occurs."""
    raw: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon:
            raise ProtocolError(f"header line without a colon: {_quote(line)}")
        raw.append((name, value))
    # Found first so that an error in any header can still name the frame's receipt (S34).
    receipt = next((value for name, value in raw if name == "receipt"), None)
    if receipt is not None and "\\" in receipt:
        try:
            receipt = _unescape(receipt, table, None)
        except ProtocolError:
            receipt = None
    headers: dict[str, str] = {}
    for name, value in raw:
        # Every header is unescaped, even a repeat that is dropped: a bad escape is fatal anywhere.
        if "\\" in name:
            name = _unescape(name, table, receipt)
        if "\\" in value:
            value = _unescape(value, table, receipt)
        if name not in headers:
            headers[name] = value
    return headers


def _refuse_raw_cr(lines: list[str], receipt: str | None) -> None:
    """Refuse a SEND with a raw CR in one of its header ``lines`` (see the module docstring)."""
    for line in lines:
        if "\r" in line:
            raise ProtocolError(
                f"SEND header {_quote(line.partition(':')[0])} holds a raw carriage return; STOMP 1.2 allows "
                "one only escaped, as \\r", receipt)


def _short_ack(buf: bytes | bytearray, pos: int, max_header_bytes: int, max_headers: int) -> tuple[Frame, int] | None:
    """The ACK or NACK frame at ``pos`` and the position after its NUL, if it is complete and in
    the plain form (see the module docstring); None otherwise: the general path takes it.

    Each refusal stands for a case where the general path could do something else: CR line
    ends, escapes, a blank line before the last one (a body follows), a header line without a
    colon, ``content-length``, a limit.  A NUL search and one decode per frame, no more.
    """
    end = buf.find(b"\0", pos, pos + _SHORT_ACK_BYTES)
    if end < 0 or end - 1 - pos > max_header_bytes:
        return None
    try:
        text = buf[pos:end].decode()
    except UnicodeDecodeError:
        return None
    if not text.endswith("\n\n") or "\r" in text or "\\" in text:
        return None
    command, eol, rest = text[:-2].partition("\n")
    if command != "ACK" and command != "NACK":
        return None
    headers: dict[str, str] = {}
    if eol:
        lines = rest.split("\n")
        if len(lines) > max_headers:
            return None
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:  # an empty line among them too: an earlier blank line
                return None
            if name not in headers:
                headers[name] = value
        if "content-length" in headers:
            return None
    return _new_frame(Frame, (command, headers, b"")), end + 1


class FrameParser:
    """Turns a STOMP byte stream into frames; see the module docstring for the design."""

    def __init__(self, limits: Limits = Limits(), *, native: bool = NATIVE) -> None:
        if native and _native is None:
            raise ValueError("the native frame codec (stompmq.protocol._frames) is not built or is switched off")
        self.limits = limits
        self._native_scan = _native.scan if native and _native is not None else None
        """The C fast path for complete, valid frames, or None (see the module docstring)."""
        self._buf = bytearray()
        self._pos = 0
        """Start of the first unconsumed byte in ``_buf``."""
        self._scan = 0
        """Where the header-terminator or NUL search resumes."""
        self._crlf = False
        """Whether the previous frame ended its header block with CRLF."""
        self._command: str | None = None
        """Set while the headers of the frame at ``_pos`` are parsed but its body is incomplete."""
        self._headers: dict[str, str] = {}
        """The pending frame's headers (meaningful only while ``_command`` is set)."""
        self._body_start = 0
        """Where the pending frame's body starts in ``_buf``."""
        self._body_len = -1
        """The content-length of the pending body, or -1 when it ends at a NUL."""
        self._checked = -1
        """How far an incomplete header block has been checked for NUL and counted for lines."""
        self._lines = 0
        """Line ends counted so far in that incomplete block (the first one ends the command line)."""
        self._pieces: list[bytes | memoryview] | None = None
        """The pieces of a large body arriving over several reads (``ASSEMBLE_BODIES``)."""
        self._need = 0
        """Bytes of that body still missing, its NUL included."""
        self._negotiated = False
        """Whether a CONNECT/STOMP has already set ``version`` (only the first one may)."""
        self._error: ProtocolError | None = None
        self._version = "1.2"
        self._table = _UNESCAPE_TABLES["1.2"]

    @property
    def version(self) -> str:
        """The session's STOMP version ("1.0", "1.1" or "1.2"); it selects header unescaping."""
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        if version not in _UNESCAPE_TABLES:
            raise ValueError(f"unsupported STOMP version {version!r}")
        self._version = version
        self._table = _UNESCAPE_TABLES[version]

    @property
    def between_frames(self) -> bool:
        """Nothing of a frame is buffered: the next byte starts a frame or is a heart-beat."""
        return not self._buf and self._pieces is None

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Append ``data`` and return every frame completed so far (possibly none).

        Raises ProtocolError when the stream breaks STOMP or a limit; the
        parser is unusable afterwards.
        """
        if self._error is not None:
            raise self._error
        try:
            frames: list[Frame] = []
            pos = 0
            if self._pieces is not None:  # a large body is arriving
                pos = self._assemble(data, frames)
                if pos < 0 or pos == len(data):
                    return frames
            buf = self._buf
            if not buf and type(data) is bytes:  # nothing left over: parse the read where it lies
                return self._parse(data, pos, frames)
            buf += memoryview(data)[pos:] if pos else data
            if self._command is not None and self._body_len >= 0 and self._body_start + self._body_len >= len(buf):
                return frames  # a body with a known length is still arriving
            return self._parse(buf, self._pos, frames)
        except ProtocolError as error:
            self._error = error
            raise

    def _assemble(self, data: bytes | bytearray | memoryview, frames: list[Frame]) -> int:
        """Take the next piece of a large body from ``data``; with its NUL, the frame is complete
        and the body is joined from its pieces, one copy: the position in ``data`` after the NUL.
        -1: the body needs more reads."""
        pieces = self._pieces
        assert pieces is not None
        need = self._need  # the body's missing bytes and its NUL
        size = len(data)
        if size < need:
            pieces.append(data if type(data) is bytes else bytes(data))  # a caller's buffer may change
            self._need = need - size
            return -1
        if data[need - 1]:
            raise ProtocolError(
                f"frame body is not followed by NUL after content-length {self._body_len}",
                self._headers.get("receipt"),
            )
        pieces.append(memoryview(data)[: need - 1])
        frames.append(_new_frame(Frame, (self._command, self._headers, b"".join(pieces))))
        self._pieces = None
        self._command = None
        return need

    def _parse(self, buf: bytes | bytearray, pos: int, frames: list[Frame]) -> list[Frame]:
        """Append the frames in ``buf`` from ``pos`` on to ``frames``: ``buf`` is the parser's
        buffer, or a read that found it empty (what is left of it is then copied there)."""
        # Everything the loop touches per frame is a local: attribute access costs.
        n = len(buf)
        scan = self._scan
        crlf = self._crlf
        command = self._command
        headers = self._headers
        body_start = self._body_start
        body_len = self._body_len
        max_body, max_header_bytes, max_headers = self.limits
        table = self._table
        append = frames.append
        native_scan = self._native_scan

        while True:
            if command is None:
                # ---- header phase -------------------------------------------------
                if native_scan is not None and pos < n:
                    pos, crlf = native_scan(buf, pos, crlf, self._version, self.limits, frames)
                if pos >= n:
                    break
                first = buf[pos]
                if first < 65:  # below "A": heart-beat EOLs, else not a command (TLS, binary junk)
                    eols = _EOLS.match(buf, pos)
                    if eols is not None:
                        pos = eols.end()
                        if pos >= n:
                            break
                        first = buf[pos]
                    if first < 65 and not (first == 13 and pos + 1 == n):  # a CR may await its LF
                        raise ProtocolError(f"malformed command line: starts with byte {first:#04x}")
                if first <= 78:  # "A".."N": ACK, NACK (one comparison for SEND; the rarer ABORT,
                    # BEGIN, COMMIT, CONNECT, DISCONNECT are declined by the short path)
                    short = _short_ack(buf, pos, max_header_bytes, max_headers)
                    if short is not None:
                        append(short[0])
                        pos = short[1]
                        crlf = False  # as the general path would find the LF blank line
                        continue
                if scan < pos:
                    scan = pos
                window = pos + max_header_bytes + 2  # a blank line may start at the limit's last byte
                if window > n:
                    window = n
                if crlf:
                    end = buf.find(b"\n\r\n", scan, window)
                    if end >= 0:
                        lf_end = buf.find(b"\n\n", scan, end + 1)
                        if lf_end >= 0:
                            end, crlf = lf_end, False
                    else:
                        end = buf.find(b"\n\n", scan, window)
                        if end >= 0:
                            crlf = False
                else:
                    end = buf.find(b"\n\n", scan, window)
                    if end < 0:
                        end = buf.find(b"\n\r\n", scan, window)
                        crlf = end >= 0
                if end < 0:
                    self._check_partial_header(buf, pos, n)
                    scan = n - 2 if n - 2 > pos else pos
                    break
                text: str | None
                try:
                    text = buf[pos:end].decode()
                except UnicodeDecodeError:
                    text = None  # maybe a body byte: the block may end earlier, see below
                if text is None or "\r" in text:
                    if not crlf:
                        # An LF-style search found "\n\n", but a CRLF blank line (which
                        # needs a CR before "\n\n") may end the block earlier.
                        crlf_end = buf.find(b"\n\r\n", scan, end + 2)
                        if crlf_end >= 0:
                            end, crlf = crlf_end, True
                            text = None
                    if text is None:
                        try:
                            text = buf[pos:end].decode()
                        except UnicodeDecodeError:
                            raise ProtocolError("frame headers are not valid UTF-8") from None
                    text = text.replace("\r\n", "\n")
                    if text[-1:] == "\r":
                        text = text[:-1]  # the last header line's CR belongs to its EOL
                    raw_cr = "\r" in text
                else:
                    raw_cr = False
                if end + 1 - pos > max_header_bytes:
                    raise ProtocolError(f"frame header block exceeds {max_header_bytes} bytes")
                if "\0" in text:
                    raise ProtocolError("NUL inside the header block (is the blank line after the headers missing?)")
                body_start = end + 3 if crlf else end + 2

                command, _, rest = text.partition("\n")
                if command not in _COMMON_COMMANDS and not (command.isalpha() and command.isascii()):
                    raise ProtocolError(f"malformed command line {_quote(command)}")
                headers = {}
                if rest:
                    lines = rest.split("\n")
                    if len(lines) > max_headers:
                        raise ProtocolError(f"frame has more than {max_headers} headers")
                    if table is not None and "\\" in rest and command not in _UNESCAPED_COMMANDS:
                        headers = _unescaped_headers(lines, table)
                    else:
                        for line in lines:
                            name, colon, value = line.partition(":")
                            if not colon:
                                raise ProtocolError(
                                    f"header line without a colon: {_quote(line)}", headers.get("receipt")
                                )
                            if name not in headers:
                                headers[name] = value
                    if raw_cr and command == "SEND":
                        _refuse_raw_cr(lines, headers.get("receipt"))
                    length = headers.get("content-length")
                    if length is None:
                        body_len = -1
                    elif length.isdigit() and length.isascii():
                        # int() refuses a value of more than 4,300 digits: 20 are past any limit
                        body_len = int(length) if len(length) < 20 else max_body + 1
                        if body_len > max_body:
                            raise ProtocolError(
                                f"frame body of {length if len(length) < 20 else _quote(length)} bytes"
                                f" exceeds the limit of {max_body}",
                                headers.get("receipt"),
                            )
                    else:
                        raise ProtocolError(f"malformed content-length {_quote(length)}", headers.get("receipt"))
                else:
                    body_len = -1
                if command in _CONNECT_COMMANDS and not self._negotiated:
                    self._negotiated = True
                    adopted = negotiate_version(headers.get("accept-version"))
                    if adopted is not None:
                        self.version = adopted
                        table = self._table
                scan = body_start

            # ---- body phase -----------------------------------------------------------
            if body_len >= 0:
                body_end = body_start + body_len
                if body_end >= n:
                    if body_len >= ASSEMBLE_BODIES:  # its pieces are kept, not copied into the buffer
                        piece = memoryview(buf)[body_start:]
                        # a view would keep the whole read: unless the body is most of it, copy
                        self._pieces = [piece if type(buf) is bytes and 2 * (n - body_start) >= n
                                        else bytes(piece)]
                        del piece  # a view of the buffer would forbid resizing it
                        self._need = body_end + 1 - n
                        pos = n
                    break
                if buf[body_end]:
                    raise ProtocolError(
                        f"frame body is not followed by NUL after content-length {body_len}",
                        headers.get("receipt"),
                    )
            else:
                body_end = buf.find(b"\0", scan, body_start + max_body + 1)
                if body_end < 0:
                    if n > body_start + max_body:
                        raise ProtocolError(f"frame body exceeds the limit of {max_body} bytes", headers.get("receipt"))
                    scan = n
                    break
            append(_new_frame(Frame, (command, headers, bytes(buf[body_start:body_end]))))
            pos = body_end + 1
            command = None

        self._crlf = crlf
        self._command = command
        self._headers = headers
        self._body_len = body_len
        if pos >= n:
            if buf is self._buf:
                buf.clear()
            self._pos = self._scan = self._body_start = 0
            self._checked = -1
        elif buf is not self._buf or pos >= _COMPACT_AT:  # a read parsed where it lies: keep the rest
            if buf is self._buf:
                del buf[:pos]
            else:
                self._buf += memoryview(buf)[pos:]
            self._pos = 0
            self._scan = scan - pos
            self._body_start = body_start - pos
            self._checked -= pos
        else:
            self._pos = pos
            self._scan = scan
            self._body_start = body_start
        return frames

    def _check_partial_header(self, buf: bytes | bytearray, pos: int, n: int) -> None:
        """Fail early on an incomplete header block that can already never be valid."""
        if n - pos - 1 > self.limits.max_header_bytes:  # a blank line could start at n - 2 at the earliest
            raise ProtocolError(f"frame header block exceeds {self.limits.max_header_bytes} bytes")
        checked = self._checked
        if checked < pos:  # the counts belong to an earlier block
            checked = pos
            self._lines = 0
        if buf.find(b"\0", checked, n) >= 0:
            raise ProtocolError("NUL inside the header block (is the blank line after the headers missing?)")
        self._lines += buf.count(b"\n", checked, n)
        self._checked = n
        if self._lines - 1 > self.limits.max_headers:  # the first LF ends the command line
            raise ProtocolError(f"frame has more than {self.limits.max_headers} headers")
