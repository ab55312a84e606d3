"""STOMP frame encoding: frames (or header blocks) in, bytes out, no I/O.

Theory of operation
-------------------
The broker encodes one MESSAGE per delivery, so encoding is shaped for the
common case: header names and values without any character that needs
escaping.  A header block is built with C-level joins
(``"\\n".join(map(":".join, items))``) and then checked as a whole: it needs
escaping only if it holds a backslash or CR, or more colons or newlines than
the separators the join itself put there.  Only then is it rebuilt item by
item with ``str.translate``.

``encode_header_block`` exists so the broker can encode a message's user
headers once per STOMP version and splice the cached bytes into every
MESSAGE it delivers.  Because the receiver keeps the FIRST occurrence of a
repeated header, the broker's own headers (destination, message-id,
subscription, ack, content-length) must come before a spliced user block.

``encode_message`` and ``encode_message_tail`` build the MESSAGE frames the
broker delivers: the tail (priority, timestamp, expiry, content-length, the
user headers and the body) is what every delivery of one message shares, so
topic fan-out builds it once per version; the head is per delivery.  For a
large body ``encode_message_tail_headers`` builds the tail without it: the
server sends the frame's bytes, the body object itself and a NUL with one
``sendmsg`` (scatter/gather), so the body is never copied into a frame.  The
Python versions below are the reference; the names are bound to the native
ones from ``_frames.c`` when that is built and not switched off (native.py).

Versions differ only in escaping: 1.0 has none, 1.1 escapes backslash,
newline and colon, 1.2 adds CR.  CONNECT, CONNECTED and STOMP frames are never
escaped.  Where a header cannot be expressed without escaping (a newline in
any name or value, or a colon in a name) encoding raises LocalProtocolError
rather than emit bytes that would split into forged headers on the wire.
A CR cannot reach a 1.0/1.1 receiver intact (1.1 has no escape for it, and a CR
at a value's end is read as part of the CRLF line end); ``encode_frame`` sends it
as is, but a message's user headers (``_user_header_block``, from a 1.2 SEND's
``\\r``) leave out of a 1.0/1.1 delivery each header that version cannot carry.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .errors import LocalProtocolError
from .frame import Frame
from .native import frames as _native

LARGE_BODY = 16 * 1024
"""Bodies at least this large go to the socket by reference (``encode_message_tail_headers``):
below it, copying a body into its frame costs less than a buffer of its own in ``sendmsg``."""

_ESCAPE_TABLES: dict[str, dict[int, str] | None] = {
    "1.0": None,
    "1.1": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"}),
    "1.2": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"}),
}
"""Character -> escape sequence, per version; None means headers go out literally."""

_UNESCAPED_COMMANDS = frozenset(("CONNECT", "CONNECTED", "STOMP"))
"""Frames whose headers are never escaped (STOMP 1.2, "Value Encoding")."""

_BODILESS_COMMANDS = frozenset(("CONNECTED", "RECEIPT"))
"""Server frames that must not carry a body (checklist S07)."""


def _table(version: str) -> dict[int, str] | None:
    try:
        return _ESCAPE_TABLES[version]
    except KeyError:
        raise LocalProtocolError(f"unsupported STOMP version {version!r}") from None


def escape(value: str, version: str) -> str:
    """Escape one header name or value for ``version`` (1.0: returned unchanged)."""
    table = _table(version)
    if table is None or not ("\\" in value or "\n" in value or ":" in value or "\r" in value):
        return value
    return value.translate(table)


def _header_text(items: Collection[tuple[str, str]], table: dict[int, str] | None) -> str:
    """Return the ``name:value\\n`` lines for ``items``, escaped with ``table``."""
    if not items:
        return ""
    count = len(items)
    text = "\n".join(map(":".join, items))
    if text.count(":") == count and text.count("\n") == count - 1 and "\\" not in text and "\r" not in text:
        return text + "\n"  # the common case: nothing to escape, nothing to reject
    if table is None:
        for name, value in items:
            if "\n" in name or ":" in name or "\n" in value:
                raise LocalProtocolError(f"header {name!r}: {value!r} cannot be sent without escaping")
        return text + "\n"
    return "".join([f"{name.translate(table)}:{value.translate(table)}\n" for name, value in items])


def encode_header_block(headers: Iterable[tuple[str, str]], version: str) -> bytes:
    """Encode ``(name, value)`` pairs as escaped ``name:value\\n`` lines for ``version``.

    The result can be cached and spliced into many frames for sessions of
    that version (after the frame's own headers: the first occurrence wins).
    """
    items = headers if isinstance(headers, Collection) else list(headers)
    return _header_text(items, _table(version)).encode()


def encode_frame(frame: Frame, version: str) -> bytes:
    """Encode ``frame`` for a session speaking ``version``.

    Adds ``content-length`` to every frame with a body, and to every MESSAGE
    (checklist S09), unless the frame already has it; a ``content-length``
    that disagrees with the body, or a body on CONNECTED/RECEIPT, raises
    LocalProtocolError.
    """
    command, headers, body = frame
    table = None if command in _UNESCAPED_COMMANDS else _table(version)
    text = _header_text(headers.items(), table)
    if body and command in _BODILESS_COMMANDS:
        raise LocalProtocolError(f"a {command} frame cannot carry a body")
    length = headers.get("content-length")
    if length is None:
        if body or command == "MESSAGE":
            head = f"{command}\n{text}content-length:{len(body)}\n\n"
        else:
            head = f"{command}\n{text}\n"
    elif length == str(len(body)):
        head = f"{command}\n{text}\n"
    else:
        raise LocalProtocolError(f"content-length {length!r} does not match the {len(body)}-byte body")
    return b"".join((head.encode(), body, b"\0"))


def _message(
    subscription: str, message_id: int, destination: str, ack: str | None, redeliveries: int, version: str, tail: bytes
) -> bytes:
    """A complete MESSAGE frame: this delivery's own headers, then ``tail`` (``_message_tail``).

    They come first so that they win over a user header of the same name;
    ``ack`` (1.2's ack id, None otherwise) is broker-made and never escaped.
    """
    if redeliveries:
        # JMSXDeliveryCount, ActiveMQ's and JMS's count of deliveries, this one included
        redelivery = b"redelivered:true\nredelivery-count:%d\nJMSXDeliveryCount:%d\n" % (redeliveries,
                                                                                        redeliveries + 1)
    else:
        redelivery = b"redelivered:false\nredelivery-count:0\n"
    ack_line = b"ack:%s\n" % ack.encode() if ack is not None else b""
    return b"MESSAGE\nsubscription:%s\nmessage-id:%d\ndestination:%s\n%s%s%s" % (
        escape(subscription, version).encode(),
        message_id,
        escape(destination, version).encode(),
        ack_line,
        redelivery,
        tail,
    )


def _expressible(name: str, value: str, version: str) -> bool:
    """Whether a ``version`` subscriber can receive this header unchanged: 1.2 any, 1.1 none
    with a CR (no escape for one), 1.0 none with a CR or a newline, nor a colon in the name."""
    if version == "1.2":
        return True
    if "\r" in name or "\r" in value:
        return False
    return version == "1.1" or not ("\n" in name or ":" in name or "\n" in value)


def _user_header_block(headers: dict[str, str], version: str) -> bytes:
    """Encode a message's user headers for ``version``.

    A header that a 1.2 sender wrote with an escaped CR (or a 1.1/1.2 sender with an
    escaped newline, or a colon in its name) cannot be expressed to every older
    subscriber: such a header is left out of that subscriber's MESSAGE (``_expressible``),
    rather than altered or failing the delivery (and with it the SEND of an unrelated
    producer).  Subscribers of the sender's version get every header intact.
    """
    if not headers:
        return b""
    try:
        block = encode_header_block(headers.items(), version)
    except LocalProtocolError:
        block = None  # 1.0: a newline, or a colon in a name
    if block is not None and (version == "1.2" or b"\r" not in block):
        return block
    return encode_header_block([(k, v) for k, v in headers.items() if _expressible(k, v, version)], version)


def _message_tail_headers(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], length: int, version: str
) -> bytes:
    """``_message_tail`` up to its blank line, for a body of ``length`` bytes that goes to the
    socket by reference, its NUL after it (a large body is not copied into its frame).

    ``expires`` (epoch ms, as JMS has it) appears only on a message that can expire.
    """
    if length < 0:
        raise ValueError("length must not be negative")
    if expires is not None:
        return b"priority:%d\ntimestamp:%d\nexpires:%d\ncontent-length:%d\n%s\n" % (
            priority, timestamp, expires, length, _user_header_block(headers, version))
    return b"priority:%d\ntimestamp:%d\ncontent-length:%d\n%s\n" % (
        priority, timestamp, length, _user_header_block(headers, version))


def _message_tail(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], body: bytes, version: str
) -> bytes:
    """The part of a MESSAGE shared by all deliveries of one message to sessions of ``version``:
    ``_message_tail_headers``, the body and its NUL."""
    return b"%s%s\x00" % (_message_tail_headers(priority, timestamp, expires, headers, len(body), version), body)


encode_message = _native.encode_message if _native is not None else _message
encode_message_tail = _native.encode_message_tail if _native is not None else _message_tail
encode_message_tail_headers = (
    _native.encode_message_tail_headers if _native is not None else _message_tail_headers
)


def encode_text_tail_headers(
    priority: int, timestamp: int, expires: int | None, headers: dict[str, str], version: str
) -> bytes:
    """``encode_message_tail_headers`` without ``content-length``, for a text message (ActiveMQ's
    convention: a MESSAGE without it is a TextMessage) whose body has no NUL: the NUL ends it.
    The length's line comes before the user headers, so the first one is the broker's; cutting
    it keeps the native encoder's escaping (a Celery header is JSON, full of colons)."""
    return encode_message_tail_headers(priority, timestamp, expires, headers, 0, version).replace(
        b"content-length:0\n", b"", 1)
