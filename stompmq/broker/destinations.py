"""Parsing and validation of destination names.

Every destination a client names passes through ``parse_destination`` once per
frame, so it is a handful of string operations; the result says which kind of
destination it is and the name inside its namespace.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from .errors import ClientError

#: Longest destination name in UTF-8 bytes; keeps index keys small.
MAX_NAME_BYTES = 255
#: Parsed destinations remembered; cleared wholesale when full (bounded memory, no LRU cost).
MAX_MEMOISED = 10_000


class Kind:
    """The destination namespaces, as the str between the first two slashes.

    Plain constants rather than an Enum: on Python 3.11 every ``Kind.X`` of an
    Enum goes through the metaclass (~70 ns), and SEND compares kinds several times.
    ``Final``: mypyc (setup.py's compiled engine) reads class attributes only when they are
    Final or ClassVar; Final ones it inlines as interned literals, so ``is`` still holds.
    """

    QUEUE: Final = "queue"
    TOPIC: Final = "topic"
    EXCHANGE: Final = "exchange"
    CONTROL: Final = "control"
    STREAM: Final = "stream"
    TEMP_QUEUE: Final = "temp-queue"  # /temp-queue/NAME: the connection's own reply queue
    REPLY_QUEUE: Final = "reply-queue"  # /reply-queue/TOKEN: someone's temp queue, for SEND only
    AMQ_QUEUE: Final = "amq"  # /amq/queue/NAME: an existing queue (RabbitMQ); ``name`` is NAME


class Destination(NamedTuple):
    kind: str  # one of the Kind constants
    name: str  # the part after "/queue/", "/topic/", "/stream/", "/control/"; for an exchange, its name
    raw: str  # the destination as the client wrote it
    #: only for /exchange/NAME/REST: REST (a SEND's routing key, a SUBSCRIBE's weight), else ""
    key: str = ""


# Maps a parsed namespace to the Kind constant itself, so kinds can be compared with "is".
_KINDS = {
    kind: kind
    for kind in (Kind.QUEUE, Kind.TOPIC, Kind.EXCHANGE, Kind.CONTROL, Kind.STREAM, Kind.TEMP_QUEUE, Kind.REPLY_QUEUE,
                 Kind.AMQ_QUEUE)
}
_EXCHANGE_PREFIX = "/exchange/"
_NAME_AT = len(_EXCHANGE_PREFIX)
#: Builds a Destination without the Python-level __new__ a NamedTuple call goes through (3x faster).
_new_destination = tuple.__new__


def parse_destination(raw: str | None) -> Destination:
    """Classify ``raw``; raise ClientError naming the problem when it is unusable.

    Valid results are memoised: producers name the same few destinations over
    and over, and this runs for every SEND. Exchange destinations that carry a
    routing key are not: keys are often new on every message (order ids,
    session ids), so a memo would only cost insertions. They take a short path
    instead, which falls back to the full checks for anything unusual.
    """
    known = _known.get(raw)  # type: ignore[arg-type]
    if known is not None:
        return known
    if raw is not None and raw.startswith(_EXCHANGE_PREFIX):
        cut = raw.find("/", _NAME_AT)
        # isprintable() rules out NUL, CR and LF in one pass; ASCII makes chars = bytes.
        if cut > _NAME_AT and len(raw) <= MAX_NAME_BYTES and raw.isprintable() and raw.isascii():
            return _new_destination(Destination, (Kind.EXCHANGE, raw[_NAME_AT:cut], raw, raw[cut + 1 :]))
    dest = _parse(raw)
    if not dest.key:
        if len(_known) >= MAX_MEMOISED:
            _known.clear()
        _known[raw] = dest  # type: ignore[index]
    return dest


def is_queue_name(name: str) -> bool:
    """Is ``name`` usable as ``/queue/NAME`` (non-empty, short enough, no NUL, CR or LF)?"""
    try:
        parse_destination("/queue/" + name)
    except ClientError:
        return False
    return True


def _utf8_length(raw: str) -> int:
    # Frames are strictly decoded UTF-8, but a JSON definitions file can hold a lone surrogate.
    try:
        return len(raw.encode())
    except UnicodeEncodeError:
        raise ClientError(f"destination {raw!r} is not encodable as UTF-8") from None


def _parse(raw: str | None) -> Destination:
    if not raw:
        raise ClientError("missing destination header")
    if not raw.isprintable() and ("\x00" in raw or "\n" in raw or "\r" in raw):
        raise ClientError("destination must not contain NUL, CR or LF")
    if len(raw) > MAX_NAME_BYTES or (not raw.isascii() and _utf8_length(raw) > MAX_NAME_BYTES):
        raise ClientError(f"destination longer than {MAX_NAME_BYTES} bytes")
    head, slash, name = raw[1:].partition("/")
    kind = _KINDS.get(head) if raw[0] == "/" and slash else None
    if kind is None:
        raise ClientError(
            f"unknown destination {raw!r}: use /queue/NAME, /topic/NAME, /stream/NAME, /exchange/NAME,"
            " /temp-queue/NAME, /reply-queue/NAME, /amq/queue/NAME or /control/..."
        )
    key = ""
    if kind is Kind.EXCHANGE:
        name, _, key = name.partition("/")
    elif kind is Kind.AMQ_QUEUE:
        space, _, name = name.partition("/")
        if space != "queue":
            raise ClientError(f"unknown destination {raw!r}: the /amq/ form is /amq/queue/NAME")
    if not name:
        raise ClientError(f"destination {raw!r} has an empty name")
    return _new_destination(Destination, (kind, name, raw, key))


_known: dict[str, Destination] = {}
