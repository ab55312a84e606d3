"""STOMP version negotiation and heart-beat arithmetic, as pure functions.

Theory of operation
-------------------
CONNECT carries two negotiations: ``accept-version`` (which protocol the
session speaks, and therefore how headers are escaped) and ``heart-beat``
(how often each side must prove it is alive).  Both are arithmetic on header
values with no state, so they live here as functions the server calls while
answering CONNECT, and that tests can check against the specification's
formulas without a socket.  The parser also calls ``negotiate_version`` so
that frames pipelined behind CONNECT in the same read are unescaped with the
version the server is about to pick.
"""

from __future__ import annotations

from .errors import ProtocolError

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.0", "1.1", "1.2")
"""Versions this implementation speaks, lowest first (the order picks the highest)."""


def negotiate_version(accept_version: str | None) -> str | None:
    """Return the highest version both sides support, or None when there is none.

    A missing ``accept-version`` header means the client speaks only 1.0
    (STOMP 1.2, "Protocol Negotiation").  Spaces around the comma-separated
    entries are tolerated; an empty header offers nothing.
    """
    if accept_version is None:
        return "1.0"
    offered = {entry.strip() for entry in accept_version.split(",")}
    for version in reversed(SUPPORTED_VERSIONS):
        if version in offered:
            return version
    return None


#: The longest heart-beat interval kept (ms): 2**31 - 1, a Java int, about 24.8 days.  A longer
#: one is clamped to it: either side's beats are then as good as never, as the peer asked.
MAX_BEAT_MS = 2**31 - 1


def _beat_ms(text: str, whole: str) -> int:
    text = text.strip(" ")
    # isdigit() alone admits non-ASCII digits such as "²"; int() would admit "+5", "1_0"; the
    # length test spares int() a 4,000-digit value (which it refuses with a ValueError).
    if not (text.isascii() and text.isdigit()):
        shown = whole if len(whole) <= 40 else whole[:40] + "..."
        raise ProtocolError(f"malformed heart-beat header {shown!r}: expected two non-negative integers 'cx,cy'")
    return int(text) if len(text) <= 10 and int(text) <= MAX_BEAT_MS else MAX_BEAT_MS


def parse_heart_beat(value: str | None) -> tuple[int, int]:
    """Parse a ``heart-beat`` header ``"cx,cy"`` into milliseconds; missing means (0, 0).

    For a client's CONNECT, ``cx`` is the smallest interval at which it can
    send beats and ``cy`` the interval at which it wants to receive them.
    Anything but two comma-separated non-negative decimal integers is a
    ProtocolError.
    """
    if value is None:
        return (0, 0)
    parts = value.split(",")
    if len(parts) != 2:
        raise ProtocolError(f"malformed heart-beat header {value!r}: expected 'cx,cy'")
    return (_beat_ms(parts[0], value), _beat_ms(parts[1], value))


def heart_beat_intervals(client: tuple[int, int], server: tuple[int, int]) -> tuple[int, int]:
    """Return ``(server_sends_every_ms, server_expects_every_ms)``; 0 means never.

    ``client`` is the CONNECT's ``heart-beat`` (cx, cy) and ``server`` the
    CONNECTED's (sx, sy).  By the STOMP formula the server sends every
    ``max(sx, cy)`` ms unless either is 0, and expects a beat from the client
    every ``max(cx, sy)`` ms unless either is 0.
    """
    cx, cy = client
    sx, sy = server
    sends = 0 if sx == 0 or cy == 0 else max(sx, cy)
    expects = 0 if cx == 0 or sy == 0 else max(cx, sy)
    return (sends, expects)


def connected_heart_beat(client: tuple[int, int], server: tuple[int, int]) -> tuple[int, int]:
    """The ``heart-beat`` CONNECTED answers: the server's own (sx, sy), or (0, 0) when the
    client asked for none.  Either answer gives the same intervals (a 0 on the client's side
    turns that direction off), but RabbitMQ and ActiveMQ say ``0,0`` to such a client, and
    clients that check the answer expect it."""
    return (0, 0) if client == (0, 0) else server
