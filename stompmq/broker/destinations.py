"""Parsing and validation of destination names.

Every destination a client names passes through ``parse_destination`` once per
frame, so it is a handful of string operations; the result says which kind of
destination it is and the name inside its namespace.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from .errors import ClientError

#: Longest destination name in UTF-8 bytes (DESIGN §3); keeps index keys small.
MAX_NAME_BYTES = 255
#: Parsed destinations remembered; cleared wholesale when full (bounded memory, no LRU cost).
MAX_MEMOISED = 10_000


class Kind(Enum):
    QUEUE = "queue"
    TOPIC = "topic"
    EXCHANGE = "exchange"
    CONTROL = "control"


class Destination(NamedTuple):
    kind: Kind
    name: str  # the part after "/queue/", "/topic/", ...
    raw: str  # the destination as the client wrote it


_PREFIXES = (
    ("/queue/", Kind.QUEUE),
    ("/topic/", Kind.TOPIC),
    ("/exchange/", Kind.EXCHANGE),
    ("/control/", Kind.CONTROL),
)


def parse_destination(raw: str | None) -> Destination:
    """Classify ``raw``; raise ClientError naming the problem when it is unusable.

    Valid results are memoised: producers name the same few destinations over
    and over, and this runs for every SEND.
    """
    if raw is not None:
        known = _known.get(raw)
        if known is not None:
            return known
    dest = _parse(raw)
    if len(_known) >= MAX_MEMOISED:
        _known.clear()
    _known[raw] = dest  # type: ignore[index]
    return dest


def _parse(raw: str | None) -> Destination:
    if not raw:
        raise ClientError("missing destination header")
    if "\x00" in raw or "\n" in raw or "\r" in raw:
        raise ClientError("destination must not contain NUL, CR or LF")
    if len(raw) > MAX_NAME_BYTES and len(raw.encode()) > MAX_NAME_BYTES:
        raise ClientError(f"destination longer than {MAX_NAME_BYTES} bytes")
    for prefix, kind in _PREFIXES:
        if raw.startswith(prefix):
            name = raw[len(prefix) :]
            if not name:
                raise ClientError(f"destination {raw!r} has an empty name")
            return Destination(kind, name, raw)
    raise ClientError(
        f"unknown destination {raw!r}: use /queue/NAME, /topic/NAME, /exchange/NAME or /control/..."
    )


_known: dict[str, Destination] = {}
